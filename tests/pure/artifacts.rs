//! Generated and packaged artifacts stay true: the committed CRD matches the
//! Rust types, the chart lints and renders as the README says. No cluster.

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_committed_crds_match_the_rust_types() {
    for (kind, generated, file) in [
        ("Bulkhead", bulkhead::crd::crd_yaml(), "bulkhead.dev_bulkheads.yaml"),
        ("BulkheadDrill", bulkhead::crd::drill_crd_yaml(), "bulkhead.dev_bulkheaddrills.yaml"),
    ] {
        for dir in ["crds", "charts/bulkhead/crds"] {
            let path = format!("{dir}/{file}");
            let committed = std::fs::read_to_string(root().join(&path)).expect("committed CRD");
            assert!(
                committed == generated,
                "{path} drifted from the types: run `cargo run -- crd --only {kind} > {path}`"
            );
        }
    }
}

#[test]
fn the_crd_is_structural_and_describes_every_field() {
    let crd = bulkhead::crd::definition();
    let schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("schema");
    fn walk(path: &str, v: &serde_json::Value, missing: &mut Vec<String>) {
        if let Some(props) = v.get("properties").and_then(|p| p.as_object()) {
            for (name, prop) in props {
                let here = format!("{path}.{name}");
                if prop.get("description").is_none() {
                    missing.push(here.clone());
                }
                assert!(
                    prop.get("type").is_some() || prop.get("x-kubernetes-int-or-string").is_some(),
                    "{here} has no type"
                );
                assert!(
                    !matches!(prop.get("format").and_then(|f| f.as_str()), Some(f) if f.starts_with("uint")),
                    "{here} keeps a non-OpenAPI format"
                );
                walk(&here, prop, missing);
                if let Some(items) = prop.get("items") {
                    walk(&here, items, missing);
                }
            }
        }
    }
    let mut missing = Vec::new();
    walk("", &schema["openAPIV3Schema"]["properties"]["spec"], &mut missing);
    assert!(missing.is_empty(), "fields without a description (kubectl explain shows nothing): {missing:?}");
    let drill = bulkhead::crd::drill_definition();
    let drill = serde_json::to_value(&drill.spec.versions[0].schema).expect("schema");
    walk("", &drill["openAPIV3Schema"]["properties"]["spec"], &mut missing);
    walk("", &drill["openAPIV3Schema"]["properties"]["status"], &mut missing);
    assert!(missing.is_empty(), "BulkheadDrill fields without a description: {missing:?}");
    let classes = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["classes"];
    assert_eq!(classes["x-kubernetes-list-type"], "map");
    assert_eq!(classes["x-kubernetes-list-map-keys"], serde_json::json!(["name"]));
    let text = serde_json::to_string(&schema).expect("json");
    assert!(!text.contains("x-kubernetes-validations"), "CEL rules are not enforced by the 1.20 test server");
    // An optional enum's null value makes the API server refuse the whole CRD.
    for yaml in [bulkhead::crd::crd_yaml(), bulkhead::crd::drill_crd_yaml()] {
        assert!(!yaml.lines().any(|l| l.trim() == "- null"), "an enum lists null");
    }
}

fn helm(args: &[&str]) -> String {
    crate::chart_support::helm(3, args)
}

#[test]
fn the_chart_lints_strictly() {
    let out = helm(&["lint"]);
    assert!(out.contains("0 chart(s) failed"), "{out}");
}

