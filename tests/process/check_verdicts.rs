//! Verdicts `bulkhead check` must not get wrong, and what it must say when
//! it is right: each test is a class of mistake a team's own manifests found
//! (a kernel called Separate inside one pod, a misspelt kind read as nothing,
//! a modern HorizontalPodAutoscaler refused, summaries that hid a pair's
//! state), with inputs written to cover the class, not the one example.

use std::path::Path;

use crate::bin::run;

fn check_text(dir: &Path, name: &str, text: &str) -> (i32, String, String) {
    let f = dir.join(name);
    std::fs::write(&f, text).expect("write");
    run(&["check", "-f", f.to_str().expect("path")], None)
}

fn bulkhead(layers: &str, classes: &str, extra: &str) -> String {
    format!(
        "apiVersion: bulkhead.dev/v1alpha1
kind: Bulkhead
metadata: {{name: b}}
spec:
  dimension: Dependency
  layers: [{layers}]
  pool: {{resource: connections, capacity: 100}}
{extra}  classes:
{classes}---
apiVersion: v1
kind: Namespace
metadata: {{name: shop}}
"
    )
}

const TWO_BY_APP: &str =
    "  - {name: checkout, reserved: 10, critical: true, pods: {podSelector: {matchLabels: {app: checkout}}}}
  - {name: reports, reserved: 10, pods: {podSelector: {matchLabels: {app: reports}}}}
";

fn pod(name: &str, labels: &str, node: &str, runtime_class: &str) -> String {
    let rc = if runtime_class.is_empty() { String::new() } else { format!(", runtimeClassName: {runtime_class}") };
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: shop, labels: {{{labels}}}}}\nspec: {{nodeName: {node:?}{rc}, containers: [{{name: c, image: x}}]}}\n"
    )
}

const GVISOR: &str = "---\napiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: gvisor}\nhandler: runsc\n";

#[test]
fn classes_served_by_one_sandboxed_pod_share_its_kernel() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Both classes select the very same gVisor pods.
    let classes = "  - {name: checkout, reserved: 10, critical: true, pods: {podSelector: {matchLabels: {app: api}}}}
  - {name: reports, reserved: 10, pods: {podSelector: {matchLabels: {app: api}}}}
";
    let text = format!("{}{GVISOR}{}", bulkhead("Kernel", classes, ""), pod("api-1", "app: api", "n-1", "gvisor"));
    let (code, _, err) = check_text(dir.path(), "one-pod.yaml", &text);
    assert_eq!(code, 1, "one pod has one kernel, sandboxed or not: {err}");
    assert!(err.contains("b: Kernel Shared (required)"), "{err}");
    assert!(err.contains("pod shop/api-1 serves both: one heap, one garbage collector (so one kernel)"), "{err}");

    // The in-process setup: classes without pods selectors run in spec.workload's sandboxed pods.
    let classes = "  - {name: checkout, reserved: 10, critical: true}\n  - {name: reports, reserved: 10}\n";
    let workload = "  workload: {namespace: shop, selector: {matchLabels: {app: api}}}\n";
    let deployment = "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api, namespace: shop}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: api}}\n  template:\n    metadata: {labels: {app: api}}\n    spec: {runtimeClassName: gvisor, containers: [{name: app, image: x}]}\n";
    let text = format!(
        "{}{GVISOR}{deployment}{}",
        bulkhead("Kernel, Zone", classes, workload),
        pod("api-1", "app: api", "n-1", "gvisor")
    );
    let (code, _, err) = check_text(dir.path(), "in-process.yaml", &text);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("b: Kernel Shared (required)") && err.contains("b: Zone Shared (required)"), "{err}");
}

