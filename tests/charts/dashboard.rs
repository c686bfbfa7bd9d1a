//! The Grafana dashboard shipped in the chart: the ConfigMap is optional and
//! carries the sidecar's label, the JSON parses, every PromQL expression
//! parses as Prometheus would parse it, and every metric it selects is one
//! the operator or the proxy really exports, with the labels it matches on.

use std::collections::BTreeMap;

use crate::chart_support::{self, exported, exported_by_proxy, find, render, Selectors};
use promql_parser::util::walk_expr;

/// Labels Prometheus adds to every target, not in any exposition.
const TARGET_LABELS: [&str; 5] = ["namespace", "pod", "container", "instance", "job"];

/// Grafana's interval variables, as Grafana substitutes them before a query.
fn substitute(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m").replace("$__interval", "30s").replace("$__range", "1h")
}

/// Every problem with one expression: does not parse, selects nothing, or
/// selects a metric or label nobody exports.
fn problems(expr: &str, metrics: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let parsed = match promql_parser::parser::parse(&substitute(expr)) {
        Ok(p) => p,
        Err(e) => return vec![format!("{expr}: {e}")],
    };
    let mut selectors = Selectors::default();
    walk_expr(&mut selectors, &parsed).expect("walk");
    if selectors.0.is_empty() {
        return vec![format!("{expr} selects no metric")];
    }
    let mut found = Vec::new();
    for vs in &selectors.0 {
        let Some(name) = vs.name.as_deref() else {
            found.push(format!("{expr}: a selector without a metric name"));
            continue;
        };
        let Some(labels) = metrics.get(name) else {
            found.push(format!("{expr}: {name} is exported by neither the operator nor the proxy"));
            continue;
        };
        for m in &vs.matchers.matchers {
            if !labels.contains(&m.name) && !TARGET_LABELS.contains(&m.name.as_str()) {
                found.push(format!("{expr}: {name} has no label {}", m.name));
            }
        }
    }
    found
}

fn all_metrics() -> BTreeMap<String, Vec<String>> {
    let mut metrics = exported();
    for (name, labels) in exported_by_proxy() {
        metrics.entry(name).or_default().extend(labels);
    }
    metrics
}

#[test]
fn the_dashboard_parses_and_queries_only_exported_metrics() {
    assert!(find(&render(3, &[]), "ConfigMap").is_empty(), "off by default");
    let typo = chart_support::helm_output(3, &["template", "--set", "grafanaDashboard.enable=true"]);
    assert!(!typo.status.success(), "an unknown key is refused, not ignored");
    let docs = render(3, &["--set", "grafanaDashboard.enabled=true", "--set", "grafanaDashboard.namespace=monitoring"]);
    let map = find(&docs, "ConfigMap")[0];
    assert_eq!(map["metadata"]["labels"]["grafana_dashboard"].as_str(), Some("1"));
    assert_eq!(map["metadata"]["namespace"].as_str(), Some("monitoring"));
    let text = map["data"]["bulkhead.json"].as_str().expect("bulkhead.json");
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let file = std::fs::read_to_string(root.join("charts/bulkhead/dashboards/bulkhead.json")).expect("dashboard file");
    assert_eq!(text, file.trim_end(), "the ConfigMap carries the file as it is");
    let dashboard: serde_json::Value = serde_json::from_str(text).expect("the dashboard is JSON");
    assert!(dashboard["uid"].as_str().is_some_and(|u| !u.is_empty()) && dashboard["title"].is_string());

    let metrics = all_metrics();
    let mut exprs = Vec::new();
    let mut ids = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        ids.push(panel["id"].as_u64().expect("panel id"));
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().expect("expr").to_string());
        }
    }
    let unique: std::collections::BTreeSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "panel ids are unique");
    assert!(exprs.len() >= 20, "{} expressions", exprs.len());
    let problems: Vec<String> = exprs.iter().flat_map(|e| problems(e, &metrics)).collect();
    assert!(problems.is_empty(), "{problems:#?}");
    // Both the operator and the proxies are on it.
    assert!(exprs.iter().any(|e| e.contains("bulkhead_reconciles_total")));
    assert!(exprs.iter().any(|e| e.contains("bulkhead_proxy_rejected_total")));
    // Each class's use against its reservation, one Bulkhead's classes apart from another's.
    assert!(
        exprs.iter().any(|e| e.contains("sum by (bulkhead, class) (bulkhead_proxy_in_flight")
            && e.contains("/ sum by (bulkhead, class) (bulkhead_proxy_class_reserved")),
        "no per-class use against reservation"
    );
    assert!(exprs.iter().any(|e| e.contains(r#"condition="Sized""#)), "no Sized panel");

    // Template variables read label values of exported metrics.
    let label_values = regex::Regex::new(r"^label_values\((\w+), (\w+)\)$").expect("regex");
    for variable in dashboard["templating"]["list"].as_array().expect("templating") {
        let Some(query) = variable["query"]["query"].as_str() else { continue };
        let caps = label_values.captures(query).unwrap_or_else(|| panic!("unexpected variable query {query}"));
        let labels = metrics.get(&caps[1]).unwrap_or_else(|| panic!("{query}: {} is not exported", &caps[1]));
        assert!(labels.iter().any(|l| *l == caps[2]) || TARGET_LABELS.contains(&&caps[2]), "{query}");
    }
}

#[test]
fn the_checks_catch_a_bad_expression() {
    let metrics = all_metrics();
    assert_eq!(problems("sum(rate(bulkhead_reconciles_total[$__rate_interval]))", &metrics), Vec::<String>::new());
    for bad in [
        "sum(rate(bulkhead_reconciles_total[5m]",
        "bulkhead_no_such_metric",
        "bulkhead_reconciles_total{verb=\"x\"}",
        "vector(1)",
    ] {
        assert!(!problems(bad, &metrics).is_empty(), "{bad} passed");
    }
}
