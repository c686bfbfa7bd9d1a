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
    /// Pods spec.workload.selector selects that run (phase Running, those
    /// being deleted included while their containers run): the ones that may
    /// hold requests. A Pending pod holds none, and starts with the config
    /// in force when it starts.
    pub pods: u64,
}

impl Replicas {
    /// Replicas a Fleet pool is split over: the replicas that run, which is
    /// the desired count or, while more pods than that run (a scale down, a
    /// rollout's surge), the running pods. So a scale up lowers every
    /// running pod's share before the new pod takes traffic, and a scale
    /// down raises the shares only once the surplus pods are gone. The
    /// operator stamps each running pod when it writes a new split (see
    /// `snapshot::CONFIG_HASH_ANNOTATION`), so a new split reaches them in
    /// about a second; splitting over an autoscaler's maximum instead left
    /// most of the pool idle (docs/guides/enforcement.md). Never 0 (an
    /// absent workload is planned as one replica).
    pub fn divisor(self) -> u64 {
        self.current.max(self.pods).max(1)
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
    // Running pods, terminating ones included: they count in the split until
    // their containers stop. Pending ones hold nothing (one stuck Pending must
    // not shrink every share, nor round a floor down to nothing).
    let pods = snapshot.pods_in(&workload.namespace).filter(|(_, p)| p.running && matcher.matches(&p.labels)).count();
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
        replicas: Replicas {
            current,
            max: autoscaled.then_some(at_most),
            pods: u64::try_from(pods).unwrap_or(u64::MAX),
        },
    })
}