#[test]
fn a_sandboxed_pod_beside_an_ordinary_one_shares_the_nodes_kernel() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "{}{GVISOR}{}{}",
        bulkhead("Kernel", TWO_BY_APP, ""),
        pod("checkout-1", "app: checkout", "n-1", "gvisor"),
        pod("reports-1", "app: reports", "n-1", "")
    );
    let (code, _, err) = check_text(dir.path(), "half.yaml", &text);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("shop/reports-1 runs on the node's own kernel, which the other shares even sandboxed"),
        "{err}"
    );
    // Both sandboxed: each has a guest kernel of its own.
    let text = format!(
        "{}{GVISOR}{}{}",
        bulkhead("Kernel", TWO_BY_APP, ""),
        pod("checkout-1", "app: checkout", "n-1", "gvisor"),
        pod("reports-1", "app: reports", "n-1", "gvisor")
    );
    let (code, _, err) = check_text(dir.path(), "both.yaml", &text);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("b: Kernel Separate (required)"), "{err}");
}

#[test]
fn a_misspelt_kind_of_a_group_read_here_is_refused_not_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = bulkhead("Node", TWO_BY_APP, "");
    for kind in ["BulkHead", "bulkhead", "Bulkheads", "BH", "BulkheadPolicy"] {
        // A good Bulkhead, then one that would fail the gate under a wrong kind.
        let bad = bulkhead("Node", TWO_BY_APP, "")
            .replace("kind: Bulkhead", &format!("kind: {kind}"))
            .replace("capacity: 100", "capacity: 5");
        let (code, _, err) = check_text(dir.path(), "kinds.yaml", &format!("{good}---\n{bad}"));
        assert_eq!(code, 3, "kind {kind}: {err}");
        assert!(err.contains(&format!("kind: {kind} is not a kind of bulkhead.dev/v1alpha1")), "{err}");
    }
    // The same mistake in a built-in group the planner reads: a pod left out could turn Shared into Separate.
    for (api_version, kind, meant) in
        [("v1", "pod", "Pod"), ("apps/v1", "Deployments", "Deployment"), ("v1", "node", "Node")]
    {
        let text =
            format!("{good}---\napiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: x, namespace: shop}}\n");
        let (code, _, err) = check_text(dir.path(), "builtin.yaml", &text);
        assert_eq!(code, 3, "{kind}: {err}");
        assert!(err.contains(&format!("did you mean {meant}?")), "{err}");
    }
    // A kind the planner does not read, and an object of another group, are still left out.
    let text = format!("{good}---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{name: x, namespace: shop}}\n");
    let (code, _, err) = check_text(dir.path(), "other.yaml", &text);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn every_served_version_of_the_kinds_read_is_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let workload = "  workload: {namespace: shop, selector: {matchLabels: {app: api}}}\n";
    let deployment = "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api, namespace: shop}\nspec:\n  replicas: 3\n  selector: {matchLabels: {app: api}}\n  template:\n    metadata: {labels: {app: api}}\n    spec: {containers: [{name: app, image: x}]}\n";
    let classes = "  - {name: checkout, reserved: 10, critical: true}\n  - {name: reports, reserved: 10}\n";
    let hpa = |version: &str, extra: &str| {
        format!("---\napiVersion: autoscaling/{version}\nkind: HorizontalPodAutoscaler\nmetadata: {{name: api, namespace: shop}}\nspec:\n  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: api}}\n  minReplicas: 3\n  maxReplicas: 50\n{extra}")
    };
    // As kubectl prints them: v2 has metrics and a status with conditions; v1 a CPU target.
    let v2_extra = "  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 60}}}]\n  behavior: {scaleDown: {stabilizationWindowSeconds: 300}}\nstatus: {currentReplicas: 3, desiredReplicas: 3, conditions: [{type: AbleToScale, status: \"True\"}], currentMetrics: []}\n";
    for (version, extra) in
        [("v1", "  targetCPUUtilizationPercentage: 60\n"), ("v2", v2_extra), ("v2beta2", v2_extra), ("v2beta1", "")]
    {
        let text = format!("{}{deployment}{}", bulkhead("Zone", classes, workload), hpa(version, extra));
        let (code, _, err) = check_text(dir.path(), "hpa.yaml", &text);
        assert_ne!(code, 3, "autoscaling/{version}: {err}");
        // The Instance note counts the fleet at the autoscaler's maximum.
        assert!(err.contains("is 300, and 5000 at the autoscaler's maxReplicas 50"), "autoscaling/{version}: {err}");
    }
    let text = format!("{}{deployment}{}", bulkhead("Zone", classes, workload), hpa("v3", ""));
    let (code, _, err) = check_text(dir.path(), "hpa.yaml", &text);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("apiVersion: autoscaling/v3 is not a version of HorizontalPodAutoscaler")
            && err.contains("autoscaling/v2"),
        "{err}"
    );
    // RuntimeClass and PriorityClass in the versions 1.20 also serves.
    let text = format!(
        "{}{}{}{}",
        bulkhead("Kernel", TWO_BY_APP, ""),
        GVISOR.replace("node.k8s.io/v1", "node.k8s.io/v1beta1"),
        pod("checkout-1", "app: checkout", "n-1", "gvisor"),
        pod("reports-1", "app: reports", "n-1", "gvisor")
    );
    let (code, _, err) = check_text(dir.path(), "rc.yaml", &text);
    assert_eq!(code, 0, "a v1beta1 RuntimeClass is read: {err}");
    let text = format!(
        "{}---\napiVersion: scheduling.k8s.io/v1beta1\nkind: PriorityClass\nmetadata: {{name: p}}\nvalue: 10\n",
        bulkhead("Node", TWO_BY_APP, "")
    );
    let (code, _, err) = check_text(dir.path(), "pc.yaml", &text);
    assert_ne!(code, 3, "{err}");
}

