//! `bulkhead check` as a CI gate: odd object sets, arithmetic at the limits,
//! validation as strict as the API server's, input handling and exit codes.
//! Each test is a case that once gave a wrong verdict or a misleading code.

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use crate::bin::run;

fn check_text(dir: &Path, text: &str) -> (i32, String, String) {
    let f = write(dir, "input.yaml", text);
    run(&["check", "-f", f.to_str().expect("path")], None)
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let f = dir.join(name);
    std::fs::write(&f, text).expect("write");
    f
}

/// Two classes with their own pods, the Node layer required.
const PLACED: &str = "apiVersion: bulkhead.dev/v1alpha1
kind: Bulkhead
metadata: {name: placed}
spec:
  dimension: Dependency
  layers: [Node]
  pool: {resource: connections, capacity: 100}
  classes:
  - {name: checkout, reserved: 10, critical: true, pods: {podSelector: {matchLabels: {app: checkout}}}}
  - {name: reports, reserved: 10, pods: {podSelector: {matchLabels: {app: reports}}}}
---
apiVersion: v1
kind: Namespace
metadata: {name: shop}
";

fn pod(metadata: &str, app: &str, node: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{{metadata}, namespace: shop, labels: {{app: {app}}}}}\nspec: {{nodeName: {node:?}, containers: [{{name: c, image: x}}]}}\n"
    )
}

#[test]
fn pods_with_only_generate_name_stay_distinct() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "{PLACED}{}{}",
        pod("generateName: worker-", "checkout", "n-1"),
        pod("generateName: worker-", "reports", "n-1")
    );
    let (code, _, err) = check_text(dir.path(), &text);
    assert_eq!(code, 1, "both pods run on n-1: {err}");
    assert!(err.contains("placed: Node Shared (required)"), "{err}");
    assert!(err.contains("worker-<"), "the made-up names say where the pods were read: {err}");
}

#[test]
fn two_different_objects_with_one_name_are_refused_naming_both_places() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The second reports-1 would hide that the first shares n-1 with checkout-1.
    let text = format!(
        "{PLACED}{}{}{}",
        pod("name: checkout-1", "checkout", "n-1"),
        pod("name: reports-1", "reports", "n-1"),
        pod("name: reports-1", "reports", "n-2")
    );
    let (code, _, err) = check_text(dir.path(), &text);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("input.yaml: document 5: Pod shop/reports-1 appears twice")
            && err.contains("also at")
            && err.contains("input.yaml: document 4"),
        "{err}"
    );
    // The same object twice (a file passed twice) changes nothing and is accepted.
    let f = write(dir.path(), "pods.yaml", &text[..text.rfind("---").expect("last pod")]);
    let (code, _, err) = run(&["check", "-f", f.to_str().expect("path"), "-f", f.to_str().expect("path")], None);
    assert_eq!(code, 1, "{err}");
}

#[test]
fn two_different_bulkheads_with_one_name_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let other = PLACED.replace("capacity: 100", "capacity: 300");
    let f1 = write(dir.path(), "a.yaml", PLACED);
    let f2 = write(dir.path(), "b.yaml", &other[..other.find("---").expect("the Bulkhead")]);
    let (code, _, err) = run(&["check", "-f", f1.to_str().expect("path"), "-f", f2.to_str().expect("path")], None);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("b.yaml: document 1: Bulkhead placed appears twice") && err.contains("a.yaml"), "{err}");
}

#[test]
fn a_namespaced_object_without_a_namespace_is_refused() {
    // Left in no namespace, reports-1 would match no class and the Node layer
    // would look Separate (only checkout-1 and reports-2 on different nodes).
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "{PLACED}{}{}{}",
        pod("name: checkout-1", "checkout", "n-1"),
        pod("name: reports-2", "reports", "n-2"),
        pod("name: reports-1", "reports", "n-1").replace(", namespace: shop", "")
    );
    let (code, _, err) = check_text(dir.path(), &text);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("document 5: metadata.namespace: missing: a Pod lives in a namespace"), "{err}");
}

#[test]
fn an_empty_node_name_means_not_scheduled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!("{PLACED}{}{}", pod("name: c-1", "checkout", ""), pod("name: r-1", "reports", ""));
    let (code, _, err) = check_text(dir.path(), &text);
    assert_ne!(code, 1, "no node named \"\" is shared: {err}");
    assert!(err.contains("2 pods not yet scheduled"), "{err}");
    assert!(!err.contains("Node Shared"), "{err}");
}

