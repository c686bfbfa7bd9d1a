//! `Sized` and `IsolatedInUse`, and `status.classes[].usage`, from the latest
//! analysis of the proxies' telemetry (`usage::Advice`). Pure: the
//! controller runs the analysis on its period and hands the result in.
//!
//! A leak has a condition of its own rather than a reason on `Sized`: it is
//! found while a class is saturated, which is when `StarvedAtCeiling` holds
//! too, so one condition would hide one behind the other; and its fix is a
//! layer to separate, not a reservation to resize.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::{
    merge_conditions,
    reasons::{reason, ISOLATED_IN_USE, SIZED},
    ConditionStatus, DesiredCondition,
};
use crate::{
    crd::{BulkheadStatus, ClassUsageStatus},
    usage::{human_seconds, Advice, ClassUsage, FindingKind},
};

/// What the operator knows of a Bulkhead's use when it builds the status.
#[derive(Clone, Debug, PartialEq)]
pub enum Sizing {
    /// The latest analysis.
    Advised(Advice),
    /// No Prometheus, or no proxy series of this Bulkhead in it; says which.
    NoTelemetry(String),
    /// Prometheus answered but the analysis failed; says how.
    Failed(String),
    /// No analysis has finished since the operator started: the status keeps
    /// what it says, so a restart writes nothing.
    Pending,
}

/// When several findings hold, `Sized` names the first kind in this order
/// and counts the others: rejections a user sees first, then rejections
/// with capacity idle, then a surplus that never suffices, then waste.
pub const SEVERITY: [FindingKind; 4] = [
    FindingKind::StarvedAtCeiling,
    FindingKind::UtilisationCollapse,
    FindingKind::SurplusExhausted,
    FindingKind::ReservationIdle,
];

/// Longest condition message written (a finding's sentence and a count fit).
const MAX_MESSAGE: usize = 1024;

/// Add `Sized`, `IsolatedInUse` and each class's usage to `status`, keeping
/// transition times from `previous`.
pub fn apply_sizing(
    status: &mut BulkheadStatus,
    sizing: &Sizing,
    previous: Option<&BulkheadStatus>,
    generation: Option<i64>,
    now: &Time,
) {
    let previous_conditions = previous.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let desired = match sizing {
        Sizing::Pending => kept_conditions(previous_conditions),
        other => vec![sized_condition(other), isolated_in_use_condition(other)],
    };
    status.conditions.extend(merge_conditions(previous_conditions, desired, generation, now));
    for class in &mut status.classes {
        class.usage = match sizing {
            Sizing::Advised(advice) if advice.replicas_seen > 0 => {
                advice.classes.iter().find(|c| c.name == class.name).map(usage_status)
            }
            Sizing::Pending => {
                previous.and_then(|p| p.classes.iter().find(|c| c.name == class.name)).and_then(|c| c.usage.clone())
            }
            _ => None,
        };
    }
}

