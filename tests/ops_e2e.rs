//! Day-2 operations on the real control plane (Kubernetes 1.20): `helm
//! upgrade` from the chart as it was released before (commit 8f46ad5) with
//! live Bulkheads, Events that `kubectl describe bulkhead` shows, the
//! ServiceAccount's exact permissions, `helm uninstall` keeping the CRD and
//! the Bulkheads; and Helm 4 installing, upgrading and uninstalling the chart.
//! One control plane for all of it.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
    process::Command,
    time::Duration,
};

use bulkhead::crd::Bulkhead;
use bulkhead_testkit::{
    audit, condition,
    operator::{Operator, NAMESPACE, SERVICE_ACCOUNT, USER},
    repo_root, unique_suffix, wait_for, ControlPlane, TestNamespace,
};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Event, Node, ResourceQuota},
    scheduling::v1::PriorityClass,
};
use kube::{
    api::{Api, ListParams},
    Client, ResourceExt,
};
use serde_json::{json, Value};

/// The chart as it was before this release: what `helm upgrade` starts from.
const PREVIOUS_CHART_COMMIT: &str = "8f46ad5";
const RELEASE: &str = "bulkhead";
const CRD: &str = "bulkheads.bulkhead.dev";
const SETTLE: Duration = Duration::from_secs(60);

/// Helm `major` (3 or 4, from tests/helm) against the test control plane.
fn helm(major: u8, args: &[&str]) -> String {
    let cp = ControlPlane::get();
    let out = Command::new(repo_root().join("tests/helm"))
        .args(["exec", "--major", &major.to_string()])
        .args(args)
        .arg("--kubeconfig")
        .arg(&cp.kubeconfig)
        .output()
        .expect("tests/helm runs");
    bulkhead_testkit::chart::stdout_or_panic(&format!("helm {major} {}", args.join(" ")), out)
}

/// charts/bulkhead as of PREVIOUS_CHART_COMMIT, unpacked under the control plane's dir.
fn previous_chart() -> PathBuf {
    let dir = ControlPlane::get().dir.join("previous-chart");
    std::fs::create_dir_all(&dir).expect("dir");
    let status = Command::new("bash")
        .arg("-c")
        .arg(r#"git -C "$1" archive "$2" charts/bulkhead | tar -x -C "$3""#)
        .args(["_", &repo_root().display().to_string(), PREVIOUS_CHART_COMMIT, &dir.display().to_string()])
        .status()
        .expect("git archive runs");
    assert!(
        status.success(),
        "git archive {PREVIOUS_CHART_COMMIT} charts/bulkhead failed (a clone with history is needed)"
    );
    dir.join("charts/bulkhead")
}

fn sa_kubeconfig(namespace: &str, service_account: &str) -> PathBuf {
    let cp = ControlPlane::get();
    let out = cp.dir.join(format!("{namespace}-{service_account}.kubeconfig"));
    let status = Command::new(repo_root().join("tests/control-plane"))
        .arg("sa-kubeconfig")
        .arg(&cp.dir)
        .args([namespace, service_account])
        .arg(&out)
        .status()
        .expect("control-plane sa-kubeconfig runs");
    assert!(status.success(), "no kubeconfig for {namespace}/{service_account}");
    out
}

/// Two Bulkheads that write every kind of thing the operator writes: node
/// claims and taints, PriorityClasses, scoped quotas and pod-template fields
/// (placement), and a pool-config ConfigMap (pools).
fn workloads(ns: &str, suffix: &str) -> String {
    let deployment = |app: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {app}, namespace: {ns}}}\nspec:\n  replicas: 1\n  \
             selector: {{matchLabels: {{app: {app}}}}}\n  template:\n    metadata: {{labels: {{app: {app}}}}}\n    \
             spec: {{containers: [{{name: c, image: registry.k8s.io/pause:3.9}}]}}\n---\n"
        )
    };
    let class = |name: &str, reserved: u32, nodes: bool| {
        let nodes = if nodes { "\n    nodes: {selector: {matchLabels: {pool: ops-e2e}}, count: 1}" } else { "" };
        format!(
            "  - name: {name}\n    reserved: {reserved}\n    pods:\n      namespaceSelector: {{matchLabels: {{team: \"{suffix}\"}}}}\n      \
             podSelector: {{matchLabels: {{app: {name}}}}}{nodes}\n    quota: {{hard: {{pods: \"4\"}}}}\n"
        )
    };
    format!(
        "{}{}{}{}apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: placement-{suffix}}}\nspec:\n  \
         dimension: Criticality\n  pool: {{resource: connections, capacity: 100}}\n  layers: [Node]\n  classes:\n{}{}{}---\n\
         apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: pools-{suffix}}}\nspec:\n  dimension: Dependency\n  \
         pool: {{resource: connections, capacity: 200, scope: Instance, sharedSurplus: 80}}\n  workload:\n    namespace: {ns}\n    \
         selector: {{matchLabels: {{app: api}}}}\n  classes:\n  - {{name: payments-db, reserved: 60}}\n  - {{name: search, reserved: 60}}\n",
        deployment("checkout"),
        deployment("reports"),
        deployment("admin"),
        deployment("api"),
        class("checkout", 50, true),
        class("reports", 30, true),
        class("admin", 10, false).replace("    reserved: 10\n", "    reserved: 10\n    critical: true\n"),
    )
}

