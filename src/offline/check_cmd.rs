//! `bulkhead check`: the shared-layer audit for CI pipelines and GitOps
//! review. Exit codes: 0 isolated and funded; 1 a required layer Shared, the
//! design unfundable, a critical class without a floor, or a Service that
//! reaches the workload around its sidecar; 2 only Unverified remains and --strict; 3 bad input
//! (files or command-line arguments: usage errors never exit 2).

use kube::ResourceExt;
use serde_json::{json, Value};

use super::evaluate::Evaluated;
use crate::{
    crd::{Layer, LayerState},
    status::{reason, ConditionStatus, CONTROL_PLANE_LANE, ENFORCED, FUNDED},
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
            // Nothing was planned or audited: conditions and layers would only look as if it had been.
            invalid = true;
            for err in &e.plan.errors {
                summary.push(format!("{name}: invalid: {err}"));
            }
            continue;
        }
        if !e.plan.capacity.funding.is_funded() {
            failed = true;
        }
        // A sidecar that traffic walks around enforces nothing: the bulkhead is decorative.
        for c in status.conditions.iter().filter(|c| c.type_ == ENFORCED && c.reason == reason::BYPASSED) {
            failed = true;
            summary.push(format!("{name}: {} {} ({}): {}", c.type_, c.status, c.reason, c.message));
        }
        // A critical lane without a floor is a lane that is not funded.
        let lane = status.conditions.iter().find(|c| c.type_ == CONTROL_PLANE_LANE);
        if lane.is_some_and(|c| c.reason == reason::CRITICAL_CLASS_UNRESERVED) {
            failed = true;
        }
        for c in status.conditions.iter().filter(|c| c.type_ == FUNDED || c.type_ == CONTROL_PLANE_LANE) {
            if ConditionStatus::of(c) != Some(ConditionStatus::True) {
                summary.push(format!("{name}: {} {} ({}): {}", c.type_, c.status, c.reason, c.message));
            }
        }
        let cap = &e.plan.capacity;
        if let (crate::crd::Scope::Instance, Some(fleet), Some(replicas)) =
            (cap.scope, cap.fleet_capacity, cap.replicas)
        {
            // An autoscaler can grow the fleet to its maximum: that, not today's count, is what the dependency must take.
            let at_max = match (replicas.max, cap.fleet_capacity_at_max) {
                (Some(max), Some(total)) if max > replicas.current => {
                    format!(", and {total} at the autoscaler's maxReplicas {max}")
                }
                _ => String::new(),
            };
            if replicas.current > 1 || !at_max.is_empty() {
                summary.push(format!(
                    "{name}: note: per-replica limits multiply: {} {} per replica across {} replica(s) is {fleet}{at_max}; \
                     make sure what is behind the pool accepts that many",
                    cap.capacity, e.bulkhead.spec.pool.resource, replicas.current
                ));
            }
        }
        // Surplus that no class's ceiling lets it borrow is capacity no one can ever use.
        let borrowable: u64 = cap.classes.iter().map(|c| u64::from(c.borrowable)).sum();
        if borrowable < u64::from(cap.shared_surplus) {
            summary.push(format!(
                "{name}: note: {} of the shared surplus of {} can never be used: the classes' ceilings let them \
                 borrow {borrowable} in all; raise a ceiling or lower the surplus",
                u64::from(cap.shared_surplus) - borrowable,
                cap.shared_surplus
            ));
        }
        if e.bulkhead.spec.layers.is_empty() && e.bulkhead.spec.classes.len() > 1 {
            summary.push(format!(
                "{name}: note: spec.layers is empty, so no layer is required to be Separate: this check verifies \
                 funding only (the layers below are reported, not enforced)"
            ));
        }
        for layer in &status.layers {
            let required = if layer.required { "required" } else { "not required" };
            summary.push(format!("{name}: {:?} {:?} ({required})", layer.name, layer.state));
            // The pairs that make the layer's state first; a pair in another state says so.
            let shown = layer.pairs.iter().filter(|p| p.state == layer.state);
            let others = layer.pairs.iter().filter(|p| p.state != layer.state);
            for pair in shown.chain(others).take(MAX_PAIRS_SHOWN) {
                let state = if pair.state == layer.state { String::new() } else { format!(" ({:?})", pair.state) };
                summary.push(format!(
                    "    {} and {}{state}: {}",
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
                let next = match (layer.name, layer.state, &e.bulkhead.spec.shuffle_sharding) {
                    // Node groups, the usual answer, cannot be combined with shuffle sharding.
                    (Layer::Node, LayerState::Shared, Some(_)) => SHARDED_NODE_ADVICE,
                    _ => advice(layer.name, layer.state),
                };
                summary.push(format!("    next: {next}"));
            }
            match (layer.required, layer.state) {
                (true, LayerState::Shared) => failed = true,
                (true, LayerState::Unverified) => unverified = true,
                _ => {}
            }
        }
        let (unscheduled, named) = &e.unscheduled;
        if *unscheduled > 0 {
            let more = unscheduled - named.len();
            let more = if more > 0 { format!(" and {more} more") } else { String::new() };
            let pods = if *unscheduled == 1 { "pod" } else { "pods" };
            summary.push(format!(
                "{name}: {unscheduled} {pods} not yet scheduled, left out of the placement layers: {}{more}",
                named.join(", ")
            ));
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

/// Shuffle-sharded tenants share nodes by design: what lowers that.
const SHARDED_NODE_ADVICE: &str = "shuffle sharding shares nodes between tenants by design: add candidate nodes or \
     lower spec.shuffleSharding.shardSize to shrink the overlaps, or drop Node from spec.layers and rely on the \
     shards (node groups cannot be combined with shuffle sharding)";

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
