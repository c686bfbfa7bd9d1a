//! `bulkhead plan`: what the operator would write and report, with no cluster.

use kube::ResourceExt;
use serde_json::{json, Value};

use super::evaluate::Evaluated;
use crate::{
    plan::{claim_key, Plan, CLAIM_EFFECT},
    status::READY,
};

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

pub fn plan_report(evaluations: &[Evaluated]) -> PlanReport {
    let mut items = Vec::new();
    let mut summary = Vec::new();
    let mut invalid = false;
    for e in evaluations {
        let name = e.bulkhead.name_any();
        items.push(json!(e.bulkhead));
        items.extend(e.plan.config_map.iter().map(|cm| json!(cm)));
        items.extend(e.plan.quotas.iter().map(|rq| json!(rq)));
        items.extend(e.plan.network_policy.policy.iter().map(|np| json!(np)));
        items.extend(e.plan.priority_classes.iter().map(|pc| json!(pc)));
        items.extend(claimed_nodes(&name, &e.plan));
        // Workload patches are partial objects: exactly what would be server-side applied.
        items.extend(e.plan.placement.iter().flat_map(|p| &p.workloads).map(|w| w.body.clone()));
        items.extend(e.plan.proxy.injections.iter().map(|i| i.body.clone()));
        if !e.plan.is_valid() {
            // Nothing is planned for an invalid spec: Ready names the fields, and the rest would only look planned.
            invalid = true;
            let ready = e.bulkhead.status.iter().flat_map(|s| &s.conditions).filter(|c| c.type_ == READY);
            for c in ready {
                summary.push(format!("bulkhead {name}: {} {} ({}): {}", c.type_, c.status, c.reason, c.message));
            }
            summary.push(format!("bulkhead {name}: nothing planned until the spec is valid"));
            continue;
        }
        for c in e.bulkhead.status.iter().flat_map(|s| &s.conditions) {
            summary.push(format!("bulkhead {name}: {} {} ({}): {}", c.type_, c.status, c.reason, c.message));
        }
        for group in &e.plan.node_groups.classes {
            summary.push(format!(
                "bulkhead {name}: class {} holds {} of {} node(s): {}",
                group.class,
                group.nodes.len(),
                group.wanted,
                if group.nodes.is_empty() { "none".to_string() } else { group.nodes.join(", ") }
            ));
        }
        for (tenant, shard) in e.plan.shards.iter().flat_map(|s| &s.shards) {
            summary.push(format!("bulkhead {name}: tenant {tenant} holds shard {}", shard.join(", ")));
        }
        if let Some(why) = &e.plan.network_policy.withheld {
            summary.push(format!("bulkhead {name}: no NetworkPolicy written: {why}"));
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

/// Each claimed node as the part of a Node the operator owns: its claim label and taint.
fn claimed_nodes(bulkhead: &str, plan: &Plan) -> Vec<Value> {
    let key = claim_key(bulkhead);
    plan.node_groups
        .classes
        .iter()
        .flat_map(|g| g.nodes.iter().map(move |n| (n, &g.class)))
        .map(|(node, class)| {
            json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node, "labels": {key.as_str(): class}},
                "spec": {"taints": [{"key": key, "value": class, "effect": CLAIM_EFFECT}]},
            })
        })
        .collect()
}
