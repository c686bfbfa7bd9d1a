//! The Helm chart rendered, no cluster: Helm 3 and Helm 4 agree on it, the
//! operator pod and the sidecar it injects meet the restricted Pod Security
//! Standard, Events are written in one namespace only, and the optional
//! monitoring objects select the real Service and alert on metrics the
//! operator exports. (Installing, upgrading and uninstalling on a real API
//! server: tests/ops_e2e.rs.)

use std::{collections::BTreeMap, process::Command};

use bulkhead::{
    controller::Metrics,
    crd::Bulkhead,
    plan::{changes, Change, PlanConfig},
    select::Selection,
    snapshot::Snapshot,
    status::{FUNDED, ISOLATED, READY},
};
use promql_parser::{
    label::MatchOp,
    parser::{Expr, VectorSelector},
    util::{walk_expr, ExprVisitor},
};
use serde_yaml::Value;

fn helm(major: u8, args: &[&str]) -> String {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("tests/helm"))
        .arg(args[0])
        .args(["--major", &major.to_string()])
        .args(&args[1..])
        .output()
        .expect("tests/helm runs");
    assert!(
        out.status.success(),
        "tests/helm {} (Helm {major}) failed:\n{}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn render(major: u8, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["template"];
    all.extend_from_slice(args);
    let rendered = helm(major, &all);
    serde_yaml::Deserializer::from_str(&rendered)
        .map(|d| serde::Deserialize::deserialize(d).expect("rendered YAML"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"].as_str() == Some(kind)).collect()
}

#[test]
fn helm_3_and_helm_4_lint_the_chart_and_render_the_same_objects() {
    for major in [3, 4] {
        let out = helm(major, &["lint"]);
        assert!(out.contains("0 chart(s) failed"), "Helm {major}: {out}");
    }
    let on = ["--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.prometheusRule.enabled=true"];
    for args in [&[][..], &on[..]] {
        assert_eq!(render(3, args), render(4, args), "Helm 3 and 4 disagree with {args:?}");
    }
}

/// What the restricted profile of the Pod Security Standards forbids, checked
/// field by field (the 1.20 test server has no Pod Security admission to ask).
/// `pod` is a pod spec; every container is checked, init containers too.
fn restricted_violations(pod: &Value) -> Vec<String> {
    let mut v = Vec::new();
    for host in ["hostNetwork", "hostPID", "hostIPC"] {
        if pod[host].as_bool() == Some(true) {
            v.push(format!("{host} is set"));
        }
    }
    for volume in pod["volumes"].as_sequence().into_iter().flatten() {
        let allowed = [
            "configMap",
            "csi",
            "downwardAPI",
            "emptyDir",
            "ephemeral",
            "persistentVolumeClaim",
            "projected",
            "secret",
            "name",
        ];
        for key in volume.as_mapping().into_iter().flatten().filter_map(|(k, _)| k.as_str()) {
            if !allowed.contains(&key) {
                v.push(format!("volume type {key}"));
            }
        }
    }
    let pod_sc = &pod["securityContext"];
    let containers = pod["containers"].as_sequence().into_iter().chain(pod["initContainers"].as_sequence()).flatten();
    for c in containers {
        let name = c["name"].as_str().unwrap_or("?");
        v.extend(restricted_container(c, pod_sc).into_iter().map(|e| format!("container {name}: {e}")));
    }
    v
}

/// The restricted rules for one container, given its pod's security context.
fn restricted_container(c: &Value, pod_sc: &Value) -> Vec<String> {
    let mut v = Vec::new();
    let sc = &c["securityContext"];
    if sc["privileged"].as_bool() == Some(true) {
        v.push("privileged".into());
    }
    if sc["allowPrivilegeEscalation"].as_bool() != Some(false) {
        v.push("allowPrivilegeEscalation is not false".into());
    }
    let non_root = sc["runAsNonRoot"].as_bool().or(pod_sc["runAsNonRoot"].as_bool());
    if non_root != Some(true) {
        v.push("runAsNonRoot is not true".into());
    }
    if sc["runAsUser"].as_u64().or(pod_sc["runAsUser"].as_u64()) == Some(0) {
        v.push("runAsUser is 0".into());
    }
    let seccomp = sc["seccompProfile"]["type"].as_str().or(pod_sc["seccompProfile"]["type"].as_str());
    if !matches!(seccomp, Some("RuntimeDefault" | "Localhost")) {
        v.push(format!("seccompProfile is {seccomp:?}"));
    }
    let drop: Vec<&str> =
        sc["capabilities"]["drop"].as_sequence().into_iter().flatten().filter_map(|x| x.as_str()).collect();
    if !drop.contains(&"ALL") {
        v.push("capabilities do not drop ALL".into());
    }
    for add in sc["capabilities"]["add"].as_sequence().into_iter().flatten() {
        if add.as_str() != Some("NET_BIND_SERVICE") {
            v.push(format!("capability {add:?} added"));
        }
    }
    for port in c["ports"].as_sequence().into_iter().flatten() {
        if port["hostPort"].as_u64().is_some_and(|p| p != 0) {
            v.push("hostPort".into());
        }
    }
    v
}

#[test]
fn the_operator_pod_meets_the_restricted_pod_security_standard() {
    let docs = render(3, &[]);
    let deployment = find(&docs, "Deployment")[0];
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(restricted_violations(pod), Vec::<String>::new());
    // Beyond restricted: nothing on the image's filesystem can be changed.
    for c in pod["containers"].as_sequence().expect("containers") {
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"].as_bool(), Some(true), "{c:?}");
    }
    // The checker itself: a root, privileged, host-network pod fails on each count.
    let bad: Value = serde_yaml::from_str(
        "hostNetwork: true\nvolumes: [{name: h, hostPath: {path: /}}]\ncontainers:\n- name: c\n  \
         securityContext: {privileged: true, runAsUser: 0, capabilities: {add: [SYS_ADMIN]}}\n  ports: [{containerPort: 80, hostPort: 80}]\n",
    )
    .expect("yaml");
    let found = restricted_violations(&bad);
    for rule in [
        "hostNetwork",
        "hostPath",
        "privileged",
        "allowPrivilegeEscalation",
        "runAsNonRoot",
        "runAsUser is 0",
        "seccompProfile",
        "drop ALL",
        "SYS_ADMIN",
        "hostPort",
    ] {
        assert!(found.iter().any(|f| f.contains(rule)), "{rule} not caught: {found:?}");
    }
}

#[test]
fn the_injected_proxy_sidecar_meets_the_restricted_pod_security_standard_on_its_own() {
    let bulkhead: Bulkhead = serde_yaml::from_str(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {name: shop, uid: u-1}\nspec:\n  dimension: Dependency\n  \
         pool: {resource: requests, capacity: 100}\n  workload:\n    namespace: shop\n    selector: {matchLabels: {app: api}}\n    \
         proxy: {mode: Ingress, port: 8081, upstreamPort: 8080}\n  classes:\n  - {name: checkout, reserved: 40}\n  \
         - {name: search, reserved: 30}\n",
    )
    .expect("fixture");
    let mut snapshot = Snapshot::default();
    snapshot.apply(
        &serde_json::from_value::<k8s_openapi::api::core::v1::Namespace>(
            serde_json::json!({"metadata": {"name": "shop"}}),
        )
        .expect("namespace"),
    );
    snapshot.apply(
        &serde_json::from_value::<k8s_openapi::api::apps::v1::Deployment>(serde_json::json!({
            "metadata": {"name": "api", "namespace": "shop", "generation": 1},
            "spec": {"selector": {"matchLabels": {"app": "api"}}, "template": {
                "metadata": {"labels": {"app": "api"}}, "spec": {"containers": [{"name": "app", "image": "app:1"}]}}},
        }))
        .expect("deployment"),
    );
    let config = PlanConfig { proxy_image: "registry.example/bulkhead:test".into() };
    let plan = bulkhead::plan::plan(&Selection::parse(&bulkhead), &snapshot, &config);
    let injected: Vec<Value> = changes("shop", &plan, &snapshot, true)
        .iter()
        .filter_map(|c| if let Change::InjectProxy(i) = c { Some(i.body.clone()) } else { None })
        .map(|body| serde_json::from_value(body).expect("yaml value"))
        .collect();
    assert_eq!(injected.len(), 1, "one Deployment gets the sidecar");
    let pod = &injected[0]["spec"]["template"]["spec"];
    let sidecars = pod["containers"].as_sequence().expect("containers");
    assert!(!sidecars.is_empty());
    for c in sidecars {
        // The injection leaves the pod's own security context to its owner:
        // the sidecar must meet restricted by itself.
        assert_eq!(restricted_container(c, &Value::Null), Vec::<String>::new(), "{c:?}");
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"].as_bool(), Some(true));
    }
    for volume in pod["volumes"].as_sequence().into_iter().flatten() {
        assert!(volume.get("configMap").is_some(), "the sidecar mounts only its ConfigMap: {volume:?}");
    }
}

#[test]
fn events_are_granted_in_namespace_default_only() {
    let docs = render(3, &[]);
    let roles = find(&docs, "Role");
    let events: Vec<_> = roles.iter().filter(|r| r["metadata"]["name"].as_str() == Some("bulkhead-events")).collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["metadata"]["namespace"].as_str(), Some(bulkhead::controller::EVENTS_NAMESPACE));
    let rules = serde_json::to_value(&events[0]["rules"]).expect("json");
    assert_eq!(
        rules,
        serde_json::json!([{"apiGroups": ["events.k8s.io", ""], "resources": ["events"], "verbs": ["create", "patch"]}])
    );
    for role in find(&docs, "ClusterRole") {
        let text = serde_yaml::to_string(&role["rules"]).expect("yaml");
        assert!(!text.contains("events"), "no cluster-wide Events: {text}");
    }
    let binding =
        find(&docs, "RoleBinding").into_iter().find(|b| b["roleRef"]["name"].as_str() == Some("bulkhead-events"));
    let binding = binding.expect("a binding of the events Role");
    assert_eq!(binding["subjects"][0]["namespace"].as_str(), Some("bulkhead-system"));
}

/// Metric names a selector may use, with the labels each sample carries:
/// from the exposition of a Metrics with one series in every family.
fn exported() -> BTreeMap<String, Vec<String>> {
    let m = Metrics::default();
    m.record_reconcile(true);
    m.leader.set(1);
    m.errors.get_or_create(&bulkhead::controller::ErrorLabels { error: "read".into() }).inc();
    m.observe_duration(std::time::Duration::from_millis(3));
    m.record_write("ConfigMap", "apply");
    let condition: k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition = serde_json::from_value(
        serde_json::json!({"type": "Ready", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2026-12-03T00:00:00Z"}),
    )
    .expect("condition");
    m.record_conditions("bh", &[condition]);
    let mut names: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in m.encode().lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (series, _) = line.rsplit_once(' ').expect("sample line");
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let labels =
            labels.trim_end_matches('}').split(',').filter_map(|kv| kv.split_once('=')).map(|(k, _)| k.to_string());
        names.entry(name.to_string()).or_default().extend(labels);
    }
    names
}

#[derive(Default)]
struct Selectors(Vec<VectorSelector>);

impl ExprVisitor for Selectors {
    type Error = ();
    fn pre_visit(&mut self, expr: &Expr) -> Result<bool, ()> {
        match expr {
            Expr::VectorSelector(vs) => self.0.push(vs.clone()),
            Expr::MatrixSelector(ms) => self.0.push(ms.vs.clone()),
            _ => {}
        }
        Ok(true)
    }
}

#[test]
fn monitoring_is_off_by_default_and_when_on_scrapes_the_service_and_alerts_on_exported_metrics() {
    let off = render(3, &[]);
    assert!(find(&off, "ServiceMonitor").is_empty() && find(&off, "PrometheusRule").is_empty());

    let docs = render(
        3,
        &["--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.prometheusRule.enabled=true"],
    );
    let service = find(&docs, "Service")[0];
    let monitor = find(&docs, "ServiceMonitor")[0];
    assert_eq!(monitor["apiVersion"].as_str(), Some("monitoring.coreos.com/v1"));
    for (k, v) in monitor["spec"]["selector"]["matchLabels"].as_mapping().expect("matchLabels") {
        assert_eq!(&service["metadata"]["labels"][k], v, "the ServiceMonitor selects the metrics Service by {k:?}");
    }
    let port = monitor["spec"]["endpoints"][0]["port"].as_str().expect("port name");
    assert!(service["spec"]["ports"].as_sequence().expect("ports").iter().any(|p| p["name"].as_str() == Some(port)));
    assert_eq!(monitor["spec"]["endpoints"][0]["path"].as_str(), Some("/metrics"));
    assert_eq!(monitor["spec"]["namespaceSelector"]["matchNames"][0], service["metadata"]["namespace"]);

    let rule = find(&docs, "PrometheusRule")[0];
    let exported = exported();
    let conditions = [READY, FUNDED, ISOLATED];
    let mut alerts = Vec::new();
    for r in rule["spec"]["groups"][0]["rules"].as_sequence().expect("rules") {
        let alert = r["alert"].as_str().expect("alert name");
        alerts.push(alert.to_string());
        let expr = r["expr"].as_str().expect("expr");
        let parsed = promql_parser::parser::parse(expr).unwrap_or_else(|e| panic!("{alert}: {expr}: {e}"));
        let mut selectors = Selectors::default();
        walk_expr(&mut selectors, &parsed).expect("walk");
        assert!(!selectors.0.is_empty(), "{alert} selects no metric");
        for vs in &selectors.0 {
            let name = vs.name.as_deref().expect("a metric name");
            let labels = exported.get(name).unwrap_or_else(|| panic!("{alert}: {name} is not exported: {exported:?}"));
            for m in &vs.matchers.matchers {
                assert!(labels.contains(&m.name), "{alert}: {name} has no label {}", m.name);
                if name == "bulkhead_condition" && m.name == "condition" {
                    assert!(matches!(m.op, MatchOp::Equal) && conditions.contains(&m.value.as_str()), "{alert}: {m:?}");
                }
                if m.name == "status" {
                    assert!(["True", "False", "Unknown"].contains(&m.value.as_str()), "{alert}: {m:?}");
                }
            }
        }
        let duration = r["for"].as_str().expect("for");
        promql_parser::util::parse_duration(duration).unwrap_or_else(|e| panic!("{alert}: for {duration}: {e}"));
        for needs in ["summary", "description"] {
            assert!(r["annotations"][needs].as_str().is_some_and(|s| !s.is_empty()), "{alert} has no {needs}");
        }
    }
    assert_eq!(
        alerts,
        ["BulkheadNotReady", "BulkheadUnfunded", "BulkheadRequiredLayerShared", "BulkheadOperatorReconcileErrors"]
    );
    // A selector of a metric the operator does not export is caught.
    let mut bogus = Selectors::default();
    walk_expr(&mut bogus, &promql_parser::parser::parse("bulkhead_no_such_metric == 1").expect("parse")).expect("walk");
    assert!(!exported.contains_key(bogus.0[0].name.as_deref().expect("name")));
}
