//! From telemetry to advice: per-class figures against the spec, the
//! recommendation in spec units, and the findings.

use kube::ResourceExt;

use super::{
    advice::{Advice, ClassUsage},
    findings::findings,
    leak::leaks,
    recommend::{recommend, Demand},
    telemetry::{ClassSeries, Telemetry},
    thresholds::Thresholds,
};
use crate::{
    crd::{Bulkhead, BulkheadSpec, Scope},
    plan::{plan_capacity, CapacityPlan, Replicas},
};

/// The planner's view of the spec with the per-replica split the proxies
/// enforced: a Fleet pool divided by pools.json's dividedBy, an Instance pool by 1.
pub fn capacity_plan(spec: &BulkheadSpec, divided_by: u64) -> CapacityPlan {
    let divisor = match spec.pool.scope {
        Scope::Instance => 1,
        Scope::Fleet => divided_by.max(1),
    };
    plan_capacity(spec, Some(Replicas { current: divisor, ..Replicas::default() })).0
}

pub fn analyse(bulkhead: &Bulkhead, t: &Telemetry, th: &Thresholds) -> Advice {
    let spec = &bulkhead.spec;
    let plan = capacity_plan(spec, t.divided_by);
    let none = ClassSeries::default();
    let series: Vec<&ClassSeries> = plan.classes.iter().map(|c| t.class(&c.name).unwrap_or(&none)).collect();
    let demands: Vec<Demand> = plan
        .classes
        .iter()
        .zip(&spec.classes)
        .zip(&series)
        .map(|((c, declared), s)| Demand {
            reserved: c.reserved_per_replica,
            ceiling: c.ceiling_per_replica,
            ceiling_declared: declared.ceiling.is_some(),
            p95: s.p95_in_flight,
            critical: c.critical,
            starved: s.time_at_ceiling() > th.starved_share && s.rejected_at_ceiling() > 0,
            silent: s.peak_in_flight == 0 && s.rejected.values().all(|n| *n == 0),
        })
        .collect();
    let sizing = recommend(plan.per_replica_capacity, &demands, th.idle_ratio, th.ceiling_growth);
    // Per-replica figures times the divisor: each is at most the per-replica
    // capacity, so the product is at most spec.pool.capacity and fits.
    let spec_units = |v: u32| u32::try_from(u64::from(v) * plan.divisor).unwrap_or(u32::MAX);
    let reserved_total: u64 = sizing.reserved.iter().map(|r| u64::from(spec_units(*r))).sum();
    let surplus = u32::try_from(u64::from(spec.pool.capacity).saturating_sub(reserved_total)).unwrap_or(0);
    let classes: Vec<ClassUsage> = plan
        .classes
        .iter()
        .zip(&demands)
        .zip(&series)
        .enumerate()
        .map(|(i, ((c, d), s))| ClassUsage {
            name: c.name.clone(),
            reserved: c.reserved,
            ceiling: c.ceiling,
            peak_in_flight: s.peak_in_flight,
            p95_in_flight: s.p95_in_flight,
            rejected: s.rejected.clone(),
            time_at_ceiling: s.time_at_ceiling(),
            borrowed_peak: s.borrowed_peak,
            recommended_reserved: spec_units(sizing.reserved[i]),
            recommended_ceiling: if d.ceiling_declared {
                spec_units(sizing.ceiling[i])
            } else {
                spec_units(sizing.reserved[i]).saturating_add(surplus)
            },
        })
        .collect();
    let floors: Vec<u32> = demands.iter().map(|d| d.reserved).collect();
    let mut found = findings(&classes, &floors, t, th);
    found.extend(leaks(t, th));
    Advice {
        bulkhead: bulkhead.name_any(),
        window_seconds: t.window_seconds,
        step_seconds: t.step_seconds,
        replicas_seen: t.replicas_seen,
        capacity: spec.pool.capacity,
        shared_surplus: plan.shared_surplus,
        recommended_shared_surplus: surplus,
        classes,
        findings: found,
    }
}

/// The spec with the advice applied: what the `kubectl patch` printed with it makes.
pub fn apply_advice(spec: &BulkheadSpec, advice: &Advice) -> BulkheadSpec {
    let mut spec = spec.clone();
    for class in &mut spec.classes {
        if let Some(u) = advice.classes.iter().find(|u| u.name == class.name) {
            class.reserved = u.recommended_reserved;
            if class.ceiling.is_some() {
                class.ceiling = Some(u.recommended_ceiling);
            }
        }
    }
    if spec.pool.shared_surplus.is_some() {
        spec.pool.shared_surplus = Some(advice.recommended_shared_surplus);
    }
    spec
}