/// Everything the operator wrote or owns, as the API holds it: what must not
/// move across an upgrade.
async fn written_state(client: &Client, ns: &str, names: &[String]) -> BTreeMap<String, Value> {
    let mut state = BTreeMap::new();
    for d in Api::<Deployment>::namespaced(client.clone(), ns).list(&ListParams::default()).await.expect("deployments")
    {
        let spec = d.spec.as_ref().expect("spec");
        state.insert(
            format!("deployment/{}", d.name_any()),
            json!({"generation": d.metadata.generation, "template": spec.template}),
        );
    }
    for cm in Api::<ConfigMap>::namespaced(client.clone(), ns).list(&ListParams::default()).await.expect("configmaps") {
        state.insert(format!("configmap/{}", cm.name_any()), json!({"rv": cm.resource_version(), "data": cm.data}));
    }
    for q in Api::<ResourceQuota>::namespaced(client.clone(), ns).list(&ListParams::default()).await.expect("quotas") {
        // Not the resourceVersion: the quota controller writes status.used.
        state.insert(format!("quota/{}", q.name_any()), json!({"spec": q.spec}));
    }
    for pc in Api::<PriorityClass>::all(client.clone()).list(&ListParams::default()).await.expect("priorityclasses") {
        if pc.labels().contains_key("bulkhead.dev/bulkhead") {
            state.insert(
                format!("priorityclass/{}", pc.name_any()),
                json!({"rv": pc.resource_version(), "value": pc.value}),
            );
        }
    }
    for n in Api::<Node>::all(client.clone()).list(&ListParams::default()).await.expect("nodes") {
        let labels: BTreeMap<_, _> = n.labels().iter().filter(|(k, _)| k.contains("bulkhead.dev")).collect();
        let taints = n.spec.as_ref().and_then(|s| s.taints.clone());
        state.insert(format!("node/{}", n.name_any()), json!({"labels": labels, "taints": taints}));
    }
    let bulkheads = Api::<Bulkhead>::all(client.clone());
    for name in names {
        let b = bulkheads.get(name).await.expect("bulkhead");
        state.insert(
            format!("bulkhead/{name}"),
            json!({"uid": b.uid(), "generation": b.metadata.generation, "finalizers": b.finalizers(), "status": b.status}),
        );
    }
    state
}

/// The written state once it holds still: the scheduler and the Deployment
/// controller are done with the re-templated workloads (pods of the old and
/// the new ReplicaSet stay, as no kubelet runs them) and the audit agrees.
async fn settled_state(client: &Client, ns: &str, names: &[String]) -> BTreeMap<String, Value> {
    let mut last = written_state(client, ns, names).await;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = written_state(client, ns, names).await;
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("the cluster did not settle in 60 s: {last:#?}");
}

