//! `bulkhead check`: the shared-layer audit for CI pipelines and GitOps
//! review. Exit codes: 0 isolated and funded; 1 a required layer Shared or
//! the design unfundable; 2 only Unverified remains and --strict; 3 bad input
//! (files or command-line arguments: usage errors never exit 2).

use kube::ResourceExt;
use serde_json::{json, Value};

use super::evaluate::Evaluated;
use crate::{
    crd::{Layer, LayerState},
    status::{ConditionStatus, CONTROL_PLANE_LANE, FUNDED},
};

pub const EXIT_OK: u8 = 0;
pub const EXIT_SHARED_OR_UNFUNDED: u8 = 1;
pub const EXIT_UNVERIFIED_STRICT: u8 = 2;
pub const EXIT_INVALID_INPUT: u8 = 3;

/// Pairs per layer in the human summary; the output has them all.
const MAX_PAIRS_SHOWN: usize = 3;

pub struct CheckReport {
    pub list: Value,
    /// What a person reads on stderr.
    pub summary: Vec<String>,
    pub exit: u8,
}

pub fn check_report(evaluations: &[Evaluated], strict: bool) -> CheckReport {
    let mut summary = Vec::new();
    let (mut failed, mut unverified, mut invalid) = (false, false, false);
    for e in evaluations {
        let name = e.bulkhead.name_any();
        let Some(status) = &e.bulkhead.status else { continue };
        if !e.plan.is_valid() {
            invalid = true;
            for err in &e.plan.errors {
                summary.push(format!("{name}: invalid: {err}"));
            }
        }
        if !e.plan.capacity.funding.is_funded() {
            failed = true;
        }
        for c in status.conditions.iter().filter(|c| c.type_ == FUNDED || c.type_ == CONTROL_PLANE_LANE) {
            if ConditionStatus::of(c) != Some(ConditionStatus::True) {
                summary.push(format!("{name}: {} {} ({}): {}", c.type_, c.status, c.reason, c.message));
            }
        }
        if let (crate::crd::Scope::Instance, Some(fleet)) = (e.plan.capacity.scope, e.plan.capacity.fleet_capacity) {
            if e.plan.capacity.replicas.is_some_and(|r| r.current > 1) {
                summary.push(format!(
                    "{name}: note: per-replica limits multiply: {} {} per replica across the fleet is {fleet}; \
                     make sure what is behind the pool accepts that many",
                    e.plan.capacity.capacity, e.bulkhead.spec.pool.resource
                ));
            }
        }
        for layer in &status.layers {
            let required = if layer.required { "required" } else { "not required" };
            summary.push(format!("{name}: {:?} {:?} ({required})", layer.name, layer.state));
            for pair in layer.pairs.iter().take(MAX_PAIRS_SHOWN) {
                summary.push(format!(
                    "    {} and {}: {}",
                    pair.classes.first().map(String::as_str).unwrap_or_default(),
                    pair.classes.get(1).map(String::as_str).unwrap_or_default(),
                    pair.evidence.join("; ")
                ));
            }
            let more = layer.pairs.len().saturating_sub(MAX_PAIRS_SHOWN) + layer.unlisted_pairs as usize;
            if more > 0 {
                summary.push(format!("    … and {more} more pairs"));
            }
            if layer.required && layer.state != LayerState::Separate {
                summary.push(format!("    next: {}", advice(layer.name, layer.state)));
            }
            match (layer.required, layer.state) {
                (true, LayerState::Shared) => failed = true,
                (true, LayerState::Unverified) => unverified = true,
                _ => {}
            }
        }
        if let Some(unscheduled) = e.audit.as_ref().map(|a| a.unscheduled).filter(|n| *n > 0) {
            summary.push(format!("{name}: {unscheduled} pods not yet scheduled were left out of the placement layers"));
        }
    }
    let exit = if invalid {
        EXIT_INVALID_INPUT
    } else if failed {
        EXIT_SHARED_OR_UNFUNDED
    } else if unverified && strict {
        EXIT_UNVERIFIED_STRICT
    } else {
        if unverified {
            summary.push("warning: some required layers are Unverified: the API cannot show they are separate (exit 2 with --strict)".into());
        }
        EXIT_OK
    };
    let items: Vec<Value> = evaluations.iter().map(|e| json!(e.bulkhead)).collect();
    CheckReport { list: json!({"apiVersion": "v1", "kind": "List", "items": items}), summary, exit }
}

/// What a person can do about a layer that is not Separate.
pub fn advice(layer: Layer, state: LayerState) -> &'static str {
    if state == LayerState::Separate {
        return "nothing to do";
    }
    match (layer, state) {
        (Layer::Process, LayerState::Shared) => {
            "run each class in its own pods (a Deployment per class, selected by classes[].pods)"
        }
        (Layer::Process, _) => "give every class pods selectors (classes[].pods) or name the workload",
        (Layer::Node, LayerState::Shared) => {
            "give each class its own nodes (node groups, or pod anti-affinity on kubernetes.io/hostname)"
        }
        (Layer::Node, _) => "wait for the classes' pods to be scheduled, or check their selectors",
        (Layer::Kernel, LayerState::Shared) => {
            "separate the classes' nodes, or run one of them with a sandboxed RuntimeClass (Kata, gVisor)"
        }
        (Layer::Kernel, _) => "make sure the RuntimeClasses the pods name exist",
        (Layer::Zone, LayerState::Shared) => {
            "spread the classes over zones (anti-affinity on topology.kubernetes.io/zone)"
        }
        (Layer::Zone, _) => "label every node with topology.kubernetes.io/zone",
        (Layer::Host, LayerState::Shared) => "move the classes' nodes onto different machines",
        (Layer::Host, _) => {
            "label nodes with the machine under them and pass --host-label, or accept that the API cannot see it"
        }
        (Layer::Database, LayerState::Shared) => "give the classes separate database instances",
        (Layer::Database, _) => {
            "point the classes at in-cluster Services whose backends the API can see, or accept the risk"
        }
    }
}
