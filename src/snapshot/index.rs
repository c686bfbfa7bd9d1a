//! The one place API objects become snapshot entries, as watch events
//! arrive (`apply`, `delete`, `reset` after a relist) or as objects are read
//! from files. Each kind is reduced to its lean form on the way in: no
//! managedFields, no whole pods.

use std::collections::BTreeMap;

use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    autoscaling::v1::HorizontalPodAutoscaler,
    core::v1::{ConfigMap, Endpoints, Namespace, Node, Pod, ResourceQuota, Service},
    discovery::v1::EndpointSlice,
    networking::v1::NetworkPolicy,
    node::v1::RuntimeClass,
    scheduling::v1::PriorityClass,
};
use kube::{api::ObjectMeta, Resource, ResourceExt};

use super::{
    Autoscaler, Delta, EndpointSliceInfo, EndpointsInfo, Interner, NamespaceInfo, NodeInfo, ObjectKey, PodInfo,
    RuntimeClassInfo, ServiceInfo, Snapshot, Workload, WorkloadKind,
};
use crate::crd::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};

/// A kind the snapshot holds: how to key it, reduce it and where it lives.
pub trait Indexed: Resource<DynamicType = ()> + Sized {
    type Key: Ord + Clone + Send;
    type Lean: Send;
    fn key(&self) -> Self::Key;
    fn lean(&self, interner: &mut Interner) -> Self::Lean;
    fn table(snapshot: &mut Snapshot) -> &mut BTreeMap<Self::Key, Self::Lean>;
    /// Whether a key in the table belongs to this kind (tables may be shared).
    fn owns(_key: &Self::Key) -> bool {
        true
    }
    /// Whether the snapshot keeps this object at all (the operator's own
    /// children only: files may hold anyone's ConfigMaps).
    fn kept(&self) -> bool {
        true
    }
    /// Whether the audit reads this kind: its relist starts a new journal epoch.
    const JOURNALED: bool = false;
    /// What the journal records of a change (see `journal.rs`).
    fn delta(_key: &Self::Key, _old: Option<Self::Lean>, _new: Option<&Self::Lean>) -> Journaled {
        Journaled::Nothing
    }
}

/// What one change means to the journal.
// Nearly every change is a pod's delta (see `Delta`).
#[allow(clippy::large_enum_variant)]
pub enum Journaled {
    Nothing,
    Delta(Delta),
    /// Not describable as a delta: readers rebuild.
    NewEpoch,
}

impl Snapshot {
    /// Add or replace one object.
    pub fn apply<K: Indexed>(&mut self, obj: &K) {
        if !obj.kept() {
            self.delete(obj);
            return;
        }
        let lean = obj.lean(&mut self.interner);
        let key = obj.key();
        let table = K::table(self);
        let old = table.insert(key.clone(), lean);
        let journaled = K::delta(&key, old, table.get(&key));
        self.journal(journaled);
    }

    pub fn delete<K: Indexed>(&mut self, obj: &K) {
        let key = obj.key();
        let old = K::table(self).remove(&key);
        if old.is_some() {
            let journaled = K::delta(&key, old, None);
            self.journal(journaled);
        }
    }

    /// Set or remove one pod's lean entry directly, journaled as a watch
    /// event would be (tools and benchmarks that build snapshots in place).
    pub fn set_pod(&mut self, key: ObjectKey, pod: Option<PodInfo>) {
        let old = match pod {
            Some(p) => self.pods.insert(key.clone(), p),
            None => self.pods.remove(&key),
        };
        if old.is_some() || self.pods.contains_key(&key) {
            let journaled = pod_delta(&key, old, self.pods.get(&key));
            self.journal(journaled);
        }
    }

    /// Set or remove one node's lean entry directly (see `set_pod`).
    pub fn set_node(&mut self, node: Option<NodeInfo>, name: &str) {
        let old = match node {
            Some(n) => self.nodes.insert(name.to_string(), n),
            None => self.nodes.remove(name),
        };
        let journaled = node_delta(name, old, self.nodes.get(name));
        self.journal(journaled);
    }

    fn journal(&mut self, journaled: Journaled) {
        match journaled {
            Journaled::Nothing => {}
            Journaled::Delta(d) => self.journal.record(d),
            Journaled::NewEpoch => self.journal.new_epoch(),
        }
    }

    /// Replace every object of the kind (after a relist).
    pub fn reset<K: Indexed>(&mut self, entries: BTreeMap<K::Key, K::Lean>) {
        if K::JOURNALED {
            self.journal.new_epoch();
        }
        let table = K::table(self);
        table.retain(|k, _| !K::owns(k));
        table.extend(entries);
    }

    /// One object's entry, for a relist in progress (see `reset`).
    pub fn entry<K: Indexed>(&mut self, obj: &K) -> Option<(K::Key, K::Lean)> {
        obj.kept().then(|| (obj.key(), obj.lean(&mut self.interner)))
    }
}

