//! `Enforced` and `status.enforcement`, in a cluster: what the operator
//! found when it asked each running selected pod's sidecar which pool config
//! it enforces (the controller asks; this turns the answers into status).
//!
//! Evidence only: `True` needs every running selected pod to have answered
//! with the planned config's hash. A pod still on another config, or one
//! that cannot be asked, is given a grace period (a rollout or a config
//! change takes a second or two) before it turns the condition; meanwhile the
//! condition stays as it was, and `status.enforcement` shows the live count.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::{
    conditions::{merge_conditions, ConditionStatus, DesiredCondition},
    reasons::{reason, ENFORCED},
};
use crate::{
    crd::{BulkheadStatus, EnforcementStatus},
    plan::{Enforcer, Plan},
    snapshot::ObjectKey,
};

/// Pods a message or `status.enforcement.lagging` names at most.
const NAMED: usize = 10;

/// What the sidecars answered, for one planned config.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    /// The config hash the pods were asked about.
    pub hash: String,
    /// The last answer of each pod asked, by pod.
    pub answers: BTreeMap<ObjectKey, Answer>,
    /// Seconds from a config's write until every pod enforced it, for the
    /// last config that got there.
    pub last_convergence_seconds: Option<f64>,
}

/// One pod's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// It enforces the planned config.
    Current,
    /// It enforces another one (`has`: its hash, or `none`), since `since`;
    /// `overdue` once that is longer than the grace period.
    Lagging { has: String, since: Time, overdue: bool },
    /// It could not be asked (`why`), since `since`.
    Unreachable { why: String, since: Time, overdue: bool },
}