#[test]
fn a_fleet_floor_that_rounds_to_zero_over_many_replicas_is_not_funded() {
    // Three Deployments of i32::MAX replicas: 6,442,450,941 in all. A sum that
    // saturated at u32::MAX would leave every class a floor of 1.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut text = "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {name: wide}\nspec:\n  dimension: Tenant\n  pool: {resource: connections, capacity: 4294967295, scope: Fleet}\n  workload: {namespace: shop, selector: {matchLabels: {app: api}}}\n  classes:\n  - {name: a, reserved: 4294967295, critical: true}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n".to_string();
    for i in 0..3 {
        text += &format!("---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: api-{i}, namespace: shop}}\nspec:\n  replicas: 2147483647\n  selector: {{matchLabels: {{app: api}}}}\n  template:\n    metadata: {{labels: {{app: api}}}}\n    spec: {{containers: [{{name: c, image: x}}]}}\n");
    }
    let f = write(dir.path(), "wide.yaml", &text);
    let (code, out, err) = run(&["check", "-f", f.to_str().expect("path"), "-o", "json"], None);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("Funded False (FloorRoundsToZero)"), "{err}");
    assert!(err.contains("over 6442450941 replicas = 0 each"), "{err}");
    let list: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(list["items"][0]["status"]["pool"]["replicas"], 6442450941u64);
}

/// A valid Bulkhead whose first class is `class` (a flow mapping); the second is `b`.
fn with_first_class(class: &str) -> String {
    format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: strict}}\nspec:\n  dimension: Tenant\n  pool: {{resource: connections, capacity: 100}}\n  classes:\n  - {class}\n  - {{name: b, reserved: 10}}\n"
    )
}

const VALID_CLASS: &str = "{name: a, reserved: 10, critical: true}";

#[test]
fn validation_is_as_strict_as_the_api_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, _, err) = check_text(dir.path(), &with_first_class(VALID_CLASS));
    assert_eq!(code, 0, "the base case is valid: {err}");
    let cases: &[(&str, &str)] = &[
        ("{name: a, reserved: 10, celing: 50}", "spec.classes[0].celing: unknown field"),
        (
            "{name: a, reserved: 10, nodes: {count: 1001, selector: {}}}",
            "spec.classes[0].nodes.count: 1001 is more than the maximum 1000",
        ),
        (
            "{name: a, reserved: 10, nodes: {count: 0, selector: {}}}",
            "spec.classes[0].nodes.count: 0 is less than the minimum 1",
        ),
        ("{name: A, reserved: 10}", "spec.classes[0].name: \"A\" does not match the pattern"),
        ("{name: a, reserved: 4294967296}", "spec.classes[0].reserved: 4294967296 is more than the maximum 4294967295"),
        ("{name: a, reserved: 1.5}", "spec.classes[0].reserved: must be of type integer, not number"),
        ("{name: a, reserved: -1}", "spec.classes[0].reserved: -1 is less than the minimum 0"),
        ("{name: a}", "spec.classes[0].reserved: required"),
        (
            "{name: a, reserved: 10, databases: [\"orders-db:5432\"]}",
            "spec.classes[0].databases[0]: \"orders-db:5432\" does not match",
        ),
        ("{name: a, reserved: 10, databases: [\"postgres://db.shop.svc:99999/x\"]}", "spec.classes[0].databases[0]"),
        (
            "{name: a, reserved: 10, antiAffinity: {topologyKey: \"not a key\"}}",
            "spec.classes[0].antiAffinity.topologyKey",
        ),
        (
            "{name: a, reserved: 10, pods: {podSelector: {matchExpressions: [{key: app, operator: In, valuez: [x]}]}}}",
            "spec.classes[0].pods.podSelector.matchExpressions[0].valuez: unknown field",
        ),
        ("{name: b, reserved: 10}", "spec.classes[1]: duplicate entry with name=\"b\""),
    ];
    for (class, expected) in cases {
        let (code, out, err) = check_text(dir.path(), &with_first_class(class));
        assert_eq!(code, 3, "{class}: {err}");
        assert!(out.is_empty(), "{class}: nothing is printed for refused input: {out}");
        assert!(err.contains(expected), "{class}: expected {expected:?} in {err}");
    }
    let typo = with_first_class(VALID_CLASS).replace("  pool:", "  layer: [Node]\n  pool:");
    let (code, _, err) = check_text(dir.path(), &typo);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("spec.layer: unknown field"), "{err}");
}

