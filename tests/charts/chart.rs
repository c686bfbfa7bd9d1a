//! The Helm chart rendered, no cluster: Helm 3 and Helm 4 agree on it, the
//! operator pod and the sidecar it injects meet the restricted Pod Security
//! Standard, Events are written in one namespace only, and the optional
//! monitoring objects select the real Service, the sidecars' real port, and
//! alert on metrics the operator exports; every optional value (security
//! contexts, extraArgs, PodDisruptionBudget, topology spread, aggregated
//! roles) renders as documented in the chart README. (The Grafana dashboard:
//! tests/charts/dashboard.rs. Installing, upgrading and uninstalling on a real API
//! server: tests/ops_e2e.rs.)

use bulkhead::{
    crd::Bulkhead,
    plan::{changes, Change, PlanConfig},
    select::Selection,
    snapshot::Snapshot,
    status::{ENFORCED, FUNDED, ISOLATED, READY},
};
use promql_parser::{label::MatchOp, util::walk_expr};
use serde_json::Value;

use crate::chart_support::{self, exported, exported_by_proxy, find, helm, render, Selectors};

#[test]
fn helm_3_and_helm_4_lint_the_chart_and_render_the_same_objects() {
    for major in [3, 4] {
        let out = helm(major, &["lint"]);
        assert!(out.contains("0 chart(s) failed"), "Helm {major}: {out}");
    }
    let on = [
        "--set",
        "monitoring.serviceMonitor.enabled=true",
        "--set",
        "monitoring.prometheusRule.enabled=true",
        "--set",
        "monitoring.podMonitor.enabled=true",
        "--set",
        "grafanaDashboard.enabled=true",
        "--set",
        "podDisruptionBudget.enabled=true",
        "--set",
        "topologySpreadConstraints[0].maxSkew=1",
        "--set",
        "topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
        "--set",
        "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
        "--set",
        "extraArgs={--host-label,example.com/hypervisor}",
        "--set",
        "leaderElection.leaseName=bulkhead-b",
    ];
    // One server version for both: the webhook's failurePolicy depends on it.
    for args in [&["--kube-version", "1.30.0"][..], &[&["--kube-version", "1.30.0"][..], &on[..]].concat()[..]] {
        // The same objects; the order differs (Helm 3 puts kinds it has no install order for last).
        let sorted = |major| {
            let mut docs = render(major, args);
            docs.sort_by_key(|d| (d["kind"].to_string(), d["metadata"]["name"].to_string()));
            docs
        };
        assert_eq!(sorted(3), sorted(4), "Helm 3 and 4 disagree with {args:?}");
    }
}

