//! BulkheadDrill, pure: a drill spec read against its Bulkhead's plan, the
//! fault in the pool config, the verdict on recorded client-side telemetry
//! (and how small a coupling it finds, how often it cries wolf), and the
//! Bulkhead's VerifiedUnderLoad. No cluster.

use std::time::Duration;

use bulkhead::{
    crd::{Bulkhead, BulkheadDrill, BulkheadDrillSpec, ProxyMode},
    plan::{DrillFault, Plan, PlanConfig},
    pool_config::PoolConfig,
    select::Selection,
    snapshot::Snapshot,
    status::{
        drill::{judge, not_ready, settings, verified_under_load, Outcome, Recording, Sample, Saturation, Thresholds},
        ConditionStatus,
    },
};
use serde_json::json;

fn bulkhead(extra_class: &str) -> Bulkhead {
    serde_saphyr::from_str(&format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: shop, uid: u-1, generation: 3}}\nspec:\n  \
         dimension: Dependency\n  pool: {{resource: requests, capacity: 10}}\n  workload:\n    namespace: shop\n    \
         selector: {{matchLabels: {{app: api}}}}\n    proxy:\n      mode: Egress\n      routes:\n      \
         - {{class: payments, port: 9001, upstream: 'http://127.0.0.1:8081'}}\n      \
         - {{class: search, port: 9002, upstream: 'http://127.0.0.1:8081'}}\n  classes:\n  \
         - {{name: payments, reserved: 4}}\n  - {{name: search, reserved: 4}}\n  \
         - {{name: control-plane, reserved: 2, critical: true}}\n{extra_class}"
    ))
    .expect("fixture")
}

fn shop() -> Snapshot {
    let mut s = Snapshot::default();
    s.apply(&crate::fixtures::mk_namespace("shop", &[]));
    s.apply(
        &serde_json::from_value::<k8s_openapi::api::apps::v1::Deployment>(json!({
            "metadata": {"name": "api", "namespace": "shop", "generation": 1},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "api"}},
                     "template": {"metadata": {"labels": {"app": "api"}}, "spec": {"containers": [{"name": "app"}]}}},
        }))
        .expect("deployment"),
    );
    s
}

fn plan(bh: &Bulkhead, fault: Option<DrillFault>) -> Plan {
    let config = PlanConfig { proxy_image: Some("img:1".into()), fault, ..PlanConfig::default() };
    bulkhead::plan::plan(&Selection::parse(bh), &shop(), &config)
}

fn spec(yaml: &str) -> BulkheadDrillSpec {
    serde_saphyr::from_str(yaml).expect("drill spec")
}

const DRILL: &str = "bulkhead: shop\nclass: payments\nload: {port: 8080, path: '/call/{class}'}\n";

#[test]
fn a_drill_is_read_against_its_bulkhead_with_defaults_and_every_refusal_names_its_field() {
    let bh = bulkhead("");
    let p = plan(&bh, None);
    let s = settings(&spec(DRILL), &bh, &p, 2).expect("a drillable spec");
    assert_eq!(
        (s.hold, s.duration, s.baseline),
        (Duration::from_secs(30), Duration::from_secs(60), Duration::from_secs(20))
    );
    assert_eq!(s.ceiling, 4, "payments' ceiling on each pod");
    assert_eq!(s.load.saturate, 9, "the ceiling on both pods, plus one to see a rejection");
    assert_eq!(s.load.measured, vec!["search", "control-plane"], "every other class, by default");
    assert_eq!(s.load.path("search"), "/call/search");
    assert_eq!(s.mode, ProxyMode::Egress);
    assert_eq!(s.critical, vec!["control-plane"]);

    let refused = |yaml: &str| settings(&spec(yaml), &bh, &p, 2).expect_err("refused");
    let critical = refused("bulkhead: shop\nclass: control-plane\nload: {port: 8080}\n");
    assert!(critical.starts_with("spec.class: control-plane is a critical class"), "{critical}");
    assert!(refused("bulkhead: shop\nclass: nope\nload: {port: 8080}\n").starts_with("spec.class: nope is not a class"));
    assert!(refused("bulkhead: shop\nclass: payments\nhold: 11m\nload: {port: 8080}\n")
        .starts_with("spec.hold: 11m is outside"));
    assert!(
        refused("bulkhead: shop\nclass: payments\nduration: soon\nload: {port: 8080}\n").starts_with("spec.duration:")
    );
    assert!(
        refused("bulkhead: shop\nclass: payments\nbaseline: 1s\nload: {port: 8080}\n").starts_with("spec.baseline:")
    );
    assert!(refused("bulkhead: shop\nclass: payments\nload: {port: 8080, classes: [search, nope]}\n")
        .starts_with("spec.load.classes[1]: nope"));
    // An egress class without a route: its sidecar never sees its calls.
    let unrouted = bulkhead("  - {name: reports, reserved: 0}\n");
    let e =
        settings(&spec("bulkhead: shop\nclass: reports\nload: {port: 8080}\n"), &unrouted, &plan(&unrouted, None), 2)
            .expect_err("no route");
    assert!(e.starts_with("spec.class: reports has no route"), "{e}");
    // What a drill waits for rather than refuses: pods with the sidecar.
    assert!(not_ready(&p, 0).is_some_and(|w| w.contains("no running pod")));
    assert_eq!(not_ready(&p, 2), None);
}

