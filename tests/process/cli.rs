//! The offline CLI as a user runs it: `bulkhead plan` and `bulkhead crd`, with
//! no cluster.

fn bulkhead(args: &[&str]) -> (i32, String, String) {
    crate::bin::run(args, None)
}

#[test]
fn plan_prints_the_status_and_the_objects_it_would_write() {
    let (code, out, err) =
        bulkhead(&["plan", "-f", "examples/cluster/shop.yaml", "-f", "examples/four-dependencies.yaml", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let list: serde_json::Value = serde_json::from_str(&out).expect("JSON list");
    assert_eq!(list["kind"], "List");
    let items = list["items"].as_array().expect("items");
    let bh = items.iter().find(|i| i["kind"] == "Bulkhead").expect("the Bulkhead");
    let funded = bh["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "Funded")
        .expect("Funded");
    assert_eq!(funded["status"], "True");
    assert_eq!(bh["status"]["classes"][0]["ceiling"], 110);
    assert_eq!(bh["status"]["classes"][0]["leftToOthers"], 90);
    let cm = items.iter().find(|i| i["kind"] == "ConfigMap").expect("the pool config");
    assert_eq!(cm["metadata"]["namespace"], "shop");
    assert!(err.contains("would apply ConfigMap shop/bulkhead-four-dependencies"), "{err}");
}

#[test]
fn plan_reads_kubectl_lists_and_prints_yaml() {
    let dir = tempfile::tempdir().expect("tempdir");
    let list = dir.path().join("cluster.yaml");
    std::fs::write(
        &list,
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Namespace\n  metadata: {name: shop}\n",
    )
    .expect("write");
    let (code, out, err) =
        bulkhead(&["plan", "-f", list.to_str().expect("path"), "-f", "examples/control-plane-lane.yaml"]);
    assert_eq!(code, 0, "{err}");
    let list: serde_json::Value = serde_saphyr::from_str(&out).expect("YAML");
    assert_eq!(list["kind"].as_str(), Some("List"));
    assert!(err.contains("ControlPlaneLane True"), "{err}");
}

#[test]
fn a_bad_file_is_named_with_the_field_and_exits_3() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {name: x}\nspec:\n  dimension: Tenant\n  pool: {resource: c, capacity: 10}\n  classes:\n  - {name: a, reserved: ten}\n",
    )
    .expect("write");
    let (code, _, err) = bulkhead(&["plan", "-f", bad.to_str().expect("path")]);
    assert_eq!(code, 3);
    assert!(err.contains("bad.yaml: document 1") && err.contains("spec.classes[0].reserved"), "{err}");

    let (code, _, err) = bulkhead(&["plan", "-f", "does-not-exist.yaml"]);
    assert_eq!(code, 3);
    assert!(err.contains("does-not-exist.yaml"), "{err}");
}

#[test]
fn plan_exits_3_on_a_spec_the_planner_rejects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("ceiling.yaml");
    std::fs::write(
        &f,
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {name: x}\nspec:\n  dimension: Tenant\n  pool: {resource: c, capacity: 10, sharedSurplus: 5}\n  classes:\n  - {name: a, reserved: 5, ceiling: 11}\n",
    )
    .expect("write");
    let (code, _, err) = bulkhead(&["plan", "-f", f.to_str().expect("path")]);
    assert_eq!(code, 3);
    assert!(err.contains("spec.classes[0].ceiling"), "{err}");
}

#[test]
fn crd_prints_the_definition() {
    let (code, out, _) = bulkhead(&["crd"]);
    assert_eq!(code, 0);
    assert!(out.contains("name: bulkheads.bulkhead.dev") && out.contains("scope: Cluster"));
}

/// Two classes with their own pods, on the nodes given, as `kubectl get -o yaml` prints them.
fn placed_cluster(dir: &std::path::Path, checkout_node: &str, reports_node: &str, layers: &str) -> std::path::PathBuf {
    let f = dir.join("cluster.yaml");
    let node = |name: &str, zone: Option<&str>| {
        let labels = zone.map(|z| format!(", labels: {{topology.kubernetes.io/zone: {z}}}")).unwrap_or_default();
        format!("- apiVersion: v1\n  kind: Node\n  metadata: {{name: {name}{labels}}}\n")
    };
    let pod = |name: &str, app: &str, node: &str| {
        format!("- apiVersion: v1\n  kind: Pod\n  metadata: {{name: {name}, namespace: shop, labels: {{app: {app}}}}}\n  spec: {{nodeName: {node}, containers: [{{name: c, image: x}}]}}\n")
    };
    let text = format!(
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Namespace\n  metadata: {{name: shop}}\n{}{}{}{}\n---\napiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: placed}}\nspec:\n  dimension: Dependency\n  layers: {layers}\n  pool: {{resource: connections, capacity: 100}}\n  classes:\n  - {{name: checkout, reserved: 10, critical: true, pods: {{podSelector: {{matchLabels: {{app: checkout}}}}}}}}\n  - {{name: reports, reserved: 10, pods: {{podSelector: {{matchLabels: {{app: reports}}}}}}}}\n",
        node("n-1", Some("a")),
        node("n-2", None),
        pod("checkout-1", "checkout", checkout_node),
        pod("reports-1", "reports", reports_node),
    );
    std::fs::write(&f, text).expect("write");
    f
}

