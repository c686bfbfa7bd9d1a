//! The fault suite, on the real control plane: the API server and etcd
//! killed and restarted (a change in flight; a change made at `/readyz`
//! after 20 s down, ten times in a row), the operator killed mid-placement, leader failover,
//! two Bulkheads wanting the same nodes and Deployment, node churn, and a
//! batch of malformed Bulkheads. Each case prints its figures (`figure:`
//! lines, `--nocapture`) and checks that nodes, children and workload
//! templates end exactly as planned, with the writes counted in the audit log.
//!
//! The cases share one control plane. Those that kill something hold
//! `EXCLUSIVE` for writing; the others run beside each other under one
//! shared operator.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use bulkhead::crd::Bulkhead;
use bulkhead_testkit::{
    audit, condition, names_with_prefix,
    operator::{second_service_account, Operator, NAMESPACE, USER},
    unique_suffix, wait_for, ControlPlane, TestNamespace,
};
use futures::StreamExt;
use k8s_openapi::api::{
    apps::v1::Deployment,
    coordination::v1::Lease,
    core::v1::{ConfigMap, Node, ResourceQuota},
    scheduling::v1::PriorityClass,
};
use kube::{
    api::{Api, ListParams, Patch, PatchParams, PostParams},
    runtime::{watcher, WatchStreamExt},
    Client,
};
use serde_json::{json, Value};
use tokio::sync::RwLock;

static EXCLUSIVE: RwLock<()> = RwLock::const_new(());
/// The operator the cases share (no leader election); a case that needs
/// other operators stops it and the next case starts a new one.
static OPERATOR: Mutex<Option<Operator>> = Mutex::new(None);

const SETTLE: Duration = Duration::from_secs(60);
/// A change made once the API server (or etcd) is back must be applied within this.
const AFTER_RESTART: Duration = Duration::from_secs(5);
/// How long a killed API server or etcd stays down before its restart (which takes 3-13 s more).
const DOWN: Duration = Duration::from_secs(8);

fn operator_up() {
    let mut op = OPERATOR.lock().unwrap_or_else(PoisonError::into_inner);
    if op.as_ref().is_none_or(|o| !o.is_running()) {
        *op = Some(Operator::start(&format!("faults-{}", unique_suffix()), &[]));
    }
}

/// The shared operator's log, for a failure message.
fn operator_log() -> String {
    OPERATOR.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map(Operator::log_text).unwrap_or_default()
}

/// SIGKILL the shared operator (a crash) or SIGTERM it.
fn operator_down(crash: bool) {
    if let Some(op) = OPERATOR.lock().unwrap_or_else(PoisonError::into_inner).take() {
        let gone = if crash { op.kill() } else { op.stop() };
        assert!(gone, "the operator exits:\n{}", op.log_text());
    }
}

/// A placement case: a Bulkhead over nodes labelled `pool=<id>`, its classes'
/// Deployments (no replicas: only their templates matter) and the `api`
/// Deployment whose pool config the Bulkhead writes. Every object's name
/// holds `id`, so the audit log's writes of one case are told apart.
struct Case {
    id: String,
    name: String,
    ns: TestNamespace,
    nodes: Vec<String>,
}

impl Case {
    async fn new(prefix: &str, nodes: usize, classes: &[&str]) -> Case {
        let cp = ControlPlane::get();
        let client = cp.client().await;
        let id = format!("{prefix}-{}", unique_suffix());
        let ns = TestNamespace::new(&id, &[("team", &id)]).await;
        let mut names = Vec::new();
        for i in 1..=nodes {
            let name = format!("{id}-n{i:02}");
            add_node(&client, &name, &[("pool", &id)]).await;
            names.push(name);
        }
        for app in classes.iter().chain(&["api"]) {
            cp.apply_yaml(&deployment(&ns.name, app));
        }
        Case { name: id.clone(), id, ns, nodes: names }
    }

    /// The Bulkhead with `counts` nodes per class, each class placing its Deployment and given a quota.
    fn bulkhead(&self, counts: &[(&str, u32)]) -> String {
        bulkhead_yaml(&self.name, &self.ns.name, &self.id, &self.id, counts)
    }

    /// `bulkhead`, with each class's quota allowing `pods` pods.
    fn bulkhead_with_quota(&self, counts: &[(&str, u32)], pods: u32) -> String {
        bulkhead_yaml_with_quota(&self.name, &self.ns.name, &self.id, &self.id, counts, pods)
    }

    /// Writes by the shared ServiceAccount since `since` to this case's objects (Events aside).
    fn writes(&self, since: &str) -> Vec<audit::Write> {
        writes_to(USER, since, &self.id)
    }
}

fn writes_to(user: &str, since: &str, marker: &str) -> Vec<audit::Write> {
    audit::writes_by(&ControlPlane::get().dir, user, since)
        .into_iter()
        .filter(|w| !w.uri.contains("/events") && w.uri.contains(marker))
        .collect()
}

fn deployment(ns: &str, app: &str) -> String {
    bulkhead_testkit::workload::DeploymentYaml::new(ns, app, 0).render()
}

fn bulkhead_yaml(name: &str, ns: &str, team: &str, pool: &str, counts: &[(&str, u32)]) -> String {
    bulkhead_yaml_with_quota(name, ns, team, pool, counts, 4)
}

fn bulkhead_yaml_with_quota(name: &str, ns: &str, team: &str, pool: &str, counts: &[(&str, u32)], pods: u32) -> String {
    let classes: String = counts
        .iter()
        .map(|(class, count)| {
            format!(
                "  - {{name: {class}, reserved: 10, pods: {{namespaceSelector: {{matchLabels: {{team: {team}}}}}, podSelector: {{matchLabels: {{app: {class}}}}}}}, nodes: {{selector: {{matchLabels: {{pool: {pool}}}}}, count: {count}}}, quota: {{hard: {{pods: \"{pods}\"}}}}}}\n"
            )
        })
        .collect();
    format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: {name}}}\nspec:\n  dimension: Tenant\n  pool: {{resource: connections, capacity: 100}}\n  workload: {{namespace: {ns}, selector: {{matchLabels: {{app: api}}}}}}\n  classes:\n{classes}"
    )
}

/// A fake node, Ready, schedulable, untainted, with extra labels.
async fn add_node(client: &Client, name: &str, labels: &[(&str, &str)]) {
    let mut all: BTreeMap<&str, &str> = labels.iter().copied().collect();
    all.insert("kubernetes.io/hostname", name);
    all.insert("test.bulkhead.dev/fake-node", "true");
    // Opted in to be claimed, as the control plane's own nodes are (--node-opt-in).
    let (opt_in, yes) = bulkhead_testkit::NODE_OPT_IN.split_once('=').expect("KEY=VALUE");
    all.insert(opt_in, yes);
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": all},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "FakeKubelet", "message": "no kubelet runs here"}]
        }
    }))
    .expect("node");
    let nodes: Api<Node> = Api::all(client.clone());
    nodes.create(&PostParams::default(), &node).await.expect("create node");
    // Admission taints a new node not-ready; no kubelet will ever clear it.
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"taints": null}})))
        .await
        .expect("untaint");
}