#[test]
fn the_planner_refuses_what_the_schema_cannot_state_with_the_field_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let class = |pods: &str, quota: &str| {
        format!(
            "{{name: a, reserved: 10, critical: true, pods: {{namespaceSelector: {{matchLabels: {{team: shop}}}}, podSelector: {pods}}}{quota}}}"
        )
    };
    let cases: Vec<(String, &str)> = vec![
        (
            class("{}", ", quota: {hard: {cpu: lots}}"),
            "spec.classes[0].quota.hard.cpu: \"lots\" is not a non-negative Kubernetes quantity",
        ),
        (class("{}", ", quota: {hard: {cpu: \"-1\"}}"), "spec.classes[0].quota.hard.cpu"),
        (class("{}", ", quota: {hard: {\"not a resource\": \"1\"}}"), "is not a resource name"),
        (
            class("{matchLabels: {\"bad key!\": x}}", ""),
            "spec.classes[0].pods.podSelector.matchLabels: \"bad key!\" is not a valid label key",
        ),
        (class("{matchLabels: {app: \"-bad\"}}", ""), "spec.classes[0].pods.podSelector.matchLabels.app"),
        (
            class("{matchExpressions: [{key: app, operator: In, values: [\"a b\"]}]}", ""),
            "spec.classes[0].pods.podSelector.matchExpressions[0].values[0]",
        ),
    ];
    for (first, expected) in &cases {
        let (code, _, err) = check_text(dir.path(), &with_first_class(first));
        assert_eq!(code, 3, "{first}: {err}");
        assert!(err.contains(expected), "{first}: expected {expected:?} in {err}");
    }
}

#[test]
fn a_bulkhead_of_another_api_group_is_not_ours() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = with_first_class(VALID_CLASS).replace("bulkhead.dev/v1alpha1", "example.com/v1");
    let (code, _, err) = check_text(dir.path(), &text);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("note:") && err.contains("ignored Bulkhead of apiVersion example.com/v1"), "{err}");
    assert!(err.contains("error: no Bulkhead in"), "{err}");
    let text = with_first_class(VALID_CLASS).replace("bulkhead.dev/v1alpha1", "bulkhead.dev/v2");
    let (code, _, err) = check_text(dir.path(), &text);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("apiVersion: bulkhead.dev/v2 is not served"), "{err}");
}

#[test]
fn directories_stdin_and_a_byte_order_mark_are_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!("{PLACED}{}{}", pod("name: c-1", "checkout", "n-1"), pod("name: r-1", "reports", "n-2"));
    let (bulkhead, rest) = text.split_at(text.find("---").expect("split"));
    let sub = dir.path().join("manifests");
    std::fs::create_dir(&sub).expect("mkdir");
    write(&sub, "b-cluster.yml", rest);
    write(&sub, "a-bulkhead.json.yaml", &format!("\u{feff}{bulkhead}"));
    write(&sub, "ignored.txt", "not: read");
    let (code, _, err) = run(&["check", "-f", sub.to_str().expect("path")], None);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("placed: Node Separate (required)"), "{err}");

    let (code, _, err) = run(&["check", "-f", "-"], Some(text.as_bytes()));
    assert_eq!(code, 0, "{err}");
    let (code, _, err) =
        run(&["check", "-f", "-", "-f", sub.join("b-cluster.yml").to_str().expect("path")], Some(bulkhead.as_bytes()));
    assert_eq!(code, 0, "{err}");

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let (code, _, err) = run(&["check", "-f", empty.to_str().expect("path")], None);
    assert_eq!(code, 3);
    assert!(err.contains("no .yaml, .yml or .json files"), "{err}");
}

