//! Conditions of placement, present only when a class asks for it:
//! NodeGroupsReady (every group holds its count of nodes) and Placed (every
//! class workload carries its placement, none is contested).

use super::{
    list,
    reasons::{reason, NODE_GROUPS_READY, PLACED},
    ApplyOutcome, ConditionStatus, DesiredCondition, Refused,
};
use crate::plan::{NodeGroupPlan, PlacementPlan, Plan};

/// At most this many workloads are named in a message.
const NAMED: usize = 10;

/// Both conditions, or none when no class asks for placement.
pub(super) fn placement_conditions(plan: &Plan, outcome: &ApplyOutcome) -> Vec<DesiredCondition> {
    let Some(placement) = &plan.placement else { return Vec::new() };
    vec![node_groups_ready(&plan.node_groups), placed(placement, outcome, plan)]
}

/// NodeGroupsReady: every group holds its count of nodes.
fn node_groups_ready(node_groups: &NodeGroupPlan) -> DesiredCondition {
    let groups = &node_groups.classes;
    let shortfalls: Vec<&str> = node_groups.shortfalls().collect();
    if groups.is_empty() {
        DesiredCondition::new(
            NODE_GROUPS_READY,
            ConditionStatus::True,
            reason::NO_NODE_GROUPS,
            "no class asks for a node group",
        )
    } else if shortfalls.is_empty() {
        let held = groups.iter().map(|g| format!("{}: {}", g.class, g.nodes.join(", "))).collect::<Vec<_>>().join("; ");
        let unopted: Vec<&str> = groups.iter().flat_map(|g| &g.kept_without_opt_in).map(String::as_str).collect();
        let held = if unopted.is_empty() {
            held
        } else {
            format!(
                "{held}; kept without the node opt-in label, claimed before: {} (never claimed again once released)",
                unopted.join(", ")
            )
        };
        DesiredCondition::new(NODE_GROUPS_READY, ConditionStatus::True, reason::NODES_CLAIMED, held)
    } else {
        DesiredCondition::new(
            NODE_GROUPS_READY,
            ConditionStatus::False,
            reason::INSUFFICIENT_NODES,
            shortfalls.join("; "),
        )
    }
}

/// Placed: every class workload carries its placement, none is contested. The
/// first reason that applies wins: an apply that stopped early, then the
/// conditions table's `False` rows in their order.
fn placed(placement: &PlacementPlan, outcome: &ApplyOutcome, plan: &Plan) -> DesiredCondition {
    let (conflicts, rejected): (&[Refused], &[Refused]) = match outcome {
        ApplyOutcome::Applied { conflicts, rejected, .. } => (conflicts, rejected),
        _ => (&[], &[]),
    };
    if let ApplyOutcome::Failed(_) = outcome {
        DesiredCondition::new(
            PLACED,
            ConditionStatus::Unknown,
            reason::APPLY_FAILED,
            "the apply stopped early (see Ready); placement is not known to be complete",
        )
    } else if !conflicts.is_empty() {
        let also = if rejected.is_empty() {
            String::new()
        } else {
            format!("; and the API server refused placement: {}", list(rejected))
        };
        DesiredCondition::new(
            PLACED,
            ConditionStatus::False,
            reason::PLACEMENT_CONFLICT,
            format!("left alone, another field manager owns what placement would set: {}{also}", list(conflicts)),
        )
    } else if !rejected.is_empty() {
        DesiredCondition::new(
            PLACED,
            ConditionStatus::False,
            reason::PLACEMENT_REJECTED,
            format!("the API server refused placement (retried every minute): {}", list(rejected)),
        )
    } else if !placement.not_opted_in.is_empty() {
        let label = plan.namespace_opt_in.as_ref().map(ToString::to_string).unwrap_or_default();
        let named: Vec<&str> = placement.not_opted_in.iter().take(NAMED).map(|(_, w)| w.as_str()).collect();
        let more = placement.not_opted_in.len() - named.len();
        let more = if more > 0 { format!(" and {more} more") } else { String::new() };
        let mut namespaces: Vec<&str> = placement.not_opted_in.iter().map(|(ns, _)| ns.as_str()).collect();
        namespaces.dedup();
        DesiredCondition::new(
            PLACED,
            ConditionStatus::False,
            reason::NAMESPACE_NOT_OPTED_IN,
            format!(
                "left as they are, in namespaces without the label {label}: {}{more}; a namespace admin opts in \
                 with: kubectl label namespace {} {label}",
                named.join(", "),
                namespaces.join(" ")
            ),
        )
    } else if !placement.yielded.is_empty() {
        let detail = placement
            .yielded
            .iter()
            .map(|y| format!("{} to Bulkhead {}", y.workload, y.winner))
            .collect::<Vec<_>>()
            .join("; ");
        DesiredCondition::new(
            PLACED,
            ConditionStatus::False,
            reason::PLACED_BY_OLDER_BULKHEAD,
            format!("left to an older Bulkhead that placed them first (created earlier, or same second and smaller name): {detail}"),
        )
    } else if !placement.ambiguous.is_empty() {
        let detail = placement
            .ambiguous
            .iter()
            .map(|a| format!("{} matches classes {}", a.workload, a.classes.join(" and ")))
            .collect::<Vec<_>>()
            .join("; ");
        DesiredCondition::new(
            PLACED,
            ConditionStatus::False,
            reason::WORKLOAD_IN_TWO_CLASSES,
            format!("left alone: {detail}"),
        )
    } else if !placement.missing_runtime_classes.is_empty() {
        let detail = placement
            .missing_runtime_classes
            .iter()
            .map(|(class, rc)| format!("class {class} names RuntimeClass {rc}, which does not exist"))
            .collect::<Vec<_>>()
            .join("; ");
        DesiredCondition::new(
            PLACED,
            ConditionStatus::False,
            reason::RUNTIME_CLASS_NOT_FOUND,
            format!("{detail}: the API server rejects the class's new pods until it is created"),
        )
    } else if placement.workloads.is_empty() {
        DesiredCondition::new(
            PLACED,
            ConditionStatus::True,
            reason::NO_WORKLOADS,
            "no Deployment or StatefulSet matches a class's pods selectors",
        )
    } else {
        let placed = placement
            .workloads
            .iter()
            .map(|w| format!("{} ({})", w.describe(), w.class))
            .collect::<Vec<_>>()
            .join(", ");
        let verb = if matches!(outcome, ApplyOutcome::Applied { .. }) { "placed" } else { "to place" };
        DesiredCondition::new(
            PLACED,
            ConditionStatus::True,
            reason::WORKLOADS_PLACED,
            format!("{} workload(s) {verb}: {placed}", placement.workloads.len()),
        )
    }
}