#[test]
fn the_fault_reaches_only_its_bulkheads_drilled_class_and_changes_the_hash() {
    let bh = bulkhead("");
    let plain = plan(&bh, None);
    let fault = |bulkhead: &str, class: &str| DrillFault {
        bulkhead: bulkhead.into(),
        drill: "d1".into(),
        class: class.into(),
        hold_ms: 30_000,
        until_unix_ms: 1_900_000_000_000,
    };
    let faulted = plan(&bh, Some(fault("shop", "payments")));
    assert_ne!(
        plain.proxy.config_hash, faulted.proxy.config_hash,
        "the sidecars report the fault's config by its hash"
    );
    let config = |p: &Plan| -> PoolConfig {
        let cm = p.config_map.as_ref().expect("a config");
        serde_json::from_str(&cm.data.as_ref().expect("data")["pools.json"]).expect("pools.json")
    };
    let holds: Vec<(String, Option<u64>)> =
        config(&faulted).classes.iter().map(|c| (c.name.clone(), c.hold.as_ref().map(|h| h.ms))).collect();
    assert_eq!(holds, vec![("payments".into(), Some(30_000)), ("search".into(), None), ("control-plane".into(), None)]);
    assert_eq!(config(&faulted).validate(), Ok(()));
    // Another Bulkhead's fault, or one on the critical lane, changes nothing here.
    assert_eq!(plan(&bh, Some(fault("other", "payments"))).proxy.config_hash, plain.proxy.config_hash);
    assert_eq!(plan(&bh, Some(fault("shop", "control-plane"))).proxy.config_hash, plain.proxy.config_hash);
}

// --- the verdict on recorded telemetry -------------------------------------

/// A deterministic noise source (SplitMix64), so every run judges the same samples.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A latency around `ms` with a long right tail, as a real app's.
    fn latency(&mut self, ms: f64) -> Duration {
        let u = self.next().max(1e-9);
        let tail = if self.next() < 0.02 { 4.0 } else { 1.0 };
        Duration::from_secs_f64(ms * (0.7 + 0.6 * u) * tail / 1000.0)
    }
}

/// 20 s of baseline and 30 s of fault at 10 requests per second per class:
/// `other` answers around `base` ms, plus `rise` ms during the fault, and
/// `failing` of its fault requests time out (5 s).
fn recording(seed: u64, base: f64, rise: f64, failing: f64) -> Recording {
    let mut noise = Noise(seed);
    let mut samples = Vec::new();
    for tenth in 0..500u64 {
        let at = Duration::from_millis(tenth * 100);
        let during = at >= Duration::from_secs(20);
        let drilled = if during {
            let rejected = noise.next() < 0.3;
            Sample {
                class: 0,
                at,
                latency: Duration::from_millis(if rejected { 5 } else { 30_000 }),
                outcome: if rejected { Outcome::Rejected } else { Outcome::Ok },
            }
        } else {
            Sample { class: 0, at, latency: noise.latency(base), outcome: Outcome::Ok }
        };
        samples.push(drilled);
        let timed_out = during && noise.next() < failing;
        let latency =
            if timed_out { Duration::from_secs(5) } else { noise.latency(base + if during { rise } else { 0.0 }) };
        samples.push(Sample { class: 1, at, latency, outcome: if timed_out { Outcome::Error } else { Outcome::Ok } });
    }
    Recording {
        classes: vec!["payments".into(), "search".into()],
        drilled: 0,
        samples,
        baseline: (Duration::ZERO, Duration::from_secs(20)),
        during: (Duration::from_secs(20), Duration::from_secs(50)),
    }
}

