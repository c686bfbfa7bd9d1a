//! Which Deployments/StatefulSets run the pools, and how many replicas they
//! have now and at most.

use super::Selection;
use crate::snapshot::Snapshot;

/// How many replicas run the pools.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replicas {
    /// Desired replicas now (sum over the matched workloads). u64: a sum of
    /// many i32 replica counts is exact (it never saturates).
    pub current: u64,
    /// The most they can reach through autoscaling, when an autoscaler targets them.
    pub max: Option<u64>,
}

impl Replicas {
    /// Replicas a Fleet pool is split over: the most there can be, so that
    /// scaling up never pushes the fleet past capacity before the config is
    /// rewritten. Never 0 (an absent workload is planned as one replica).
    pub fn divisor(self) -> u64 {
        self.current.max(self.max.unwrap_or(0)).max(1)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadMatch {
    pub namespace: String,
    /// "Deployment shop/api", sorted.
    pub workloads: Vec<String>,
    pub replicas: Replicas,
}

/// Resolve spec.workload against the snapshot; None when the Bulkhead names no workload.
pub fn resolve_workload(selection: &Selection<'_>, snapshot: &Snapshot) -> Option<WorkloadMatch> {
    let workload = selection.bulkhead.spec.workload.as_ref()?;
    let matcher = selection.workload.as_ref()?;
    let mut names = Vec::new();
    // Each term is at most i32::MAX and there are fewer than 2^32 workloads: u64 sums are exact.
    let mut current = 0u64;
    let mut at_most = 0u64;
    let mut autoscaled = false;
    for w in snapshot.workloads_in(&workload.namespace) {
        if !matcher.matches(&w.template_labels) {
            continue;
        }
        names.push(format!("{} {}/{}", w.kind.as_str(), w.namespace, w.name));
        current += u64::from(w.replicas);
        // Several autoscalers on one target fight; count the largest maximum.
        let hpa_max = snapshot.autoscalers_of(w).map(|a| a.max_replicas).max();
        autoscaled |= hpa_max.is_some();
        at_most += u64::from(hpa_max.unwrap_or(w.replicas).max(w.replicas));
    }
    names.sort();
    Some(WorkloadMatch {
        namespace: workload.namespace.clone(),
        workloads: names,
        replicas: Replicas { current, max: autoscaled.then_some(at_most) },
    })
}
