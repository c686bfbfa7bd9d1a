//! The usage analysis (pure): any telemetry gives a fundable recommendation
//! (checked by the planner itself), never under a class's observed p95 when
//! the p95s fit, a critical class never under 1; and the findings on
//! hand-made windows.

use std::collections::BTreeMap;

use bulkhead::{
    crd::{Bulkhead, BulkheadSpec, Scope},
    plan::{plan_capacity, Funding, Replicas},
    usage::{analyse, apply_advice, ClassSeries, FindingKind, Telemetry, Thresholds},
};
use promql_parser::util::walk_expr;
use proptest::prelude::*;

use crate::chart_support;

fn bulkhead(spec: serde_json::Value) -> Bulkhead {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "bulkhead.dev/v1alpha1", "kind": "Bulkhead", "metadata": {"name": "shop"}, "spec": spec,
    }))
    .expect("a Bulkhead")
}

/// Capacity 10, floors 2 + 6 + 1 (surplus 1 derived), ceilings 3, 7 and default.
fn shop() -> Bulkhead {
    bulkhead(serde_json::json!({
        "dimension": "Tenant",
        "pool": {"resource": "requests", "capacity": 10, "scope": "Instance"},
        "classes": [
            {"name": "starved", "reserved": 2, "ceiling": 3},
            {"name": "idle", "reserved": 6, "ceiling": 7},
            {"name": "ops", "reserved": 1, "critical": true},
        ],
    }))
}

fn series(name: &str, p95: u32, at_ceiling: f64, rejected_at_ceiling: u64, steps: usize) -> ClassSeries {
    ClassSeries {
        name: name.into(),
        peak_in_flight: p95,
        p95_in_flight: p95,
        rejected: BTreeMap::from([("ceiling".to_string(), rejected_at_ceiling)]),
        borrowed_peak: 0,
        at_ceiling: vec![Some(at_ceiling); steps],
        latency: vec![Some(0.01); steps],
    }
}

fn uneven(steps: usize) -> Telemetry {
    Telemetry {
        window_seconds: 60,
        step_seconds: 2,
        replicas_seen: 1,
        divided_by: 1,
        classes: vec![
            series("starved", 3, 0.9, 500, steps),
            series("idle", 1, 0.0, 0, steps),
            series("ops", 0, 0.0, 0, steps),
        ],
        rejections: vec![20.0; steps],
        occupancy: vec![Some(0.4); steps],
        surplus_exhausted: vec![Some(1.0); steps],
    }
}

#[test]
fn an_uneven_window_raises_the_starved_class_lowers_the_idle_one_and_says_why() {
    let b = shop();
    let advice = analyse(&b, &uneven(30), &Thresholds::default());
    let by = |n: &str| advice.classes.iter().find(|c| c.name == n).expect(n);
    assert_eq!(
        (by("starved").recommended_reserved, by("idle").recommended_reserved, by("ops").recommended_reserved),
        (3, 1, 1)
    );
    assert_eq!(advice.recommended_shared_surplus, 5);
    assert_eq!(by("starved").recommended_ceiling, 5, "3 × 1.5 rounded up");
    assert_eq!(by("ops").recommended_ceiling, 6, "an undeclared ceiling is floor + surplus");
    let kinds: Vec<FindingKind> = advice.findings.iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds,
        [
            FindingKind::StarvedAtCeiling,
            FindingKind::ReservationIdle,
            FindingKind::UtilisationCollapse,
            FindingKind::SurplusExhausted
        ]
    );
    let starved = &advice.findings[0].message;
    assert!(
        starved.contains("ceiling of 3 for 90% of the window (threshold 5%)") && starved.contains("500"),
        "{starved}"
    );
    assert!(advice.findings[1].message.contains("at most 1 of its 6 reserved"), "{}", advice.findings[1].message);
    assert!(advice.findings[2].message.contains("600 requests"), "{}", advice.findings[2].message);
    let patched = apply_advice(&b.spec, &advice);
    assert!(plan_capacity(&patched, None).0.funding.is_funded());
}

#[test]
fn a_quiet_window_has_no_findings_and_keeps_the_floors() {
    let mut t = uneven(30);
    t.classes = vec![series("starved", 2, 0.0, 0, 30), series("idle", 5, 0.0, 0, 30), series("ops", 1, 0.0, 0, 30)];
    t.rejections = vec![0.0; 30];
    t.surplus_exhausted = vec![Some(0.0); 30];
    let advice = analyse(&shop(), &t, &Thresholds::default());
    assert!(advice.findings.is_empty(), "{:?}", advice.findings);
    let floors: Vec<u32> = advice.classes.iter().map(|c| c.recommended_reserved).collect();
    assert_eq!(floors, [2, 6, 1]);
}

