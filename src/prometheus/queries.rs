//! The PromQL that reads one Bulkhead's telemetry, built from the proxy's
//! metric names and the `bulkhead` label, and the reduction of the answers
//! into the pure analysis's `Telemetry`.
//!
//! Every query aggregates by class (or over everything) on the server, so an
//! answer holds at most one series per class whatever the replica count.

use std::collections::BTreeMap;

use super::{
    client::{PrometheusClient, Series},
    error::PrometheusError,
};
use crate::usage::{ClassSeries, Telemetry};

/// The proxy's series (crates/bulkhead-admission/src/metrics.rs), as Prometheus names them.
pub mod names {
    pub const IN_FLIGHT: &str = "bulkhead_proxy_in_flight";
    pub const HIGH_WATER: &str = "bulkhead_proxy_in_flight_high_water";
    pub const BORROWED_HIGH_WATER: &str = "bulkhead_proxy_borrowed_high_water";
    pub const CEILING: &str = "bulkhead_proxy_class_ceiling";
    pub const CAPACITY: &str = "bulkhead_proxy_capacity";
    pub const SURPLUS: &str = "bulkhead_proxy_shared_surplus";
    pub const SURPLUS_IN_USE: &str = "bulkhead_proxy_shared_surplus_in_use";
    pub const DIVIDED_BY: &str = "bulkhead_proxy_divided_by";
    pub const REJECTED: &str = "bulkhead_proxy_rejected_total";
    pub const DURATION_SUM: &str = "bulkhead_proxy_request_duration_seconds_sum";
    pub const DURATION_COUNT: &str = "bulkhead_proxy_request_duration_seconds_count";
}
use names::*;

/// The window and step of one analysis, in whole seconds, ending at `end` (unix seconds).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Range {
    pub end: f64,
    pub window: u64,
    pub step: u64,
}

impl Range {
    fn start(&self) -> f64 {
        self.end - self.window as f64 + self.step as f64
    }

    /// Steps in the per-step series: one per `step` from start to end.
    fn steps(&self) -> usize {
        usize::try_from((self.window / self.step).max(1)).unwrap_or(usize::MAX)
    }

    fn index(&self, t: f64) -> Option<usize> {
        let i = ((t - self.start()) / self.step as f64).round();
        (i >= 0.0 && i < self.steps() as f64).then_some(i as usize)
    }
}

/// The queries, each for one Bulkhead (the label value escaped for PromQL).
pub struct Queries {
    selector: String,
}

impl Queries {
    pub fn new(bulkhead: &str) -> Self {
        let escaped = bulkhead.replace('\\', r"\\").replace('"', "\\\"");
        Queries { selector: format!("bulkhead=\"{escaped}\"") }
    }

    fn s(&self, metric: &str) -> String {
        format!("{metric}{{{}}}", self.selector)
    }

    fn rejected(&self) -> String {
        format!("{REJECTED}{{{},reason!=\"unclassified\"}}", self.selector)
    }

    pub fn replicas(&self, w: u64) -> String {
        format!("count(max_over_time({}[{w}s]))", self.s(CAPACITY))
    }
    pub fn divided_by(&self, w: u64) -> String {
        format!("max(max_over_time({}[{w}s]))", self.s(DIVIDED_BY))
    }
    pub fn peak(&self, w: u64) -> String {
        format!("max by (class) (max_over_time({}[{w}s]))", self.s(HIGH_WATER))
    }
    pub fn p95(&self, w: u64) -> String {
        format!("max by (class) (quantile_over_time(0.95, {}[{w}s]))", self.s(HIGH_WATER))
    }
    pub fn borrowed_peak(&self, w: u64) -> String {
        format!("max by (class) (max_over_time({}[{w}s]))", self.s(BORROWED_HIGH_WATER))
    }
    pub fn rejected_by_reason(&self, w: u64) -> String {
        format!("sum by (class, reason) (increase({}[{w}s]))", self.rejected())
    }
    /// Per step and class: the share of replicas whose high-water mark reached the ceiling.
    pub fn at_ceiling(&self, s: u64) -> String {
        format!(
            "avg by (class) (max_over_time({hw}[{s}s]) >= bool max_over_time({ceiling}[{s}s]))",
            hw = self.s(HIGH_WATER),
            ceiling = self.s(CEILING)
        )
    }
    /// Per step and class: mean request duration, from the histogram's sum and count.
    pub fn latency(&self, s: u64) -> String {
        format!(
            "sum by (class) (increase({}[{s}s])) / sum by (class) (increase({}[{s}s]))",
            self.s(DURATION_SUM),
            self.s(DURATION_COUNT)
        )
    }
    pub fn occupancy(&self, s: u64) -> String {
        format!("sum(avg_over_time({}[{s}s])) / sum(avg_over_time({}[{s}s]))", self.s(IN_FLIGHT), self.s(CAPACITY))
    }
    pub fn rejections(&self, s: u64) -> String {
        format!("sum(increase({}[{s}s]))", self.rejected())
    }
    /// Per step: the share of replicas (with a surplus at all) whose surplus was fully borrowed.
    pub fn surplus_exhausted(&self, s: u64) -> String {
        format!(
            "avg((max_over_time({used}[{s}s]) >= bool max_over_time({all}[{s}s])) and (max_over_time({all}[{s}s]) > 0))",
            used = self.s(SURPLUS_IN_USE),
            all = self.s(SURPLUS)
        )
    }
}

