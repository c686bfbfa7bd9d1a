//! metav1 Conditions that move only when they change: lastTransitionTime is
//! kept unless the status flips.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }

    /// The status of a written condition; `None` for a value the API would
    /// not have accepted.
    pub fn of(condition: &Condition) -> Option<Self> {
        match condition.status.as_str() {
            "True" => Some(ConditionStatus::True),
            "False" => Some(ConditionStatus::False),
            "Unknown" => Some(ConditionStatus::Unknown),
            _ => None,
        }
    }
}

/// A condition as the planner wants it, before times are attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredCondition {
    pub type_: String,
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
}

impl DesiredCondition {
    pub fn new(type_: &str, status: ConditionStatus, reason: &str, message: impl Into<String>) -> Self {
        Self { type_: type_.into(), status, reason: reason.into(), message: message.into() }
    }
}

/// Conditions in the order desired; a condition whose status did not change
/// keeps its lastTransitionTime.
pub fn merge_conditions(
    previous: &[Condition],
    desired: Vec<DesiredCondition>,
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    desired
        .into_iter()
        .map(|d| {
            let last_transition_time = previous
                .iter()
                .find(|p| p.type_ == d.type_ && p.status == d.status.as_str())
                .map_or_else(|| now.clone(), |p| p.last_transition_time.clone());
            Condition {
                type_: d.type_,
                status: d.status.as_str().to_string(),
                reason: d.reason,
                message: d.message,
                observed_generation: generation,
                last_transition_time,
            }
        })
        .collect()
}