#[test]
fn a_fleet_pool_is_advised_in_spec_units_through_the_planners_division() {
    // 40 over 4 replicas = 10 each; floors 8 + 24 + 4 fleet-wide = 2 + 6 + 1 per replica.
    let b = bulkhead(serde_json::json!({
        "dimension": "Tenant",
        "pool": {"resource": "requests", "capacity": 40, "scope": "Fleet"},
        "classes": [
            {"name": "starved", "reserved": 8, "ceiling": 12},
            {"name": "idle", "reserved": 24, "ceiling": 28},
            {"name": "ops", "reserved": 4, "critical": true},
        ],
    }));
    let mut t = uneven(30);
    t.divided_by = 4;
    let advice = analyse(&b, &t, &Thresholds::default());
    let floors: Vec<u32> = advice.classes.iter().map(|c| c.recommended_reserved).collect();
    assert_eq!(floors, [12, 4, 4], "per replica 3, 1, 1 times 4");
    assert_eq!(advice.recommended_shared_surplus, 20);
    let patched = apply_advice(&b.spec, &advice);
    let (plan, errors) = plan_capacity(&patched, Some(Replicas { current: 4, ..Replicas::default() }));
    assert!(errors.is_empty() && plan.funding.is_funded(), "{errors:?} {:?}", plan.funding);
    assert_eq!(plan.classes[0].reserved_per_replica, 3);
}

#[test]
fn every_query_parses_and_selects_only_series_the_proxy_exports_with_their_labels() {
    let exported = chart_support::exported_by_proxy();
    let q = bulkhead::prometheus::Queries::new("shop");
    let queries = [
        q.replicas(604_800),
        q.divided_by(604_800),
        q.peak(604_800),
        q.p95(604_800),
        q.borrowed_peak(604_800),
        q.rejected_by_reason(604_800),
        q.at_ceiling(605),
        q.latency(605),
        q.occupancy(605),
        q.rejections(605),
        q.surplus_exhausted(605),
    ];
    for query in queries {
        let parsed = promql_parser::parser::parse(&query).unwrap_or_else(|e| panic!("{query}: {e}"));
        let mut selectors = chart_support::Selectors::default();
        walk_expr(&mut selectors, &parsed).expect("walk");
        assert!(!selectors.0.is_empty(), "{query}");
        for vs in &selectors.0 {
            let name = vs.name.as_deref().expect("a metric name");
            let labels = exported.get(name).unwrap_or_else(|| panic!("{query}: the proxy exports no {name}"));
            for m in &vs.matchers.matchers {
                assert!(labels.contains(&m.name), "{query}: {name} has no label {}", m.name);
            }
            assert!(
                vs.matchers.matchers.iter().any(|m| m.name == "bulkhead"),
                "{query}: {name} not selected by bulkhead"
            );
        }
    }
}