impl From<&ObjectMeta> for ObjectKey {
    fn from(meta: &ObjectMeta) -> Self {
        ObjectKey::new(meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
    }
}

fn managed(meta: &ObjectMeta) -> bool {
    meta.labels.as_ref().and_then(|l| l.get(MANAGED_BY_LABEL)).is_some_and(|v| v == MANAGED_BY_VALUE)
}

/// The plain cases: one kind, one table, keyed by name or namespace/name.
macro_rules! indexed {
    ($kind:ty, $key:ident, $lean:ty, $table:ident, |$obj:ident, $interner:ident| $make:expr $(, kept: $kept:expr)? $(, delta: $delta:expr)?) => {
        impl Indexed for $kind {
            type Key = indexed!(@key_type $key);
            type Lean = $lean;
            fn key(&self) -> Self::Key {
                indexed!(@key self, $key)
            }
            fn lean(&self, $interner: &mut Interner) -> $lean {
                let $obj = self;
                $make
            }
            fn table(s: &mut Snapshot) -> &mut BTreeMap<Self::Key, $lean> {
                &mut s.$table
            }
            $(fn kept(&self) -> bool {
                $kept(self.meta())
            })?
            $(const JOURNALED: bool = true;
            fn delta(key: &Self::Key, old: Option<$lean>, new: Option<&$lean>) -> Journaled {
                $delta(key, old, new)
            })?
        }
    };
    (@key_type cluster) => { String };
    (@key_type namespaced) => { ObjectKey };
    (@key $self:ident, cluster) => { $self.name_any() };
    (@key $self:ident, namespaced) => { ObjectKey::from($self.meta()) };
}

// What the audit reads is journaled: pods and node labels as deltas, the
// rest (which decides which pods a class holds, and which are sandboxed) as
// a new epoch.
fn new_epoch_if_changed<K, L: PartialEq>(_: &K, old: Option<L>, new: Option<&L>) -> Journaled {
    if old.as_ref() == new {
        Journaled::Nothing
    } else {
        Journaled::NewEpoch
    }
}

fn pod_delta(key: &ObjectKey, old: Option<PodInfo>, new: Option<&PodInfo>) -> Journaled {
    Journaled::Delta(Delta::Pod { key: key.clone(), old, new: new.cloned() })
}

/// Status heartbeats change nodes all the time; only labels and presence matter.
fn node_delta(name: &str, old: Option<NodeInfo>, new: Option<&NodeInfo>) -> Journaled {
    if old.as_ref().map(|n| &n.labels) == new.map(|n| &n.labels) {
        Journaled::Nothing
    } else {
        Journaled::Delta(Delta::Node(name.to_string()))
    }
}

indexed!(Namespace, cluster, NamespaceInfo, namespaces, |ns, _interner| NamespaceInfo::from(ns), delta: new_epoch_if_changed);
indexed!(HorizontalPodAutoscaler, namespaced, Autoscaler, autoscalers, |h, _interner| Autoscaler::from(h));
indexed!(Node, cluster, NodeInfo, nodes, |node, interner| NodeInfo::from_node(node, interner), delta: node_delta);
indexed!(Pod, namespaced, PodInfo, pods, |pod, interner| PodInfo::from_pod(pod, interner), delta: pod_delta);
indexed!(Service, namespaced, ServiceInfo, services, |svc, _interner| ServiceInfo::from(svc));
indexed!(Endpoints, namespaced, EndpointsInfo, endpoints, |ep, _interner| EndpointsInfo::from(ep));
indexed!(EndpointSlice, namespaced, EndpointSliceInfo, endpoint_slices, |slice, _interner| EndpointSliceInfo::from(
    slice
));
indexed!(RuntimeClass, cluster, RuntimeClassInfo, runtime_classes, |rc, _interner| RuntimeClassInfo::from(rc), delta: new_epoch_if_changed);
// The operator's own children are kept whole (they are few), minus managedFields.
indexed!(ConfigMap, namespaced, ConfigMap, config_maps, |cm, _interner| {
    let mut cm = cm.clone();
    cm.metadata.managed_fields = None;
    cm
}, kept: managed);
indexed!(PriorityClass, cluster, PriorityClass, priority_classes, |pc, _interner| {
    let mut pc = pc.clone();
    pc.metadata.managed_fields = None;
    pc
}, kept: managed);
indexed!(ResourceQuota, namespaced, ResourceQuota, resource_quotas, |rq, _interner| {
    let mut rq = rq.clone();
    rq.metadata.managed_fields = None;
    rq.status = None;
    rq
}, kept: managed);

indexed!(NetworkPolicy, namespaced, NetworkPolicy, network_policies, |np, _interner| {
    let mut np = np.clone();
    np.metadata.managed_fields = None;
    np
}, kept: managed);

// Deployments and StatefulSets share one table, so each owns only its kind's keys.
macro_rules! indexed_workload {
    ($kind:ty, $variant:ident) => {
        impl Indexed for $kind {
            type Key = (WorkloadKind, ObjectKey);
            type Lean = Workload;
            fn key(&self) -> Self::Key {
                (WorkloadKind::$variant, ObjectKey::from(self.meta()))
            }
            fn lean(&self, _: &mut Interner) -> Workload {
                Workload::from(self)
            }
            fn table(s: &mut Snapshot) -> &mut BTreeMap<Self::Key, Workload> {
                &mut s.workloads
            }
            fn owns(key: &Self::Key) -> bool {
                key.0 == WorkloadKind::$variant
            }
        }
    };
}

indexed_workload!(Deployment, Deployment);
indexed_workload!(StatefulSet, StatefulSet);
