//! `bulkhead plan`: what the operator would write and report, with no cluster.

use kube::ResourceExt;
use serde_json::{json, Value};

use super::evaluate::Evaluation;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Yaml,
    Json,
}

pub struct PlanReport {
    /// A `kind: List` of the Bulkheads (status filled in) and the objects they would write.
    pub list: Value,
    /// Per Bulkhead, lines for a person: conditions and what would change.
    pub summary: Vec<String>,
    /// Some Bulkhead has spec errors.
    pub invalid: bool,
}

pub fn plan_report(evaluations: &[Evaluation]) -> PlanReport {
    let mut items = Vec::new();
    let mut summary = Vec::new();
    let mut invalid = false;
    for e in evaluations {
        let name = e.bulkhead.name_any();
        items.push(json!(e.bulkhead));
        items.extend(e.plan.config_map.iter().map(|cm| json!(cm)));
        items.extend(e.plan.quotas.iter().map(|rq| json!(rq)));
        invalid |= !e.plan.is_valid();
        for c in e.bulkhead.status.iter().flat_map(|s| &s.conditions) {
            summary.push(format!("bulkhead {name}: {} {} ({}): {}", c.type_, c.status, c.reason, c.message));
        }
        if e.changes.is_empty() {
            summary.push(format!("bulkhead {name}: nothing to change"));
        }
        for change in &e.changes {
            summary.push(format!("bulkhead {name}: would {change}"));
        }
    }
    PlanReport { list: json!({"apiVersion": "v1", "kind": "List", "items": items}), summary, invalid }
}