/// Per node of the case: (its class label, the values of its taints of this Bulkhead).
async fn claims(client: &Client, case: &Case) -> BTreeMap<String, (Option<String>, Vec<(String, String)>)> {
    let key = format!("bulkhead.dev/{}", case.name);
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels("test.bulkhead.dev/fake-node=true"))
        .await
        .expect("list nodes");
    nodes
        .items
        .into_iter()
        .filter(|n| n.metadata.name.as_ref().is_some_and(|name| name.starts_with(&case.id)))
        .map(|n| {
            let label = n.metadata.labels.as_ref().and_then(|l| l.get(&key)).cloned();
            let taints = n
                .spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .into_iter()
                .filter(|t| t.key == key)
                .map(|t| (t.value.unwrap_or_default(), t.effect))
                .collect();
            (n.metadata.name.unwrap_or_default(), (label, taints))
        })
        .collect()
}

/// Node -> class, for the nodes claimed by `case`'s Bulkhead.
async fn groups(client: &Client, case: &Case) -> BTreeMap<String, String> {
    claims(client, case).await.into_iter().filter_map(|(n, (label, _))| Some((n, label?))).collect()
}

/// What differs from the plan of `counts`: node claims (label and its one
/// NoSchedule taint, on exactly `count` nodes per class), the ConfigMap, the
/// quotas, the PriorityClasses, the Deployment templates, and the status.
async fn problems(client: &Client, case: &Case, counts: &[(&str, u32)]) -> Vec<String> {
    let mut out = Vec::new();
    let name = &case.name;
    let key = format!("bulkhead.dev/{name}");
    let mut held: BTreeMap<String, u32> = BTreeMap::new();
    for (node, (label, taints)) in claims(client, case).await {
        match &label {
            Some(class) => {
                *held.entry(class.clone()).or_default() += 1;
                if taints != [(class.clone(), "NoSchedule".to_string())] {
                    out.push(format!("{node} labelled {class} has taints {taints:?}"));
                }
            }
            None if !taints.is_empty() => out.push(format!("{node} unclaimed but tainted {taints:?}")),
            None => {}
        }
    }
    for (class, count) in counts {
        let n = held.remove(*class).unwrap_or_default();
        if n != *count {
            out.push(format!("class {class} holds {n} nodes, not {count}"));
        }
    }
    if !held.is_empty() {
        out.push(format!("nodes claimed for unknown classes: {held:?}"));
    }
    let ns = &case.ns.name;
    if Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(&format!("bulkhead-{name}"))
        .await
        .ok()
        .flatten()
        .is_none()
    {
        out.push("no pool config ConfigMap".into());
    }
    let want: BTreeSet<String> = counts.iter().map(|(c, _)| format!("bulkhead-{name}.{c}")).collect();
    let prefix = format!("bulkhead-{name}.");
    let quotas =
        names_with_prefix(&Api::<ResourceQuota>::namespaced(client.clone(), ns), &prefix).await.unwrap_or_default();
    if quotas != want {
        out.push(format!("quotas {quotas:?}, not {want:?}"));
    }
    let pcs = names_with_prefix(&Api::<PriorityClass>::all(client.clone()), &prefix).await.unwrap_or_default();
    if pcs != want {
        out.push(format!("PriorityClasses {pcs:?}, not {want:?}"));
    }
    for (class, _) in counts {
        let Ok(d) = Api::<Deployment>::namespaced(client.clone(), ns).get(class).await else {
            out.push(format!("no Deployment {class}"));
            continue;
        };
        let t = json!(d.spec.map(|s| s.template));
        let terms = &t["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"];
        let placed = t["metadata"]["labels"][&key] == *class
            && t["spec"]["priorityClassName"] == format!("bulkhead-{name}.{class}")
            && t["spec"]["tolerations"]
                .as_array()
                .is_some_and(|ts| ts.iter().any(|x| x["key"] == key && x["value"] == *class))
            && terms == &json!([{"matchExpressions": [{"key": key, "operator": "In", "values": [class]}]}]);
        if !placed {
            out.push(format!("Deployment {class}'s template is not placed: {t}"));
        }
    }
    match condition(client, name, "Ready").await {
        Some((s, _, _)) if s == "True" => {}
        other => out.push(format!("Ready is {other:?}")),
    }
    out
}