/// The webhook fails closed only where matchConditions send it the pods that
/// carry the operator's keys alone: on an older server every pod is sent, and
/// an operator outage must not block every pod of the cluster.
#[test]
fn the_webhook_fails_closed_only_where_match_conditions_scope_it() {
    let webhook = |version: &str, extra: &[&str]| {
        let mut args = vec!["--kube-version", version];
        args.extend_from_slice(extra);
        let docs = render(3, &args);
        find(&docs, "ValidatingWebhookConfiguration").first().map(|w| (*w).clone())
    };
    let old = webhook("1.20.2", &[]).expect("registered by default");
    assert_eq!(old["webhooks"][0]["name"], "pods.bulkhead.dev");
    assert_eq!(old["webhooks"][0]["failurePolicy"], "Ignore");
    assert!(old["webhooks"][0].get("matchConditions").is_none(), "1.20 has no matchConditions: {old}");
    let new = webhook("1.30.0", &[]).expect("registered");
    assert_eq!(new["webhooks"][0]["failurePolicy"], "Fail");
    let expression = new["webhooks"][0]["matchConditions"][0]["expression"].as_str().expect("a condition");
    assert!(expression.contains("startsWith('bulkhead.dev/')"), "{expression}");
    assert_eq!(new["webhooks"][1]["name"], "owned.bulkhead.dev");
    assert_eq!(new["webhooks"][1]["failurePolicy"], "Ignore", "never blocks a namespace's deletion");
    assert_eq!(new["webhooks"][1]["objectSelector"]["matchLabels"]["app.kubernetes.io/managed-by"], "bulkhead");
    assert_eq!(
        webhook("1.30.0", &["--set", "admission.failurePolicy=Ignore"]).expect("w")["webhooks"][0]["failurePolicy"],
        "Ignore"
    );
    assert!(webhook("1.30.0", &["--set", "admission.enabled=false"]).is_none());
    // cert-manager: the CA is injected, the operator is given the mounted certificate and no Secret RBAC.
    let docs = render(3, &["--kube-version", "1.30.0", "--set", "admission.certManager.enabled=true"]);
    let config = find(&docs, "ValidatingWebhookConfiguration")[0];
    assert_eq!(config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"], "bulkhead-system/bulkhead-webhook");
    assert_eq!(find(&docs, "Certificate").len(), 1);
    let args = find(&docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("--admission-tls-dir") && !args.contains("--admission-secret"), "{args}");
    assert!(find(&docs, "Role").iter().all(|r| r["metadata"]["name"] != "bulkhead-webhook-tls"));
    // The CEL policy: only where the server serves it, bound to every Bulkhead of this operator.
    let vap = [
        "--kube-version",
        "1.30.0",
        "--api-versions",
        "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
        "--set",
        "admission.validatingAdmissionPolicy.enabled=true",
    ];
    let docs = render(3, &vap);
    let policy = find(&docs, "ValidatingAdmissionPolicy")[0];
    assert_eq!(policy["spec"]["paramKind"]["kind"], "Bulkhead");
    let binding = find(&docs, "ValidatingAdmissionPolicyBinding")[0];
    assert_eq!(binding["spec"]["paramRef"]["selector"]["matchExpressions"][0]["operator"], "DoesNotExist");
    let out = chart_support::helm_output(
        3,
        &["template", "--kube-version", "1.20.2", "--set", "admission.validatingAdmissionPolicy.enabled=true"],
    );
    assert!(!out.status.success(), "refused where the API is not served");
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
    for volume in pod["volumes"].as_array().into_iter().flatten() {
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
        for key in volume.as_object().into_iter().flatten().map(|(k, _)| k.as_str()) {
            if !allowed.contains(&key) {
                v.push(format!("volume type {key}"));
            }
        }
    }
    let pod_sc = &pod["securityContext"];
    let containers = pod["containers"].as_array().into_iter().chain(pod["initContainers"].as_array()).flatten();
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
        sc["capabilities"]["drop"].as_array().into_iter().flatten().filter_map(|x| x.as_str()).collect();
    if !drop.contains(&"ALL") {
        v.push("capabilities do not drop ALL".into());
    }
    for add in sc["capabilities"]["add"].as_array().into_iter().flatten() {
        if add.as_str() != Some("NET_BIND_SERVICE") {
            v.push(format!("capability {add:?} added"));
        }
    }
    for port in c["ports"].as_array().into_iter().flatten() {
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
    for c in pod["containers"].as_array().expect("containers") {
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"].as_bool(), Some(true), "{c:?}");
    }
    // The checker itself: a root, privileged, host-network pod fails on each count.
    let bad: Value = serde_saphyr::from_str(
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

/// The pod template of a Deployment after the operator injected the sidecar.
fn injected_pod() -> Value {
    injected_pod_with(&PlanConfig {
        proxy_image: Some("registry.example/bulkhead:test".into()),
        ..PlanConfig::default()
    })
}

/// The same, with the operator configured as `config`.
fn injected_pod_with(config: &PlanConfig) -> Value {
    let bulkhead: Bulkhead = serde_saphyr::from_str(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {name: shop, uid: u-1}\nspec:\n  dimension: Dependency\n  \
         pool: {resource: requests, capacity: 100}\n  workload:\n    namespace: shop\n    selector: {matchLabels: {app: api}}\n    \
         proxy: {mode: Ingress, port: 8081, upstreamPort: 8080, metricsAddress: \"0.0.0.0:9902\"}\n  classes:\n  - {name: checkout, reserved: 40}\n  \
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
    let plan = bulkhead::plan::plan(&Selection::parse(&bulkhead), &snapshot, config);
    let injected: Vec<Value> = changes("shop", &plan, &snapshot, bulkhead::plan::WithheldConfig::KeepLast)
        .iter()
        .filter_map(|c| if let Change::InjectProxy(i) = c { Some(i.body.clone()) } else { None })
        .map(|body| serde_json::from_value(body).expect("yaml value"))
        .collect();
    assert_eq!(injected.len(), 1, "one Deployment gets the sidecar");
    injected[0]["spec"]["template"]["spec"].clone()
}

#[test]
fn the_injected_proxy_sidecar_meets_the_restricted_pod_security_standard_on_its_own() {
    let pod = &injected_pod();
    let sidecars = pod["containers"].as_array().expect("containers");
    assert!(!sidecars.is_empty());
    for c in sidecars {
        // The injection leaves the pod's own security context to its owner:
        // the sidecar must meet restricted by itself.
        assert_eq!(restricted_container(c, &Value::Null), Vec::<String>::new(), "{c:?}");
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"].as_bool(), Some(true));
    }
    for volume in pod["volumes"].as_array().into_iter().flatten() {
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
        let text = bulkhead::crd::to_yaml(&role["rules"]).expect("yaml");
        assert!(!text.contains("events"), "no cluster-wide Events: {text}");
    }
    let binding =
        find(&docs, "RoleBinding").into_iter().find(|b| b["roleRef"]["name"].as_str() == Some("bulkhead-events"));
    let binding = binding.expect("a binding of the events Role");
    assert_eq!(binding["subjects"][0]["namespace"].as_str(), Some("bulkhead-system"));
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
    for (k, v) in monitor["spec"]["selector"]["matchLabels"].as_object().expect("matchLabels") {
        assert_eq!(&service["metadata"]["labels"][k], v, "the ServiceMonitor selects the metrics Service by {k:?}");
    }
    let port = monitor["spec"]["endpoints"][0]["port"].as_str().expect("port name");
    assert!(service["spec"]["ports"].as_array().expect("ports").iter().any(|p| p["name"].as_str() == Some(port)));
    assert_eq!(monitor["spec"]["endpoints"][0]["path"].as_str(), Some("/metrics"));
    assert_eq!(monitor["spec"]["namespaceSelector"]["matchNames"][0], service["metadata"]["namespace"]);

    let rule = find(&docs, "PrometheusRule")[0];
    let mut exported = exported();
    let by_proxy = exported_by_proxy();
    exported.extend(by_proxy.clone());
    let conditions = [READY, FUNDED, ISOLATED, ENFORCED];
    let mut alerts = Vec::new();
    let rules = rule["spec"]["groups"].as_array().expect("groups").iter();
    for r in rules.flat_map(|g| g["rules"].as_array().expect("rules")) {
        let alert = r["alert"].as_str().expect("alert name");
        alerts.push(alert.to_string());
        let expr = r["expr"].as_str().expect("expr");
        let parsed = promql_parser::parser::parse(expr).unwrap_or_else(|e| panic!("{alert}: {expr}: {e}"));
        let mut selectors = Selectors::default();
        walk_expr(&mut selectors, &parsed).expect("walk");
        assert!(!selectors.0.is_empty(), "{alert} selects no metric");
        // Each `by (...)` label is one every metric aggregated carries.
        let mut groupings = Groupings::default();
        walk_expr(&mut groupings, &parsed).expect("walk");
        for (label, metrics) in &groupings.0 {
            for name in metrics {
                let labels = exported.get(name).unwrap_or_else(|| panic!("{alert}: {name} is not exported"));
                assert!(labels.contains(label), "{alert}: groups {name} by {label}, which it does not carry");
            }
        }
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
        [
            "BulkheadNotReady",
            "BulkheadUnfunded",
            "BulkheadRequiredLayerShared",
            "BulkheadNotEnforced",
            "BulkheadOperatorReconcileErrors",
            "BulkheadClassStarvedAtCeiling",
            "BulkheadUtilisationCollapse",
            "BulkheadSurplusExhausted",
        ]
    );
    // The usage alerts read the proxies' series, each Bulkhead's apart.
    let usage = &rule["spec"]["groups"][1];
    assert_eq!(usage["name"].as_str(), Some("bulkhead-usage"));
    for r in usage["rules"].as_array().expect("rules") {
        let parsed = promql_parser::parser::parse(r["expr"].as_str().expect("expr")).expect("parsed above");
        let mut selectors = Selectors::default();
        walk_expr(&mut selectors, &parsed).expect("walk");
        for name in selectors.0.iter().filter_map(|vs| vs.name.as_deref()) {
            let labels = by_proxy.get(name).unwrap_or_else(|| panic!("{name} is not a proxy metric"));
            assert!(labels.iter().any(|l| l == "bulkhead"), "{name} has no bulkhead label: {labels:?}");
        }
    }
    // The thresholds are values.
    let docs = render(
        3,
        &[
            "--set",
            "monitoring.prometheusRule.enabled=true",
            "--set-json",
            "monitoring.prometheusRule.thresholds.starvedRejectedRatio=0.05",
        ],
    );
    let starved = &find(&docs, "PrometheusRule")[0]["spec"]["groups"][1]["rules"][0];
    assert!(starved["expr"].as_str().is_some_and(|e| e.trim_end().ends_with("> 0.05")), "{starved:?}");
    let out = chart_support::helm_output(
        3,
        &[
            "template",
            "--set",
            "monitoring.prometheusRule.enabled=true",
            "--set-json",
            "monitoring.prometheusRule.thresholds.collapseOccupancy=2",
        ],
    );
    assert!(!out.status.success(), "an occupancy above 1 is refused");
    // A selector of a metric the operator does not export is caught.
    let mut bogus = Selectors::default();
    walk_expr(&mut bogus, &promql_parser::parser::parse("bulkhead_no_such_metric == 1").expect("parse")).expect("walk");
    assert!(!exported.contains_key(bogus.0[0].name.as_deref().expect("name")));
}

/// Each label an aggregation groups `by`, with the metrics it aggregates.
#[derive(Default)]
struct Groupings(Vec<(String, Vec<String>)>);

impl promql_parser::util::ExprVisitor for Groupings {
    type Error = ();
    fn pre_visit(&mut self, expr: &promql_parser::parser::Expr) -> Result<bool, ()> {
        if let promql_parser::parser::Expr::Aggregate(a) = expr {
            if let Some(promql_parser::parser::LabelModifier::Include(labels)) = &a.modifier {
                let mut inner = Selectors::default();
                walk_expr(&mut inner, &a.expr)?;
                let metrics: Vec<String> = inner.0.iter().filter_map(|vs| vs.name.clone()).collect();
                self.0.extend(labels.labels.iter().map(|l| (l.to_string(), metrics.clone())));
            }
        }
        Ok(true)
    }
}

fn deployment_pod(docs: &[Value]) -> Value {
    find(docs, "Deployment")[0]["spec"]["template"]["spec"].clone()
}

#[test]
fn security_contexts_default_to_restricted_and_openshift_can_leave_the_ids_out() {
    let pod = deployment_pod(&render(3, &[]));
    let container = &pod["containers"][0]["securityContext"];
    for (sc, key) in
        [(&pod["securityContext"], "fsGroup"), (container, "runAsUser"), (&pod["securityContext"], "runAsUser")]
    {
        assert_eq!(sc[key].as_u64(), Some(65532), "{key} by default: {sc:?}");
    }
    // OpenShift's restricted SCC assigns the ids from the namespace's range.
    let unset = [
        "--set",
        "podSecurityContext.runAsUser=null",
        "--set",
        "podSecurityContext.runAsGroup=null",
        "--set",
        "podSecurityContext.fsGroup=null",
        "--set",
        "containerSecurityContext.runAsUser=null",
        "--set",
        "containerSecurityContext.runAsGroup=null",
        // The sidecar the operator injects (passed as --proxy-security-context).
        "--set",
        "proxy.securityContext.runAsUser=null",
    ];
    for major in [3, 4] {
        let pod = deployment_pod(&render(major, &unset));
        let text = bulkhead::crd::to_yaml(&pod).expect("yaml");
        for id in ["runAsUser", "runAsGroup", "fsGroup"] {
            assert!(!text.contains(id), "Helm {major}: {id} left in:\n{text}");
        }
        // Still restricted: non-root is required, not assumed from an id.
        assert_eq!(restricted_violations(&pod), Vec::<String>::new(), "Helm {major}");
    }
    // A value the schema refuses.
    let out = chart_support::helm_output(3, &["template", "--set", "podSecurityContext.runAsUser=-1"]);
    assert!(!out.status.success(), "a negative uid is refused");
}

#[test]
fn extra_args_a_disruption_budget_and_topology_spread_are_optional_values() {
    let docs = render(3, &[]);
    assert!(find(&docs, "PodDisruptionBudget").is_empty());
    assert!(deployment_pod(&docs).get("topologySpreadConstraints").is_none());
    let docs = render(
        3,
        &[
            "--set",
            "extraArgs={--host-label,example.com/hypervisor}",
            "--set",
            "podDisruptionBudget.enabled=true",
            "--set",
            "replicaCount=2",
            "--set",
            "topologySpreadConstraints[0].maxSkew=1",
            "--set",
            "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
            "--set",
            "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
        ],
    );
    let deployment = find(&docs, "Deployment")[0];
    let pod = &deployment["spec"]["template"]["spec"];
    let args: Vec<&str> =
        pod["containers"][0]["args"].as_array().expect("args").iter().filter_map(Value::as_str).collect();
    assert_eq!(args[args.len() - 2..], ["--host-label", "example.com/hypervisor"], "{args:?}");
    let pdb = find(&docs, "PodDisruptionBudget")[0];
    assert_eq!(pdb["apiVersion"].as_str(), Some("policy/v1"));
    assert_eq!(pdb["spec"]["maxUnavailable"].as_u64(), Some(1));
    assert!(pdb["spec"].get("minAvailable").is_none());
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let spread = &pod["topologySpreadConstraints"][0];
    assert_eq!(spread["topologyKey"].as_str(), Some("topology.kubernetes.io/zone"));
    for selector in [&pdb["spec"]["selector"]["matchLabels"], &spread["labelSelector"]["matchLabels"]] {
        let selector = selector.as_object().expect("matchLabels");
        assert!(!selector.is_empty());
        for (k, v) in selector {
            assert_eq!(&pod_labels[k], v, "selects the operator pods by {k:?}");
        }
    }
    // minAvailable wins over maxUnavailable; a selector given is kept.
    let docs = render(
        3,
        &[
            "--set",
            "podDisruptionBudget.enabled=true",
            "--set",
            "podDisruptionBudget.minAvailable=50%",
            "--set",
            "topologySpreadConstraints[0].maxSkew=2",
            "--set",
            "topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
            "--set",
            "topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule",
            "--set",
            "topologySpreadConstraints[0].labelSelector.matchLabels.app=mine",
        ],
    );
    let pdb = find(&docs, "PodDisruptionBudget")[0];
    assert_eq!(pdb["spec"]["minAvailable"].as_str(), Some("50%"));
    assert!(pdb["spec"].get("maxUnavailable").is_none());
    let spread = &deployment_pod(&docs)["topologySpreadConstraints"][0];
    assert_eq!(
        serde_json::to_value(&spread["labelSelector"]).expect("json"),
        serde_json::json!({"matchLabels": {"app": "mine"}})
    );
    for bad in ["podDisruptionBudget.minAvailable=half", "topologySpreadConstraints[0].maxSkew=1"] {
        let out = chart_support::helm_output(3, &["template", "--set", bad]);
        assert!(!out.status.success(), "{bad} is refused by the schema");
    }
}

/// Reading Bulkheads is aggregated into view, edit and admin; writing them
/// is a role of its own, `<fullname>-author`, folded into edit and admin only
/// when asked (issue 44: whoever writes a Bulkhead makes the operator write
/// into namespaces and onto nodes, so one ClusterRoleBinding to edit must not
/// carry it).
#[test]
fn writing_bulkheads_is_a_role_of_its_own_and_only_reading_is_aggregated() {
    let docs = render(3, &[]);
    let aggregated = |docs: &[Value], to: &str| -> Vec<serde_json::Value> {
        find(docs, "ClusterRole")
            .into_iter()
            .filter(|r| {
                r["metadata"]["labels"][format!("rbac.authorization.k8s.io/aggregate-to-{to}")].as_str() == Some("true")
            })
            .map(|r| serde_json::to_value(&r["rules"]).expect("json"))
            .collect()
    };
    let read = serde_json::json!([{"apiGroups": ["bulkhead.dev"], "resources": ["bulkheads", "bulkheads/status", "bulkheaddrills", "bulkheaddrills/status"], "verbs": ["get", "list", "watch"]}]);
    for role in ["view", "edit", "admin"] {
        assert_eq!(aggregated(&docs, role), std::slice::from_ref(&read), "{role} gets reading only");
    }
    let author = find(&docs, "ClusterRole")
        .into_iter()
        .find(|r| r["metadata"]["name"].as_str().is_some_and(|n| n.ends_with("-author")))
        .expect("the author role");
    let write = serde_json::json!([
        {"apiGroups": ["bulkhead.dev"], "resources": ["bulkheads", "bulkheaddrills"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]},
        {"apiGroups": ["bulkhead.dev"], "resources": ["bulkheads/status", "bulkheaddrills/status"],
         "verbs": ["get", "list", "watch"]}
    ]);
    assert_eq!(serde_json::to_value(&author["rules"]).expect("json"), write);
    // No binding: the platform team binds it.
    let bindings = serde_json::to_string(&find(&docs, "ClusterRoleBinding")).expect("json");
    assert!(!bindings.contains("-author"), "{bindings}");

    // rbac.aggregateToEdit folds it into edit and admin (what releases before did), never into view.
    let folded = render(3, &["--set", "rbac.aggregateToEdit=true"]);
    for role in ["edit", "admin"] {
        let rules = aggregated(&folded, role);
        assert!(rules.contains(&write) && rules.contains(&read), "{role}: {rules:?}");
    }
    assert_eq!(aggregated(&folded, "view"), std::slice::from_ref(&read));
    // The status is the operator's alone.
    assert!(!serde_json::to_string(&write).expect("json").contains("bulkheads/status\"],\"verbs\":[\"create"));
    let off = render(3, &["--set", "rbac.aggregateToView=false"]);
    assert!(aggregated(&off, "view").is_empty() && aggregated(&off, "edit").is_empty());
    let none = render(3, &["--set", "rbac.create=false"]);
    assert!(find(&none, "ClusterRole").is_empty());
}

/// A fresh install is scoped: only the chart's own image may be injected,
/// only labelled namespaces and nodes are written; each value reaches its
/// flag in a form the operator accepts, and a bad one is refused by the schema.
#[test]
fn the_image_allow_list_and_the_opt_ins_default_to_safe_and_reach_the_flags() {
    use bulkhead::plan::{ImageAllowList, OptIn};
    let flag = |args: &[String], name: &str| -> Option<String> {
        args.iter().position(|a| a == name).map(|at| args[at + 1].clone())
    };
    for major in [3, 4] {
        let args = operator_args(&render(major, &[]));
        assert_eq!(flag(&args, "--proxy-image-allow"), None, "Helm {major}: only --proxy-image: {args:?}");
        assert_eq!(flag(&args, "--namespace-opt-in").as_deref(), Some("bulkhead.dev/enabled=true"));
        assert_eq!(flag(&args, "--node-opt-in").as_deref(), Some("bulkhead.dev/claimable=true"));
    }
    let args = operator_args(&render(
        3,
        &[
            "--set",
            "proxy.allowedImages={registry.example/bulkhead:*,mirror.example/proxy:1.0}",
            "--set",
            "optIn.namespaces=example.com/tenant=managed",
            "--set",
            "optIn.nodes=none",
        ],
    ));
    let allow = flag(&args, "--proxy-image-allow").expect("--proxy-image-allow");
    let list = ImageAllowList::parse(&allow).expect("the operator accepts it");
    assert!(list.allows("registry.example/bulkhead:2.0") && list.allows("mirror.example/proxy:1.0"));
    let ns = flag(&args, "--namespace-opt-in").expect("--namespace-opt-in");
    assert_eq!(
        OptIn::parse(&ns).expect("accepted").map(|o| o.to_string()).as_deref(),
        Some("example.com/tenant=managed")
    );
    assert_eq!(OptIn::parse_for_nodes(&flag(&args, "--node-opt-in").expect("--node-opt-in")), Ok(None));
    // Empty is none, too.
    let args = operator_args(&render(3, &["--set", "optIn.namespaces="]));
    assert_eq!(flag(&args, "--namespace-opt-in").as_deref(), Some("none"));
    refused_by_schema(&[
        "optIn.namespaces=enabled",
        "optIn.nodes=bulkhead.dev/shop=checkout",
        "optIn.node=none",
        "proxy.allowedImages={registry.example/*/proxy}",
        "proxy.allowedImages={a,b c}",
    ]);
    for flag in ["--proxy-image-allow=x", "--namespace-opt-in=none", "--node-opt-in=none"] {
        let out = chart_support::helm_output(3, &["template", "--set", &format!("extraArgs={{{flag}}}")]);
        assert!(!out.status.success(), "{flag} in extraArgs is refused");
    }
}

#[test]
fn the_prometheus_annotations_go_when_a_service_monitor_scrapes() {
    let annotations = |args: &[&str]| {
        let docs = render(3, args);
        let service = find(&docs, "Service")[0];
        service["metadata"]["annotations"].as_object().map(|m| m.len()).unwrap_or(0)
    };
    assert_eq!(annotations(&[]), 3, "prometheus.io/scrape, port, path by default");
    assert_eq!(annotations(&["--set", "monitoring.serviceMonitor.enabled=true"]), 0);
    assert_eq!(
        annotations(&["--set", "monitoring.serviceMonitor.enabled=true", "--set", "service.annotations.team=a"]),
        1,
        "the Service's own annotations stay"
    );
}

#[test]
fn the_pod_monitor_scrapes_the_port_the_operator_gives_the_sidecar() {
    assert!(find(&render(3, &[]), "PodMonitor").is_empty(), "off by default");
    let docs = render(3, &["--set", "monitoring.podMonitor.enabled=true"]);
    let monitor = find(&docs, "PodMonitor")[0];
    assert_eq!(monitor["apiVersion"].as_str(), Some("monitoring.coreos.com/v1"));
    assert_eq!(monitor["spec"]["namespaceSelector"]["any"].as_bool(), Some(true));
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["path"].as_str(), Some("/metrics"));
    // Prometheus keeps only pods with a container port of this name: the one
    // the injection declares when spec.workload.proxy.metricsAddress opens
    // the sidecar's metrics beyond the pod (the fixture's does).
    let port = endpoint["port"].as_str().expect("port name");
    let pod = injected_pod();
    let named: Vec<&str> = pod["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .flat_map(|c| c["ports"].as_array().into_iter().flatten())
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(named.contains(&port), "{port} is not a port of the injected sidecar: {named:?}");
    // The API server refuses a port name longer than 15 characters (IANA_SVC_NAME).
    for name in &named {
        assert!(
            name.len() <= 15 && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "{name:?} is not a valid container port name"
        );
    }
    // The port is a value (the proxy may serve metrics on a port of its own).
    let docs = render(
        3,
        &[
            "--set",
            "monitoring.podMonitor.enabled=true",
            "--set",
            "monitoring.podMonitor.port=proxy-metrics",
            "--set",
            "monitoring.podMonitor.namespaces={shop,search}",
        ],
    );
    let monitor = find(&docs, "PodMonitor")[0];
    assert_eq!(monitor["spec"]["podMetricsEndpoints"][0]["port"].as_str(), Some("proxy-metrics"));
    // A container port name has at most 15 characters: a longer one could never match.
    refused_by_schema(&["monitoring.podMonitor.port=bulkhead-proxy-metrics", "monitoring.podMonitor.path=metrics"]);
    assert_eq!(
        serde_json::to_value(&monitor["spec"]["namespaceSelector"]).expect("json"),
        serde_json::json!({"matchNames": ["shop", "search"]})
    );
}

#[test]
fn the_chart_readme_documents_every_value() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("charts/bulkhead/README.md")).expect("charts/bulkhead/README.md");
    let values: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(root.join("charts/bulkhead/values.yaml")).expect("values"))
            .expect("yaml");
    fn leaves(prefix: &str, v: &Value, out: &mut Vec<String>) {
        match v.as_object() {
            Some(m) if !m.is_empty() => {
                for (k, v) in m {
                    let k = k.as_str();
                    let path = if prefix.is_empty() { k.to_string() } else { format!("{prefix}.{k}") };
                    leaves(&path, v, out);
                }
            }
            _ => out.push(prefix.to_string()),
        }
    }
    let mut keys = Vec::new();
    leaves("", &values, &mut keys);
    // A value is documented by its own row or by a row of the object it is
    // part of (`podSecurityContext` covers its fields).
    let documented = |key: &str| {
        let parts: Vec<&str> = key.split('.').collect();
        (1..=parts.len()).any(|n| readme.contains(&format!("| `{}` |", parts[..n].join("."))))
    };
    let missing: Vec<&String> = keys.iter().filter(|k| !documented(k)).collect();
    assert!(missing.is_empty(), "values not in charts/bulkhead/README.md: {missing:?}");
}

/// The operator container's arguments in a rendered chart.
fn operator_args(docs: &[Value]) -> Vec<String> {
    deployment_pod(docs)["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(String::from))
        .collect()
}

/// Each `--set` value is refused by the chart's schema (`helm template` fails).
fn refused_by_schema(values: &[&str]) {
    for bad in values {
        let out = chart_support::helm_output(3, &["template", "--set", bad]);
        assert!(!out.status.success(), "{bad} is refused by the schema");
    }
}

#[test]
fn usage_analysis_is_off_by_default_and_passes_its_url_period_and_window() {
    let args = operator_args;
    let off = args(&render(3, &[]));
    assert!(!off.iter().any(|a| a.starts_with("--prometheus-url") || a.starts_with("--usage")), "{off:?}");
    let on = args(&render(
        3,
        &["--set", "usage.prometheusUrl=http://prometheus-operated.monitoring:9090", "--set", "usage.period=5m"],
    ));
    let at = on.iter().position(|a| a == "--prometheus-url").expect("--prometheus-url");
    assert_eq!(
        on[at..at + 6],
        [
            "--prometheus-url",
            "http://prometheus-operated.monitoring:9090",
            "--usage-period",
            "5m",
            "--usage-window",
            "7d"
        ]
    );
    refused_by_schema(&[
        "usage.prometheusUrl=prometheus:9090",
        "usage.period=10 minutes",
        "usage.period=90",
        "usage.window=0d",
        "usage.window=0h0m",
        "usage.windw=7d",
        "usage.caFile=ca.pem",
        "usage.caConfigMap=Not_A_Name",
    ]);
    // The binary's grammar: 1h30m is a span.
    let on = args(&render(3, &["--set", "usage.prometheusUrl=http://p:9090", "--set", "usage.period=1h30m"]));
    assert!(on.windows(2).any(|w| w == ["--usage-period", "1h30m"]), "{on:?}");
}

/// An https Prometheus behind a token (kube-rbac-proxy, Thanos, a managed
/// one): the CA and the token file reach the operator's flags, a CA
/// ConfigMap is mounted read-only where the flag points, and nothing is
/// passed or mounted while no URL is set.
#[test]
fn an_https_prometheus_gets_its_ca_and_token_file() {
    let args = operator_args;
    let token = "/var/run/secrets/kubernetes.io/serviceaccount/token";
    let url = "usage.prometheusUrl=https://prometheus.monitoring:9091";
    for major in [3, 4] {
        let docs = render(
            major,
            &[
                "--set",
                url,
                "--set",
                "usage.caConfigMap=prometheus-ca",
                "--set",
                &format!("usage.bearerTokenFile={token}"),
            ],
        );
        let a = args(&docs);
        assert!(a.windows(2).any(|w| w == ["--prometheus-ca-file", "/etc/bulkhead/prometheus-ca/ca.crt"]), "{a:?}");
        assert!(a.windows(2).any(|w| w == ["--prometheus-bearer-token-file", token]), "{a:?}");
        let pod = deployment_pod(&docs);
        assert_eq!(pod["volumes"][0]["configMap"]["name"], "prometheus-ca");
        assert_eq!(pod["volumes"][0]["configMap"]["items"][0]["key"], "ca.crt");
        let mount = &pod["containers"][0]["volumeMounts"][0];
        assert_eq!(
            (mount["mountPath"].as_str(), mount["readOnly"].as_bool()),
            (Some("/etc/bulkhead/prometheus-ca"), Some(true))
        );
        assert_eq!(restricted_violations(&pod), Vec::<String>::new(), "Helm {major}");
    }
    let a = args(&render(3, &["--set", url, "--set", "usage.caFile=/etc/ssl/private-ca.pem"]));
    assert!(a.windows(2).any(|w| w == ["--prometheus-ca-file", "/etc/ssl/private-ca.pem"]), "{a:?}");
    assert!(!a.iter().any(|x| x == "--prometheus-bearer-token-file"), "{a:?}");
    // Without a URL nothing is passed or mounted.
    let docs =
        render(3, &["--set", "usage.caConfigMap=prometheus-ca", "--set", &format!("usage.bearerTokenFile={token}")]);
    assert!(!args(&docs).iter().any(|x| x.starts_with("--prometheus")), "{:?}", args(&docs));
    assert!(deployment_pod(&docs).get("volumes").is_none());
    let both = ["template", "--set", url, "--set", "usage.caFile=/a.pem", "--set", "usage.caConfigMap=ca"];
    let out = chart_support::helm_output(3, &both);
    assert!(!out.status.success(), "a CA file and a CA ConfigMap at once are refused");
    assert!(String::from_utf8_lossy(&out.stderr).contains("give one"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The sidecar's securityContext is a chart value passed to the operator:
/// by default the very context the binary would use (restricted, user
/// 65532), and on OpenShift the same without runAsUser, still restricted.
#[test]
fn the_injected_sidecars_security_context_is_a_value_and_openshift_can_leave_the_user_out() {
    let context = |docs: &[Value]| -> Value {
        let args: Vec<String> = deployment_pod(docs)["containers"][0]["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(|a| a.as_str().map(String::from))
            .collect();
        let at = args.iter().position(|a| a == "--proxy-security-context").expect("--proxy-security-context");
        bulkhead::plan::parse_security_context(&args[at + 1]).expect("a securityContext the operator accepts")
    };
    for major in [3, 4] {
        assert_eq!(context(&render(major, &[])), bulkhead::plan::default_proxy_security_context(), "Helm {major}");
        let openshift = context(&render(major, &["--set", "proxy.securityContext.runAsUser=null"]));
        assert!(openshift.get("runAsUser").is_none(), "Helm {major}: {openshift}");
        // What the operator then injects still meets restricted on its own.
        let config = PlanConfig {
            proxy_image: Some("registry.example/bulkhead:test".into()),
            proxy_security_context: openshift,
            ..PlanConfig::default()
        };
        let pod = injected_pod_with(&config);
        let sidecar = pod["containers"].as_array().expect("containers").last().expect("the sidecar").clone();
        assert_eq!(sidecar["name"], "bulkhead-proxy");
        assert!(sidecar["securityContext"].get("runAsUser").is_none(), "{sidecar}");
        assert_eq!(restricted_container(&sidecar, &Value::Null), Vec::<String>::new(), "Helm {major}");
    }
    refused_by_schema(&["proxy.securityContext.runAsUsr=1000", "proxy.securityContext.runAsUser=-1", "proxy.image=x"]);
}

/// The Lease name is one value: the flag the operator gets and the one name
/// the Role grants. Given in extraArgs it would leave the Role granting
/// another Lease (leader election then fails), so that is refused.
#[test]
fn a_lease_name_given_in_values_is_the_one_the_role_grants() {
    let lease = |docs: &[Value]| -> (Option<String>, Vec<String>) {
        let args: Vec<String> = deployment_pod(docs)["containers"][0]["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(|a| a.as_str().map(String::from))
            .collect();
        let flag = args.iter().position(|a| a == "--lease-name").map(|i| args[i + 1].clone());
        let role = find(docs, "Role")
            .into_iter()
            .find(|r| r["metadata"]["name"].as_str().is_some_and(|n| n.ends_with("-leader-election")))
            .expect("the leader-election Role");
        let granted = role["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .filter(|r| r["verbs"].as_array().is_some_and(|v| v.iter().any(|v| v == "update")))
            .flat_map(|r| r["resourceNames"].as_array().cloned().unwrap_or_default())
            .filter_map(|n| n.as_str().map(String::from))
            .collect();
        (flag, granted)
    };
    for major in [3, 4] {
        for (args, name) in [
            (vec!["--set", "replicaCount=2"], "bulkhead-operator"),
            (vec!["--set", "replicaCount=2", "--set", "leaderElection.leaseName=team-b-operator"], "team-b-operator"),
            (vec!["--set", "leaderElection.enabled=true", "--set", "leaderElection.leaseName=b"], "b"),
        ] {
            let (flag, granted) = lease(&render(major, &args));
            assert_eq!(flag.as_deref(), Some(name), "Helm {major} {args:?}: the flag");
            assert_eq!(granted, [name], "Helm {major} {args:?}: the Role grants the Lease the flag names");
        }
        // Without leader election no flag; the Role is rendered anyway, for the value's Lease.
        let (flag, granted) = lease(&render(major, &["--set", "leaderElection.leaseName=later"]));
        assert_eq!((flag, granted), (None, vec!["later".to_string()]), "Helm {major}");
    }
    for bad in ["extraArgs={--lease-name,b}", "extraArgs={--lease-name=b}", "extraArgs={--proxy-image,x}"] {
        let out = chart_support::helm_output(3, &["template", "--set", bad]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("is set by the chart from its values"), "{bad}: {err}");
    }
    let out = chart_support::helm_output(3, &["template", "--set", "leaderElection.leaseName=Not_A_Name"]);
    assert!(!out.status.success(), "a Lease name the API server would refuse is refused");
}

/// operatorName reaches the operator's --operator-name, labels its
/// Deployment (which the chart's check of other releases reads) and names
/// its default Lease; without it the operator acts on unlabelled Bulkheads
/// and its Deployment says so with an empty label.
#[test]
fn an_operator_name_is_passed_labelled_and_names_the_lease() {
    for major in [3, 4] {
        let docs = render(major, &["--set", "operatorName=team-b", "--set", "replicaCount=2"]);
        let deployment = find(&docs, "Deployment")[0];
        assert_eq!(deployment["metadata"]["labels"]["bulkhead.dev/operator"], "team-b");
        let args: Vec<&str> = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(args.windows(2).any(|w| w == ["--operator-name", "team-b"]), "{args:?}");
        assert!(args.windows(2).any(|w| w == ["--lease-name", "bulkhead-operator-team-b"]), "{args:?}");
        let docs = render(major, &[]);
        let deployment = find(&docs, "Deployment")[0];
        assert_eq!(deployment["metadata"]["labels"]["bulkhead.dev/operator"], "");
        let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
        assert!(!args.contains("--operator-name"), "{args}");
    }
    for bad in ["operatorName=Team_B", "operatorName=-b", "extraArgs={--operator-name,b}"] {
        let out = chart_support::helm_output(3, &["template", "--set", bad]);
        assert!(!out.status.success(), "{bad} is refused");
    }
}

/// NOTES.txt, what `helm install` prints, names every condition a status
/// can carry (it once named 5 of 11).
#[test]
fn the_install_notes_name_every_condition() {
    let notes = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/charts/bulkhead/templates/NOTES.txt"))
        .expect("NOTES.txt");
    let missing: Vec<&str> = bulkhead::status::CONDITION_TYPES
        .iter()
        .copied()
        .filter(|c| !notes.split(|ch: char| !ch.is_ascii_alphanumeric()).any(|w| w == *c))
        .collect();
    assert!(missing.is_empty(), "NOTES.txt does not name {missing:?}");
}

/// "values.schema.json rejects unknown keys": the security contexts,
/// affinity, tolerations, extraEnv and spread constraints too, whose fields
/// are Kubernetes's, so a misspelt one fails the install instead of being
/// dropped by the API server.
#[test]
fn the_schema_refuses_a_misspelt_security_context_or_affinity_field() {
    for bad in [
        "podSecurityContext.runAsUsr=1000",
        "containerSecurityContext.readOnlyRootFileSystem=true",
        "containerSecurityContext.capabilities.remove={NET_RAW}",
        "affinity.nodeAfinity.x=1",
        "extraEnv[0].name=A,extraEnv[0].vaule=1",
        "tolerations[0].key=a,tolerations[0].efect=NoSchedule",
        "topologySpreadConstraints[0].maxSkew=1,topologySpreadConstraints[0].topologyKey=k,topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule,topologySpreadConstraints[0].labelSelecter.a=b",
    ] {
        let out = chart_support::helm_output(3, &["template", "--set", bad]);
        assert!(!out.status.success(), "{bad} is refused by the schema");
    }
    let docs = render(
        3,
        &[
            "--set",
            "podSecurityContext.supplementalGroups={1000}",
            "--set",
            "tolerations[0].key=dedicated,tolerations[0].operator=Exists,tolerations[0].effect=NoSchedule",
            "--set",
            "extraEnv[0].name=A,extraEnv[0].value=x",
            "--set",
            "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=1",
            "--set",
            "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0].key=pool",
            "--set",
            "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0].operator=Exists",
        ],
    );
    let pod = deployment_pod(&docs);
    assert_eq!(pod["securityContext"]["supplementalGroups"][0], 1000);
    assert_eq!(pod["tolerations"][0]["key"], "dedicated");
    assert_eq!(pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"], 1);
}
