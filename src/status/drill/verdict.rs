//! The verdict of a drill, from what its client recorded: every measured
//! class's latency and outcomes before the fault and while the drilled class
//! was held at its ceiling.
//!
//! The rule is the one `bulkhead advise` uses for an isolation leak in the
//! telemetry (`usage::Thresholds`): a class leaks when its median latency
//! rises past `ratio` × its baseline and at least `min_rise` above it, in at
//! least `consistency` of the one-second windows of the fault. A drill adds
//! one rule the telemetry cannot: requests that fail (time out, lose their
//! connection) where they did not before are a leak too, whatever their
//! latency; a worker pool shared behind the sidecar shows first that way.

use std::time::Duration;

use crate::crd::{drill_verdict, DrillClassFigures, DrillWindow, ProxyMode};

/// How one request ended, as the drill's client saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Answered, not 429 or 503.
    Ok,
    /// 429 or 503: the bulkhead (or the app) refused it.
    Rejected,
    /// No answer within the timeout, no connection, or a broken answer.
    Error,
}

/// One request: its class (index into `Recording::classes`), when it ended
/// (since the drill began), how long it took, and how it ended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    pub class: usize,
    pub at: Duration,
    pub latency: Duration,
    pub outcome: Outcome,
}

/// What a drill's client recorded.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recording {
    /// The classes loaded; `drilled` indexes the saturated one.
    pub classes: Vec<String>,
    pub drilled: usize,
    pub samples: Vec<Sample>,
    /// The baseline window and the fault's, since the drill began.
    pub baseline: (Duration, Duration),
    pub during: (Duration, Duration),
}

/// Whether the drilled class reached its ceiling: the sidecars' `held=`
/// (the most held at once on one pod) and the rejections the client saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Saturation {
    pub held_peak: u32,
    pub ceiling: u32,
}

/// The bar a class's latency must clear to count as moved.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    pub ratio: f64,
    pub min_rise: Duration,
    pub consistency: f64,
    /// Windows with answers a class needs in each phase to be judged.
    pub min_windows: usize,
    /// Requests a class needs in each phase to be judged.
    pub min_requests: u64,
    /// Percentage points of failures above the baseline's that count as a leak.
    pub error_rise_percent: f64,
}

impl Default for Thresholds {
    /// advise's leak rule (`usage::Thresholds::default()`): 1.5×, +5 ms, 75 % of 3 or more windows.
    fn default() -> Self {
        let usage = crate::usage::Thresholds::default();
        Self {
            ratio: usage.leak_ratio,
            min_rise: Duration::from_secs_f64(usage.leak_min_rise_seconds),
            consistency: usage.leak_consistency,
            min_windows: usage.leak_min_windows,
            min_requests: 20,
            error_rise_percent: 5.0,
        }
    }
}

/// The verdict, its message, and each class's figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Judgement {
    pub verdict: &'static str,
    pub message: String,
    pub figures: Vec<DrillClassFigures>,
    /// The classes whose latency or errors moved.
    pub moved: Vec<String>,
}