async fn converge(client: &Client, case: &Case, counts: &[(&str, u32)], timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let p = problems(client, case, counts).await;
        if p.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "not converged to {counts:?} in {timeout:?}: {p:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The node writes are the fewest the move from `before` to `after` needs:
/// one per node claimed or released, two per node that changed class (release,
/// then claim). A write that changed nothing (a retry of a write that had
/// landed, a fight) shows as one more. Nothing else but the Bulkhead's status
/// is written: counts change no child and no template.
fn assert_fewest_writes(
    what: &str,
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
    writes: &[audit::Write],
) {
    let mut per_node: BTreeMap<String, u32> = BTreeMap::new();
    let mut others = Vec::new();
    for w in writes.iter().filter(|w| w.code < 300) {
        let path = w.uri.split('?').next().unwrap_or_default();
        match path.strip_prefix("/api/v1/nodes/") {
            Some(node) => *per_node.entry(node.to_string()).or_default() += 1,
            None if path.contains("/bulkheads/") => {}
            None => others.push(w),
        }
    }
    assert!(others.is_empty(), "{what}: writes besides nodes and status: {others:#?}");
    for (node, n) in &per_node {
        let needed = match (before.get(node), after.get(node)) {
            (Some(a), Some(b)) if a == b => 0,
            (Some(_), Some(_)) => 2,
            (None, None) => 0,
            _ => 1,
        };
        assert!(
            *n <= needed,
            "{what}: {node} written {n} times, {needed} needed ({before:?} -> {after:?})\n{writes:#?}"
        );
    }
}

/// Nothing written to the case's objects for `window` (the operator at rest).
async fn assert_at_rest(case: &Case, window: Duration) {
    let since = audit::now_rfc3339();
    tokio::time::sleep(window).await;
    let writes = case.writes(&since);
    assert!(writes.is_empty(), "writes at rest: {writes:#?}");
}

/// 1, 2. The API server, then etcd, SIGKILLed right after a change (a reconcile
/// in flight) and restarted: a change made once it is back is applied within 5 s.
#[tokio::test]
async fn api_server_and_etcd_killed_mid_reconcile_and_restarted() {
    let _exclusive = EXCLUSIVE.write().await;
    let cp = ControlPlane::get();
    operator_up();
    let client = cp.client().await;
    let case = Case::new("restart", 6, &["a", "b"]).await;
    cp.apply_yaml(&case.bulkhead(&[("a", 2), ("b", 2)]));
    converge(&client, &case, &[("a", 2), ("b", 2)], SETTLE).await;

    type Counts = [(&'static str, u32); 2];
    let steps: [(&str, Counts, Counts); 2] = [
        ("kube-apiserver", [("a", 2), ("b", 1)], [("a", 3), ("b", 1)]),
        ("etcd", [("a", 2), ("b", 2)], [("a", 1), ("b", 3)]),
    ];
    for (component, in_flight, after) in steps {
        let held_before = groups(&client, &case).await;
        let since = audit::now_rfc3339();
        cp.apply_yaml(&case.bulkhead(&in_flight));
        let killed = Instant::now();
        cp.kill(component);
        if component == "kube-apiserver" {
            // Down about 20 s in all, as in the report: long enough for kube's
            // default watch backoff (0.8 s doubling to 30 s) to reach waits of 13-26 s.
            tokio::time::sleep(DOWN).await;
        }
        // `restart` returns once /readyz answers: the change is made at that
        // moment, as a user would make it. Custom resources are served a
        // moment later (and after etcd's return the API server holds
        // requests until its etcd client has reconnected), so it may be
        // refused at first; it is sent again until it is taken.
        cp.restart(component);
        let ready = Instant::now();
        let down = killed.elapsed();
        let (accepted, refused) = apply_until_taken(cp, &case.bulkhead(&after), ready).await;
        let changed = Instant::now();
        converge(&client, &case, &after, SETTLE).await;
        let applied = changed.elapsed();
        let since_ready = ready.elapsed();
        eprintln!(
            "figure: {component} SIGKILLed mid-reconcile, back after {down:.1?}; the next change, made the moment /readyz answered, accepted {accepted:.2?} later ({refused} refusals) and applied {applied:.2?} after that: {since_ready:.2?} from /readyz in all"
        );
        assert!(
            since_ready <= AFTER_RESTART,
            "{component}: change applied {since_ready:?} after it was ready, over {AFTER_RESTART:?}; operator log:\n{}",
            operator_log()
        );
        assert_fewest_writes(component, &held_before, &groups(&client, &case).await, &case.writes(&since));
        assert_at_rest(&case, Duration::from_secs(3)).await;
    }
    cp.kubectl(&["delete", "bulkhead", &case.name, "--timeout=60s"]);
    assert!(groups(&client, &case).await.is_empty(), "deletion releases every node");
}

/// Send `yaml` until the API server takes it: right after a restart it may
/// refuse custom resources a moment. How long after `ready` it was taken,
/// and how often it was refused before.
async fn apply_until_taken(cp: &ControlPlane, yaml: &str, ready: Instant) -> (Duration, u32) {
    let mut refused = 0;
    loop {
        let (ok, _, err) = cp.try_apply_yaml(yaml);
        if ok {
            return (ready.elapsed(), refused);
        }
        refused += 1;
        assert!(ready.elapsed() < Duration::from_secs(30), "the API server keeps refusing the change: {err}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How often the user's sequence runs in a row, and how long the API server stays down in each.
const AT_REST_RUNS: u32 = 10;
const AT_REST_DOWN: Duration = Duration::from_secs(20);

/// 2b. The user's sequence (issue 40): nothing in flight, the API server
/// SIGKILLed, down 20 s and restarted with the same flags; the moment
/// `/readyz` answers, a class's quota is changed, and its ResourceQuota must
/// follow within 5 s, in every one of ten runs in a row (the 10 s hold this
/// guards against came in five of six runs by hand, so one run proves
/// little). The relists the restart causes write nothing else.
#[tokio::test]
async fn api_server_killed_at_rest_a_change_made_at_readyz_is_applied_within_5s_every_time() {
    let _exclusive = EXCLUSIVE.write().await;
    let cp = ControlPlane::get();
    operator_up();
    let client = cp.client().await;
    let case = Case::new("readyz", 2, &["a"]).await;
    let counts = [("a", 1)];
    cp.apply_yaml(&case.bulkhead_with_quota(&counts, 4));
    converge(&client, &case, &counts, SETTLE).await;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &case.ns.name);
    let quota = format!("bulkhead-{}.a", case.name);
    let hard_pods = || async {
        let q = quotas.get_opt(&quota).await.ok().flatten()?;
        q.spec?.hard?.get("pods").map(|p| p.0.clone())
    };
    let mut figures = Vec::new();
    for run in 1..=AT_REST_RUNS {
        let pods = if run % 2 == 1 { 5 } else { 4 };
        // At rest: nothing written for 2 s, so no reconcile is in flight when the server dies.
        audit::wait_quiet(&cp.dir, USER, Duration::from_secs(2), SETTLE).await;
        let since = audit::now_rfc3339();
        let killed = Instant::now();
        cp.kill("kube-apiserver");
        tokio::time::sleep(AT_REST_DOWN).await;
        cp.restart("kube-apiserver");
        let ready = Instant::now();
        let down = killed.elapsed();
        let (accepted, refused) = apply_until_taken(cp, &case.bulkhead_with_quota(&counts, pods), ready).await;
        let want = pods.to_string();
        while hard_pods().await.as_deref() != Some(want.as_str()) {
            assert!(
                ready.elapsed() < SETTLE,
                "run {run}: quota never became {want}; operator log:\n{}",
                operator_log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let since_ready = ready.elapsed();
        eprintln!(
            "figure: at rest, run {run:2}/{AT_REST_RUNS}: kube-apiserver SIGKILLed, back after {down:.1?}; the quota change made the moment /readyz answered was accepted {accepted:.2?} later ({refused} refusals) and applied {since_ready:.2?} from /readyz"
        );
        figures.push(since_ready);
        assert!(
            since_ready <= AFTER_RESTART,
            "run {run}: quota change applied {since_ready:?} after /readyz, over {AFTER_RESTART:?} (runs so far: {figures:.2?}); operator log:\n{}",
            operator_log()
        );
        // Only the quota and the Bulkhead's status may change: the relists rewrote nothing.
        audit::wait_quiet(&cp.dir, USER, Duration::from_secs(2), SETTLE).await;
        let others: Vec<_> = case
            .writes(&since)
            .into_iter()
            .filter(|w| {
                w.code < 300 && !w.uri.contains(&format!("/resourcequotas/{quota}")) && !w.uri.contains("/bulkheads/")
            })
            .collect();
        assert!(others.is_empty(), "run {run}: writes besides the quota and the status: {others:#?}");
    }
    figures.sort();
    let n = figures.len();
    let median = (figures[(n - 1) / 2] + figures[n / 2]) / 2;
    eprintln!(
        "figure: at rest, {n} runs in a row (down {AT_REST_DOWN:?} each): change applied from /readyz in {:.2?} slowest, {median:.2?} median, {:.2?} fastest; all {figures:.2?}",
        figures[n - 1], figures[0]
    );
    cp.kubectl(&["delete", "bulkhead", &case.name, "--timeout=60s"]);
}

async fn lease_holder(leases: &Api<Lease>) -> Option<String> {
    leases.get("bulkhead-operator").await.ok()?.spec?.holder_identity
}

/// 3. Leader failover: on SIGTERM the leader releases the Lease after its last
/// write and a standby takes over in under 2 s; after a SIGKILL, once the Lease
/// expires (15 s). The audit log never shows two replicas writing at once.
#[tokio::test]
async fn leader_failover_on_sigterm_and_sigkill_never_two_writers() {
    let _exclusive = EXCLUSIVE.write().await;
    let cp = ControlPlane::get();
    operator_down(false);
    let client = cp.client().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let other_sa = format!("faults-{}", unique_suffix());
    let other_kubeconfig = second_service_account(&other_sa);
    let other_user = format!("system:serviceaccount:{NAMESPACE}:{other_sa}");
    let since = audit::now_rfc3339();
    let a = Operator::start("leader-a", &["--leader-elect"]);
    wait_for("leader-a holds the Lease", SETTLE, || async {
        (lease_holder(&leases).await? == "leader-a").then_some(())
    })
    .await;
    let b = Operator::start_as("leader-b", &other_kubeconfig, &["--leader-elect"]);

    // Keep the leader busy: a Bulkhead changed every 200 ms, so there is always a write to make.
    let id = format!("leader-{}", unique_suffix());
    let yaml = |reserved: u32| {
        format!("apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: {id}}}\nspec:\n  dimension: Tenant\n  pool: {{resource: connections, capacity: 100}}\n  classes: [{{name: a, reserved: {reserved}, critical: true}}]\n")
    };
    cp.apply_yaml(&yaml(1));
    let churn = {
        let id = id.clone();
        let client = client.clone();
        tokio::spawn(async move {
            let api: Api<Bulkhead> = Api::all(client);
            for i in 0u32.. {
                let patch = json!({"spec": {"classes": [{"name": "a", "reserved": 1 + i % 5, "critical": true}]}});
                let _ = api.patch(&id, &PatchParams::default(), &Patch::Merge(patch)).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;

    // SIGTERM the leader; watch the Lease meanwhile.
    let signalled = Instant::now();
    let stopping = tokio::task::spawn_blocking(move || (a.stop(), a));
    let b_holds = wait_for("leader-b takes the Lease", Duration::from_secs(30), || async {
        (lease_holder(&leases).await? == "leader-b").then(|| signalled.elapsed())
    })
    .await;
    let (stopped, a) = stopping.await.expect("stop");
    assert!(stopped, "leader-a exits on SIGTERM:\n{}", a.log_text());
    assert!(a.log_text().contains("released the leader lease"), "{}", a.log_text());
    eprintln!("figure: leader SIGTERMed -> standby holds the Lease after {b_holds:.2?}");
    assert!(b_holds < Duration::from_secs(2), "takeover after SIGTERM took {b_holds:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;

    // A new standby, then SIGKILL the leader: the Lease must expire first.
    let a2 = Operator::start("leader-a2", &["--leader-elect"]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let killed = Instant::now();
    assert!(b.kill(), "leader-b dies");
    let a2_holds = wait_for("leader-a2 takes the Lease", Duration::from_secs(40), || async {
        (lease_holder(&leases).await? == "leader-a2").then(|| killed.elapsed())
    })
    .await;
    eprintln!("figure: leader SIGKILLed -> standby holds the Lease after {a2_holds:.2?} (Lease duration 15 s)");
    assert!(a2_holds <= Duration::from_secs(17), "takeover after SIGKILL took {a2_holds:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    churn.abort();

    // Never two writers: the writes of each term lie between the takeovers.
    let by_a = writes_to(USER, &since, "");
    let by_b = writes_to(&other_user, &since, "");
    let (a_first_term, a_second_term): (Vec<_>, Vec<_>) =
        by_a.iter().partition(|w| by_b.first().is_none_or(|first_b| w.at < first_b.at));
    let b_first = by_b.first().map(|w| w.at.clone()).expect("leader-b wrote");
    let b_last = by_b.last().map(|w| w.at.clone()).expect("leader-b wrote");
    let a_last_first_term = a_first_term.last().map(|w| w.at.clone()).expect("leader-a wrote");
    let a2_first = a_second_term.first().map(|w| w.at.clone()).expect("leader-a2 wrote");
    eprintln!(
        "figure: writes per term: leader-a {}, leader-b {}, leader-a2 {}; a's last {a_last_first_term}, b's first {b_first}, b's last {b_last}, a2's first {a2_first}",
        a_first_term.len(),
        by_b.len(),
        a_second_term.len()
    );
    assert!(a_last_first_term < b_first && b_last < a2_first, "two writers at once");
    assert!(!by_b.is_empty() && !a_second_term.is_empty());
    assert!(a2.stop(), "leader-a2 exits on SIGTERM");
    operator_up();
    cp.kubectl(&["delete", "bulkhead", &id, "--timeout=60s"]);
}

/// A seeded generator for the random delays (SplitMix64): the seed is printed, and
/// FAULTS_SEED replays a run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Every state a node of the case passes through, checked as the watch sees it:
/// never two classes of the Bulkhead on one node (label and taints together).
fn watch_double_claims(client: &Client, case: &Case) -> (Arc<Mutex<Vec<String>>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let key = format!("bulkhead.dev/{}", case.name);
    let api: Api<Node> = Api::all(client.clone());
    let config = watcher::Config::default().labels(&format!("pool={}", case.id));
    let out = seen.clone();
    let task = tokio::spawn(async move {
        let mut stream = watcher(api, config).default_backoff().applied_objects().boxed();
        while let Some(Ok(node)) = stream.next().await {
            let mut classes: BTreeSet<String> = BTreeSet::new();
            classes.extend(node.metadata.labels.as_ref().and_then(|l| l.get(&key)).cloned());
            for t in node.spec.and_then(|s| s.taints).unwrap_or_default() {
                if t.key == key {
                    classes.insert(t.value.unwrap_or_default());
                }
            }
            if classes.len() > 1 {
                out.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(format!("{:?}: {classes:?}", node.metadata.name));
            }
        }
    });
    (seen, task)
}

/// 4. The operator SIGKILLed at random moments while it places four classes
/// on 12 of 14 nodes (from unclaimed nodes each round), and restarted: every
/// round ends in the state an uninterrupted placement reached, with no write
/// repeated, and no node is ever claimed by two classes. The Bulkhead is then
/// deleted (every other round with a SIGKILL mid-cleanup too) and everything
/// must be released.
#[tokio::test]
async fn operator_killed_at_random_moments_during_placement() {
    let _exclusive = EXCLUSIVE.write().await;
    let cp = ControlPlane::get();
    operator_up();
    let client = cp.client().await;
    let case = Case::new("crash", 14, &["a", "b", "c", "d"]).await;
    let spec = [("a", 4), ("b", 3), ("c", 3), ("d", 2)];
    cp.apply_yaml(&case.bulkhead(&spec));
    converge(&client, &case, &spec, SETTLE).await;
    let reference = groups(&client, &case).await;
    cp.kubectl(&["delete", "bulkhead", &case.name, "--timeout=60s"]);
    let (double, watch) = watch_double_claims(&client, &case);
    let seed = std::env::var("FAULTS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    });
    eprintln!("figure: operator SIGKILL rounds with FAULTS_SEED={seed}");
    let mut rng = Rng(seed);
    let mut slowest = (Duration::ZERO, 0);
    let rounds = 20;
    for round in 0..rounds {
        assert!(groups(&client, &case).await.is_empty(), "round {round} starts from unclaimed nodes");
        let delay = Duration::from_millis(rng.next() % 400);
        let since = audit::now_rfc3339();
        cp.apply_yaml(&case.bulkhead(&spec));
        let changed = Instant::now();
        tokio::time::sleep(delay).await;
        operator_down(true);
        let before_kill = case.writes(&since).len();
        operator_up();
        converge(&client, &case, &spec, SETTLE).await;
        let took = changed.elapsed();
        if took > slowest.0 {
            slowest = (took, round);
        }
        let state = groups(&client, &case).await;
        let writes = case.writes(&since);
        eprintln!(
            "round {round:2}: killed {delay:>5.0?} after the Bulkhead was applied ({before_kill} of {} writes before the kill), converged after {took:.2?}",
            writes.len()
        );
        assert_eq!(state, reference, "round {round} ended differently (FAULTS_SEED={seed})");
        assert_written_once(&format!("round {round}"), &writes);
        // Clean up; every other round, crash in the middle of it.
        let deleting = std::process::Command::new(&cp.kubectl)
            .arg("--kubeconfig")
            .arg(&cp.kubeconfig)
            .args(["delete", "bulkhead", &case.name, "--wait=false"])
            .output()
            .expect("kubectl runs");
        assert!(deleting.status.success());
        if round % 2 == 1 {
            tokio::time::sleep(Duration::from_millis(rng.next() % 300)).await;
            operator_down(true);
            operator_up();
        }
        wait_for(&format!("round {round}: everything released"), SETTLE, || async {
            let gone = Api::<Bulkhead>::all(client.clone()).get_opt(&case.name).await.ok()?.is_none();
            (gone && claims(&client, &case).await.values().all(|(l, t)| l.is_none() && t.is_empty())).then_some(())
        })
        .await;
    }
    watch.abort();
    let double = double.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert!(double.is_empty(), "nodes claimed by two classes at once: {double:?}");
    eprintln!(
        "figure: {rounds} operator SIGKILL rounds mid-placement, slowest convergence {:.2?} (round {})",
        slowest.0, slowest.1
    );
    let left = clean_problems(&client, &case).await;
    assert!(left.is_empty(), "left behind: {left:#?}");
}

/// Placing from scratch writes each object once at most, crash or not.
fn assert_written_once(what: &str, writes: &[audit::Write]) {
    let mut per_uri: BTreeMap<&str, u32> = BTreeMap::new();
    for w in writes.iter().filter(|w| w.code < 300 && !w.uri.contains("/bulkheads/")) {
        *per_uri.entry(w.uri.split('?').next().unwrap_or_default()).or_default() += 1;
    }
    let twice: Vec<_> = per_uri.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "{what}: written more than once: {twice:?}\n{writes:#?}");
}

/// What the Bulkhead left behind after its deletion.
async fn clean_problems(client: &Client, case: &Case) -> Vec<String> {
    let mut out = Vec::new();
    let prefix = format!("bulkhead-{}.", case.name);
    for (node, (label, taints)) in claims(client, case).await {
        if label.is_some() || !taints.is_empty() {
            out.push(format!("{node}: {label:?} {taints:?}"));
        }
    }
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), &case.ns.name).list(&ListParams::default()).await;
    out.extend(quotas.map(|l| l.items).unwrap_or_default().into_iter().filter_map(|q| q.metadata.name));
    let pcs = Api::<PriorityClass>::all(client.clone()).list(&ListParams::default()).await;
    out.extend(
        pcs.map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|q| q.metadata.name)
            .filter(|n| n.starts_with(&prefix)),
    );
    if let Ok(Some(_)) =
        Api::<ConfigMap>::namespaced(client.clone(), &case.ns.name).get_opt(&format!("bulkhead-{}", case.name)).await
    {
        out.push("pool config ConfigMap".into());
    }
    let key = format!("bulkhead.dev/{}", case.name);
    for d in Api::<Deployment>::namespaced(client.clone(), &case.ns.name)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let t = json!(d.spec.map(|s| s.template));
        if t["metadata"]["labels"].get(&key).is_some()
            || t["spec"].get("affinity").is_some()
            || t["spec"].get("tolerations").is_some()
            || t["spec"].get("priorityClassName").is_some()
        {
            out.push(format!("Deployment {:?} still placed: {t}", d.metadata.name));
        }
    }
    out
}

/// 5a. Two Bulkheads want the same nodes and the same Deployment, created one
/// after the other: the older keeps both (see `rivals_settle`).
#[tokio::test]
async fn two_bulkheads_created_in_turn_the_older_keeps_nodes_and_deployment() {
    let _shared = EXCLUSIVE.read().await;
    let cp = ControlPlane::get();
    operator_up();
    let client = cp.client().await;
    let case = Case::new("rivals", 3, &["shared"]).await;
    let older = case.name.clone();
    let newer = format!("{}-newer", case.id);
    cp.apply_yaml(&bulkhead_yaml(&older, &case.ns.name, &case.id, &case.id, &[("shared", 2)]));
    converge(&client, &case, &[("shared", 2)], SETTLE).await;
    cp.apply_yaml(&bulkhead_yaml(&newer, &case.ns.name, &case.id, &case.id, &[("shared", 2)]));
    rivals_settle(&client, &case, &older, &newer, None).await;
}

/// 5b. The same two created in one `kubectl apply`, the later name first, so
/// that both race from the start: the winner is the one the rule names
/// (earlier creationTimestamp, then the smaller name), whichever wrote first.
#[tokio::test]
async fn two_bulkheads_created_together_the_rule_names_the_winner() {
    let _shared = EXCLUSIVE.read().await;
    let cp = ControlPlane::get();
    operator_up();
    let client = cp.client().await;
    let mut case = Case::new("tie", 3, &["shared"]).await;
    let (a, b) = (format!("{}-a", case.id), format!("{}-b", case.id));
    let yaml = |name: &str| bulkhead_yaml(name, &case.ns.name, &case.id, &case.id, &[("shared", 2)]);
    let started = (audit::now_rfc3339(), Instant::now());
    cp.apply_yaml(&format!("{}---\n{}", yaml(&b), yaml(&a)));
    let api = Api::<Bulkhead>::all(client.clone());
    let created = |bh: Bulkhead| bh.metadata.creation_timestamp.map(|t| t.0);
    let ta = created(api.get(&a).await.expect("a"));
    let tb = created(api.get(&b).await.expect("b"));
    let (winner, loser) = if (ta, &a) < (tb, &b) { (a.clone(), b.clone()) } else { (b.clone(), a.clone()) };
    eprintln!("figure: two Bulkheads created together ({b} at {tb:?}, then {a} at {ta:?}): {winner} wins");
    case.name = winner.clone();
    rivals_settle(&client, &case, &winner, &loser, Some(started)).await;
}

/// The older holds its nodes and places the Deployment; the newer holds only
/// what is left, names the older in NodeGroupsReady and Placed, and keeps
/// nothing of its own on the Deployment or the older's nodes; then no write
/// passes between them for the window (60 s, `FAULTS_RIVAL_WINDOW_SECS`).
async fn rivals_settle(client: &Client, case: &Case, older: &str, newer: &str, race: Option<(String, Instant)>) {
    let cp = ControlPlane::get();
    converge(client, case, &[("shared", 2)], SETTLE).await;
    let (_, _, nodes_msg) = wait_for("the newer Bulkhead reports the nodes held", SETTLE, || async {
        condition(client, newer, "NodeGroupsReady").await.filter(|c| c.0 == "False" && c.2.contains(older))
    })
    .await;
    // A newer Bulkhead that applied before it saw the older's placement may
    // first report the conflict (PlacementConflict); it then yields.
    let (_, reason, placed_msg) = wait_for("the newer Bulkhead reports the Deployment held", SETTLE, || async {
        condition(client, newer, "Placed").await.filter(|c| c.0 == "False" && c.1 == "PlacedByOlderBulkhead")
    })
    .await;
    eprintln!("newer Bulkhead: NodeGroupsReady: {nodes_msg}\nPlaced: {reason}: {placed_msg}");
    assert!(nodes_msg.contains(&format!("held by Bulkhead {older}, which outranks this one")), "{nodes_msg}");
    assert!(placed_msg.contains(&format!("Deployment {}/shared to Bulkhead {older}", case.ns.name)), "{placed_msg}");
    wait_for("the newer Bulkhead lets go of the older's nodes and the Deployment", SETTLE, || async {
        let left = leftovers(client, case, newer).await;
        left.is_empty().then_some(())
    })
    .await;
    if let Some((since, at)) = race {
        // The contest itself: each side's writes until the newer let go.
        let writes = case.writes(&since);
        let landed = |what: &str| writes.iter().filter(|w| w.code < 300 && w.uri.contains(what)).count();
        eprintln!(
            "figure: created together: settled in {:?}; writes by both: {} to nodes, {} to the Deployment; {} refused",
            at.elapsed(),
            landed("/nodes/"),
            landed("/deployments/"),
            writes.iter().filter(|w| w.code >= 300).count()
        );
    }
    let claimed = groups(client, case).await;
    let window =
        Duration::from_secs(std::env::var("FAULTS_RIVAL_WINDOW_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60));
    let since = audit::now_rfc3339();
    tokio::time::sleep(window).await;
    let writes = case.writes(&since);
    eprintln!("figure: two Bulkheads over the same nodes and Deployment: {} writes in {window:?}", writes.len());
    assert!(writes.is_empty(), "writes between rivals: {writes:#?}");
    assert_eq!(groups(client, case).await, claimed, "the older keeps its nodes");
    let left = problems(client, case, &[("shared", 2)]).await;
    assert!(left.is_empty(), "the older's plan holds: {left:#?}");
    let left = leftovers(client, case, newer).await;
    assert!(left.is_empty(), "the newer keeps nothing it lost: {left:#?}");
    cp.kubectl(&["delete", "bulkhead", newer, older, "--timeout=60s"]);
}

/// What `newer` still holds that the older won: a claim on a node the older
/// claims, or its label or placement annotation on the Deployment.
async fn leftovers(client: &Client, case: &Case, newer: &str) -> Vec<String> {
    let (theirs, ours) = (format!("bulkhead.dev/{}", case.name), format!("bulkhead.dev/{newer}"));
    let mut out = Vec::new();
    let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await.map(|l| l.items);
    for n in nodes
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.metadata.name.as_ref().is_some_and(|x| x.starts_with(&case.id)))
    {
        let labels = n.metadata.labels.unwrap_or_default();
        if labels.contains_key(&theirs) && labels.contains_key(&ours) {
            out.push(format!("node {:?} claimed by both", n.metadata.name));
        }
    }
    match Api::<Deployment>::namespaced(client.clone(), &case.ns.name).get("shared").await {
        Ok(d) => {
            let t = json!(d.spec.map(|s| s.template));
            if t["metadata"]["labels"].get(&ours).is_some() {
                out.push(format!("Deployment shared carries {ours}: {t}"));
            }
            let annotations = d.metadata.annotations.unwrap_or_default();
            if annotations.contains_key(&format!("placement.bulkhead.dev/{newer}")) {
                out.push(format!("Deployment shared is annotated as placed by {newer}"));
            }
        }
        Err(e) => out.push(format!("Deployment shared: {e}")),
    }
    out
}

/// 6. Node churn under a running operator: a claimed node deleted, one
/// cordoned, one relabelled out of the selector. Each is released (if it still
/// exists) exactly, replaced, and nothing else is written.
#[tokio::test]
async fn node_churn_is_replaced_and_released_exactly() {
    let _shared = EXCLUSIVE.read().await;
    let cp = ControlPlane::get();
    operator_up();
    let client = cp.client().await;
    let case = Case::new("churn", 7, &["a", "b"]).await;
    let counts = [("a", 2), ("b", 1)];
    let nodes: Api<Node> = Api::all(client.clone());
    let original = |n: Node| (json!(n.metadata.labels), json!(n.spec.and_then(|s| s.taints)));
    let mut before = BTreeMap::new();
    for n in &case.nodes {
        before.insert(n.clone(), original(nodes.get(n).await.expect("node")));
    }
    cp.apply_yaml(&case.bulkhead(&counts));
    converge(&client, &case, &counts, SETTLE).await;
    for (event, class) in [("deleted", "a"), ("cordoned", "a"), ("relabelled", "b")] {
        let held = groups(&client, &case).await;
        let victim = held.iter().find(|(_, c)| *c == class).map(|(n, _)| n.clone()).expect("a claimed node");
        let since = audit::now_rfc3339();
        let started = Instant::now();
        match event {
            "deleted" => cp.kubectl(&["delete", "node", &victim]),
            "cordoned" => cp.kubectl(&["cordon", &victim]),
            _ => cp.kubectl(&["label", "node", &victim, "pool=elsewhere", "--overwrite"]),
        };
        let after = wait_for(&format!("{victim} {event}: replaced"), SETTLE, || async {
            let now = groups(&client, &case).await;
            let replaced = !now.contains_key(&victim)
                && now.values().filter(|c| *c == class).count() == if class == "a" { 2 } else { 1 };
            replaced.then_some(now)
        })
        .await;
        let took = started.elapsed();
        converge(&client, &case, &counts, SETTLE).await;
        // Only the victim and its replacement changed hands.
        let moved: BTreeSet<&String> =
            held.keys().chain(after.keys()).filter(|n| held.get(*n) != after.get(*n)).collect();
        assert_eq!(moved.len(), 2, "{event}: only {victim} and one replacement changed: {held:?} -> {after:?}");
        if event != "deleted" {
            // Released exactly: its own labels and taints as before the claim.
            let mut now = original(nodes.get(&victim).await.expect("node"));
            if event == "relabelled" {
                now.0["pool"] = json!(case.id);
            }
            let taints = now.1.as_array().cloned().unwrap_or_default();
            let own: Vec<_> = taints.iter().filter(|t| t["key"] != "node.kubernetes.io/unschedulable").collect();
            let was: Vec<_> = before[&victim].1.as_array().cloned().unwrap_or_default();
            assert_eq!(now.0, before[&victim].0, "{victim}'s labels after release");
            assert_eq!(own, was.iter().collect::<Vec<_>>(), "{victim}'s taints after release");
        }
        let writes: Vec<_> =
            case.writes(&since).into_iter().filter(|w| w.uri.contains("/nodes/") && w.code < 300).collect();
        let expected = if event == "deleted" { 1 } else { 2 };
        eprintln!("figure: claimed node {event} -> replaced after {took:.2?}, {} node writes", writes.len());
        assert_eq!(writes.len(), expected, "{event}: node writes {writes:#?}");
        assert_fewest_writes(event, &held, &after, &case.writes(&since));
    }
    cp.kubectl(&["delete", "bulkhead", &case.name, "--timeout=60s"]);
    for n in &case.nodes {
        if let Some(node) = nodes.get_opt(n).await.expect("get node") {
            let (labels, taints) = original(node);
            let mut labels = labels;
            if labels["pool"] == "elsewhere" {
                labels["pool"] = json!(case.id);
            }
            assert_eq!(labels, before[n].0, "{n}'s labels after the Bulkhead went");
            let taints: Vec<Value> = taints
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|t| t["key"] != "node.kubernetes.io/unschedulable")
                .collect();
            assert_eq!(json!(taints), json!(before[n].1.as_array().cloned().unwrap_or_default()), "{n}'s taints");
        }
    }
}

/// Malformed specs the CRD schema admits (it refuses, itself, out-of-range
/// priorities and counts, duplicate or non-DNS class names, and empty or
/// overlong class lists), each with the field its condition must name.
fn malformed(id: &str) -> Vec<(String, Value, &'static str)> {
    let pods =
        json!({"namespaceSelector": {"matchLabels": {"team": "t"}}, "podSelector": {"matchLabels": {"app": "a"}}});
    let sel = |expr: Value| json!({"matchExpressions": [expr]});
    let class = |extra: Value| {
        let mut c = json!({"name": "a", "reserved": 10});
        c.as_object_mut().expect("object").extend(extra.as_object().cloned().unwrap_or_default());
        c
    };
    let spec = |classes: Value, extra: Value| {
        let mut s =
            json!({"dimension": "Tenant", "pool": {"resource": "connections", "capacity": 100}, "classes": classes});
        s.as_object_mut().expect("object").extend(extra.as_object().cloned().unwrap_or_default());
        s
    };
    let one = |extra: Value| spec(json!([class(extra)]), json!({}));
    let workload = |w: Value| spec(json!([class(json!({}))]), json!({"workload": w}));
    let proxy =
        |p: Value| workload(json!({"namespace": "default", "selector": {"matchLabels": {"app": "x"}}, "proxy": p}));
    let cases: Vec<(&str, Value, &'static str)> = vec![
        (
            "sel-operator",
            one(
                json!({"pods": {"namespaceSelector": sel(json!({"key": "team", "operator": "Like", "values": ["x"]}))}}),
            ),
            "spec.classes[0].pods.namespaceSelector",
        ),
        (
            "sel-in-no-values",
            one(json!({"pods": {"namespaceSelector": sel(json!({"key": "team", "operator": "In"}))}})),
            "spec.classes[0].pods.namespaceSelector",
        ),
        (
            "sel-exists-values",
            one(
                json!({"pods": {"namespaceSelector": sel(json!({"key": "team", "operator": "Exists", "values": ["x"]}))}}),
            ),
            "spec.classes[0].pods.namespaceSelector",
        ),
        (
            "podsel-operator",
            one(
                json!({"pods": {"namespaceSelector": {"matchLabels": {"team": "t"}}, "podSelector": sel(json!({"key": "app", "operator": "Gt", "values": ["1"]}))}}),
            ),
            "spec.classes[0].pods.podSelector",
        ),
        (
            "nodesel-notin",
            one(
                json!({"pods": pods, "nodes": {"selector": sel(json!({"key": "pool", "operator": "NotIn"})), "count": 1}}),
            ),
            "spec.classes[0].nodes.selector",
        ),
        (
            "workload-sel",
            workload(json!({"namespace": "default", "selector": sel(json!({"key": "app", "operator": "In"}))})),
            "spec.workload.selector",
        ),
        ("ceiling-below-floor", one(json!({"reserved": 30, "ceiling": 10})), "spec.classes[0].ceiling"),
        ("ceiling-above-pool", one(json!({"ceiling": 500})), "spec.classes[0].ceiling"),
        (
            "floors-over-capacity",
            spec(json!([{"name": "a", "reserved": 80}, {"name": "b", "reserved": 80}]), json!({})),
            "capacity of 100",
        ),
        (
            "capacity-zero",
            spec(json!([{"name": "a", "reserved": 0}]), json!({"pool": {"resource": "connections", "capacity": 0}})),
            "spec.pool.capacity",
        ),
        (
            "surplus-over-capacity",
            spec(
                json!([class(json!({}))]),
                json!({"pool": {"resource": "connections", "capacity": 100, "sharedSurplus": 1000}}),
            ),
            "capacity of 100",
        ),
        (
            "critical-not-highest",
            spec(
                json!([class(json!({"priority": 100, "critical": true, "pods": pods})), {"name": "b", "reserved": 10, "priority": 500, "pods": {"namespaceSelector": {"matchLabels": {"team": "t"}}, "podSelector": {"matchLabels": {"app": "b"}}}}]),
                json!({}),
            ),
            "spec.classes[0].priority",
        ),
        (
            "fleet-no-workload",
            spec(
                json!([class(json!({}))]),
                json!({"pool": {"resource": "connections", "capacity": 100, "scope": "Fleet"}}),
            ),
            "spec.workload",
        ),
        (
            "unreachable-nodes",
            one(
                json!({"pods": pods, "nodes": {"selector": {"matchLabels": {"pool": format!("{id}-none")}}, "count": 2}}),
            ),
            "spec.classes[0].nodes.selector",
        ),
        (
            "no-pod-selector",
            one(
                json!({"pods": {"namespaceSelector": {"matchLabels": {"team": "t"}}}, "nodes": {"selector": {"matchLabels": {"pool": "x"}}, "count": 1}}),
            ),
            "spec.classes[0].pods.podSelector",
        ),
        // (A topologyKey that is not a label key used to be here: the CRD's
        // schema now refuses it, see `the_schema_refuses_what_it_can_carry`.)
        (
            "podsel-label-key",
            one(
                json!({"pods": {"namespaceSelector": {"matchLabels": {"team": "t"}}, "podSelector": {"matchLabels": {"bad key!": "x"}}}}),
            ),
            "spec.classes[0].pods.podSelector.matchLabels",
        ),
        (
            "sharding-outside-tenant",
            spec(
                json!([class(json!({}))]),
                json!({"dimension": "Criticality", "shuffleSharding": {"nodes": {"selector": {}}, "shardSize": 1}}),
            ),
            "spec.shuffleSharding",
        ),
        ("quota-no-ns-selector", one(json!({"quota": {"hard": {"pods": "4"}}})), "spec.classes[0].quota"),
        ("proxy-ingress-no-ports", proxy(json!({"mode": "Ingress"})), "spec.workload.proxy"),
        (
            "proxy-unknown-class",
            proxy(json!({"mode": "Egress", "routes": [{"class": "nope", "port": 9000, "upstream": "http://db:5432"}]})),
            "spec.workload.proxy.routes[0].class",
        ),
        (
            "proxy-port-twice",
            proxy(
                json!({"mode": "Egress", "routes": [{"class": "a", "port": 9000, "upstream": "http://db:5432"}, {"class": "a", "port": 9000, "upstream": "http://db:5433"}]}),
            ),
            "spec.workload.proxy.routes[1].port",
        ),
        ("proxy-no-routes", proxy(json!({"mode": "Egress"})), "spec.workload.proxy.routes"),
        (
            "proxy-header-and-prefixes",
            proxy(
                json!({"mode": "Ingress", "port": 8080, "upstreamPort": 8081, "classifyHeader": "x-class", "pathPrefixes": [{"prefix": "/a", "class": "a"}]}),
            ),
            "spec.workload.proxy",
        ),
        (
            "proxy-bad-header",
            proxy(json!({"mode": "Ingress", "port": 8080, "upstreamPort": 8081, "classifyHeader": "bad header"})),
            "spec.workload.proxy.classifyHeader",
        ),
        (
            "proxy-same-ports",
            proxy(json!({"mode": "Ingress", "port": 8080, "upstreamPort": 8080})),
            "spec.workload.proxy.port",
        ),
        (
            "nodesel-exists-values",
            one(
                json!({"pods": pods, "nodes": {"selector": sel(json!({"key": "pool", "operator": "Exists", "values": ["x"]})), "count": 1}}),
            ),
            "spec.classes[0].nodes.selector",
        ),
        (
            "podsel-in-no-values",
            one(
                json!({"pods": {"namespaceSelector": {"matchLabels": {"team": "t"}}, "podSelector": sel(json!({"key": "app", "operator": "In"}))}}),
            ),
            "spec.classes[0].pods.podSelector",
        ),
        (
            "workload-sel-operator",
            workload(
                json!({"namespace": "default", "selector": sel(json!({"key": "app", "operator": "Like", "values": ["x"]}))}),
            ),
            "spec.workload.selector",
        ),
        (
            "ceiling-below-floor-2",
            spec(json!([{"name": "a", "reserved": 10}, {"name": "b", "reserved": 20, "ceiling": 5}]), json!({})),
            "spec.classes[1].ceiling",
        ),
        (
            "critical-below-other",
            spec(
                json!([class(json!({"critical": true, "priority": -10, "pods": pods})), {"name": "b", "reserved": 10, "pods": {"namespaceSelector": {"matchLabels": {"team": "t"}}, "podSelector": {"matchLabels": {"app": "b"}}}}]),
                json!({}),
            ),
            "spec.classes[0].priority",
        ),
        (
            "count-max",
            one(
                json!({"pods": pods, "nodes": {"selector": {"matchLabels": {"pool": format!("{id}-big")}}, "count": 1000}}),
            ),
            "spec.classes[0].nodes.selector",
        ),
        (
            "proxy-prefix-unknown-class",
            proxy(
                json!({"mode": "Ingress", "port": 8080, "upstreamPort": 8081, "pathPrefixes": [{"prefix": "/a", "class": "nope"}]}),
            ),
            "spec.workload.proxy.pathPrefixes[0].class",
        ),
        (
            "proxy-ingress-routes",
            proxy(
                json!({"mode": "Ingress", "port": 8080, "upstreamPort": 8081, "routes": [{"class": "a", "port": 9000, "upstream": "http://db:5432"}]}),
            ),
            "spec.workload.proxy.routes",
        ),
        (
            "proxy-unclassified-unknown",
            proxy(
                json!({"mode": "Ingress", "port": 8080, "upstreamPort": 8081, "classifyHeader": "x-class", "unclassified": "nope"}),
            ),
            "spec.workload.proxy.unclassified",
        ),
    ];
    cases.into_iter().map(|(n, s, f)| (format!("{id}-{n}"), s, f)).collect()
}

/// 7. Malformed Bulkheads the schema admits, applied together with good ones:
/// each refused in a condition naming the field, the good ones Ready, and the
/// operator never restarts.
#[tokio::test]
async fn malformed_bulkheads_are_refused_by_field_and_good_ones_unaffected() {
    let _shared = EXCLUSIVE.read().await;
    let cp = ControlPlane::get();
    operator_up();
    let client = cp.client().await;
    let case = Case::new("malformed", 2, &["a"]).await;
    let bad = malformed(&case.id);
    // What the CRD can carry, the API server itself refuses, naming the field.
    let refused = json!({"apiVersion": "bulkhead.dev/v1alpha1", "kind": "Bulkhead", "metadata": {"name": format!("{}-schema", case.id)},
        "spec": {"dimension": "Tenant", "pool": {"resource": "connections", "capacity": 100},
                 "classes": [{"name": "a", "reserved": 10, "antiAffinity": {"topologyKey": "not a key!"}}]}});
    let (ok, _, stderr) = cp.try_apply_yaml(&refused.to_string());
    assert!(!ok && stderr.contains("spec.classes.antiAffinity.topologyKey"), "the schema refuses it: {stderr}");
    let mut docs: Vec<Value> = bad
        .iter()
        .map(|(name, spec, _)| json!({"apiVersion": "bulkhead.dev/v1alpha1", "kind": "Bulkhead", "metadata": {"name": name}, "spec": spec}))
        .collect();
    let good = case.bulkhead(&[("a", 1)]);
    let good_tenant = format!("{}-good-tenant", case.id);
    docs.push(json!({"apiVersion": "bulkhead.dev/v1alpha1", "kind": "Bulkhead", "metadata": {"name": good_tenant}, "spec": {"dimension": "Tenant", "pool": {"resource": "connections", "capacity": 100}, "classes": [{"name": "a", "reserved": 10, "critical": true}]}}));
    let mut list = json!({"apiVersion": "v1", "kind": "List", "items": docs});
    let good_yaml: Value = serde_saphyr::from_str(&good).expect("yaml");
    list["items"].as_array_mut().expect("items").push(good_yaml);
    let started = Instant::now();
    cp.apply_yaml(&serde_json::to_string(&list).expect("json"));
    for (name, _, field) in &bad {
        let message = wait_for(&format!("{name} refused"), SETTLE, || async {
            for type_ in ["Ready", "Funded", "NodeGroupsReady"] {
                if let Some((s, _, m)) = condition(&client, name, type_).await {
                    if s == "False" && m.contains(field) {
                        return Some(m);
                    }
                }
            }
            None
        })
        .await;
        eprintln!("{name}: {message}");
    }
    converge(&client, &case, &[("a", 1)], SETTLE).await;
    wait_for("the good Tenant Bulkhead is Ready", SETTLE, || async {
        condition(&client, &good_tenant, "Ready").await.filter(|c| c.0 == "True")
    })
    .await;
    eprintln!(
        "figure: {} malformed Bulkheads refused by field, 2 good ones Ready, in {:.2?}",
        bad.len(),
        started.elapsed()
    );
    assert!(bad.len() >= 25);
    let guard = OPERATOR.lock().unwrap_or_else(PoisonError::into_inner);
    let op = guard.as_ref().expect("the shared operator");
    assert!(op.is_running(), "the operator process that started the case still runs:\n{}", op.log_text());
    assert!(!op.log_text().contains("panicked"), "{}", op.log_text());
    drop(guard);
    let names: Vec<&str> = bad.iter().map(|(n, _, _)| n.as_str()).collect();
    let mut args = vec!["delete", "bulkhead", "--timeout=60s", &good_tenant, &case.name];
    args.extend(names);
    cp.kubectl(&args);
}