#[test]
fn parse_errors_say_what_is_wrong_with_the_text_not_the_parsers_options() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text =
        bulkhead("Node", TWO_BY_APP, "").replace("metadata: {name: b}", "metadata: {name: b}\nmetadata: {name: c}");
    let (code, _, err) = check_text(dir.path(), "dup.yaml", &text);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("the key metadata appears twice in one mapping"), "{err}");
    let text = bulkhead("Node", TWO_BY_APP, "").replace("capacity: 100", "capacity: 100000000000000000000000");
    let (code, _, err) = check_text(dir.path(), "large.yaml", &text);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("spec.pool.capacity: 1e+23 is too large for an integer"), "{err}");
    for leaked in ["DuplicateKeyPolicy", "Options", "RecordedAnchorEvents", "not number"] {
        assert!(!err.contains(leaked), "{leaked}: {err}");
    }
}

#[test]
fn json_is_read_as_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = r#"{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"},}"#;
    let (code, _, err) = check_text(dir.path(), "trailing.json", json);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("trailing.json: document 1: not JSON: trailing comma"), "{err}");
    // On stdin, JSON is told by its first character.
    let (code, _, err) = run(&["check", "-f", "-"], Some(json.as_bytes()));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("not JSON: trailing comma"), "{err}");
    // Good JSON still reads, several values in a row as several documents.
    let good = format!(
        "{}\n{}",
        r#"{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}"#,
        r#"{"apiVersion": "bulkhead.dev/v1alpha1", "kind": "Bulkhead", "metadata": {"name": "b"}, "spec": {"dimension": "Dependency", "layers": [], "pool": {"resource": "connections", "capacity": 10}, "classes": [{"name": "a", "reserved": 1, "critical": true}, {"name": "c", "reserved": 1}]}}"#
    );
    let (code, _, err) = check_text(dir.path(), "good.json", &good);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_critical_class_without_a_floor_fails_the_gate_naming_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = bulkhead("Node", &TWO_BY_APP.replace("reserved: 10, critical: true", "reserved: 0, critical: true"), "");
    let (code, _, err) = check_text(dir.path(), "lane.yaml", &text);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("ControlPlaneLane False (CriticalClassUnreserved)")
            && err.contains("checkout (spec.classes[0].reserved: 0)"),
        "{err}"
    );
}

#[test]
fn a_summary_shows_each_pairs_own_state_shared_pairs_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    // c and a are unplaced (Unverified with b and d); b and d share n-1.
    let classes = "  - {name: a, reserved: 1, critical: true, pods: {podSelector: {matchLabels: {app: a}}}}
  - {name: b, reserved: 1, pods: {podSelector: {matchLabels: {app: b}}}}
  - {name: c, reserved: 1, pods: {podSelector: {matchLabels: {app: c}}}}
  - {name: d, reserved: 1, pods: {podSelector: {matchLabels: {app: d}}}}