const SATURATED: Saturation = Saturation { held_peak: 4, ceiling: 4 };

#[test]
fn a_class_that_does_not_move_is_isolated_and_one_that_does_is_a_leak_with_its_figures() {
    let th = Thresholds::default();
    let isolated = judge(&recording(1, 12.0, 0.0, 0.0), SATURATED, ProxyMode::Egress, &th);
    assert_eq!(isolated.verdict, "Isolated", "{}", isolated.message);
    assert!(isolated.message.contains("search p50"), "{}", isolated.message);
    let search = &isolated.figures[1];
    assert_eq!((search.name.as_str(), search.drilled), ("search", false));
    assert_eq!(search.baseline.as_ref().map(|w| w.requests), Some(200));
    assert!(
        isolated.figures[0].during.as_ref().is_some_and(|w| w.rejected_percent > 20.0),
        "the drilled class was rejected past its ceiling"
    );

    let slower = judge(&recording(1, 12.0, 30.0, 0.0), SATURATED, ProxyMode::Egress, &th);
    assert_eq!(slower.verdict, "Leak", "{}", slower.message);
    assert_eq!(slower.moved, vec!["search"]);
    assert!(slower.message.contains("search p50 1") && slower.message.contains("ms"), "{}", slower.message);

    // A shared worker pool first shows as requests that never come back.
    let stalled = judge(&recording(1, 12.0, 0.0, 0.5), SATURATED, ProxyMode::Egress, &th);
    assert_eq!(stalled.verdict, "Leak", "{}", stalled.message);
    assert!(stalled.message.contains("errors 0.0 →"), "{}", stalled.message);
}

#[test]
fn a_drill_that_proves_nothing_says_why() {
    let th = Thresholds::default();
    let unsaturated =
        judge(&recording(2, 12.0, 0.0, 0.0), Saturation { held_peak: 2, ceiling: 4 }, ProxyMode::Egress, &th);
    // The recording's drilled class saw rejections: that alone shows its ceiling.
    assert_eq!(unsaturated.verdict, "Isolated");
    let mut quiet = recording(2, 12.0, 0.0, 0.0);
    quiet.samples.retain(|s| !(s.class == 0 && s.outcome == Outcome::Rejected));
    let never = judge(&quiet, Saturation { held_peak: 2, ceiling: 4 }, ProxyMode::Egress, &th);
    assert_eq!(never.verdict, "Inconclusive");
    assert!(never.message.contains("never reached its ceiling"), "{}", never.message);
    let mut thin = recording(2, 12.0, 0.0, 0.0);
    thin.samples.retain(|s| s.class == 0 || s.at.as_millis() % 2000 == 0);
    let thin = judge(&thin, SATURATED, ProxyMode::Egress, &th);
    assert_eq!(thin.verdict, "Inconclusive");
    assert!(thin.message.contains("too little traffic"), "{}", thin.message);
    // A leak is a leak whether or not the ceiling was reached (a shared pool keeps it from being reached).
    let mut leaky = recording(2, 12.0, 0.0, 0.6);
    leaky.samples.retain(|s| !(s.class == 0 && s.outcome == Outcome::Rejected));
    assert_eq!(judge(&leaky, Saturation { held_peak: 3, ceiling: 4 }, ProxyMode::Egress, &th).verdict, "Leak");
}