pub fn judge(rec: &Recording, saturation: Saturation, mode: ProxyMode, th: &Thresholds) -> Judgement {
    let in_window = |s: &&Sample, (from, to): (Duration, Duration)| s.at >= from && s.at < to;
    let of = |class: usize, window| rec.samples.iter().filter(move |s| s.class == class && in_window(s, window));
    let figures: Vec<DrillClassFigures> = rec
        .classes
        .iter()
        .enumerate()
        .map(|(i, name)| DrillClassFigures {
            name: name.clone(),
            drilled: i == rec.drilled,
            baseline: Some(window_figures(of(i, rec.baseline))),
            during: Some(window_figures(of(i, rec.during))),
        })
        .collect();
    let drilled = &rec.classes[rec.drilled];
    let mut moved = Vec::new();
    let mut reasons = Vec::new();
    let mut thin = Vec::new();
    for (i, name) in rec.classes.iter().enumerate().filter(|(i, _)| *i != rec.drilled) {
        let (base, during) = (windows(of(i, rec.baseline), rec.baseline), windows(of(i, rec.during), rec.during));
        let (fb, fd) = (figures[i].baseline.clone().unwrap_or_default(), figures[i].during.clone().unwrap_or_default());
        let answered = |w: &[Vec<Sample>]| w.iter().filter(|w| !w.is_empty()).count();
        if fb.requests < th.min_requests || answered(&base) < th.min_windows {
            thin.push(format!("{name} ({} requests in the baseline)", fb.requests));
            continue;
        }
        if fd.requests < th.min_requests.min(3) && answered(&during) == 0 {
            // Nothing came back at all during the fault: the class stalled.
            moved.push(name.clone());
            reasons.push(format!(
                "{name} got no answer at all while {drilled} was held (baseline p50 {:.1} ms)",
                fb.p50_ms
            ));
            continue;
        }
        let b = median(&base.iter().flatten().map(|s| s.latency).collect::<Vec<_>>());
        let bar = b.mul_f64(th.ratio).max(b + th.min_rise);
        let judged: Vec<Duration> = during
            .iter()
            .filter(|w| !w.is_empty())
            .map(|w| median(&w.iter().map(|s| s.latency).collect::<Vec<_>>()))
            .collect();
        let risen = judged.iter().filter(|m| **m > bar).count();
        let latency_moved = !judged.is_empty() && risen as f64 >= th.consistency * judged.len() as f64;
        let errors_moved = fd.error_percent > fb.error_percent + th.error_rise_percent;
        if latency_moved || errors_moved {
            moved.push(name.clone());
            let mut why = format!(
                "{name} p50 {:.1} → {:.1} ms, p99 {:.1} → {:.1} ms",
                fb.p50_ms, fd.p50_ms, fb.p99_ms, fd.p99_ms
            );
            if latency_moved {
                why.push_str(&format!(" (over {:.1} ms in {risen} of {} windows)", ms(bar), judged.len()));
            }
            if errors_moved {
                why.push_str(&format!(", errors {:.1} → {:.1} %", fb.error_percent, fd.error_percent));
            }
            reasons.push(why);
        }
    }
    let measured = rec.classes.len() - 1;
    let caveat = match mode {
        ProxyMode::Ingress => {
            "; the fault sat in the ingress sidecar, in front of the app, so this shows the proxy's own isolation, \
             not the app's: drill an Egress proxy to find a worker pool shared behind it"
        }
        ProxyMode::Egress => "",
    };
    let df = figures[rec.drilled].during.clone().unwrap_or_default();
    let saturated = saturation.held_peak >= saturation.ceiling || df.rejected_percent > 0.0;
    let held = format!(
        "{drilled} held {} of its ceiling {} on one pod, {:.1} % of its requests rejected",
        saturation.held_peak, saturation.ceiling, df.rejected_percent
    );
    let (verdict, message) = if !moved.is_empty() {
        (drill_verdict::LEAK, format!("while {held}, {} moved: {}{caveat}", moved.join(", "), reasons.join("; ")))
    } else if measured == 0 || thin.len() == measured {
        let why = if measured == 0 {
            "no other class was loaded".to_string()
        } else {
            format!("too little traffic to judge: {}", thin.join(", "))
        };
        (drill_verdict::INCONCLUSIVE, why)
    } else if !saturated {
        (
            drill_verdict::INCONCLUSIVE,
            format!(
                "{drilled} never reached its ceiling (held at most {} of {} on one pod, no rejection): the drill did not saturate it; raise spec.load.saturate",
                saturation.held_peak, saturation.ceiling
            ),
        )
    } else {
        let others: Vec<String> = figures
            .iter()
            .filter(|f| !f.drilled && !thin.iter().any(|t| t.starts_with(&format!("{} (", f.name))))
            .map(|f| {
                let (b, d) = (f.baseline.clone().unwrap_or_default(), f.during.clone().unwrap_or_default());
                format!("{} p50 {:.1} → {:.1} ms", f.name, b.p50_ms, d.p50_ms)
            })
            .collect();
        let unjudged = if thin.is_empty() {
            String::new()
        } else {
            format!("; not judged, too little traffic: {}", thin.join(", "))
        };
        (
            drill_verdict::ISOLATED,
            format!(
                "while {held}, no other class moved: {} (bar: {}× and +{} ms in {:.0} % of 1 s windows){unjudged}{caveat}",
                others.join(", "),
                th.ratio,
                th.min_rise.as_millis(),
                th.consistency * 100.0
            ),
        )
    };
    Judgement { verdict, message, figures, moved }
}

/// The samples of one phase, cut into one-second windows.
fn windows<'a>(samples: impl Iterator<Item = &'a Sample>, (from, to): (Duration, Duration)) -> Vec<Vec<Sample>> {
    let count = usize::try_from((to.saturating_sub(from)).as_secs().max(1)).unwrap_or(usize::MAX).min(3600);
    let mut out = vec![Vec::new(); count];
    for s in samples {
        let i = usize::try_from(s.at.saturating_sub(from).as_secs()).unwrap_or(usize::MAX).min(count - 1);
        out[i].push(*s);
    }
    out
}

fn window_figures<'a>(samples: impl Iterator<Item = &'a Sample>) -> DrillWindow {
    let samples: Vec<&Sample> = samples.collect();
    let n = samples.len() as u64;
    let mut latencies: Vec<Duration> = samples.iter().map(|s| s.latency).collect();
    latencies.sort_unstable();
    let percent = |o: Outcome| {
        if n == 0 {
            0.0
        } else {
            round1(100.0 * samples.iter().filter(|s| s.outcome == o).count() as f64 / n as f64)
        }
    };
    DrillWindow {
        requests: n,
        p50_ms: round1(ms(quantile(&latencies, 0.5))),
        p99_ms: round1(ms(quantile(&latencies, 0.99))),
        rejected_percent: percent(Outcome::Rejected),
        error_percent: percent(Outcome::Error),
    }
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn median(values: &[Duration]) -> Duration {
    let mut v = values.to_vec();
    v.sort_unstable();
    quantile(&v, 0.5)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}