";
    let text = format!(
        "{}{}{}{}",
        bulkhead("Node", classes, ""),
        pod("b-1", "app: b", "n-1", ""),
        pod("d-1", "app: d", "n-1", ""),
        pod("c-1", "app: c", "", "")
    );
    let (code, _, err) = check_text(dir.path(), "pairs.yaml", &text);
    assert_eq!(code, 1, "{err}");
    let lines: Vec<&str> = err.lines().collect();
    let at = lines.iter().position(|l| l.contains("b: Node Shared (required)")).expect("the layer line");
    assert_eq!(lines[at + 1], "    b and d: node n-1 runs shop/b-1 and shop/d-1", "{err}");
    assert!(lines[at + 2].starts_with("    a and b (Unverified): "), "{err}");
    assert!(err.contains("… and 3 more pairs"), "{err}");
    // The unscheduled pod is named.
    assert!(err.contains("b: 1 pod not yet scheduled, left out of the placement layers: shop/c-1"), "{err}");
}

#[test]
fn an_invalid_spec_prints_its_errors_and_nothing_that_looks_planned() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A ceiling above floor plus surplus passes the schema; the planner refuses it.
    let text = bulkhead(
        "Node",
        &TWO_BY_APP.replace("name: reports, reserved: 10", "name: reports, reserved: 10, ceiling: 500"),
        "",
    );
    let (code, _, err) = check_text(dir.path(), "invalid.yaml", &text);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("b: invalid:"), "{err}");
    for planned in ["Funded", "ControlPlaneLane", "Node ", "note:"] {
        assert!(!err.contains(planned), "{planned}: {err}");
    }
    let f = dir.path().join("invalid.yaml");
    let (code, _, err) = run(&["plan", "-f", f.to_str().expect("path")], None);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("Ready False (InvalidSpec)"), "{err}");
    assert!(!err.contains("Funded") && !err.contains("would "), "{err}");
}

#[test]
fn a_vacuous_pass_and_unusable_surplus_are_said() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = bulkhead("", TWO_BY_APP, "");
    let (code, _, err) = check_text(dir.path(), "vacuous.yaml", &text);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("note: spec.layers is empty, so no layer is required to be Separate"), "{err}");
    // Surplus 80; each class may borrow only 5 over its floor: 70 can never be used.
    let classes = TWO_BY_APP.replace("reserved: 10,", "reserved: 10, ceiling: 15,");
    let (code, _, err) = check_text(dir.path(), "unusable.yaml", &bulkhead("Node", &classes, ""));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("note: 70 of the shared surplus of 80 can never be used"), "{err}");
}

#[test]
fn a_sharded_node_layer_is_not_advised_node_groups() {
    let (code, _, err) =
        run(&["check", "-f", "examples/offline/eight-nodes.yaml", "-f", "examples/shuffle-sharding.yaml"], None);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("next: shuffle sharding shares nodes between tenants by design"), "{err}");
    assert!(!err.contains("node groups, or pod anti-affinity"), "{err}");
}

