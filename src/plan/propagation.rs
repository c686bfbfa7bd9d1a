//! From the pool config written to the pods that enforce it: which pods
//! spec.workload selects, which of them run this Bulkhead's sidecar (and
//! where to ask it what it enforces), and which must be stamped with the
//! config's hash so that their kubelet refreshes the mounted config at once
//! instead of on its periodic sync, about a minute later.

use std::net::{IpAddr, SocketAddr};

use crate::{
    select::Selection,
    snapshot::{ObjectKey, PodInfo, Snapshot},
};

/// One running pod spec.workload selects, as enforcement sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectedPod {
    pub key: ObjectKey,
    pub enforcer: Enforcer,
}

/// What in a selected pod enforces the pool, if anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Enforcer {
    /// This Bulkhead's sidecar; its admin port is where it says which config
    /// it enforces (None: the pod shows no IP or no admin port to ask).
    Sidecar { admin: Option<SocketAddr> },
    /// No bulkhead-proxy at all: a pod started before the injection.
    Missing,
    /// A bulkhead-proxy that mounts another pool config (another Bulkhead's).
    Foreign { config_map: String },
}

/// The running pods `selection`'s spec.workload selects in `namespace`, in key order.
pub(super) fn selected_pods(
    selection: &Selection<'_>,
    snapshot: &Snapshot,
    namespace: &str,
    config_map: &str,
) -> Vec<SelectedPod> {
    let Some(matcher) = &selection.workload else { return Vec::new() };
    snapshot
        .pods_in(namespace)
        .filter(|(_, pod)| pod.running && !pod.terminating && matcher.matches(&pod.labels))
        .map(|(key, pod)| SelectedPod { key: key.clone(), enforcer: enforcer(pod, config_map) })
        .collect()
}

fn enforcer(pod: &PodInfo, config_map: &str) -> Enforcer {
    match &pod.sidecar {
        None => Enforcer::Missing,
        Some(sidecar) => match sidecar.config_map.as_deref() {
            Some(mounted) if mounted != config_map => Enforcer::Foreign { config_map: mounted.to_string() },
            _ => {
                let ip = pod.ip.as_deref().and_then(|ip| ip.parse::<IpAddr>().ok());
                Enforcer::Sidecar { admin: ip.zip(sidecar.admin_port).map(|(ip, port)| SocketAddr::new(ip, port)) }
            }
        },
    }
}

/// Pods to stamp with `hash`: every scheduled pod that mounts `config_map`
/// through the sidecar, is neither finished nor being deleted, and does not
/// carry the hash yet. Pods not yet running are included: their volume may
/// have been set up from the config before this one.
pub(super) fn stamps(snapshot: &Snapshot, namespace: &str, config_map: &str, hash: &str) -> Vec<ObjectKey> {
    snapshot
        .pods_in(namespace)
        .filter(|(_, pod)| {
            let mounts = pod.sidecar.as_ref().is_some_and(|s| s.config_map.as_deref() == Some(config_map));
            let live = pod.node.is_some() && !pod.finished && !pod.terminating;
            let stamped = pod.sidecar.as_ref().and_then(|s| s.config_hash.as_deref());
            mounts && live && stamped != Some(hash)
        })
        .map(|(key, _)| key.clone())
        .collect()
}