#[test]
fn input_beyond_the_limits_is_refused_at_once() {
    // /dev/zero never ends: the read stops at the limit.
    let (code, _, err) = run(&["check", "-f", "/dev/zero"], None);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("more than 16777216 bytes of input"), "{err}");

    // 200 KB of `[` once took the YAML parser 40 s.
    let dir = tempfile::tempdir().expect("tempdir");
    let f = write(dir.path(), "deep.yaml", &"[".repeat(200_000));
    let started = Instant::now();
    let (code, _, err) = run(&["check", "-f", f.to_str().expect("path")], None);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("nested more than 64 levels deep at line 1 column 65"), "{err}");
    // Not a timing test: a bound a thousand times the expected time, so a hang fails.
    assert!(started.elapsed() < Duration::from_secs(20));

    // Block nesting is bounded too (the parser's own limit is 128).
    let block: String = (0..100).map(|i| format!("{}k{i}:\n", "  ".repeat(i))).collect();
    let f = write(dir.path(), "block.yaml", &block);
    let (code, _, err) = run(&["check", "-f", f.to_str().expect("path")], None);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("nested more than 64 levels deep"), "{err}");

    // `- - - - …` on one line is block nesting: it once took gigabytes.
    let f = write(dir.path(), "dashes.yaml", &"- ".repeat(100_000));
    let (code, _, err) = run(&["check", "-f", f.to_str().expect("path")], None);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("indented more than 256 columns (nested too deep) at line 1"), "{err}");

    // Many values: refused from the text, before parsing.
    let f = write(dir.path(), "wide.yaml", &format!("[{}1]", "1,".repeat(2_000_001)));
    let (code, _, err) = run(&["check", "-f", f.to_str().expect("path")], None);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("more than 2000000 values in all"), "{err}");

    // One object with very many values (each `{}` would decode into a whole Container).
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: shop}}\nspec: {{containers: [{}{{}}]}}\n",
        "{},".repeat(100_000)
    );
    let (code, _, err) = check_text(dir.path(), &pod);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("more than 100000 values in one object"), "{err}");

    // Brackets inside quoted strings and comments are not nesting.
    let quoted = with_first_class(VALID_CLASS).replace(
        "metadata: {name: strict}",
        &format!(
            "metadata:\n  name: strict\n  annotations:\n    a: \"{}\\\"\"\n    b: '{}'''\n    c: it's [fine]\n# {}",
            "[".repeat(100),
            "{".repeat(100),
            "[".repeat(100)
        ),
    );
    let (code, _, err) = check_text(dir.path(), &quoted);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn what_the_pre_scan_lets_through_the_parser_s_budgets_still_refuse_naming_the_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    // One space per level: 200 levels within the scan's 256 columns.
    let steps: String = (0..200).map(|i| format!("{}k{i}:\n", " ".repeat(i))).collect();
    let (code, _, err) = check_text(dir.path(), &steps);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("document 1: nested more than 64 levels deep at line 129"), "{err}");

    // An alias bomb: ten anchors of ten aliases each, 10^10 values once expanded.
    let mut bomb = String::from("apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: shop}\nspec:\n  x:\n");
    bomb.push_str("    a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10u8 {
        let (name, prev) = ((b'a' + i) as char, (b'a' + i - 1) as char);
        bomb.push_str(&format!("    {name}: &{name} [{}]\n", vec![format!("*{prev}"); 10].join(", ")));
    }
    let started = Instant::now();
    let (code, _, err) = check_text(dir.path(), &bomb);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("aliases (*name) expand to more than 100000 values"), "{err}");
    // Not a timing test: a bound far above the expected time, so a hang fails.
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn errors_name_the_document_a_reader_counts_empty_ones_included() {
    let dir = tempfile::tempdir().expect("tempdir");
    let namespace = "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n";
    // An empty document between two: the Pod is the third.
    let text = format!("{namespace}---\n---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\n");
    let (code, _, err) = check_text(dir.path(), &text);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("document 3: metadata.namespace: missing"), "{err}");
    // A syntax error names its document, line and column.
    let (code, _, err) = check_text(dir.path(), &format!("# a comment\n{namespace}---\nkind: [1, 2\n"));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("document 2: not YAML: unclosed bracket '[' at line 6, column 7"), "{err}");
}

#[test]
fn usage_errors_exit_3_never_2() {
    for args in [
        &["check"][..],
        &["check", "-f", "examples/four-dependencies.yaml", "-o", "JSON"],
        &["plan", "--no-such-flag"],
        &["check", "-f"],
        &["no-such-command"],
        &[],
    ] {
        let (code, _, err) = run(args, None);
        assert_eq!(code, 3, "{args:?}: {err}");
        assert!(!err.is_empty(), "{args:?}: a usage error says why");
    }
    let (code, out, _) = run(&["check", "--help"], None);
    assert_eq!(code, 0);
    assert!(out.contains("Usage: bulkhead check"), "{out}");
}
