//! `bulkhead plan`: what the operator would write and report, with no cluster.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use serde_json::{json, Value};

use super::Input;
use crate::{
    plan::{changes, plan},
    status::{build_status, ApplyOutcome},
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Yaml,
    Json,
}

pub struct PlanReport {
    /// A `kind: List` of the Bulkheads (status filled in) and the objects they would write.
    pub list: Value,
    /// Per Bulkhead, a line for a person: what would change.
    pub summary: Vec<String>,
    /// Some Bulkhead has spec errors.
    pub invalid: bool,
}

pub fn plan_files(input: &Input, now: &Time) -> PlanReport {
    let mut items = Vec::new();
    let mut summary = Vec::new();
    let mut invalid = false;
    for bulkhead in &input.bulkheads {
        let name = bulkhead.name_any();
        let plan = plan(bulkhead, &input.snapshot);
        let changes = changes(&name, &plan, &input.snapshot, bulkhead.spec.workload.is_some());
        let status = build_status(bulkhead, &plan, &ApplyOutcome::NotApplied, bulkhead.status.as_ref(), now);
        let mut with_status = bulkhead.clone();
        with_status.metadata.managed_fields = None;
        with_status.status = Some(status.clone());
        items.push(json!(with_status));
        items.extend(plan.config_map.iter().map(|cm| json!(cm)));
        items.extend(plan.quotas.iter().map(|rq| json!(rq)));
        invalid |= !plan.is_valid();
        for c in &status.conditions {
            summary.push(format!("bulkhead {name}: {} {} ({}): {}", c.type_, c.status, c.reason, c.message));
        }
        if changes.is_empty() {
            summary.push(format!("bulkhead {name}: nothing to change"));
        }
        for change in &changes {
            summary.push(format!("bulkhead {name}: would {change}"));
        }
    }
    PlanReport { list: json!({"apiVersion": "v1", "kind": "List", "items": items}), summary, invalid }
}
