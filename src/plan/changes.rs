//! What must change in the cluster for it to match a plan: the difference
//! between the desired children and the ones the operator already wrote.
//! Pure, so "no writes at steady state" is a property of this function.

use k8s_openapi::{
    api::core::v1::{ConfigMap, ResourceQuota},
    apimachinery::pkg::api::resource::Quantity,
};
use kube::api::ObjectMeta;

use super::Plan;
use crate::{crd::BULKHEAD_LABEL, snapshot::{ObjectKey, Snapshot}};

#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    ApplyConfigMap(ConfigMap),
    DeleteConfigMap(ObjectKey),
    ApplyQuota(ResourceQuota),
    DeleteQuota(ObjectKey),
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = |m: &ObjectMeta| {
            ObjectKey::new(m.namespace.clone().unwrap_or_default(), m.name.clone().unwrap_or_default())
        };
        match self {
            Change::ApplyConfigMap(cm) => write!(f, "apply ConfigMap {}", key(&cm.metadata)),
            Change::DeleteConfigMap(k) => write!(f, "delete ConfigMap {k}"),
            Change::ApplyQuota(rq) => write!(f, "apply ResourceQuota {}", key(&rq.metadata)),
            Change::DeleteQuota(k) => write!(f, "delete ResourceQuota {k}"),
        }
    }
}

/// Changes that bring the children of Bulkhead `name` in line with `plan`.
/// An invalid plan changes nothing: the last good objects stay in force.
pub fn changes(name: &str, plan: &Plan, snapshot: &Snapshot, names_workload: bool) -> Vec<Change> {
    if !plan.is_valid() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let ours = |m: &ObjectMeta| m.labels.as_ref().and_then(|l| l.get(BULKHEAD_LABEL)).is_some_and(|b| b == name);

    if let Some(cm) = &plan.config_map {
        let key = key_of(&cm.metadata);
        match snapshot.config_maps.get(&key) {
            Some(existing) if meta_up_to_date(&existing.metadata, &cm.metadata) && existing.data == cm.data => {}
            _ => out.push(Change::ApplyConfigMap(cm.clone())),
        }
    }
    // A withheld config (unfunded, namespace missing) leaves the last one in place;
    // a config that moved namespace, or a Bulkhead that dropped its workload, removes it.
    if plan.config_map.is_some() || !names_workload {
        for (key, existing) in &snapshot.config_maps {
            let desired = plan.config_map.iter().any(|cm| key_of(&cm.metadata) == *key);
            if ours(&existing.metadata) && !desired {
                out.push(Change::DeleteConfigMap(key.clone()));
            }
        }
    }

    for rq in &plan.quotas {
        let key = key_of(&rq.metadata);
        let hard = |q: &ResourceQuota| q.spec.as_ref().and_then(|s| s.hard.clone()).unwrap_or_default();
        match snapshot.resource_quotas.get(&key) {
            Some(existing)
                if meta_up_to_date(&existing.metadata, &rq.metadata)
                    && same_quantities(&hard(existing), &hard(rq)) => {}
            _ => out.push(Change::ApplyQuota(rq.clone())),
        }
    }
    for (key, existing) in &snapshot.resource_quotas {
        let desired = plan.quotas.iter().any(|rq| key_of(&rq.metadata) == *key);
        if ours(&existing.metadata) && !desired {
            out.push(Change::DeleteQuota(key.clone()));
        }
    }
    out
}

fn key_of(meta: &ObjectMeta) -> ObjectKey {
    ObjectKey::new(meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
}

/// Our labels are present and our owner reference is there (others may add theirs).
fn meta_up_to_date(existing: &ObjectMeta, desired: &ObjectMeta) -> bool {
    let labels_ok = desired.labels.iter().flatten().all(|(k, v)| {
        existing.labels.as_ref().and_then(|l| l.get(k)) == Some(v)
    });
    let owners_ok = desired.owner_references.iter().flatten().all(|want| {
        existing.owner_references.iter().flatten().any(|have| have.uid == want.uid && have.controller == want.controller)
    });
    labels_ok && owners_ok
}

/// Quantities compare by value: the API server may store "0.5" as "500m".
fn same_quantities(
    a: &std::collections::BTreeMap<String, Quantity>,
    b: &std::collections::BTreeMap<String, Quantity>,
) -> bool {
    a.len() == b.len()
        && a.iter().all(|(k, qa)| {
            b.get(k).is_some_and(|qb| match (milli_units(&qa.0), milli_units(&qb.0)) {
                (Some(x), Some(y)) => x == y,
                _ => qa.0 == qb.0,
            })
        })
}

/// A quantity in thousandths of a unit, for the plain forms (`500m`, `2`, `1.5`,
/// `4Gi`, `10k`); None for exponent forms, which then compare as text.
pub fn milli_units(q: &str) -> Option<i128> {
    let q = q.trim();
    let split = q.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+')).unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let factor: i128 = match suffix {
        "" => 1000,
        "m" => 1,
        "k" => 1000 * 1000,
        "M" => 1000 * 1000_000,
        "G" => 1000 * 1000_000_000,
        "T" => 1000 * 1000_000_000_000,
        "Ki" => 1000 * 1024,
        "Mi" => 1000 * 1024 * 1024,
        "Gi" => 1000 * 1024 * 1024 * 1024,
        "Ti" => 1000 * 1024 * 1024 * 1024 * 1024,
        _ => return None,
    };
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let negative = int.starts_with('-');
    let int: i128 = int.trim_start_matches(['-', '+']).parse().ok().or(if int.is_empty() { Some(0) } else { None })?;
    let frac_digits = frac.len() as u32;
    let frac: i128 = if frac.is_empty() { 0 } else { frac.parse().ok()? };
    let scaled = int * factor + frac * factor / 10i128.checked_pow(frac_digits)?;
    Some(if negative { -scaled } else { scaled })
}

/// Everything a Bulkhead made, to delete when it goes: found by label, so
/// cleanup needs neither a valid spec nor the garbage collector.
pub fn teardown(name: &str, snapshot: &Snapshot) -> Vec<Change> {
    let ours = |m: &ObjectMeta| m.labels.as_ref().and_then(|l| l.get(BULKHEAD_LABEL)).is_some_and(|b| b == name);
    let config_maps = snapshot
        .config_maps
        .iter()
        .filter(|(_, cm)| ours(&cm.metadata))
        .map(|(k, _)| Change::DeleteConfigMap(k.clone()));
    let quotas = snapshot
        .resource_quotas
        .iter()
        .filter(|(_, rq)| ours(&rq.metadata))
        .map(|(k, _)| Change::DeleteQuota(k.clone()));
    config_maps.chain(quotas).collect()
}