fn arbitrary() -> impl Strategy<Value = (Bulkhead, Telemetry)> {
    (1u32..400, prop::bool::ANY, 1u64..6, 1usize..7).prop_flat_map(|(capacity, fleet, divisor, n)| {
        let class = (0u32..=capacity, prop::option::of(0u32..=capacity), any::<bool>(), 0u32..=capacity, 0.0f64..1.0, 0u64..50);
        (Just(capacity), Just(fleet), Just(divisor), prop::collection::vec(class, n), prop::option::of(0u32..=capacity))
            .prop_map(|(capacity, fleet, divisor, classes, surplus)| {
                let divisor = if fleet { divisor } else { 1 };
                // Any floors that fit; any telemetry at all (p95s may add up past the pool).
                let mut left = capacity;
                let spec_classes: Vec<serde_json::Value> = classes
                    .iter()
                    .enumerate()
                    .map(|(i, (reserved, ceiling, critical, ..))| {
                        let reserved = (*reserved).min(left);
                        left -= reserved;
                        let mut c = serde_json::json!({"name": format!("c{i}"), "reserved": reserved, "critical": critical});
                        if let Some(ceiling) = ceiling {
                            c["ceiling"] = serde_json::json!(reserved.max(*ceiling).min(reserved + left));
                        }
                        c
                    })
                    .collect();
                let mut pool = serde_json::json!({"resource": "requests", "capacity": capacity, "scope": if fleet {"Fleet"} else {"Instance"}});
                if let Some(s) = surplus {
                    pool["sharedSurplus"] = serde_json::json!(s.min(left));
                }
                let b = bulkhead(serde_json::json!({"dimension": "Tenant", "pool": pool, "classes": spec_classes}));
                let per_replica = u32::try_from(u64::from(capacity) / divisor).unwrap_or(0);
                let t = Telemetry {
                    window_seconds: 3600,
                    step_seconds: 60,
                    replicas_seen: u32::try_from(divisor).unwrap_or(1),
                    divided_by: divisor,
                    classes: classes
                        .iter()
                        .enumerate()
                        .map(|(i, (_, _, _, p95, at, rejected))| {
                            let p95 = (*p95).min(per_replica);
                            ClassSeries {
                                name: format!("c{i}"),
                                peak_in_flight: p95,
                                p95_in_flight: p95,
                                rejected: BTreeMap::from([("ceiling".into(), *rejected)]),
                                borrowed_peak: 0,
                                at_ceiling: vec![Some(*at); 10],
                                latency: vec![Some(0.01); 10],
                            }
                        })
                        .collect(),
                    ..Telemetry::default()
                };
                (b, t)
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_telemetry_gives_a_fundable_recommendation_never_under_p95_and_critical_at_least_1((b, t) in arbitrary()) {
        let advice = analyse(&b, &t, &Thresholds::default());
        let d = if b.spec.pool.scope == Scope::Fleet { t.divided_by } else { 1 };
        let patched: BulkheadSpec = apply_advice(&b.spec, &advice);
        let (plan, errors) = plan_capacity(&patched, Some(Replicas { current: d, ..Replicas::default() }));
        prop_assert!(errors.is_empty(), "{errors:?}");
        prop_assert!(matches!(plan.funding, Funding::Funded { .. }), "{:?}", plan.funding);
        let total: u64 = advice.classes.iter().map(|c| u64::from(c.recommended_reserved)).sum();
        prop_assert_eq!(total + u64::from(advice.recommended_shared_surplus), u64::from(b.spec.pool.capacity));
        let per_replica = u64::from(b.spec.pool.capacity) / d;
        let minimums: u64 = t.classes.iter().zip(&b.spec.classes)
            .map(|(s, c)| u64::from(s.p95_in_flight.max(u32::from(c.critical)))).sum();
        let criticals = b.spec.classes.iter().filter(|c| c.critical).count() as u64;
        for ((u, s), c) in advice.classes.iter().zip(&t.classes).zip(&b.spec.classes) {
            prop_assert!(u.recommended_ceiling >= u.recommended_reserved);
            if minimums <= per_replica {
                prop_assert!(u64::from(u.recommended_reserved) >= u64::from(s.p95_in_flight) * d, "{} under its p95", u.name);
            }
            if c.critical && criticals <= per_replica {
                prop_assert!(u.recommended_reserved >= 1, "critical {} at 0", u.name);
            }
        }
    }
}

/// A window without a single request is no evidence: nothing is advised,
/// no floor is lowered, and `advise` says so and exits as for no telemetry.
#[test]
fn an_idle_window_advises_nothing_and_lowers_no_floor() {
    let b = shop();
    let silent = |name: &str| ClassSeries {
        name: name.into(),
        rejected: BTreeMap::from([("ceiling".to_string(), 0)]),
        at_ceiling: vec![Some(0.0); 30],
        latency: vec![None; 30],
        ..ClassSeries::default()
    };
    let t = Telemetry { classes: vec![silent("starved"), silent("idle"), silent("ops")], ..uneven(30) };
    let advice = analyse(&b, &t, &Thresholds::default());
    assert!(!advice.saw_traffic());
    let floors: Vec<u32> = advice.classes.iter().map(|c| c.recommended_reserved).collect();
    assert_eq!(floors, vec![2, 6, 1], "silence keeps every floor");
    let text = bulkhead::offline::advise_text(&b, &advice);
    assert!(text.contains("no traffic: no class had a request"), "{text}");
    assert!(!text.contains("no findings") && !text.contains("kubectl patch"), "{text}");
    assert_eq!(bulkhead::offline::advise_exit(&advice), bulkhead::offline::EXIT_NO_TELEMETRY);
    // One quiet class beside busy ones keeps its floor too; a lightly used one keeps at least 1.
    let mut t = uneven(30);
    t.classes[1] = silent("idle");
    let advice = analyse(&b, &t, &Thresholds::default());
    assert!(advice.saw_traffic());
    let idle = advice.classes.iter().find(|c| c.name == "idle").expect("idle");
    assert!(idle.recommended_reserved >= 1, "{idle:?}");
    let mut t = uneven(30);
    t.classes[1].p95_in_flight = 0;
    let advice = analyse(&b, &t, &Thresholds::default());
    let idle = advice.classes.iter().find(|c| c.name == "idle").expect("idle");
    assert_eq!(idle.recommended_reserved, 1, "a used class with p95 0 keeps a floor of 1: {idle:?}");
}
