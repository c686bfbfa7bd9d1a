//! Which Deployments/StatefulSets run the pools, and how many replicas they
//! have now and at most.

use super::{capacity::Replicas, selector::Matcher};
use crate::{crd::WorkloadRef, snapshot::Snapshot};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadMatch {
    pub namespace: String,
    /// "Deployment shop/api", sorted.
    pub workloads: Vec<String>,
    pub replicas: Replicas,
}

/// Resolve spec.workload against the snapshot. An unparsable selector matches
/// nothing (the validation error is reported separately).
pub fn resolve(workload: &WorkloadRef, snapshot: &Snapshot) -> WorkloadMatch {
    let matcher = Matcher::parse(Some(&workload.selector), "spec.workload.selector").ok();
    let mut names = Vec::new();
    let mut current = 0u32;
    let mut at_most = 0u32;
    let mut autoscaled = false;
    for w in snapshot.workloads_in(&workload.namespace) {
        if !matcher.as_ref().is_some_and(|m| m.matches(&w.template_labels)) {
            continue;
        }
        names.push(format!("{} {}/{}", w.kind.as_str(), w.namespace, w.name));
        current = current.saturating_add(w.replicas);
        // Several autoscalers on one target fight; count the largest maximum.
        let hpa_max = snapshot.autoscalers_of(w).map(|a| a.max_replicas).max();
        autoscaled |= hpa_max.is_some();
        at_most = at_most.saturating_add(hpa_max.unwrap_or(w.replicas).max(w.replicas));
    }
    names.sort();
    WorkloadMatch {
        namespace: workload.namespace.clone(),
        workloads: names,
        replicas: Replicas { current, max: autoscaled.then_some(at_most) },
    }
}
