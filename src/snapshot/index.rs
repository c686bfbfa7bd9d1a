//! The one place API objects become snapshot entries, as watch events
//! arrive (`apply`, `delete`, `reset` after a relist) or as objects are read
//! from files. Each kind is reduced to its lean form on the way in: no
//! managedFields, no whole pods.

use std::collections::BTreeMap;

use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    autoscaling::v1::HorizontalPodAutoscaler,
    core::v1::{ConfigMap, Endpoints, Namespace, Node, Pod, ResourceQuota, Service},
    node::v1::RuntimeClass,
    scheduling::v1::PriorityClass,
};
use kube::{api::ObjectMeta, Resource, ResourceExt};

use super::{
    Autoscaler, EndpointsInfo, Interner, NamespaceInfo, NodeInfo, ObjectKey, PodInfo, RuntimeClassInfo, ServiceInfo,
    Snapshot, Workload, WorkloadKind,
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
}

impl Snapshot {
    /// Add or replace one object.
    pub fn apply<K: Indexed>(&mut self, obj: &K) {
        if !obj.kept() {
            self.delete(obj);
            return;
        }
        let lean = obj.lean(&mut self.interner);
        K::table(self).insert(obj.key(), lean);
    }

    pub fn delete<K: Indexed>(&mut self, obj: &K) {
        K::table(self).remove(&obj.key());
    }

    /// Replace every object of the kind (after a relist).
    pub fn reset<K: Indexed>(&mut self, entries: BTreeMap<K::Key, K::Lean>) {
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
    ($kind:ty, $key:ident, $lean:ty, $table:ident, |$obj:ident, $interner:ident| $make:expr $(, kept: $kept:expr)?) => {
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
        }
    };
    (@key_type cluster) => { String };
    (@key_type namespaced) => { ObjectKey };
    (@key $self:ident, cluster) => { $self.name_any() };
    (@key $self:ident, namespaced) => { ObjectKey::from($self.meta()) };
}

indexed!(Namespace, cluster, NamespaceInfo, namespaces, |ns, _interner| NamespaceInfo::from(ns));
indexed!(HorizontalPodAutoscaler, namespaced, Autoscaler, autoscalers, |h, _interner| Autoscaler::from(h));
indexed!(Node, cluster, NodeInfo, nodes, |node, interner| NodeInfo::from_node(node, interner));
indexed!(Pod, namespaced, PodInfo, pods, |pod, interner| PodInfo::from_pod(pod, interner));
indexed!(Service, namespaced, ServiceInfo, services, |svc, _interner| ServiceInfo::from(svc));
indexed!(Endpoints, namespaced, EndpointsInfo, endpoints, |ep, _interner| EndpointsInfo::from(ep));
indexed!(RuntimeClass, cluster, RuntimeClassInfo, runtime_classes, |rc, _interner| RuntimeClassInfo::from(rc));
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
