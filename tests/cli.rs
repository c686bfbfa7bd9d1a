//! The offline CLI as a user runs it: `bulkhead plan` and `bulkhead crd`, with
//! no cluster.

use std::process::Command;

fn bulkhead(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_bulkhead"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("bulkhead runs");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
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
    let funded = bh["status"]["conditions"].as_array().expect("conditions").iter().find(|c| c["type"] == "Funded").expect("Funded");
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
    let (code, out, err) = bulkhead(&["plan", "-f", list.to_str().expect("path"), "-f", "examples/control-plane-lane.yaml"]);
    assert_eq!(code, 0, "{err}");
    let list: serde_yaml::Value = serde_yaml::from_str(&out).expect("YAML");
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
