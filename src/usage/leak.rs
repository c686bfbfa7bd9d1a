//! Isolation-leak detection. While one class sits at its ceiling, the
//! partition promises that no other class notices. So, for each class S with
//! enough saturated windows (steps), and each other class A: compare A's
//! mean latency in the windows where S was at its ceiling (and A was not at
//! its own) with A's baseline, its latency in the windows where no class was
//! at its ceiling. A rise past `leak_ratio` × baseline and
//! `leak_min_rise_seconds` above it, the median over the saturated windows
//! and in at least `leak_consistency` of them, is a leak: something below
//! the pool (an upstream's workers, a connection pool, a CPU) is shared.

use super::{
    advice::{Finding, FindingKind},
    telemetry::Telemetry,
    thresholds::Thresholds,
};

pub(super) fn leaks(t: &Telemetry, th: &Thresholds) -> Vec<Finding> {
    let steps = t.steps();
    let quiet: Vec<usize> = (0..steps).filter(|&i| !t.classes.iter().any(|c| c.at_ceiling_in(i))).collect();
    let mut findings = Vec::new();
    for s in &t.classes {
        let saturated: Vec<usize> = (0..steps).filter(|&i| s.at_ceiling_in(i)).collect();
        if saturated.len() < th.leak_min_windows {
            continue;
        }
        for a in t.classes.iter().filter(|a| a.name != s.name) {
            let latency = |i: &usize| a.latency.get(*i).copied().flatten().filter(|v| v.is_finite());
            let base: Vec<f64> = quiet.iter().filter_map(latency).collect();
            let during: Vec<f64> = saturated.iter().filter(|&&i| !a.at_ceiling_in(i)).filter_map(latency).collect();
            if base.len() < th.leak_min_windows || during.len() < th.leak_min_windows {
                continue;
            }
            let (b, l) = (median(&base), median(&during));
            let bar = (b * th.leak_ratio).max(b + th.leak_min_rise_seconds);
            let risen = during.iter().filter(|v| **v > bar).count();
            if l > bar && risen as f64 >= th.leak_consistency * during.len() as f64 {
                findings.push(Finding {
                    kind: FindingKind::IsolationLeak,
                    classes: vec![s.name.clone(), a.name.clone()],
                    message: format!(
                        "while {s} was at its ceiling, {a}'s mean latency was {l:.1} ms against its baseline of \
                         {b:.1} ms (×{x:.1}; threshold ×{ratio} and +{rise:.0} ms) in {risen} of {n} windows of \
                         {step} s: a layer below the pool is shared",
                        s = s.name,
                        a = a.name,
                        l = l * 1e3,
                        b = b * 1e3,
                        x = if b > 0.0 { l / b } else { f64::INFINITY },
                        ratio = th.leak_ratio,
                        rise = th.leak_min_rise_seconds * 1e3,
                        n = during.len(),
                        step = t.step_seconds,
                    ),
                });
            }
        }
    }
    findings
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::telemetry::ClassSeries;

    /// 20 steps: `hot` at its ceiling in steps 10–19; `other` at 20 ms, and
    /// at `during` ms while `hot` is saturated.
    fn telemetry(during: f64) -> Telemetry {
        let hot = ClassSeries {
            name: "hot".into(),
            at_ceiling: (0..20).map(|i| Some(if i >= 10 { 1.0 } else { 0.0 })).collect(),
            latency: vec![Some(0.2); 20],
            ..ClassSeries::default()
        };
        let other = ClassSeries {
            name: "other".into(),
            at_ceiling: vec![Some(0.0); 20],
            latency: (0..20).map(|i| Some(if i >= 10 { during } else { 0.020 } + 0.001 * f64::from(i % 3))).collect(),
            ..ClassSeries::default()
        };
        Telemetry { step_seconds: 2, classes: vec![hot, other], ..Telemetry::default() }
    }

    #[test]
    fn a_rise_in_every_saturated_window_is_a_leak_naming_both_classes_and_the_numbers() {
        let f = leaks(&telemetry(0.080), &Thresholds::default());
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].classes, vec!["hot", "other"]);
        assert!(f[0].message.contains("81.0 ms against its baseline of 21.0 ms"), "{}", f[0].message);
        assert!(f[0].message.contains("in 10 of 10 windows"), "{}", f[0].message);
    }

    #[test]
    fn no_rise_or_a_small_one_is_no_leak() {
        assert!(leaks(&telemetry(0.020), &Thresholds::default()).is_empty());
        assert!(leaks(&telemetry(0.025), &Thresholds::default()).is_empty(), "×1.25 is under ×1.5");
    }

    #[test]
    fn a_rise_in_a_few_windows_only_is_not_consistent() {
        let mut t = telemetry(0.020);
        for i in [10, 11, 12] {
            t.classes[1].latency[i] = Some(0.5);
        }
        assert!(leaks(&t, &Thresholds::default()).is_empty());
    }
}
