//! The Node layer says when node groups are kept at admission (the
//! operator's webhook refuses a pod that reaches another class's nodes);
//! without the field they are only audited, as before there was a webhook,
//! so an operator without one writes no status it did not write before. With
//! admission on, a pod found across a group anyway bypassed it (created while
//! the webhook did not answer, before the group existed, or with
//! `failurePolicy: Ignore` during an outage); its evidence says so, and the
//! audit reports it as it always has.

use crate::{
    crd::{Layer, LayerState, LayerStatus, NodeAdmission},
    plan::Plan,
};

/// What a Shared pair's evidence gains when admission should have kept it apart.
pub const BYPASSED: &str =
    "it bypassed admission (created while the webhook did not answer, or before the node group existed)";

pub(super) fn annotate_admission(layers: &mut [LayerStatus], plan: &Plan, enforced: bool) {
    let grouped: Vec<&str> = plan.node_groups.classes.iter().map(|c| c.class.as_str()).collect();
    if grouped.is_empty() || !enforced {
        return;
    }
    let Some(node) = layers.iter_mut().find(|l| l.name == Layer::Node) else { return };
    node.admission = Some(NodeAdmission::Enforced);
    for pair in node.pairs.iter_mut().filter(|p| p.state == LayerState::Shared) {
        if pair.classes.iter().any(|c| grouped.contains(&c.as_str())) {
            for evidence in &mut pair.evidence {
                evidence.push_str("; ");
                evidence.push_str(BYPASSED);
            }
        }
    }
}
