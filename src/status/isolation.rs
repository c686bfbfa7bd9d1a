//! `Isolated`, from the audit's layers: the one condition a person reads to
//! know whether the classes are kept apart where the Bulkhead requires.

use super::{
    reasons::{reason, ISOLATED},
    ConditionStatus, DesiredCondition,
};
use crate::crd::{LayerState, LayerStatus};

/// Pairs each layer names in the message; the rest are counted.
const PAIRS_NAMED: usize = 3;

/// `Isolated`: True when every required layer is Separate; False when one is
/// Shared; Unknown when only Unverified ones remain.
pub fn isolated_condition(layers: &[LayerStatus], classes: usize) -> DesiredCondition {
    let required: Vec<&LayerStatus> = layers.iter().filter(|l| l.required).collect();
    let describe = |l: &LayerStatus| {
        let matching = l.pairs.iter().filter(|p| p.state == l.state);
        let mut said: Vec<String> = matching
            .clone()
            .take(PAIRS_NAMED)
            .map(|p| {
                format!(
                    "{:?} {} by {}: {}",
                    l.name,
                    verb(l.state),
                    p.classes.join(" and "),
                    p.evidence.first().cloned().unwrap_or_default()
                )
            })
            .collect();
        // The status lists a bounded number of pairs; those it counts without listing may be in either state.
        let more = matching.count().saturating_sub(PAIRS_NAMED);
        match (more, l.unlisted_pairs) {
            (0, 0) => {}
            (n, 0) => said.push(format!("and {n} more {} pair(s) in {:?}", verb(l.state), l.name)),
            (n, u) => said.push(format!("and {} more pair(s) in {:?} (see status.layers)", n + u as usize, l.name)),
        }
        said
    };
    let shared: Vec<String> =
        required.iter().filter(|l| l.state == LayerState::Shared).flat_map(|l| describe(l)).collect();
    if !shared.is_empty() {
        return DesiredCondition::new(
            ISOLATED,
            ConditionStatus::False,
            reason::SHARED_LAYER_DETECTED,
            shared.join("; "),
        );
    }
    let unverified: Vec<String> =
        required.iter().filter(|l| l.state == LayerState::Unverified).flat_map(|l| describe(l)).collect();
    if !unverified.is_empty() {
        return DesiredCondition::new(
            ISOLATED,
            ConditionStatus::Unknown,
            reason::SHARED_LAYER_UNVERIFIED,
            unverified.join("; "),
        );
    }
    let names: Vec<String> = required.iter().map(|l| format!("{:?}", l.name)).collect();
    let message = if classes < 2 {
        "only one class: there is nothing to isolate it from".to_string()
    } else if names.is_empty() {
        "no layers are required (spec.layers is empty)".to_string()
    } else {
        format!("every required layer is Separate: {}", names.join(", "))
    };
    DesiredCondition::new(ISOLATED, ConditionStatus::True, reason::ALL_LAYERS_SEPARATE, message)
}

fn verb(state: LayerState) -> &'static str {
    match state {
        LayerState::Shared => "shared",
        LayerState::Unverified => "unverified",
        LayerState::Separate => "separate",
    }
}