/// The figures of one class as the status keeps them.
pub fn usage_status(c: &ClassUsage) -> ClassUsageStatus {
    let at_ceiling = c.rejected.get("ceiling").copied().unwrap_or(0);
    let all: u64 = c.rejected.values().fold(0u64, |sum, n| sum.saturating_add(*n));
    ClassUsageStatus {
        peak_in_flight: c.peak_in_flight,
        p95_in_flight: c.p95_in_flight,
        rejected_at_ceiling: at_ceiling,
        rejected_other: all.saturating_sub(at_ceiling),
        time_at_ceiling_permille: permille(c.time_at_ceiling),
        borrowed_peak: c.borrowed_peak,
        recommended_reserved: c.recommended_reserved,
        recommended_ceiling: c.recommended_ceiling,
    }
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // clamped to 0..=1000 first
fn permille(share: f64) -> u32 {
    if share.is_nan() {
        return 0;
    }
    (share.clamp(0.0, 1.0) * 1000.0).round() as u32
}

/// `Sized`: True `MatchesUse` without findings; False with the most severe
/// finding's kind as the reason; Unknown without telemetry.
pub fn sized_condition(sizing: &Sizing) -> DesiredCondition {
    let advice = match unknown(SIZED, sizing) {
        Ok(advice) => advice,
        Err(condition) => return condition,
    };
    let sizing_findings: Vec<_> = advice.findings.iter().filter(|f| f.kind != FindingKind::IsolationLeak).collect();
    let worst = SEVERITY.iter().find_map(|kind| sizing_findings.iter().find(|f| f.kind == *kind));
    let Some(worst) = worst else {
        return DesiredCondition::new(
            SIZED,
            ConditionStatus::True,
            reason::MATCHES_USE,
            format!(
                "no finding over the last {} ({} proxy replica(s) reported): every class's reservation and \
                 ceiling match its use",
                human_seconds(advice.window_seconds),
                advice.replicas_seen
            ),
        );
    };
    let others: Vec<&str> =
        sizing_findings.iter().filter(|f| !std::ptr::eq(**f, *worst)).map(|f| f.kind.as_str()).collect();
    let mut message = worst.message.clone();
    if !others.is_empty() {
        message.push_str(&format!(
            " (and {} other finding(s): {}; `bulkhead advise` lists them)",
            others.len(),
            others.join(", ")
        ));
    }
    DesiredCondition::new(SIZED, ConditionStatus::False, worst.kind.as_str(), bounded(message))
}

/// `IsolatedInUse`: False `IsolationLeak` when another class's latency rose
/// while one sat at its ceiling; Unknown when no class reached its ceiling
/// (nothing to test against) or without telemetry; else True.
pub fn isolated_in_use_condition(sizing: &Sizing) -> DesiredCondition {
    let advice = match unknown(ISOLATED_IN_USE, sizing) {
        Ok(advice) => advice,
        Err(condition) => return condition,
    };
    let leaks: Vec<_> = advice.findings.iter().filter(|f| f.kind == FindingKind::IsolationLeak).collect();
    if let Some(first) = leaks.first() {
        let mut message = first.message.clone();
        if leaks.len() > 1 {
            message.push_str(&format!(" (and {} other leak(s))", leaks.len() - 1));
        }
        return DesiredCondition::new(
            ISOLATED_IN_USE,
            ConditionStatus::False,
            FindingKind::IsolationLeak.as_str(),
            bounded(message),
        );
    }
    let saturated: Vec<String> = advice
        .classes
        .iter()
        .filter(|c| c.time_at_ceiling > 0.0)
        .map(|c| format!("{} ({:.1}% of the time)", c.name, c.time_at_ceiling * 100.0))
        .collect();
    if saturated.is_empty() {
        return DesiredCondition::new(
            ISOLATED_IN_USE,
            ConditionStatus::Unknown,
            reason::NO_SATURATION,
            format!(
                "no class reached its ceiling in the last {}: there was no saturation to test isolation against",
                human_seconds(advice.window_seconds)
            ),
        );
    }
    DesiredCondition::new(
        ISOLATED_IN_USE,
        ConditionStatus::True,
        reason::NO_LATENCY_COUPLING,
        bounded(format!(
            "while {} sat at its ceiling in the last {}, no other class's latency rose",
            saturated.join(", "),
            human_seconds(advice.window_seconds)
        )),
    )
}

/// The advice to judge, or the Unknown condition of type `type_` when there is none.
fn unknown<'a>(type_: &str, sizing: &'a Sizing) -> Result<&'a Advice, DesiredCondition> {
    match sizing {
        Sizing::Advised(advice) if advice.replicas_seen > 0 && advice.saw_traffic() => Ok(advice),
        Sizing::Advised(advice) if advice.replicas_seen > 0 => Err(DesiredCondition::new(
            type_,
            ConditionStatus::Unknown,
            reason::NO_TELEMETRY,
            format!(
                "{} proxy replica(s) of Bulkhead {} reported in the last {}, but no class had a request: silence \
                 is no evidence of what a class needs",
                advice.replicas_seen,
                advice.bulkhead,
                human_seconds(advice.window_seconds)
            ),
        )),
        Sizing::Advised(advice) => Err(DesiredCondition::new(
            type_,
            ConditionStatus::Unknown,
            reason::NO_TELEMETRY,
            format!(
                "no proxy of Bulkhead {} reported in the last {}",
                advice.bulkhead,
                human_seconds(advice.window_seconds)
            ),
        )),
        Sizing::NoTelemetry(why) => {
            Err(DesiredCondition::new(type_, ConditionStatus::Unknown, reason::NO_TELEMETRY, bounded(why.clone())))
        }
        Sizing::Failed(why) => {
            Err(DesiredCondition::new(type_, ConditionStatus::Unknown, reason::ANALYSIS_FAILED, bounded(why.clone())))
        }
        Sizing::Pending => Err(DesiredCondition::new(
            type_,
            ConditionStatus::Unknown,
            reason::NO_TELEMETRY,
            "the first analysis has not finished yet",
        )),
    }
}

/// The previous status's `Sized` and `IsolatedInUse`, as they are.
fn kept_conditions(previous: &[Condition]) -> Vec<DesiredCondition> {
    [SIZED, ISOLATED_IN_USE]
        .iter()
        .filter_map(|t| previous.iter().find(|c| c.type_ == *t))
        .map(|c| DesiredCondition {
            type_: c.type_.clone(),
            status: match c.status.as_str() {
                "True" => ConditionStatus::True,
                "False" => ConditionStatus::False,
                _ => ConditionStatus::Unknown,
            },
            reason: c.reason.clone(),
            message: c.message.clone(),
        })
        .collect()
}

fn bounded(mut message: String) -> String {
    if message.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE - 3;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push_str("...");
    }
    message
}

#[cfg(test)]
mod tests;
