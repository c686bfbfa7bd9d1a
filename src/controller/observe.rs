//! Watches that keep the shared `Snapshot` current. Each watched kind is
//! reduced to its lean form on arrival (no managedFields, no whole objects),
//! and every change nudges the controller to reconcile.

use std::{
    collections::BTreeMap,
    fmt::Debug,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use futures::{Stream, StreamExt};
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    autoscaling::v1::HorizontalPodAutoscaler,
    core::v1::{ConfigMap, Endpoints, Namespace, Node, Pod, ResourceQuota, Service},
    node::v1::RuntimeClass,
    scheduling::v1::PriorityClass,
};
use kube::{
    api::Api,
    runtime::{watcher, WatchStreamExt},
    Client, Resource, ResourceExt,
};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, RwLock};
use tracing::{debug, warn};

use crate::{
    crd::{MANAGED_BY_LABEL, MANAGED_BY_VALUE},
    snapshot::{
        Autoscaler, EndpointsInfo, Interner, NamespaceInfo, NodeInfo, ObjectKey, PodInfo, RuntimeClassInfo,
        ServiceInfo, Snapshot, Workload, WorkloadKind,
    },
};

/// The snapshot shared between the watches (writers) and reconciles (readers).
pub struct SharedSnapshot {
    snapshot: RwLock<Snapshot>,
    /// Watches that have not yet completed their first list.
    pending: AtomicUsize,
    /// Of those, the watches of the operator's own children (cleanup needs only these).
    children_pending: AtomicUsize,
    changed: Notify,
}

impl SharedSnapshot {
    fn new() -> Self {
        Self {
            snapshot: RwLock::new(Snapshot::default()),
            // Each watch counts itself in as it is spawned.
            pending: AtomicUsize::new(0),
            children_pending: AtomicUsize::new(CHILD_KINDS.len()),
            changed: Notify::new(),
        }
    }

    /// True once every watch has listed its objects: before that a plan could
    /// mistake "not listed yet" for "does not exist" and delete things.
    pub fn is_ready(&self) -> bool {
        self.pending.load(Ordering::Acquire) == 0
    }

    /// True once the operator's own children are listed: enough to clean up,
    /// so a Bulkhead's deletion never waits on a watch it does not need.
    pub fn children_listed(&self) -> bool {
        self.children_pending.load(Ordering::Acquire) == 0
    }

    pub async fn read(&self) -> tokio::sync::RwLockReadGuard<'_, Snapshot> {
        self.snapshot.read().await
    }

    /// A stream that yields whenever the snapshot changed, at most every `every`.
    pub fn changes(self: Arc<Self>, every: Duration) -> impl Stream<Item = ()> + Send + 'static {
        futures::stream::unfold(self, move |shared| async move {
            shared.changed.notified().await;
            tokio::time::sleep(every).await;
            Some(((), shared))
        })
    }
}

/// Kinds the operator writes or marks; cleanup waits for these watches only.
const CHILD_KINDS: [&str; 6] = ["ConfigMap", "ResourceQuota", "PriorityClass", "Node", "Deployment", "StatefulSet"];

/// One watched kind: how to key it, reduce it and where it lives in the snapshot.
trait Observed: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static {
    type Key: Ord + Clone + Send;
    type Lean: Send;
    fn key(&self) -> Self::Key;
    fn lean(&self, interner: &mut Interner) -> Self::Lean;
    fn table(snapshot: &mut Snapshot) -> &mut BTreeMap<Self::Key, Self::Lean>;
    /// Whether a key in the table belongs to this kind (tables may be shared).
    fn owns(_key: &Self::Key) -> bool {
        true
    }
}

fn namespaced_key<K: Resource>(k: &K) -> ObjectKey {
    ObjectKey::new(k.namespace().unwrap_or_default(), k.name_any())
}

/// The plain cases: one kind, one table, keyed by name or namespace/name.
macro_rules! observed {
    ($kind:ty, $key:ident, $lean:ty, $table:ident, |$obj:ident, $interner:ident| $make:expr) => {
        impl Observed for $kind {
            type Key = observed!(@key_type $key);
            type Lean = $lean;
            fn key(&self) -> Self::Key {
                observed!(@key self, $key)
            }
            fn lean(&self, $interner: &mut Interner) -> $lean {
                let $obj = self;
                $make
            }
            fn table(s: &mut Snapshot) -> &mut BTreeMap<Self::Key, $lean> {
                &mut s.$table
            }
        }
    };
    (@key_type cluster) => { String };
    (@key_type namespaced) => { ObjectKey };
    (@key $self:ident, cluster) => { $self.name_any() };
    (@key $self:ident, namespaced) => { namespaced_key($self) };
}

