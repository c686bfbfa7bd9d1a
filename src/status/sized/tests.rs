use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::{
    crd::ClassStatus,
    usage::{Finding, FindingKind},
};

fn class(name: &str, time_at_ceiling: f64, rejected_at_ceiling: u64) -> ClassUsage {
    let mut rejected = BTreeMap::new();
    if rejected_at_ceiling > 0 {
        rejected.insert("ceiling".to_string(), rejected_at_ceiling);
    }
    ClassUsage {
        name: name.into(),
        reserved: 10,
        ceiling: 20,
        peak_in_flight: 20,
        p95_in_flight: 18,
        rejected,
        time_at_ceiling,
        borrowed_peak: 10,
        recommended_reserved: 14,
        recommended_ceiling: 24,
    }
}

fn finding(kind: FindingKind, class: &str, message: &str) -> Finding {
    Finding { kind, classes: vec![class.into()], message: message.into() }
}

fn advice(findings: Vec<Finding>) -> Advice {
    Advice {
        bulkhead: "pools".into(),
        window_seconds: 7 * 86_400,
        step_seconds: 605,
        replicas_seen: 3,
        capacity: 100,
        shared_surplus: 30,
        recommended_shared_surplus: 26,
        classes: vec![class("checkout", 0.25, 1200), class("search", 0.0, 0)],
        findings,
    }
}

fn at(second: i64) -> Time {
    Time(jiff::Timestamp::from_second(second).expect("time"))
}

fn status_of(classes: &[&str]) -> BulkheadStatus {
    BulkheadStatus {
        classes: classes.iter().map(|n| ClassStatus { name: (*n).into(), ..ClassStatus::default() }).collect(),
        ..BulkheadStatus::default()
    }
}

#[test]
fn no_finding_matches_use() {
    let c = sized_condition(&Sizing::Advised(advice(vec![])));
    assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::True, "MatchesUse"));
    assert!(c.message.contains("7d") && c.message.contains("3 proxy replica(s)"), "{}", c.message);
}

#[test]
fn a_starved_class_is_the_reason_with_its_numbers_and_the_others_are_counted() {
    let findings = vec![
        finding(FindingKind::ReservationIdle, "search", "search's p95 in-flight 2 is under half its reservation 10"),
        finding(FindingKind::UtilisationCollapse, "checkout", "1200 rejections with occupancy at 31%"),
        finding(FindingKind::StarvedAtCeiling, "checkout", "checkout was at its ceiling 20 for 25.0% of 7d"),
    ];
    let c = sized_condition(&Sizing::Advised(advice(findings)));
    assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::False, "StarvedAtCeiling"));
    assert!(c.message.starts_with("checkout was at its ceiling 20 for 25.0% of 7d"), "{}", c.message);
    assert!(c.message.contains("2 other finding(s): ReservationIdle, UtilisationCollapse"), "{}", c.message);
}

#[test]
fn the_severity_order_decides_whatever_order_the_findings_come_in() {
    for (kinds, expected) in [
        (vec![FindingKind::ReservationIdle, FindingKind::SurplusExhausted], FindingKind::SurplusExhausted),
        (vec![FindingKind::SurplusExhausted, FindingKind::UtilisationCollapse], FindingKind::UtilisationCollapse),
        (vec![FindingKind::ReservationIdle], FindingKind::ReservationIdle),
    ] {
        let findings = kinds.iter().map(|k| finding(*k, "checkout", k.as_str())).collect();
        let c = sized_condition(&Sizing::Advised(advice(findings)));
        assert_eq!(c.reason, expected.as_str(), "{kinds:?}");
    }
}

#[test]
fn without_telemetry_nothing_is_guessed() {
    for sizing in [
        Sizing::NoTelemetry("the operator runs without --prometheus-url".into()),
        Sizing::Advised(Advice { replicas_seen: 0, findings: vec![], ..advice(vec![]) }),
    ] {
        for c in [sized_condition(&sizing), isolated_in_use_condition(&sizing)] {
            assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::Unknown, "NoTelemetry"), "{sizing:?}");
        }
        let mut status = status_of(&["checkout"]);
        apply_sizing(&mut status, &sizing, None, Some(1), &at(1));
        assert_eq!(status.classes[0].usage, None, "no figures without telemetry");
    }
    let failed = sized_condition(&Sizing::Failed("Prometheus answered 400: bad query".into()));
    assert_eq!((failed.status, failed.reason.as_str()), (ConditionStatus::Unknown, "AnalysisFailed"));
}

