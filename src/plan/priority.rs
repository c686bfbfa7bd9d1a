//! Per-class PriorityClasses. They give a critical class the scheduler's
//! precedence during an overload, and they are what a ResourceQuota's
//! scopeSelector can tell classes apart by inside one namespace.

use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::ResourceExt;

use crate::{
    crd::{Bulkhead, BulkheadSpec, ClassSpec},
    select::SpecError,
};

/// Priority of a class that names none: that of pods without a PriorityClass.
pub(super) const DEFAULT_PRIORITY: i32 = 0;
/// How far a critical class without a priority of its own sits above the rest.
pub(super) const CRITICAL_MARGIN: i32 = 1000;
/// Highest value a user-defined PriorityClass may have.
pub(super) const MAX_PRIORITY: i32 = 1_000_000_000;

/// `bulkhead-<bulkhead>.<class>`, like the quotas: unique across Bulkheads.
pub fn priority_class_name(bulkhead: &str, class: &str) -> String {
    format!("bulkhead-{bulkhead}.{class}")
}

/// Whether the Bulkhead places workloads at all: placement is opt-in, switched
/// on by shuffle sharding or by any class declaring a node group,
/// anti-affinity, a RuntimeClass or a priority.
pub fn places_workloads(spec: &BulkheadSpec) -> bool {
    spec.shuffle_sharding.is_some()
        || spec.classes.iter().any(|c| {
            c.nodes.is_some() || c.anti_affinity.is_some() || c.runtime_class_name.is_some() || c.priority.is_some()
        })
}

/// The priority of every class, in spec order.
fn class_priorities(spec: &BulkheadSpec) -> Vec<i32> {
    let highest_other =
        spec.classes.iter().filter(|c| !c.critical).map(|c| c.priority.unwrap_or(DEFAULT_PRIORITY)).max();
    spec.classes
        .iter()
        .map(|c| match (c.priority, c.critical) {
            (Some(p), _) => p,
            (None, false) => DEFAULT_PRIORITY,
            (None, true) => highest_other.unwrap_or(DEFAULT_PRIORITY).saturating_add(CRITICAL_MARGIN).min(MAX_PRIORITY),
        })
        .collect()
}

/// A critical class must outrank every other class, or it is no lane at all.
pub(super) fn validate_priorities(spec: &BulkheadSpec) -> Vec<SpecError> {
    let priorities = class_priorities(spec);
    let mut errors = Vec::new();
    for (i, (class, p)) in spec.classes.iter().zip(&priorities).enumerate() {
        if !class.critical {
            continue;
        }
        let outranking = spec.classes.iter().zip(&priorities).find(|(other, q)| !other.critical && **q >= *p);
        if let Some((other, q)) = outranking {
            errors.push(SpecError::new(
                format!("spec.classes[{i}].priority"),
                format!(
                    "critical class {} has priority {p}, not above class {}'s {q}: a critical class must have the \
                     highest priority of the Bulkhead",
                    class.name, other.name
                ),
            ));
        }
    }
    errors
}

pub(super) fn priority_classes(bulkhead: &Bulkhead) -> Vec<PriorityClass> {
    let name = bulkhead.name_any();
    bulkhead
        .spec
        .classes
        .iter()
        .zip(class_priorities(&bulkhead.spec))
        .map(|(class, value)| priority_class(bulkhead, &name, class, value))
        .collect()
}

fn priority_class(bulkhead: &Bulkhead, name: &str, class: &ClassSpec, value: i32) -> PriorityClass {
    PriorityClass {
        metadata: super::child_meta(bulkhead, priority_class_name(name, &class.name), None, Some(&class.name)),
        value,
        global_default: Some(false),
        description: Some(format!("bulkhead {name}: pods of class {}", class.name)),
        // Only the control-plane lane may evict other pods to be scheduled;
        // the other classes wait their turn, whatever their value.
        preemption_policy: Some(preemption_policy(class.critical).to_string()),
    }
}

fn preemption_policy(critical: bool) -> &'static str {
    if critical {
        "PreemptLowerPriority"
    } else {
        "Never"
    }
}