#[test]
fn shard_bounds_its_work_and_its_output() {
    // Each refused at once, the flag named (a shard size of 500,000 once ran past 60 s).
    for (args, flag) in [
        (["--nodes", "1000000", "--shard-size", "2", "--tenants", "10"], "--nodes"),
        (["--nodes", "1000", "--shard-size", "500", "--tenants", "10"], "--shard-size"),
        (["--nodes", "8", "--shard-size", "2", "--tenants", "18446744073709551615"], "--tenants"),
    ] {
        let started = std::time::Instant::now();
        let mut all = vec!["shard"];
        all.extend(args);
        let (code, out, err) = run(&all, None);
        assert_eq!(code, 3, "{args:?}: {out}{err}");
        assert!(err.starts_with(&format!("error: {flag}: ")), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "{args:?}");
    }
    // The largest input it takes: C(N, K) in scientific notation, the columns apart.
    let (code, out, err) = run(&["shard", "--nodes", "100000", "--shard-size", "64", "--tenants", "1000000000"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("distinct shards") && out.contains("e") && out.contains("(a number of "), "{out}");
    assert!(out.lines().all(|l| l.len() < 200), "{out}");
    let shared = out.lines().find(|l| l.starts_with("shared ")).expect("the shared row");
    let cells: Vec<&str> = shared.split_whitespace().collect();
    assert_eq!(cells, ["shared", "999,999,999", "0", "0"], "shared is T - 1 exactly, in columns of its own: {out}");
}

#[test]
fn two_bulkheads_injecting_one_workload_are_told_apart_offline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let one = |name: &str, created: &str| {
        format!(
            "---\napiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: {name}, creationTimestamp: \"{created}\"}}\nspec:\n  dimension: Dependency\n  pool: {{resource: requests, capacity: 100}}\n  workload:\n    namespace: shop\n    selector: {{matchLabels: {{app: api}}}}\n    proxy: {{mode: Ingress, port: 8081, upstreamPort: 8080}}\n  classes:\n  - {{name: a, reserved: 10, critical: true}}\n  - {{name: b, reserved: 10}}\n"
        )
    };
    let cluster = "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop, labels: {bulkhead.dev/enabled: \"true\"}}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api, namespace: shop}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: api}}\n  template:\n    metadata: {labels: {app: api}}\n    spec: {containers: [{name: app, image: x}]}\n";
    let text = format!("{cluster}{}{}", one("young", "2026-06-01T00:00:00Z"), one("old", "2026-01-01T00:00:00Z"));
    let f = dir.path().join("two.yaml");
    std::fs::write(&f, text).expect("write");
    let (code, _, err) =
        run(&["plan", "--proxy-image", "registry.example/bulkhead:1", "-f", f.to_str().expect("path")], None);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("bulkhead old: ProxyInjected True (SidecarInjected)"), "{err}");
    assert!(
        err.contains("bulkhead young: ProxyInjected False (ProxyOfOlderBulkhead)")
            && err.contains("left Deployment shop/api to Bulkhead old"),
        "{err}"
    );
    let injected: Vec<&str> =
        err.lines().filter(|l| l.contains("would") && l.contains("Deployment shop/api")).collect();
    assert_eq!(injected.len(), 1, "one sidecar is planned: {err}");
    assert!(injected[0].starts_with("bulkhead old: "), "{err}");
}

#[test]
fn a_service_around_the_sidecar_fails_the_gate_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop, labels: {bulkhead.dev/enabled: \"true\"}}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api, namespace: shop}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: api}}\n  template:\n    metadata: {labels: {app: api}}\n    spec: {containers: [{name: app, image: x, ports: [{name: http, containerPort: 8080}]}]}\n";
    let bulkhead = "---\napiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {name: api}\nspec:\n  dimension: Dependency\n  pool: {resource: requests, capacity: 100}\n  workload:\n    namespace: shop\n    selector: {matchLabels: {app: api}}\n    proxy: {mode: Ingress, port: 8081, upstreamPort: 8080}\n  classes:\n  - {name: a, reserved: 10, critical: true}\n  - {name: b, reserved: 10}\n";
    let service = |target: &str| {
        format!("---\napiVersion: v1\nkind: Service\nmetadata: {{name: api, namespace: shop}}\nspec:\n  selector: {{app: api}}\n  ports: [{{port: 80, targetPort: {target}}}]\n")
    };
    let f = dir.path().join("bypass.yaml");
    std::fs::write(&f, format!("{cluster}{bulkhead}{}", service("http"))).expect("write");
    let image = ["--proxy-image", "registry.example/bulkhead:1"];
    let (code, _, err) = run(&[&["check", "-f", f.to_str().expect("path")][..], &image].concat(), None);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("api: Enforced False (Bypassed): Service shop/api port 80 sends to targetPort http, 8080"),
        "{err}"
    );
    std::fs::write(&f, format!("{cluster}{bulkhead}{}", service("8081"))).expect("write");
    let (code, _, err) = run(&[&["check", "-f", f.to_str().expect("path")][..], &image].concat(), None);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("Bypassed"), "{err}");
}