fn reconciles(op: &Operator) -> Option<u64> {
    let (_, body) = op.http_get("/metrics")?;
    // Summed over results (success, error).
    body.lines()
        .filter_map(|l| l.strip_prefix("bulkhead_reconciles_total{"))
        .map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.trim().parse::<u64>().ok()))
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upgrade_from_the_previous_chart_loses_nothing_rolls_out_nothing_and_events_show() {
    let cp = ControlPlane::get();
    let client = cp.client().await;
    let suffix = unique_suffix();
    let names = vec![format!("placement-{suffix}"), format!("pools-{suffix}")];

    // The previous release, with Helm 3, and the operator under its RBAC.
    let t = std::time::Instant::now();
    helm(
        3,
        &["install", RELEASE, &previous_chart().display().to_string(), "--namespace", NAMESPACE, "--create-namespace"],
    );
    eprintln!("helm 3 install of the previous chart: {:?}", t.elapsed());
    let kubeconfig = sa_kubeconfig(NAMESPACE, SERVICE_ACCOUNT);
    let before_upgrade = Operator::start_as("before-upgrade", &kubeconfig, &[]);
    let ns = TestNamespace::new("ops", &[("team", &suffix)]).await;
    cp.kubectl(&["label", "nodes", "node-1", "node-2", "pool=ops-e2e", "--overwrite"]);
    cp.apply_yaml(&workloads(&ns.name, &suffix));
    for name in &names {
        wait_for(&format!("{name} Ready"), SETTLE, || async {
            condition(&client, name, "Ready").await.filter(|(s, _, _)| s == "True")
        })
        .await;
    }
    let placed = Api::<Deployment>::namespaced(client.clone(), &ns.name).get("checkout").await.expect("checkout");
    assert!(placed.metadata.generation >= Some(2), "placement re-templated checkout before the upgrade");
    let before = settled_state(&client, &ns.name, &names).await;
    assert!(before.keys().any(|k| k.starts_with("configmap/")), "{before:#?}");
    assert!(before.keys().any(|k| k.starts_with("priorityclass/")), "{before:#?}");
    assert!(before.keys().any(|k| k.starts_with("quota/")), "{before:#?}");
    assert!(before_upgrade.stop(), "the old operator stops on SIGTERM");

    // The documented upgrade: the CRD first (helm upgrade never touches crds/), then the chart.
    let t = std::time::Instant::now();
    cp.kubectl(&["apply", "-f", &repo_root().join("charts/bulkhead/crds").display().to_string()]);
    helm(3, &["upgrade", RELEASE, "charts/bulkhead", "--namespace", NAMESPACE]);
    eprintln!("CRD apply + helm 3 upgrade: {:?}", t.elapsed());
    let since = audit::now_rfc3339();
    let after_upgrade = Operator::start_as("after-upgrade", &kubeconfig, &[]);
    wait_for("both Bulkheads reconciled by the new operator", SETTLE, || async {
        reconciles(&after_upgrade).filter(|n| *n >= names.len() as u64)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = written_state(&client, &ns.name, &names).await;
    for (key, value) in &before {
        assert_eq!(Some(value), after.get(key), "{key} moved across the upgrade");
    }
    assert_eq!(before.len(), after.len(), "objects appeared across the upgrade: {after:#?}");
    let writes: Vec<_> =
        audit::writes_by(&cp.dir, USER, &since).into_iter().filter(|w| !w.uri.contains("/events")).collect();
    assert!(writes.is_empty(), "the upgraded operator wrote to an unchanged cluster: {writes:#?}");

    // Events: a Bulkhead that cannot be funded says so where a person looks.
    let unfunded = format!("unfunded-{suffix}");
    cp.apply_yaml(&format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: {unfunded}}}\nspec:\n  dimension: Tenant\n  \
         pool: {{resource: connections, capacity: 10}}\n  classes:\n  - {{name: a, reserved: 8}}\n  - {{name: b, reserved: 8}}\n"
    ));
    let describe = wait_for("Events in kubectl describe", SETTLE, || async {
        let out = cp.kubectl(&["describe", "bulkhead", &unfunded]);
        out.contains("Funded is False").then_some(out)
    })
    .await;
    let events_table = describe.split("\nEvents:").nth(1).expect("an Events section");
    assert!(
        events_table.lines().any(|l| l.contains("Warning") && l.contains("Unfundable") && l.contains("bulkhead")),
        "{describe}"
    );
    let events = Api::<Event>::namespaced(client.clone(), bulkhead::controller::EVENTS_NAMESPACE)
        .list(&ListParams::default().fields(&format!("involvedObject.name={unfunded}")))
        .await
        .expect("events");
    let warning =
        events.items.iter().find(|e| e.reason.as_deref() == Some("Unfundable")).expect("the Unfundable Event");
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert_eq!(warning.involved_object.kind.as_deref(), Some("Bulkhead"));
    assert_eq!(warning.source.as_ref().and_then(|s| s.component.as_deref()), Some("bulkhead"));
    let log = after_upgrade.log_text();
    assert!(!log.contains("could not publish event"), "{log}");
    assert!(log.contains("using core/v1 Events"), "the 1.20 server refuses events.k8s.io/v1 here: {log}");

    // Least privilege, as the API server sees it.
    least_privilege_is_exact(cp);
    writing_bulkheads_takes_the_author_role(&suffix).await;

    // helm uninstall: the operator goes, the CRD and every Bulkhead stay.
    assert!(after_upgrade.stop());
    helm(3, &["uninstall", RELEASE, "--namespace", NAMESPACE]);
    cp.kubectl(&["get", "crd", CRD]);
    let bulkheads = Api::<Bulkhead>::all(client.clone());
    for name in names.iter().chain([&unfunded]) {
        let b = bulkheads.get(name).await.unwrap_or_else(|e| panic!("{name} is gone after helm uninstall: {e}"));
        if let Some(v) = before.get(&format!("bulkhead/{name}")) {
            assert_eq!(b.uid(), v["uid"].as_str().map(String::from), "{name} was recreated");
        }
    }
    // The deletes are sent; let the API server finish them.
    let mut left = String::new();
    for _ in 0..100 {
        left = cp.kubectl(&[
            "get",
            "clusterrole,clusterrolebinding",
            "-l",
            "app.kubernetes.io/instance=bulkhead",
            "-o",
            "name",
        ]);
        if left.trim().is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(left.trim().is_empty(), "the release's RBAC is removed: {left}");
}