/// Read the telemetry of `bulkhead` over `range`. `NoSeries` when no proxy
/// of it reported in the window.
pub async fn read(client: &PrometheusClient, bulkhead: &str, range: Range) -> Result<Telemetry, PrometheusError> {
    let q = Queries::new(bulkhead);
    let (w, s, end) = (range.window, range.step, range.end);
    let (start, step) = (range.start(), range.step as f64);
    let instant = |promql: String| async move { client.query(&promql, end).await };
    let over = |promql: String| async move { client.query_range(&promql, start, end, step).await };
    let (replicas, divided_by, peak, p95, borrowed, rejected) = tokio::try_join!(
        instant(q.replicas(w)),
        instant(q.divided_by(w)),
        instant(q.peak(w)),
        instant(q.p95(w)),
        instant(q.borrowed_peak(w)),
        instant(q.rejected_by_reason(w)),
    )?;
    let replicas_seen = replicas
        .first()
        .map(|r| r.value)
        .filter(|v| *v >= 1.0)
        .ok_or_else(|| PrometheusError::NoSeries { bulkhead: bulkhead.to_owned(), window_seconds: w })?;
    let (at_ceiling, latency, occupancy, rejections, surplus) = tokio::try_join!(
        over(q.at_ceiling(s)),
        over(q.latency(s)),
        over(q.occupancy(s)),
        over(q.rejections(s)),
        over(q.surplus_exhausted(s)),
    )?;

    let mut by_class = ByClass::default();
    for r in &peak {
        by_class.get(&r.labels).peak_in_flight = whole(r.value);
    }
    for r in &p95 {
        by_class.get(&r.labels).p95_in_flight = whole(r.value);
    }
    for r in &borrowed {
        by_class.get(&r.labels).borrowed_peak = whole(r.value);
    }
    for r in &rejected {
        let reason = r.labels.get("reason").cloned().unwrap_or_default();
        let n = r.value.round();
        if n.is_finite() && n > 0.0 {
            by_class.get(&r.labels).rejected.insert(reason, n as u64);
        }
    }
    for series in &at_ceiling {
        by_class.get(&series.labels).at_ceiling = aligned(series, range);
    }
    for series in &latency {
        by_class.get(&series.labels).latency = aligned(series, range);
    }
    let single = |v: &[Series]| v.first().map(|s| aligned(s, range)).unwrap_or_else(|| vec![None; range.steps()]);
    Ok(Telemetry {
        window_seconds: w,
        step_seconds: s,
        replicas_seen: whole(replicas_seen),
        divided_by: divided_by.first().map(|d| u64::from(whole(d.value))).unwrap_or(1).max(1),
        classes: by_class.0.into_values().filter(|c| !c.name.is_empty()).collect(),
        rejections: single(&rejections).into_iter().map(|v| v.unwrap_or(0.0)).collect(),
        occupancy: single(&occupancy),
        surplus_exhausted: single(&surplus),
    })
}

#[derive(Default)]
struct ByClass(BTreeMap<String, ClassSeries>);

impl ByClass {
    fn get(&mut self, labels: &BTreeMap<String, String>) -> &mut ClassSeries {
        let name = labels.get("class").cloned().unwrap_or_default();
        self.0.entry(name.clone()).or_insert_with(|| ClassSeries { name, ..ClassSeries::default() })
    }
}

/// A series on the range's steps; a step with no point (or NaN: 0/0) is None.
fn aligned(series: &Series, range: Range) -> Vec<Option<f64>> {
    let mut out = vec![None; range.steps()];
    for &(t, v) in &series.points {
        if let (Some(i), true) = (range.index(t), v.is_finite()) {
            out[i] = Some(v);
        }
    }
    out
}

/// A count Prometheus returns as a float, as a whole number (rounded up: a
/// high-water mark is an integer; a quantile between two is the larger).
fn whole(v: f64) -> u32 {
    if v.is_finite() && v > 0.0 {
        v.ceil().min(f64::from(u32::MAX)) as u32
    } else {
        0
    }
}
