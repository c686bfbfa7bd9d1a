//! Watches that keep the shared `Snapshot` current (the snapshot's index
//! turns each event into its lean entry), and every change nudges the
//! controller to reconcile.

use std::{
    collections::BTreeMap,
    fmt::Debug,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use futures::{Stream, StreamExt};
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    autoscaling::v1::HorizontalPodAutoscaler,
    core::v1::{ConfigMap, Endpoints, Namespace, Node, Pod, ResourceQuota, Service},
    discovery::v1::EndpointSlice,
    networking::v1::NetworkPolicy,
    node::v1::RuntimeClass,
    scheduling::v1::PriorityClass,
};
use kube::{
    api::{Api, PartialObjectMeta},
    runtime::watcher,
    Client, ResourceExt,
};
use prometheus_client::metrics::{counter::Counter, family::Family};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, RwLock};
use tracing::{debug, info, warn};

use super::backend_source::{self, BackendSource};
use super::watch_backoff::{Failure, WatchBackoff};
use crate::controller::runtime::metrics::KindLabels;
use crate::{
    crd::{Bulkhead, MANAGED_BY_LABEL, MANAGED_BY_VALUE},
    snapshot::{Indexed, Seniority, Snapshot},
};

/// The snapshot shared between the watches (writers) and reconciles (readers).
pub struct SharedSnapshot {
    snapshot: RwLock<Snapshot>,
    /// Watches that have not yet completed their first list.
    pending: AtomicUsize,
    /// Of those, the watches of the operator's own children (cleanup needs only these).
    children_pending: AtomicUsize,
    /// Changes of anything but pods, counted under the write lock: with the
    /// journal (which holds every pod change) it tells a reconcile whether a
    /// Bulkhead's last evaluation still holds (`evaluate::evaluate_kept`).
    others: AtomicU64,
    changed: Notify,
    /// Failed watch attempts by kind (`bulkhead_watch_failures_total`).
    pub watch_failures: Family<KindLabels, Counter>,
    /// Each Bulkhead's latest `metadata.generation` as the metadata watch saw
    /// it (and the catch-up lists). The controller's own watch can lag behind
    /// it after an API server restart (see `catch_up`). A reconcile whose
    /// copy is older reads the Bulkhead afresh (`newer_spec`) instead of
    /// planning the old spec.
    generations: std::sync::Mutex<std::collections::HashMap<String, i64>>,
    /// When a watch last failed, and a wake-up for the catch-up lists when one does.
    pub(in crate::controller) last_watch_failure: std::sync::Mutex<Option<std::time::Instant>>,
    pub(in crate::controller) watch_failed: Notify,
}

impl SharedSnapshot {
    /// Record the generation `meta` carries; true when it is newer than the last seen.
    pub(crate) fn note_generation(&self, meta: &kube::api::ObjectMeta) -> bool {
        let (Some(name), Some(generation)) = (meta.name.as_ref(), meta.generation) else { return false };
        let mut known = self.generations.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = known.insert(name.clone(), generation);
        before.is_some_and(|b| generation > b)
    }

    /// Wake the reconciles (the snapshot's change stream).
    pub(in crate::controller) fn wake(&self) {
        self.changed.notify_one();
    }

    /// Whether the metadata watch has seen a newer spec of `name` than `generation`.
    pub fn newer_spec(&self, name: &str, generation: Option<i64>) -> bool {
        let known = self.generations.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        known.get(name).is_some_and(|seen| generation.is_none_or(|g| *seen > g))
    }

    fn new() -> Self {
        Self {
            snapshot: RwLock::new(Snapshot::default()),
            // Each watch counts itself in as it is spawned.
            pending: AtomicUsize::new(0),
            children_pending: AtomicUsize::new(CHILD_KINDS.len()),
            others: AtomicU64::new(0),
            changed: Notify::new(),
            watch_failures: Family::default(),
            generations: std::sync::Mutex::default(),
            last_watch_failure: std::sync::Mutex::default(),
            watch_failed: Notify::new(),
        }
    }