#[test]
fn check_exits_0_when_every_required_layer_is_separate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = placed_cluster(dir.path(), "n-1", "n-2", "[Process, Node, Kernel]");
    let (code, out, err) = bulkhead(&["check", "-f", f.to_str().expect("path"), "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let list: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let status = &list["items"][0]["status"];
    let isolated = status["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "Isolated")
        .expect("Isolated");
    assert_eq!(isolated["status"], "True");
    let node = status["layers"].as_array().expect("layers").iter().find(|l| l["name"] == "Node").expect("Node");
    assert_eq!(node["state"], "Separate");
    assert!(err.contains("placed: Node Separate (required)"), "{err}");
}

#[test]
fn check_exits_1_and_names_the_node_when_a_required_layer_is_shared() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = placed_cluster(dir.path(), "n-1", "n-1", "[Node]");
    let (code, out, err) = bulkhead(&["check", "-f", f.to_str().expect("path")]);
    assert_eq!(code, 1, "{err}");
    assert!(out.contains("SharedLayerDetected"), "{out}");
    assert!(err.contains("checkout and reports: node n-1 runs shop/checkout-1 and shop/reports-1"), "{err}");
    assert!(err.contains("next: give each class its own nodes"), "{err}");
}

#[test]
fn check_warns_on_unverified_and_exits_2_only_with_strict() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = placed_cluster(dir.path(), "n-1", "n-2", "[Zone]");
    let (code, _, err) = bulkhead(&["check", "-f", f.to_str().expect("path")]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("warning: some required layers are Unverified"), "{err}");
    assert!(err.contains("node n-2 (running shop/reports-1) has no topology.kubernetes.io/zone label"), "{err}");
    let (code, _, _) = bulkhead(&["check", "--strict", "-f", f.to_str().expect("path")]);
    assert_eq!(code, 2);
}

#[test]
fn check_exits_1_for_an_unfundable_design_and_3_for_bad_input() {
    let (code, _, err) =
        bulkhead(&["check", "-f", "examples/cluster/shop.yaml", "-f", "examples/four-dependencies.yaml"]);
    assert_eq!(code, 1, "the example's classes share the api process: {err}");
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("unfunded.yaml");
    std::fs::write(&f, "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {name: x}\nspec:\n  dimension: Tenant\n  pool: {resource: c, capacity: 10}\n  classes:\n  - {name: a, reserved: 8, critical: true}\n  - {name: b, reserved: 8}\n").expect("write");
    let (code, _, err) = bulkhead(&["check", "-f", f.to_str().expect("path")]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("Funded False (Unfundable)"), "{err}");
    std::fs::write(
        &f,
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {name: x}\nspec: {dimension: Sideways}\n",
    )
    .expect("write");
    let (code, _, err) = bulkhead(&["check", "-f", f.to_str().expect("path")]);
    assert_eq!(code, 3);
    assert!(err.contains("unfunded.yaml: document 1") && err.contains("spec.dimension"), "{err}");
}

#[test]
fn plan_shows_node_claims_taints_and_workload_patches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes = dir.path().join("nodes.yaml");
    let node = |n: u32| {
        format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: n{n}, resourceVersion: \"1\", labels: {{pool: bulkhead-demo, bulkhead.dev/claimable: \"true\"}}}}\nstatus: {{conditions: [{{type: Ready, status: \"True\"}}]}}\n"
        )
    };
    std::fs::write(&nodes, (1..=5).map(node).collect::<Vec<_>>().join("---\n")).expect("write");
    let (code, out, err) =
        bulkhead(&["plan", "-f", nodes.to_str().expect("path"), "-f", "examples/placement.yaml", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("class checkout holds 2 of 2 node(s): n1, n2"), "{err}");
    assert!(err.contains("class reports holds 2 of 2 node(s): n3, n4"), "{err}");
    assert!(
        err.contains(
            "would claim Node n1 for class checkout (label and taint bulkhead.dev/placement=checkout:NoSchedule)"
        ),
        "{err}"
    );
    assert!(err.contains("would place Deployment storefront/admin in class admin"), "{err}");
    assert!(err.contains("would apply PriorityClass bulkhead-placement.admin (value 1000)"), "{err}");
    let list: serde_json::Value = serde_json::from_str(&out).expect("JSON list");
    let items = list["items"].as_array().expect("items");
    let n1 = items.iter().find(|i| i["kind"] == "Node" && i["metadata"]["name"] == "n1").expect("n1's claim");
    assert_eq!(n1["metadata"]["labels"]["bulkhead.dev/placement"], "checkout");
    assert_eq!(n1["spec"]["taints"][0]["effect"], "NoSchedule");
    let patch = items
        .iter()
        .find(|i| i["kind"] == "Deployment" && i["metadata"]["name"] == "checkout")
        .expect("checkout's patch");
    assert_eq!(patch["spec"]["template"]["spec"]["priorityClassName"], "bulkhead-placement.checkout");
    assert!(patch["spec"]["template"]["spec"].get("containers").is_none(), "only placement's fields: {patch}");
    let quota = items.iter().find(|i| i["kind"] == "ResourceQuota").expect("a scoped quota");
    assert_eq!(quota["spec"]["scopeSelector"]["matchExpressions"][0]["scopeName"], "PriorityClass");
}