#[test]
fn the_chart_runs_the_operator_locked_down_with_least_privilege() {
    let rendered = helm(&["template"]);
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&rendered).expect("rendered YAML");
    let kind = |k: &str| docs.iter().find(|d| d["kind"].as_str() == Some(k)).unwrap_or_else(|| panic!("no {k}"));
    let deployment = kind("Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let sc = &container["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(sc["capabilities"]["drop"][0].as_str(), Some("ALL"));
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"].as_str(), Some("RuntimeDefault"));
    assert_eq!(container["args"][0].as_str(), Some("run"));

    // Every verb the code uses and none it does not: writes only where it writes
    // (cluster-wide; Events are granted in one namespace: tests/charts/chart.rs).
    // The operator's own ClusterRole: the one its binding names (the
    // aggregated view/edit roles are for people: tests/charts/chart.rs).
    let bound = kind("ClusterRoleBinding")["roleRef"]["name"].as_str().expect("roleRef");
    let role = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("ClusterRole") && d["metadata"]["name"].as_str() == Some(bound))
        .expect("the bound ClusterRole");
    let mut writes = Vec::new();
    for rule in role["rules"].as_array().expect("rules") {
        let verbs: Vec<&str> = rule["verbs"].as_array().expect("verbs").iter().filter_map(|v| v.as_str()).collect();
        assert!(!verbs.contains(&"*"), "no wildcard verbs");
        for r in rule["resources"].as_array().expect("resources") {
            let r = r.as_str().expect("resource");
            assert_ne!(r, "*", "no wildcard resources");
            if verbs.iter().any(|v| matches!(*v, "create" | "update" | "patch" | "delete")) {
                writes.push(r.to_string());
            }
        }
    }
    writes.sort();
    writes.dedup();
    assert_eq!(
        writes,
        vec![
            "bulkheaddrills/status",
            "bulkheads",
            "bulkheads/finalizers",
            "bulkheads/status",
            "configmaps",
            "deployments",
            "networkpolicies",
            "nodes",
            "pods",
            "priorityclasses",
            "resourcequotas",
            "statefulsets",
            "validatingwebhookconfigurations"
        ]
    );
}

/// What `kubectl explain bulkhead` and `kubectl get` show a user: no names
/// from the code, every condition type, whole numbers as integers, and the
/// columns an on-call engineer looks for first.
#[test]
fn explain_text_and_columns_speak_to_users() {
    let yaml = bulkhead::crd::crd_yaml();
    let crd: serde_json::Value = serde_saphyr::from_str(&yaml).expect("CRD YAML");
    let mut descriptions = Vec::new();
    fn collect(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(map) => {
                if let Some(d) = map.get("description").and_then(|d| d.as_str()) {
                    out.push(d.to_string());
                }
                map.values().for_each(|v| collect(v, out));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| collect(v, out)),
            _ => {}
        }
    }
    collect(&crd["spec"]["versions"][0]["schema"], &mut descriptions);
    let constant = regex::Regex::new(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b").expect("regex");
    for d in &descriptions {
        assert!(!constant.is_match(d), "a code constant in the explain text: {d:?}");
    }
    let status = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
    let conditions = status["conditions"]["description"].as_str().expect("conditions description");
    for t in bulkhead::status::CONDITION_TYPES {
        assert!(conditions.contains(t), "status.conditions does not name {t}: {conditions:?}");
    }
    let pairs = status["layers"]["items"]["properties"]["pairs"]["description"].as_str().expect("pairs description");
    assert!(pairs.contains(&format!("at most {}", bulkhead::crd::MAX_PAIRS_LISTED)), "{pairs:?}");
    let float_bound = regex::Regex::new(r"(?m)^\s*(minimum|maximum): -?[0-9]+\.0$").expect("regex");
    assert!(!float_bound.is_match(&yaml), "a whole bound written as a float");
    assert!(yaml.contains("maximum: 4294967295\n"), "u32 bounds are still there, as integers");

    let version = &crd["spec"]["versions"][0];
    let columns: Vec<(&str, i64)> = version["additionalPrinterColumns"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| (c["name"].as_str().expect("name"), c["priority"].as_i64().unwrap_or(0)))
        .collect();
    assert!(columns.contains(&("Isolated", 0)), "{columns:?}");
    assert!(columns.contains(&("Message", 1)), "{columns:?}");
    assert!(columns.contains(&("Sized", 1)), "{columns:?}");
    assert_eq!(crd["spec"]["names"]["categories"], serde_json::json!(["bulkhead-dev"]));
}