observed!(Namespace, cluster, NamespaceInfo, namespaces, |ns, _interner| NamespaceInfo::from(ns));
observed!(HorizontalPodAutoscaler, namespaced, Autoscaler, autoscalers, |h, _interner| Autoscaler::from(h));
observed!(Node, cluster, NodeInfo, nodes, |node, interner| NodeInfo::from_node(node, interner));
observed!(Pod, namespaced, PodInfo, pods, |pod, interner| PodInfo::from_pod(pod, interner));
observed!(Service, namespaced, ServiceInfo, services, |svc, _interner| ServiceInfo::from(svc));
observed!(Endpoints, namespaced, EndpointsInfo, endpoints, |ep, _interner| EndpointsInfo::from(ep));
observed!(RuntimeClass, cluster, RuntimeClassInfo, runtime_classes, |rc, _interner| RuntimeClassInfo::from(rc));
// The operator's own children are kept whole (they are few), minus managedFields.
observed!(ConfigMap, namespaced, ConfigMap, config_maps, |cm, _interner| {
    let mut cm = cm.clone();
    cm.metadata.managed_fields = None;
    cm
});
observed!(PriorityClass, cluster, PriorityClass, priority_classes, |pc, _interner| {
    let mut pc = pc.clone();
    pc.metadata.managed_fields = None;
    pc
});
observed!(ResourceQuota, namespaced, ResourceQuota, resource_quotas, |rq, _interner| {
    let mut rq = rq.clone();
    rq.metadata.managed_fields = None;
    rq.status = None;
    rq
});

// Deployments and StatefulSets share one table, so each owns only its kind's keys.
impl Observed for Deployment {
    type Key = (WorkloadKind, ObjectKey);
    type Lean = Workload;
    fn key(&self) -> Self::Key {
        (WorkloadKind::Deployment, namespaced_key(self))
    }
    fn lean(&self, _: &mut Interner) -> Workload {
        Workload::from(self)
    }
    fn table(s: &mut Snapshot) -> &mut BTreeMap<Self::Key, Workload> {
        &mut s.workloads
    }
    fn owns(key: &Self::Key) -> bool {
        key.0 == WorkloadKind::Deployment
    }
}

impl Observed for StatefulSet {
    type Key = (WorkloadKind, ObjectKey);
    type Lean = Workload;
    fn key(&self) -> Self::Key {
        (WorkloadKind::StatefulSet, namespaced_key(self))
    }
    fn lean(&self, _: &mut Interner) -> Workload {
        Workload::from(self)
    }
    fn table(s: &mut Snapshot) -> &mut BTreeMap<Self::Key, Workload> {
        &mut s.workloads
    }
    fn owns(key: &Self::Key) -> bool {
        key.0 == WorkloadKind::StatefulSet
    }
}

/// Start every watch; they run until the process ends.
pub fn start(client: &Client) -> Arc<SharedSnapshot> {
    let owned = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"));
    let all = watcher::Config::default();
    let shared = Arc::new(SharedSnapshot::new());
    spawn::<Namespace>(Api::all(client.clone()), all.clone(), shared.clone());
    spawn::<Deployment>(Api::all(client.clone()), all.clone(), shared.clone());
    spawn::<StatefulSet>(Api::all(client.clone()), all.clone(), shared.clone());
    spawn::<HorizontalPodAutoscaler>(Api::all(client.clone()), all.clone(), shared.clone());
    spawn::<ConfigMap>(Api::all(client.clone()), owned.clone(), shared.clone());
    spawn::<ResourceQuota>(Api::all(client.clone()), owned.clone(), shared.clone());
    spawn::<PriorityClass>(Api::all(client.clone()), owned, shared.clone());
    // What the layer audit reads.
    spawn::<Node>(Api::all(client.clone()), all.clone(), shared.clone());
    spawn::<Pod>(Api::all(client.clone()), all.clone(), shared.clone());
    spawn::<Service>(Api::all(client.clone()), all.clone(), shared.clone());
    spawn::<Endpoints>(Api::all(client.clone()), all.clone(), shared.clone());
    spawn::<RuntimeClass>(Api::all(client.clone()), all, shared.clone());
    shared
}

fn spawn<K: Observed>(api: Api<K>, config: watcher::Config, shared: Arc<SharedSnapshot>) {
    shared.pending.fetch_add(1, Ordering::AcqRel);
    tokio::spawn(async move {
        let kind = K::kind(&()).to_string();
        let mut stream = watcher(api, config).default_backoff().boxed();
        let mut buffer: Option<BTreeMap<K::Key, K::Lean>> = None;
        let mut listed_once = false;
        while let Some(event) = stream.next().await {
            let event = match event {
                Ok(event) => event,
                Err(e) => {
                    // The backoff retries; the snapshot keeps its last state meanwhile.
                    warn!(%kind, error = %e, "watch failed; retrying");
                    continue;
                }
            };
            let mut snapshot = shared.snapshot.write().await;
            match event {
                watcher::Event::Init => buffer = Some(BTreeMap::new()),
                watcher::Event::InitApply(obj) => {
                    if let Some(b) = buffer.as_mut() {
                        b.insert(obj.key(), obj.lean(&mut snapshot.interner));
                    }
                }
                watcher::Event::InitDone => {
                    let table = K::table(&mut snapshot);
                    table.retain(|k, _| !K::owns(k));
                    table.extend(buffer.take().unwrap_or_default());
                    if !listed_once {
                        listed_once = true;
                        shared.pending.fetch_sub(1, Ordering::AcqRel);
                        if CHILD_KINDS.contains(&kind.as_str()) {
                            shared.children_pending.fetch_sub(1, Ordering::AcqRel);
                        }
                        debug!(%kind, "initial list complete");
                    }
                }
                watcher::Event::Apply(obj) => {
                    let lean = obj.lean(&mut snapshot.interner);
                    K::table(&mut snapshot).insert(obj.key(), lean);
                }
                watcher::Event::Delete(obj) => {
                    K::table(&mut snapshot).remove(&obj.key());
                }
            }
            drop(snapshot);
            shared.changed.notify_one();
        }
    });
}