/// `kubectl auth can-i --list` for the chart's ServiceAccount in three kinds
/// of namespace, against the list of what the code calls.
fn least_privilege_is_exact(cp: &ControlPlane) {
    // Cluster-wide: (resource, resource names, verbs).
    let common: &[(&str, &str, &str)] = &[
        // What every authenticated user may do (system:basic-user).
        ("selfsubjectaccessreviews.authorization.k8s.io", "", "create"),
        ("selfsubjectrulesreviews.authorization.k8s.io", "", "create"),
        // Reconcile (watch), re-read one that does not decode (get), the finalizer (patch).
        ("bulkheads.bulkhead.dev", "", "get list watch patch"),
        ("bulkheads.bulkhead.dev/status", "", "patch"),
        ("bulkheads.bulkhead.dev/finalizers", "", "update"),
        // Drills: run from the watch, verdicts written to their status only.
        ("bulkheaddrills.bulkhead.dev", "", "list watch"),
        ("bulkheaddrills.bulkhead.dev/status", "", "patch"),
        ("configmaps", "", "get list watch create patch delete"),
        ("resourcequotas", "", "get list watch create patch delete"),
        ("networkpolicies.networking.k8s.io", "", "get list watch create patch delete"),
        ("priorityclasses.scheduling.k8s.io", "", "get list watch create patch delete"),
        ("deployments.apps", "", "get list watch patch"),
        ("statefulsets.apps", "", "get list watch patch"),
        ("nodes", "", "list watch patch"),
        ("namespaces", "", "list watch"),
        // Stamps the config hash on running pods (propagation within seconds).
        ("pods", "", "list watch patch"),
        ("services", "", "list watch"),
        ("endpoints", "", "list watch"),
        ("endpointslices.discovery.k8s.io", "", "list watch"),
        ("horizontalpodautoscalers.autoscaling", "", "list watch"),
        ("runtimeclasses.node.k8s.io", "", "list watch"),
        // The admission webhook's own configuration: its caBundle (admission.enabled).
        ("validatingwebhookconfigurations.admissionregistration.k8s.io", "bulkhead", "get patch"),
    ];
    let lease: &[(&str, &str, &str)] = &[
        ("leases.coordination.k8s.io", "", "create"),
        ("leases.coordination.k8s.io", "bulkhead-operator", "get update patch"),
        // The webhook's certificate, made once and read by every replica.
        ("secrets", "", "create"),
        ("secrets", "bulkhead-webhook-tls", "get"),
    ];
    let events: &[(&str, &str, &str)] = &[("events", "", "create patch"), ("events.events.k8s.io", "", "create patch")];
    let other = cp.kubectl(&["create", "namespace", &format!("ops-other-{}", unique_suffix()), "-o", "name"]);
    let other = other.trim().trim_start_matches("namespace/").to_string();
    for (ns, extra) in [(NAMESPACE, lease), (bulkhead::controller::EVENTS_NAMESPACE, events), (other.as_str(), &[][..])]
    {
        let out = cp.kubectl(&["auth", "can-i", "--list", &format!("--as={USER}"), "-n", ns]);
        let (granted, non_resource) = parse_can_i(&out);
        let expected: BTreeSet<(String, String, String)> =
            common.iter().chain(extra).map(|(r, n, v)| (r.to_string(), n.to_string(), v.to_string())).collect();
        assert_eq!(granted, expected, "namespace {ns}:\n{out}");
        assert!(non_resource.iter().all(|v| v == "get"), "non-resource URLs are read-only: {out}");
    }
    for verb in ["get", "list", "watch"] {
        let out = Command::new(&cp.kubectl)
            .arg("--kubeconfig")
            .arg(&cp.kubeconfig)
            .args(["auth", "can-i", verb, "secrets", "--all-namespaces", &format!("--as={USER}")])
            .output()
            .expect("kubectl runs");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no", "{verb} secrets");
    }
}