/// Replace the plan-only `Enforced` that `build_status` made with one from
/// `observed`, and fill `status.enforcement`. Without spec.workload.proxy,
/// or with no config planned, the plan-only condition stands.
pub fn apply_enforcement(
    status: &mut BulkheadStatus,
    plan: &Plan,
    observed: Option<&Observed>,
    previous: Option<&BulkheadStatus>,
    generation: Option<i64>,
    now: &Time,
) {
    let proxy = &plan.proxy;
    let Some(hash) = proxy.config_hash.as_deref().filter(|_| proxy.requested) else { return };
    let observed = observed.filter(|o| o.hash == hash);
    let answer = |key: &ObjectKey| observed.and_then(|o| o.answers.get(key));
    let (mut missing, mut not_current) = (Vec::new(), Vec::new());
    let (mut current, mut lagging, mut unreachable, mut waiting) = (0u32, Vec::new(), Vec::new(), Vec::new());
    for pod in &proxy.pods {
        let name = pod.key.name.clone();
        let answered = answer(&pod.key);
        let on_it = matches!((&pod.enforcer, answered), (Enforcer::Sidecar { .. }, Some(Answer::Current)));
        if !on_it && not_current.len() < NAMED {
            not_current.push(name.clone());
        }
        match (&pod.enforcer, answered) {
            (Enforcer::Missing, _) => missing.push(format!("{name} (no bulkhead-proxy container)")),
            (Enforcer::Foreign { config_map }, _) => {
                missing.push(format!("{name} (its bulkhead-proxy mounts ConfigMap {config_map})"));
            }
            (Enforcer::Sidecar { .. }, Some(Answer::Current)) => current += 1,
            (Enforcer::Sidecar { .. }, Some(Answer::Lagging { has, since, overdue })) => {
                let item = format!("{name} (enforces {has} since {})", since.0);
                if *overdue {
                    lagging.push(item)
                } else {
                    waiting.push(name)
                }
            }
            (Enforcer::Sidecar { .. }, Some(Answer::Unreachable { why, since, overdue })) => {
                let item = format!("{name} ({why} since {})", since.0);
                if *overdue {
                    unreachable.push(item)
                } else {
                    waiting.push(name)
                }
            }
            (Enforcer::Sidecar { .. }, None) => waiting.push(name),
        }
    }
    let pods = u32::try_from(proxy.pods.len()).unwrap_or(u32::MAX);
    status.enforcement = Some(EnforcementStatus {
        config_hash: hash.to_string(),
        pods,
        converged: current,
        lagging: not_current,
        last_convergence_seconds: observed.and_then(|o| o.last_convergence_seconds),
    });
    let condition = |status, reason, message: String| DesiredCondition::new(ENFORCED, status, reason, message);
    let desired = if !proxy.bypassed.is_empty() {
        None // build_status's Bypassed stands: traffic walks around every sidecar.
    } else if !missing.is_empty() {
        Some(condition(
            ConditionStatus::False,
            reason::SIDECAR_MISSING,
            format!(
                "{} of {pods} running pod(s) enforce no pool of this Bulkhead: {}; restart them (kubectl rollout \
                 restart) so they start with the sidecar",
                missing.len(),
                named(&missing)
            ),
        ))
    } else if !lagging.is_empty() {
        Some(condition(
            ConditionStatus::False,
            reason::CONVERGING,
            format!(
                "{} of {pods} pod(s) still enforce another pool config than {hash}: {}",
                lagging.len(),
                named(&lagging)
            ),
        ))
    } else if !unreachable.is_empty() {
        Some(condition(
            ConditionStatus::Unknown,
            reason::UNREACHABLE,
            format!(
                "the operator cannot ask {} of {pods} pod(s) which pool config they enforce: {}; a NetworkPolicy \
                 must admit the operator to the sidecar's admin port",
                unreachable.len(),
                named(&unreachable)
            ),
        ))
    } else if pods == 0 {
        Some(condition(
            ConditionStatus::Unknown,
            reason::NOT_OBSERVED,
            format!("no running pod is selected by spec.workload: nothing enforces pool config {hash} yet"),
        ))
    } else if !waiting.is_empty() {
        // Within the grace period. About the same config (a pod that just
        // started, say) the condition stays as it was, so a rollout does not
        // flap; a new config is not confirmed by anything said about the old
        // one, so until every pod reports it the condition says it is on its way.
        let same_config = previous.and_then(|p| p.enforcement.as_ref()).is_some_and(|e| e.config_hash == hash);
        let kept = previous_enforced(previous).filter(|c| same_config && c.reason != reason::BYPASSED);
        Some(kept.unwrap_or_else(|| match observed {
            None => condition(
                ConditionStatus::Unknown,
                reason::NOT_OBSERVED,
                format!("the {pods} running pod(s) have not been asked about pool config {hash} yet"),
            ),
            Some(_) => condition(
                ConditionStatus::Unknown,
                reason::PROPAGATING,
                format!(
                    "{current} of {pods} pod(s) enforce pool config {hash} so far; {} not yet: {}",
                    waiting.len(),
                    named(&waiting)
                ),
            ),
        }))
    } else {
        Some(condition(
            ConditionStatus::True,
            reason::CONVERGED,
            format!("every one of {pods} running pod(s) enforces pool config {hash}"),
        ))
    };
    let Some(desired) = desired else { return };
    let previous_conditions = previous.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let merged = merge_conditions(previous_conditions, vec![desired], generation, now);
    for condition in merged {
        if let Some(slot) = status.conditions.iter_mut().find(|c| c.type_ == condition.type_) {
            *slot = condition;
        }
    }
}

/// The Enforced condition last reported, as a desired one.
fn previous_enforced(previous: Option<&BulkheadStatus>) -> Option<DesiredCondition> {
    let c: &Condition = previous?.conditions.iter().find(|c| c.type_ == ENFORCED)?;
    Some(DesiredCondition::new(ENFORCED, ConditionStatus::of(c)?, &c.reason, c.message.clone()))
}

/// The first few items, and how many more.
fn named(items: &[String]) -> String {
    let mut out = items.iter().take(NAMED).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > NAMED {
        out.push_str(&format!(" and {} more", items.len() - NAMED));
    }
    out
}