#[test]
fn an_ingress_drill_says_it_proves_the_proxys_isolation_only() {
    let j = judge(&recording(3, 12.0, 0.0, 0.0), SATURATED, ProxyMode::Ingress, &Thresholds::default());
    assert_eq!(j.verdict, "Isolated");
    assert!(j.message.contains("the proxy's own isolation, not the app's"), "{}", j.message);
}

/// How small a coupling the verdict finds and how often it finds one that
/// is not there, over 500 recordings each (a 12 ms app with a 2 % tail).
#[test]
fn the_smallest_coupling_found_and_the_false_positive_rate() {
    let th = Thresholds::default();
    let rate = |rise: f64| {
        let leaks = (0..500)
            .filter(|seed| {
                judge(&recording(1000 + seed, 12.0, rise, 0.0), SATURATED, ProxyMode::Egress, &th).verdict == "Leak"
            })
            .count();
        leaks as f64 / 500.0
    };
    let false_positives = rate(0.0);
    println!("false positives with no coupling: {:.1} %", false_positives * 100.0);
    for rise in [3.0, 5.0, 6.0, 7.0, 8.0, 10.0] {
        println!("+{rise} ms on a 12 ms median: found in {:.1} %", rate(rise) * 100.0);
    }
    assert!(false_positives < 0.01, "{false_positives}");
    // The bar is advise's: 1.5× the baseline (18 ms here) in 75 % of the windows.
    assert!(rate(10.0) > 0.95, "a rise of 10 ms (1.8×) is found");
    assert!(rate(3.0) < 0.05, "a rise under the 5 ms floor is not called a leak");
}

// --- VerifiedUnderLoad -------------------------------------------------------

fn finished(name: &str, verdict: &str, at: &str, generation: i64) -> BulkheadDrill {
    serde_json::from_value(json!({
        "apiVersion": "bulkhead.dev/v1alpha1", "kind": "BulkheadDrill",
        "metadata": {"name": name},
        "spec": {"bulkhead": "shop", "class": "payments", "load": {"port": 8080}},
        "status": {"phase": "Complete", "verdict": verdict, "message": format!("{verdict} found"),
                   "completionTime": at, "bulkheadGeneration": generation},
    }))
    .expect("drill")
}

#[test]
fn verified_under_load_follows_the_last_drill_that_judged_the_current_spec() {
    let bh = bulkhead("");
    let c = verified_under_load(&bh, []).expect("a Bulkhead with a proxy has the condition");
    assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::Unknown, "NotDrilled"));
    let isolated = finished("d1", "Isolated", "2026-12-06T10:00:00Z", 3);
    let leak = finished("d2", "Leak", "2026-12-06T11:00:00Z", 3);
    let aborted = finished("d3", "Aborted", "2026-12-06T12:00:00Z", 3);
    let c = verified_under_load(&bh, [&leak, &isolated, &aborted]).expect("condition");
    assert_eq!(
        (c.status, c.reason.as_str()),
        (ConditionStatus::False, "LatencyCoupled"),
        "the latest verdict, aborted ones skipped"
    );
    assert!(c.message.starts_with("drill d2 at 2026-12-06T11:00:00Z: Leak found"), "{}", c.message);
    let c = verified_under_load(&bh, [&isolated]).expect("condition");
    assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::True, "NoLatencyCoupling"));
    let c = verified_under_load(&bh, [&aborted]).expect("condition");
    assert_eq!(c.reason, "NotDrilled");
    assert!(c.message.contains("d3, was aborted"), "{}", c.message);
    let mut changed = bh.clone();
    changed.metadata.generation = Some(4);
    let c = verified_under_load(&changed, [&isolated]).expect("condition");
    assert_eq!(c.reason, "NotDrilled", "a spec changed since the drill is not verified by it");
    let inconclusive = finished("d4", "Inconclusive", "2026-12-06T13:00:00Z", 3);
    assert_eq!(verified_under_load(&bh, [&isolated, &inconclusive]).expect("c").reason, "Inconclusive");
    let mut unproxied = bh.clone();
    unproxied.spec.workload.as_mut().expect("workload").proxy = None;
    assert_eq!(verified_under_load(&unproxied, [&isolated]), None, "no sidecar, no drill, no condition");
}