/// `bulkhead plan` (and so the operator, which shares its planner and flags)
/// without --proxy-image injects no sidecar into a Bulkhead that names no
/// image, and the condition names the flag; --proxy-image and
/// --proxy-security-context then shape the sidecar, and a securityContext
/// with a misspelt field is refused at start.
#[test]
fn without_proxy_image_no_sidecar_is_planned_and_the_condition_names_the_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("proxied.yaml");
    std::fs::write(
        &f,
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {name: proxied}\nspec:\n  dimension: Dependency\n  \
         pool: {resource: requests, capacity: 10}\n  workload:\n    namespace: shop\n    selector: {matchLabels: {app: api}}\n    \
         proxy: {mode: Ingress, port: 8081, upstreamPort: 8080}\n  classes:\n  - {name: a, reserved: 5}\n  - {name: b, reserved: 5}\n",
    )
    .expect("write");
    let file = f.to_str().expect("path");
    let (code, out, err) = bulkhead(&["plan", "-f", "examples/cluster/shop.yaml", "-f", file, "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("ProxyInjected False (NoProxyImage)") && err.contains("--proxy-image"), "{err}");
    assert!(!err.contains("would inject"), "{err}");
    assert!(!out.contains("bulkhead-proxy"), "no sidecar is planned: {out}");

    let context = r#"{"runAsNonRoot":true,"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}"#;
    let (code, out, err) = bulkhead(&[
        "plan",
        "-f",
        "examples/cluster/shop.yaml",
        "-f",
        file,
        "-o",
        "json",
        "--proxy-image",
        "registry.example/bulkhead:1",
        "--proxy-security-context",
        context,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("ProxyInjected True"), "{err}");
    let list: serde_json::Value = serde_json::from_str(&out).expect("JSON list");
    let deployment = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|i| i["kind"] == "Deployment")
        .expect("the injection's apply body");
    let sidecar = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(sidecar["image"], "registry.example/bulkhead:1");
    assert_eq!(sidecar["securityContext"], serde_json::from_str::<serde_json::Value>(context).expect("json"));

    let (code, _, err) = bulkhead(&["plan", "-f", file, "--proxy-security-context", r#"{"runAsUsr":1}"#]);
    assert!(code == 3 && err.contains("--proxy-security-context") && err.contains("runAsUsr"), "{err}");
}

/// `run --prometheus-url https://…` is a configuration the operator starts
/// with, not a fatal error that would crash-loop its pod: with no cluster to
/// reach it stops on the missing credentials, past the URL. A URL it cannot
/// use still stops it at once, named, and without the password.
#[test]
fn run_takes_an_https_prometheus_and_names_a_bad_one_without_its_password() {
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_bulkhead"))
            .arg("run")
            .args(args)
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("NO_COLOR", "1")
            .output()
            .expect("bulkhead runs");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.code().unwrap_or(-1), text)
    };
    let token = "/var/run/secrets/kubernetes.io/serviceaccount/token";
    let (code, out) =
        run(&["--prometheus-url", "https://prom.monitoring:9091", "--prometheus-bearer-token-file", token]);
    assert!(code == 1 && out.contains("no Kubernetes credentials") && !out.contains("prometheus"), "{out}");
    for (url, why) in [
        ("https://alice:hunter2@prom:99999", "port \"99999\" is not a port"),
        ("https://alice:hunter2@prom:9091/?x=1", "must not carry a query"),
    ] {
        let (code, out) = run(&["--prometheus-url", url]);
        assert!(code == 1 && out.contains(why) && out.contains("https://***@prom"), "{url}: {out}");
        assert!(!out.contains("hunter2"), "{url}: the password is printed: {out}");
    }
    let (code, out) = run(&["--prometheus-url", "https://prom:9091", "--prometheus-ca-file", "/nonexistent/ca.pem"]);
    assert!(code == 1 && out.contains("--prometheus-ca-file /nonexistent/ca.pem"), "{out}");
}
