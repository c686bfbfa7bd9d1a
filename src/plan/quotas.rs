//! Per-class ResourceQuotas, one in every namespace a class's
//! namespaceSelector selects. An unscoped ResourceQuota bounds every pod of
//! its namespace, so two classes' quotas in one namespace would each bound the
//! other's pods too. When the Bulkhead places workloads, each class's pods
//! carry its PriorityClass, and the quotas of a namespace that classes share
//! are scoped to it; otherwise such namespaces get no quota and are reported.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceQuota, ResourceQuotaSpec, ScopeSelector, ScopedResourceSelectorRequirement};
use kube::ResourceExt;

use crate::{crd::ClassSpec, select::Selection, snapshot::Snapshot};

/// A namespace selected by the quotas of more than one class, left without them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaCollision {
    pub namespace: String,
    pub classes: Vec<String>,
    /// Why scoping could not separate them, when placement is on.
    pub unscopable: Option<String>,
}

/// What a quota scoped by PriorityClass may set: the pod count and pod CPU
/// and memory. The API server refuses the scope on anything else
/// (ephemeral-storage, services, persistentvolumeclaims, …) with
/// "unsupported scope applied to resource".
const SCOPABLE: [&str; 7] = ["pods", "cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"];

fn scopable(resource: &str) -> bool {
    SCOPABLE.contains(&resource)
}

/// `bulkhead-<bulkhead>.<class>`: the dot (allowed in a quota's name, never in
/// a DNS label) keeps Bulkhead `shop` class `api-read` and Bulkhead
/// `shop-api` class `read` from naming the same object.
pub fn quota_name(bulkhead: &str, class: &str) -> String {
    format!("bulkhead-{bulkhead}.{class}")
}

/// The quotas to write, and the namespaces withheld because classes collide
/// there. `places`: classes' pods carry their PriorityClass, so quotas in a
/// shared namespace can be scoped to it.
pub(super) fn plan_quotas(
    selection: &Selection<'_>,
    snapshot: &Snapshot,
    places: bool,
) -> (Vec<ResourceQuota>, Vec<QuotaCollision>) {
    let bulkhead = selection.bulkhead;
    // namespace -> classes whose pods may run there (an absent namespaceSelector
    // is every namespace), with or without a quota: an unscoped quota would
    // bound them all.
    let mut present: BTreeMap<&str, Vec<&ClassSpec>> = BTreeMap::new();
    for class in &selection.classes {
        let Some(pods) = &class.pods else { continue };
        for ns in snapshot.namespaces.values() {
            if !ns.terminating && pods.namespaces.matches(&ns.labels) {
                present.entry(ns.name.as_str()).or_default().push(class.spec);
            }
        }
    }
    let mut quotas = Vec::new();
    let mut collisions = Vec::new();
    for (namespace, here) in present {
        // A quota goes only where its class names the namespace explicitly
        // (validate requires a namespaceSelector with a quota).
        let classes: Vec<&ClassSpec> = here
            .iter()
            .copied()
            .filter(|c| c.quota.is_some() && c.pods.as_ref().is_some_and(|p| p.namespace_selector.is_some()))
            .collect();
        if classes.is_empty() {
            continue;
        }
        let shared = here.len() > 1;
        if shared {
            let unscopable = classes.iter().find_map(|c| {
                let key = c.quota.as_ref()?.hard.keys().find(|k| !scopable(k))?;
                Some(format!("class {}'s quota sets {key}, which a quota scoped by PriorityClass cannot count", c.name))
            });
            if !places || unscopable.is_some() {
                collisions.push(QuotaCollision {
                    namespace: namespace.to_string(),
                    classes: here.iter().map(|c| c.name.clone()).collect(),
                    unscopable: unscopable.filter(|_| places),
                });
                continue;
            }
        }
        for class in classes {
            let Some(quota) = &class.quota else { continue };
            quotas.push(ResourceQuota {
                metadata: super::child_meta(
                    bulkhead,
                    quota_name(&bulkhead.name_any(), &class.name),
                    Some(namespace),
                    Some(&class.name),
                ),
                spec: Some(ResourceQuotaSpec {
                    hard: Some(quota.hard.clone()),
                    scope_selector: shared.then(|| priority_scope(&bulkhead.name_any(), &class.name)),
                    ..ResourceQuotaSpec::default()
                }),
                ..ResourceQuota::default()
            });
        }
    }
    (quotas, collisions)
}

fn priority_scope(bulkhead: &str, class: &str) -> ScopeSelector {
    ScopeSelector {
        match_expressions: Some(vec![ScopedResourceSelectorRequirement {
            scope_name: "PriorityClass".to_string(),
            operator: "In".to_string(),
            values: Some(vec![super::priority::priority_class_name(bulkhead, class)]),
        }]),
    }
}