#[test]
fn a_leak_is_its_own_condition_and_does_not_hide_a_starved_class() {
    let findings = vec![
        finding(FindingKind::IsolationLeak, "checkout", "search's p99 rose from 12 ms to 80 ms in 9 windows"),
        finding(FindingKind::StarvedAtCeiling, "checkout", "checkout starved"),
    ];
    let sizing = Sizing::Advised(advice(findings));
    let sized = sized_condition(&sizing);
    assert_eq!((sized.reason.as_str(), sized.message.as_str()), ("StarvedAtCeiling", "checkout starved"));
    let leak = isolated_in_use_condition(&sizing);
    assert_eq!((leak.status, leak.reason.as_str()), (ConditionStatus::False, "IsolationLeak"));
    assert!(leak.message.contains("12 ms to 80 ms"), "{}", leak.message);
}

#[test]
fn isolation_in_use_needs_a_saturation_to_be_tested() {
    let quiet = Advice { classes: vec![class("checkout", 0.0, 0), class("search", 0.0, 0)], ..advice(vec![]) };
    let c = isolated_in_use_condition(&Sizing::Advised(quiet));
    assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::Unknown, "NoSaturation"));
    let c = isolated_in_use_condition(&Sizing::Advised(advice(vec![])));
    assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::True, "NoLatencyCoupling"));
    assert!(c.message.contains("checkout (25.0% of the time)"), "{}", c.message);
}

#[test]
fn usage_lands_on_its_class_in_whole_numbers() {
    let mut a = advice(vec![]);
    a.classes[0].rejected.insert("surplus-exhausted".into(), 30);
    a.classes[0].time_at_ceiling = 0.123_456;
    let mut status = status_of(&["checkout", "search", "new"]);
    apply_sizing(&mut status, &Sizing::Advised(a), None, Some(1), &at(1));
    let usage = status.classes[0].usage.clone().expect("checkout's usage");
    assert_eq!(
        usage,
        ClassUsageStatus {
            peak_in_flight: 20,
            p95_in_flight: 18,
            rejected_at_ceiling: 1200,
            rejected_other: 30,
            time_at_ceiling_permille: 123,
            borrowed_peak: 10,
            recommended_reserved: 14,
            recommended_ceiling: 24,
        }
    );
    assert!(status.classes[1].usage.is_some());
    assert_eq!(status.classes[2].usage, None, "a class the analysis did not see has no figures");
}

#[test]
fn the_same_advice_twice_gives_the_same_status_and_a_flip_moves_the_time() {
    let sizing = Sizing::Advised(advice(vec![]));
    let mut first = status_of(&["checkout", "search"]);
    apply_sizing(&mut first, &sizing, None, Some(1), &at(100));
    let mut again = status_of(&["checkout", "search"]);
    apply_sizing(&mut again, &sizing, Some(&first), Some(1), &at(200));
    assert_eq!(first, again, "nothing moves when the analysis says the same");

    let starved = Sizing::Advised(advice(vec![finding(FindingKind::StarvedAtCeiling, "checkout", "starved")]));
    let mut flipped = status_of(&["checkout", "search"]);
    apply_sizing(&mut flipped, &starved, Some(&again), Some(1), &at(300));
    let time = |s: &BulkheadStatus, t: &str| {
        s.conditions.iter().find(|c| c.type_ == t).map(|c| c.last_transition_time.clone()).expect("condition")
    };
    assert_eq!(time(&flipped, SIZED), at(300), "Sized flipped");
    assert_eq!(time(&flipped, ISOLATED_IN_USE), at(100), "IsolatedInUse did not");
}

#[test]
fn pending_keeps_what_the_status_says() {
    let mut before = status_of(&["checkout", "search"]);
    apply_sizing(
        &mut before,
        &Sizing::Advised(advice(vec![finding(FindingKind::StarvedAtCeiling, "checkout", "starved")])),
        None,
        Some(1),
        &at(100),
    );
    let mut after = status_of(&["checkout", "search"]);
    apply_sizing(&mut after, &Sizing::Pending, Some(&before), Some(1), &at(900));
    assert_eq!(before, after, "a restart writes nothing");
    let mut fresh = status_of(&["checkout"]);
    apply_sizing(&mut fresh, &Sizing::Pending, None, Some(1), &at(900));
    assert!(fresh.conditions.is_empty(), "no guess before the first analysis: {:?}", fresh.conditions);
}

#[test]
fn messages_stay_bounded() {
    let long = "x".repeat(10_000);
    let c = sized_condition(&Sizing::Advised(advice(vec![finding(FindingKind::StarvedAtCeiling, "checkout", &long)])));
    assert!(c.message.len() <= 1024, "{}", c.message.len());
}