/// `kubectl auth can-i ARGS --as=USER` as cluster-admin: "yes" or "no".
fn can_i(user: &str, args: &[&str]) -> String {
    let cp = ControlPlane::get();
    let out = Command::new(&cp.kubectl)
        .arg("--kubeconfig")
        .arg(&cp.kubeconfig)
        .args(["auth", "can-i"])
        .args(args)
        .arg(format!("--as={user}"))
        .output()
        .expect("kubectl runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Wait until `can_i` answers `want` (the aggregation controller folds a
/// ClusterRole into edit a moment after it changes).
async fn wait_can_i(user: &str, args: &[&str], want: &str) {
    wait_for(&format!("can-i {} as {user}: {want}", args.join(" ")), SETTLE, || async {
        (can_i(user, args) == want).then_some(())
    })
    .await;
}

/// Issue 44: after the upgrade, the built-in edit role reads Bulkheads and
/// BulkheadDrills (the aggregation controller works) but does not write them
/// (its holder would make the operator write into namespaces and onto
/// nodes); the chart's own `<fullname>-author` role does, never their status.
async fn writing_bulkheads_takes_the_author_role(suffix: &str) {
    let cp = ControlPlane::get();
    let roles =
        cp.kubectl(&["get", "clusterrole", "-l", &format!("app.kubernetes.io/instance={RELEASE}"), "-o", "name"]);
    let author = roles
        .lines()
        .filter_map(|l| l.rsplit('/').next())
        .find(|r| r.ends_with("-author"))
        .unwrap_or_else(|| panic!("no author ClusterRole: {roles}"))
        .to_string();
    assert!(!roles.lines().any(|l| l.ends_with("-edit")), "no role folds writing into edit: {roles}");
    let developer = format!("dev-{suffix}");
    cp.kubectl(&[
        "create",
        "clusterrolebinding",
        &format!("{developer}-edit"),
        "--clusterrole=edit",
        &format!("--user={developer}"),
    ]);
    wait_can_i(&developer, &["get", "bulkheads.bulkhead.dev"], "yes").await;
    assert_eq!(can_i(&developer, &["list", "bulkheaddrills.bulkhead.dev"]), "yes", "edit reads drills");
    for resource in ["bulkheads.bulkhead.dev", "bulkheaddrills.bulkhead.dev"] {
        for verb in ["create", "patch", "delete"] {
            assert_eq!(can_i(&developer, &[verb, resource]), "no", "edit may not {verb} {resource}");
        }
    }
    let platform = format!("platform-{suffix}");
    cp.kubectl(&[
        "create",
        "clusterrolebinding",
        &format!("{platform}-author"),
        &format!("--clusterrole={author}"),
        &format!("--user={platform}"),
    ]);
    wait_can_i(&platform, &["create", "bulkheads.bulkhead.dev"], "yes").await;
    for resource in ["bulkheads.bulkhead.dev", "bulkheaddrills.bulkhead.dev"] {
        for verb in ["create", "update", "patch", "delete", "get"] {
            assert_eq!(can_i(&platform, &[verb, resource]), "yes", "the author may {verb} {resource}");
        }
        assert_eq!(can_i(&platform, &["patch", resource, "--subresource=status"]), "no", "{resource} status");
    }
    for binding in [format!("{developer}-edit"), format!("{platform}-author")] {
        cp.kubectl(&["delete", "clusterrolebinding", &binding]);
    }
}

/// Rows of `kubectl auth can-i --list` (1.20's table): resource rows as
/// (resource, resource names, verbs), and the verbs of non-resource rows.
fn parse_can_i(out: &str) -> (BTreeSet<(String, String, String)>, Vec<String>) {
    let mut granted = BTreeSet::new();
    let mut non_resource = Vec::new();
    for line in out.lines().skip(1) {
        let brackets: Vec<&str> =
            line.split('[').skip(1).map(|part| part.split(']').next().unwrap_or_default()).collect();
        assert_eq!(brackets.len(), 3, "unexpected row: {line}");
        if line.starts_with(' ') {
            non_resource.push(brackets[2].to_string());
        } else {
            let resource = line.split_whitespace().next().unwrap_or_default().to_string();
            granted.insert((resource, brackets[1].to_string(), brackets[2].to_string()));
        }
    }
    (granted, non_resource)
}

/// Helm 4 installs, upgrades and uninstalls the chart, and refuses a third
/// release whose operatorName the second already has (a second release
/// beside the first, once the CRD is there).
#[tokio::test(flavor = "multi_thread")]
async fn helm_4_installs_upgrades_and_uninstalls_the_chart() {
    let cp = ControlPlane::get();
    let client = cp.client().await;
    // The other test installs the previous chart, CRD included, first.
    wait_for("the CRD of the first release", SETTLE, || async {
        Api::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>::all(
            client.clone(),
        )
        .get_opt(CRD)
        .await
        .ok()
        .flatten()
    })
    .await;
    let (release, ns) = ("bh4", "bulkhead-h4");
    let t = std::time::Instant::now();
    // The CRD is cluster-wide and the first release brought it, from an older
    // chart: Helm 4 server-side applies crds/ and would conflict with Helm 3's
    // fields (.spec.versions), so a second release skips them, as the README says.
    // A release of its own name: the chart refuses a second operator under a
    // name another release's operator has (both would act on the same Bulkheads).
    let out = helm(
        4,
        &[
            "install",
            release,
            "charts/bulkhead",
            "--namespace",
            ns,
            "--create-namespace",
            "--skip-crds",
            "--set",
            "operatorName=h4",
        ],
    );
    assert!(out.contains("STATUS: deployed"), "{out}");
    let twin = Command::new(repo_root().join("tests/helm"))
        .args(["exec", "--major", "4", "install", "bh4-twin", "charts/bulkhead", "--namespace", "bulkhead-h4-twin"])
        .args(["--create-namespace", "--skip-crds", "--set", "operatorName=h4", "--kubeconfig"])
        .arg(&cp.kubeconfig)
        .output()
        .expect("tests/helm runs");
    let err = String::from_utf8_lossy(&twin.stderr);
    assert!(!twin.status.success(), "a second operator named h4 is refused");
    assert!(
        err.contains(&format!("Deployment {ns}/{release}-bulkhead already runs a bulkhead operator named \"h4\"")),
        "{err}"
    );
    assert!(
        cp.kubectl(&["get", "deployments", "-A", "-l", "app.kubernetes.io/instance=bh4-twin", "-o", "name"])
            .trim()
            .is_empty(),
        "nothing of the refused release was made"
    );
    let sa = format!("{release}-bulkhead");
    cp.kubectl(&["-n", ns, "get", "serviceaccount", &sa]);
    cp.kubectl(&["-n", "default", "get", "role,rolebinding", &format!("{sa}-events")]);
    helm(
        4,
        &[
            "upgrade",
            release,
            "charts/bulkhead",
            "--namespace",
            ns,
            "--set",
            "replicaCount=2",
            "--set",
            "operatorName=h4",
        ],
    );
    let args = cp.kubectl(&[
        "-n",
        ns,
        "get",
        "deployment",
        &sa,
        "-o",
        "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].args}",
    ]);
    assert!(args.starts_with("2 ") && args.contains("--leader-elect"), "{args}");
    let history = helm(4, &["history", release, "--namespace", ns, "-o", "json"]);
    let revisions: Vec<Value> = serde_json::from_str(&history).expect("helm history JSON");
    assert_eq!(revisions.len(), 2, "{history}");
    helm(4, &["uninstall", release, "--namespace", ns]);
    eprintln!("helm 4 install + upgrade + uninstall: {:?}", t.elapsed());
    wait_for("the release's objects gone", SETTLE, || async {
        let left = cp.kubectl(&[
            "get",
            "clusterrole,clusterrolebinding",
            "-l",
            &format!("app.kubernetes.io/instance={release}"),
            "-o",
            "name",
        ]);
        let left_ns = cp.kubectl(&[
            "-n",
            ns,
            "get",
            "deployment,serviceaccount,service,role",
            "-l",
            &format!("app.kubernetes.io/instance={release}"),
            "-o",
            "name",
        ]);
        (left.trim().is_empty() && left_ns.trim().is_empty()).then_some(())
    })
    .await;
    cp.kubectl(&["get", "crd", CRD]);
}