    /// A snapshot already listed in full (tests, and tools that build one
    /// from files); no watch feeds it.
    pub fn listed(snapshot: Snapshot) -> Arc<Self> {
        Arc::new(Self {
            snapshot: RwLock::new(snapshot),
            pending: AtomicUsize::new(0),
            children_pending: AtomicUsize::new(0),
            others: AtomicU64::new(0),
            changed: Notify::new(),
            watch_failures: Family::default(),
            generations: std::sync::Mutex::default(),
            last_watch_failure: std::sync::Mutex::default(),
            watch_failed: Notify::new(),
        })
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

    /// The snapshot and its count of changes to anything but pods, read together.
    pub async fn read_counted(&self) -> (tokio::sync::RwLockReadGuard<'_, Snapshot>, u64) {
        let snapshot = self.snapshot.read().await;
        // Bumped only under the write lock: stable while the guard is held.
        let others = self.others.load(Ordering::Acquire);
        (snapshot, others)
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
const CHILD_KINDS: [&str; 7] =
    ["ConfigMap", "ResourceQuota", "NetworkPolicy", "PriorityClass", "Node", "Deployment", "StatefulSet"];

/// Kinds of an optional feature (spec.workload.proxy.networkPolicy) that the
/// operator may be refused to read: an RBAC older than the binary (an upgrade
/// that applies the Deployment first), or one that withholds them on purpose.
/// Refused, such a kind counts as listed and empty, so every other Bulkhead
/// is still planned; one that asks for the feature gets `ApplyFailed` naming
/// the refusal. It is listed for real once granted.
const OPTIONAL_KINDS: [&str; 1] = ["NetworkPolicy"];

/// A list refused by RBAC.
fn forbidden(error: &watcher::Error) -> bool {
    matches!(error, watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 403)
}

/// Start every watch; they run until the process ends.
pub(in crate::controller) fn start(client: &Client) -> Arc<SharedSnapshot> {
    let owned = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"));
    let all = watcher::Config::default();
    let shared = Arc::new(SharedSnapshot::new());
    spawn::<Namespace>(Api::all(client.clone()), all.clone(), shared.clone());
    spawn::<Deployment>(Api::all(client.clone()), all.clone(), shared.clone());
    spawn::<StatefulSet>(Api::all(client.clone()), all.clone(), shared.clone());
    spawn::<HorizontalPodAutoscaler>(Api::all(client.clone()), all.clone(), shared.clone());
    spawn::<ConfigMap>(Api::all(client.clone()), owned.clone(), shared.clone());
    spawn::<ResourceQuota>(Api::all(client.clone()), owned.clone(), shared.clone());
    spawn::<NetworkPolicy>(Api::all(client.clone()), owned.clone(), shared.clone());
    spawn::<PriorityClass>(Api::all(client.clone()), owned, shared.clone());
    // What the layer audit reads.
    spawn::<Node>(Api::all(client.clone()), all.clone(), shared.clone());
    spawn::<Pod>(Api::all(client.clone()), all.clone(), shared.clone());
    spawn::<Service>(Api::all(client.clone()), all.clone(), shared.clone());
    spawn_backends(client.clone(), all.clone(), shared.clone());
    spawn::<RuntimeClass>(Api::all(client.clone()), all, shared.clone());
    spawn_seniority(Api::all(client.clone()), shared.clone());
    shared
}

/// Bulkheads' names and creation times (their metadata only, so that one the
/// operator's types cannot read still counts). Only an added or removed
/// Bulkhead nudges the controller: status writes change nothing here.
fn spawn_seniority(api: Api<PartialObjectMeta<Bulkhead>>, shared: Arc<SharedSnapshot>) {
    shared.pending.fetch_add(1, Ordering::AcqRel);
    tokio::spawn(async move {
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        let mut retry = WatchBackoff::default();
        let mut buffer: Option<Seniority> = None;
        let mut listed_once = false;
        while let Some(event) = stream.next().await {
            let event = match event {
                Ok(event) => event,
                Err(e) => {
                    wait_to_retry(&mut retry, "Bulkhead", Failure::of(&e), &e, &shared).await;
                    continue;
                }
            };
            // A new spec wakes the reconciles even where nothing else here
            // changed: the controller's own watch may not have it yet.
            let newer_spec = match &event {
                watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) => shared.note_generation(&obj.metadata),
                _ => false,
            };
            // Most events are status writes, which change nothing here: do
            // not hold every reconcile up on the write lock for them.
            if let watcher::Event::Apply(obj) = &event {
                if shared.snapshot.read().await.seniority.holds(&obj.metadata) {
                    if newer_spec {
                        shared.changed.notify_one();
                    }
                    continue;
                }
            }
            let mut snapshot = shared.snapshot.write().await;
            let changed = match event {
                watcher::Event::Init => {
                    buffer = Some(Seniority::default());
                    false
                }
                watcher::Event::InitApply(obj) => {
                    if let Some(b) = buffer.as_mut() {
                        b.insert(&obj.metadata);
                    }
                    false
                }
                watcher::Event::InitDone => {
                    let listed = buffer.take().unwrap_or_default();
                    // Bulkheads deleted while the watch was down are not listed: forget them.
                    shared
                        .generations
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .retain(|name, _| listed.knows(name));
                    let changed = listed != snapshot.seniority;
                    snapshot.seniority = listed;
                    if !listed_once {
                        listed_once = true;
                        shared.pending.fetch_sub(1, Ordering::AcqRel);
                        debug!(kind = "Bulkhead", "initial list complete");
                    }
                    changed
                }
                watcher::Event::Apply(obj) => snapshot.seniority.insert(&obj.metadata),
                watcher::Event::Delete(obj) => {
                    shared
                        .generations
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .remove(&obj.name_any());
                    snapshot.seniority.remove(&obj.name_any())
                }
            };
            if changed {
                // The planner reads seniority: no kept evaluation outlives a change of it.
                shared.others.fetch_add(1, Ordering::AcqRel);
            }
            drop(snapshot);
            if changed || newer_spec {
                shared.changed.notify_one();
            }
        }
    });
}

/// One WARN line per failed attempt, with the wait before the next one;
/// the watcher is not polled meanwhile, so it does not retry sooner.
async fn wait_to_retry(
    retry: &mut WatchBackoff,
    kind: &str,
    failure: Failure,
    error: &(dyn std::error::Error + Send + Sync + 'static),
    shared: &SharedSnapshot,
) {
    shared.watch_failures.get_or_create(&KindLabels { kind: kind.to_owned() }).inc();
    let now = std::time::Instant::now();
    *shared.last_watch_failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(now);
    shared.watch_failed.notify_one();
    let wait = retry.failed(failure, now);
    warn!(%kind, error = %crate::error_chain::Chain(error), retry_in = ?wait, "watch failed");
    tokio::time::sleep(wait).await;
}

/// Services' backends: asks the API server which source it serves (see
/// `backend_source`), retrying as a failed watch does, then watches that one.
/// Counted as pending from the start, so nothing is planned before it lists.
fn spawn_backends(client: Client, config: watcher::Config, shared: Arc<SharedSnapshot>) {
    shared.pending.fetch_add(1, Ordering::AcqRel);
    tokio::spawn(async move {
        let mut retry = WatchBackoff::default();
        let source = loop {
            match backend_source::discover(&client).await {
                Ok(source) => break source,
                Err(e) => wait_to_retry(&mut retry, "EndpointSlice", Failure::of_request(&e), &e, &shared).await,
            }
        };
        info!(?source, "Service backends read from this source");
        match source {
            BackendSource::EndpointSlices => watch::<EndpointSlice>(Api::all(client), config, shared).await,
            BackendSource::Endpoints => watch::<Endpoints>(Api::all(client), config, shared).await,
        }
    });
}

/// What a watched kind needs beyond the snapshot's index.
trait Watched: Indexed + Clone + DeserializeOwned + Debug + Send + Sync + 'static {}
impl<K: Indexed + Clone + DeserializeOwned + Debug + Send + Sync + 'static> Watched for K {}

fn spawn<K: Watched>(api: Api<K>, config: watcher::Config, shared: Arc<SharedSnapshot>) {
    shared.pending.fetch_add(1, Ordering::AcqRel);
    tokio::spawn(watch(api, config, shared));
}

/// Keeps the kind's table current; its pending count was added by the caller.
async fn watch<K: Watched>(api: Api<K>, config: watcher::Config, shared: Arc<SharedSnapshot>) {
    let kind = K::kind(&()).to_string();
    let is_pod = kind == "Pod";
    let mut stream = watcher(api, config).boxed();
    let mut retry = WatchBackoff::default();
    let mut buffer: Option<BTreeMap<K::Key, K::Lean>> = None;
    let mut listed_once = false;
    // An optional kind refused so far (see `OPTIONAL_KINDS`).
    let mut refused = false;
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                if !listed_once && OPTIONAL_KINDS.contains(&kind.as_str()) && forbidden(&e) {
                    listed_once = true;
                    refused = true;
                    shared.snapshot.write().await.reset::<K>(BTreeMap::new());
                    shared.pending.fetch_sub(1, Ordering::AcqRel);
                    shared.children_pending.fetch_sub(1, Ordering::AcqRel);
                    // Asked again now and then, not every 5 s: it may be withheld on purpose.
                    retry = WatchBackoff::with_cap(Duration::from_secs(60));
                    warn!(%kind, "may not list this kind: planning as if there were none until it is granted");
                }
                // The snapshot keeps its last state meanwhile.
                wait_to_retry(&mut retry, &kind, Failure::of(&e), &e, &shared).await;
                continue;
            }
        };
        let mut snapshot = shared.snapshot.write().await;
        match event {
            watcher::Event::Init => buffer = Some(BTreeMap::new()),
            watcher::Event::InitApply(obj) => {
                if let (Some(b), Some((key, lean))) = (buffer.as_mut(), snapshot.entry(&obj)) {
                    b.insert(key, lean);
                }
            }
            watcher::Event::InitDone => {
                snapshot.reset::<K>(buffer.take().unwrap_or_default());
                if refused {
                    refused = false;
                    retry = WatchBackoff::default();
                    info!(%kind, "listed after all: the permission was granted");
                }
                if !listed_once {
                    listed_once = true;
                    shared.pending.fetch_sub(1, Ordering::AcqRel);
                    if CHILD_KINDS.contains(&kind.as_str()) {
                        shared.children_pending.fetch_sub(1, Ordering::AcqRel);
                    }
                    debug!(%kind, "initial list complete");
                }
            }
            watcher::Event::Apply(obj) => snapshot.apply(&obj),
            watcher::Event::Delete(obj) => snapshot.delete(&obj),
        }
        if !is_pod {
            shared.others.fetch_add(1, Ordering::AcqRel);
        }
        drop(snapshot);
        shared.changed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use http::{Request, Response};
    use kube::client::Body;
    use serde_json::{json, Value};
    use tower_test::mock;

    use super::*;
    use crate::snapshot::ObjectKey;

    /// The backends' watch against a mock API server: discovery answered with
    /// `discovery`, then the list the watch makes answered with `listed`.
    /// Returns that list's path and the snapshot once listed.
    async fn backends_with(discovery: (u16, Value), listed: Value) -> (String, Arc<SharedSnapshot>) {
        let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let shared = Arc::new(SharedSnapshot::new());
        spawn_backends(Client::new(service, "default"), watcher::Config::default(), shared.clone());
        let answer = |code: u16, body: &Value| {
            let body = serde_json::to_vec(body).expect("json");
            Response::builder().status(code).body(Body::from(body)).expect("a response")
        };
        let (request, send) = handle.next_request().await.expect("discovery");
        assert_eq!(request.uri().path(), "/apis/discovery.k8s.io/v1");
        send.send_response(answer(discovery.0, &discovery.1));
        let (request, send) = handle.next_request().await.expect("the list");
        let path = request.uri().path().to_string();
        send.send_response(answer(200, &listed));
        for _ in 0..200 {
            if shared.is_ready() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(shared.is_ready(), "listed");
        (path, shared)
    }

    fn list(kind: &str, api_version: &str, items: Value) -> Value {
        json!({"kind": format!("{kind}List"), "apiVersion": api_version, "metadata": {"resourceVersion": "7"}, "items": items})
    }

    /// A watch whose list is answered 403: listed (as empty) only if its kind is optional.
    async fn refused<K: Watched>() -> Arc<SharedSnapshot> {
        let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let shared = Arc::new(SharedSnapshot::new());
        spawn::<K>(Api::all(Client::new(service, "default")), watcher::Config::default(), shared.clone());
        let (_, send) = handle.next_request().await.expect("the list");
        let status =
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403, "reason": "Forbidden"});
        send.send_response(
            Response::builder().status(403).body(Body::from(status.to_string().into_bytes())).expect("a response"),
        );
        // Ready within 2 s, or never: the retries that follow are not answered.
        for _ in 0..40 {
            if shared.is_ready() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        shared
    }

    #[tokio::test]
    async fn only_an_optional_kind_may_be_refused_without_holding_every_plan_up() {
        use k8s_openapi::api::{core::v1::ConfigMap, networking::v1::NetworkPolicy};
        let shared = refused::<NetworkPolicy>().await;
        assert!(shared.is_ready(), "a refused NetworkPolicy list counts as none");
        assert!(shared.read().await.network_policies.is_empty());
        let shared = refused::<ConfigMap>().await;
        assert!(!shared.is_ready(), "a refused ConfigMap list holds planning: it would delete what it cannot see");
    }

    #[tokio::test]
    async fn a_server_that_serves_slices_is_watched_through_them() {
        let resources = json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "discovery.k8s.io/v1",
            "resources": [{"name": "endpointslices", "singularName": "", "namespaced": true, "kind": "EndpointSlice", "verbs": ["list", "watch"]}]});
        let slice = json!({"metadata": {"name": "db-x1", "namespace": "shop", "labels": {"kubernetes.io/service-name": "db"}},
            "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.5"]}]});
        let (path, shared) =
            backends_with((200, resources), list("EndpointSlice", "discovery.k8s.io/v1", json!([slice]))).await;
        assert_eq!(path, "/apis/discovery.k8s.io/v1/endpointslices");
        let backends = shared.read().await.backends_of(&ObjectKey::new("shop", "db"));
        assert_eq!(backends, [("10.0.0.5".to_string(), None)]);
    }

    #[tokio::test]
    async fn a_server_without_v1_slices_is_watched_through_endpoints() {
        let endpoints = json!({"metadata": {"name": "db", "namespace": "shop"},
            "subsets": [{"addresses": [{"ip": "10.0.0.5"}]}]});
        let not_found =
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound"});
        let (path, shared) = backends_with((404, not_found), list("Endpoints", "v1", json!([endpoints]))).await;
        assert_eq!(path, "/api/v1/endpoints");
        let backends = shared.read().await.backends_of(&ObjectKey::new("shop", "db"));
        assert_eq!(backends, [("10.0.0.5".to_string(), None)]);
    }
}
