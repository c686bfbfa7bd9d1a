//! `VerifiedUnderLoad` on a Bulkhead: what its last finished drill found,
//! for the spec it ran against. Only with spec.workload.proxy (a drill needs
//! the sidecars); an aborted drill verifies nothing, and a spec changed
//! since the drill is not verified by it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::{
    crd::{drill_verdict, Bulkhead, BulkheadDrill, BulkheadStatus},
    status::{
        conditions::{merge_conditions, ConditionStatus, DesiredCondition},
        reasons::{reason, VERIFIED_UNDER_LOAD},
    },
};

/// The condition from `drills` (any drills; those of other Bulkheads are skipped).
pub fn verified_under_load<'a>(
    bulkhead: &Bulkhead,
    drills: impl IntoIterator<Item = &'a BulkheadDrill>,
) -> Option<DesiredCondition> {
    bulkhead.spec.workload.as_ref().and_then(|w| w.proxy.as_ref())?;
    let name = bulkhead.metadata.name.as_deref()?;
    let mut finished: Vec<&BulkheadDrill> = drills
        .into_iter()
        .filter(|d| d.spec.bulkhead == name)
        .filter(|d| d.status.as_ref().is_some_and(|s| s.verdict.is_some() && s.completion_time.is_some()))
        .collect();
    finished.sort_by(|a, b| completed(a).cmp(&completed(b)).then_with(|| a.metadata.name.cmp(&b.metadata.name)));
    let condition =
        |status, reason: &str, message: String| DesiredCondition::new(VERIFIED_UNDER_LOAD, status, reason, message);
    let judged = finished.iter().rev().find(|d| verdict(d) != Some(drill_verdict::ABORTED));
    let Some(drill) = judged else {
        let message = match finished.last() {
            Some(aborted) => format!(
                "no drill reached a verdict; the last, {}, was aborted: {}",
                drill_name(aborted),
                aborted.status.as_ref().and_then(|s| s.message.clone()).unwrap_or_default()
            ),
            None => {
                "no BulkheadDrill has run against this Bulkhead: nothing shows that its classes stay apart under load"
                    .into()
            }
        };
        return Some(condition(ConditionStatus::Unknown, reason::NOT_DRILLED, message));
    };
    let status = drill.status.as_ref()?;
    let when = status.completion_time.as_ref().map(|t| t.0.to_string()).unwrap_or_default();
    let tested = status.bulkhead_generation;
    if tested.is_some() && tested != bulkhead.metadata.generation {
        return Some(condition(
            ConditionStatus::Unknown,
            reason::NOT_DRILLED,
            format!(
                "the last drill, {} at {when}, ran against generation {}; the spec has changed since: drill again",
                drill_name(drill),
                tested.unwrap_or_default()
            ),
        ));
    }
    let message = format!("drill {} at {when}: {}", drill_name(drill), status.message.clone().unwrap_or_default());
    Some(match verdict(drill) {
        Some(drill_verdict::ISOLATED) => condition(ConditionStatus::True, reason::NO_LATENCY_COUPLING, message),
        Some(drill_verdict::LEAK) => condition(ConditionStatus::False, reason::LATENCY_COUPLED, message),
        _ => condition(ConditionStatus::Unknown, reason::INCONCLUSIVE, message),
    })
}

/// Add `desired` (if any) to `status`, keeping its transition time unless it flipped.
pub fn apply_verified(
    status: &mut BulkheadStatus,
    desired: Option<DesiredCondition>,
    previous: Option<&BulkheadStatus>,
    generation: Option<i64>,
    now: &Time,
) {
    let Some(desired) = desired else { return };
    let previous_conditions = previous.map(|s| s.conditions.as_slice()).unwrap_or_default();
    status.conditions.retain(|c| c.type_ != VERIFIED_UNDER_LOAD);
    status.conditions.extend(merge_conditions(previous_conditions, vec![desired], generation, now));
}

fn verdict(d: &BulkheadDrill) -> Option<&str> {
    d.status.as_ref().and_then(|s| s.verdict.as_deref())
}

fn completed(d: &BulkheadDrill) -> Option<&Time> {
    d.status.as_ref().and_then(|s| s.completion_time.as_ref())
}

fn drill_name(d: &BulkheadDrill) -> &str {
    d.metadata.name.as_deref().unwrap_or("?")
}
