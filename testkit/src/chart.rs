//! The chart rendered by real Helm 3 and 4 (tests/helm), and the metric
//! names the operator and the proxy really export: shared by tests/charts/chart.rs,
//! tests/charts/dashboard.rs and tests/pure/artifacts.rs.

use std::{collections::BTreeMap, process::Command, sync::Arc};

use bulkhead::{controller::Metrics, pool_config::PoolConfig, proxy};
use promql_parser::parser::{Expr, VectorSelector};
use promql_parser::util::ExprVisitor;
use serde_json::Value;

/// The stdout of a finished command; panics with both outputs, naming
/// `what`, if it failed. Every Helm runner of the tests ends here.
pub fn stdout_or_panic(what: &str, out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs tests/helm ARGS with Helm `major`; panics with its output on failure.
pub fn helm(major: u8, args: &[&str]) -> String {
    stdout_or_panic(&format!("tests/helm {} (Helm {major})", args.join(" ")), helm_output(major, args))
}

pub fn helm_output(major: u8, args: &[&str]) -> std::process::Output {
    Command::new(crate::repo_root().join("tests/helm"))
        .arg(args[0])
        .args(["--major", &major.to_string()])
        .args(&args[1..])
        .output()
        .expect("tests/helm runs")
}

pub fn render(major: u8, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["template"];
    all.extend_from_slice(args);
    let rendered = helm(major, &all);
    // Empty documents (a template that renders nothing) are skipped.
    serde_saphyr::from_multiple(&rendered).expect("rendered YAML")
}

pub fn find<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"].as_str() == Some(kind)).collect()
}

/// Sample names of an exposition, with the labels each carries.
fn names(exposition: &str, into: &mut BTreeMap<String, Vec<String>>) {
    for line in exposition.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (series, _) = line.rsplit_once(' ').expect("sample line");
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let labels =
            labels.trim_end_matches('}').split(',').filter_map(|kv| kv.split_once('=')).map(|(k, _)| k.to_string());
        into.entry(name.to_string()).or_default().extend(labels);
    }
}

/// Metric names a selector may use, with the labels each sample carries:
/// from the exposition of the operator's Metrics with one series in every family.
pub fn exported() -> BTreeMap<String, Vec<String>> {
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
    let spec: bulkhead::crd::BulkheadSpec = serde_saphyr::from_str(
        "dimension: Tenant\npool: {resource: c, capacity: 10}\nclasses: [{name: a, reserved: 1}]\nlayers: [Node]",
    )
    .expect("spec");
    m.record_plan("bh", &bulkhead::plan::plan_capacity(&spec, None).0);
    let layer: bulkhead::crd::LayerStatus =
        serde_json::from_value(serde_json::json!({"name": "Node", "required": true, "state": "Shared"}))
            .expect("layer");
    m.record_layers("bh", [&layer]);
    m.evaluations_reused.inc();
    m.plans_reused.inc();
    m.record_analysis("advised", std::time::Duration::from_millis(40));
    let mut out = BTreeMap::new();
    names(&m.encode(), &mut out);
    out
}

/// The same for a proxy that admitted, rejected and reloaded.
pub fn exported_by_proxy() -> BTreeMap<String, Vec<String>> {
    let config: PoolConfig = serde_json::from_value(serde_json::json!({
        "version": bulkhead::pool_config::POOL_CONFIG_VERSION, "bulkhead": "shop", "resource": "connections",
        "scope": "Instance", "dividedBy": 1, "capacity": 3, "sharedSurplus": 1, "onCeiling": "reject",
        "classes": [{"name": "checkout", "reserved": 2, "ceiling": 3, "critical": false}],
    }))
    .expect("pool config");
    let pool = proxy::Pool::new(config, proxy::Unclassified::Reject).expect("valid pool");
    let metrics = proxy::ProxyMetrics::new(Arc::clone(&pool));
    let held: Vec<_> = (0..3).map(|_| pool.admit(Some(b"checkout")).expect("room")).collect();
    assert!(pool.admit(Some(b"checkout")).is_err(), "past the ceiling");
    drop(held);
    metrics.reload("applied");
    metrics.applied_now();
    let mut out = BTreeMap::new();
    names(&metrics.encode(), &mut out);
    out
}

/// Every vector and matrix selector of an expression.
#[derive(Default)]
pub struct Selectors(pub Vec<VectorSelector>);

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
