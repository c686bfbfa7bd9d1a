//! What the I/O layer reads from Prometheus for one Bulkhead over one
//! window, already reduced to what the analysis needs. Per-step series are
//! aligned: index `i` of every one is the same step of `step_seconds`.

use std::collections::BTreeMap;

/// The proxies' telemetry of one Bulkhead over one window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Telemetry {
    pub window_seconds: u64,
    /// Length of one step of the per-step series (a leak-detection window).
    pub step_seconds: u64,
    /// Distinct proxy replicas that reported in the window.
    pub replicas_seen: u32,
    /// pools.json's `dividedBy` (the largest seen): how many replicas a Fleet
    /// pool was split over, to turn per-replica figures into spec units.
    pub divided_by: u64,
    pub classes: Vec<ClassSeries>,
    /// Per step: requests rejected (ceiling or surplus-exhausted, all classes).
    pub rejections: Vec<f64>,
    /// Per step: units in flight over capacity, summed over replicas (0–1).
    pub occupancy: Vec<Option<f64>>,
    /// Per step: share of replicas whose shared surplus was fully borrowed.
    pub surplus_exhausted: Vec<Option<f64>>,
}

/// One class's figures. In-flight figures are per replica, as a proxy counts them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClassSeries {
    pub name: String,
    /// Highest in-flight on any replica in the window (from the high-water mark).
    pub peak_in_flight: u32,
    /// 95th percentile of the high-water samples, on the busiest replica.
    pub p95_in_flight: u32,
    /// Requests rejected in the window, by reason.
    pub rejected: BTreeMap<String, u64>,
    /// Most surplus units the class held at once on one replica.
    pub borrowed_peak: u32,
    /// Per step: share of replicas on which the class reached its ceiling.
    pub at_ceiling: Vec<Option<f64>>,
    /// Per step: mean request duration in seconds (None: no request ended).
    pub latency: Vec<Option<f64>>,
}

impl Telemetry {
    pub fn class(&self, name: &str) -> Option<&ClassSeries> {
        self.classes.iter().find(|c| c.name == name)
    }

    /// Steps in the per-step series.
    pub fn steps(&self) -> usize {
        self.classes
            .iter()
            .flat_map(|c| [c.at_ceiling.len(), c.latency.len()])
            .chain([self.rejections.len(), self.occupancy.len(), self.surplus_exhausted.len()])
            .max()
            .unwrap_or(0)
    }
}

impl ClassSeries {
    /// Share of the window (0–1) the class spent at its ceiling: the mean,
    /// over the steps with a sample, of the share of replicas at it.
    pub fn time_at_ceiling(&self) -> f64 {
        let (sum, n) = self.at_ceiling.iter().flatten().fold((0.0, 0u32), |(s, n), v| (s + v.clamp(0.0, 1.0), n + 1));
        if n == 0 {
            0.0
        } else {
            sum / f64::from(n)
        }
    }

    pub fn rejected_at_ceiling(&self) -> u64 {
        self.rejected.get("ceiling").copied().unwrap_or(0)
    }

    /// Whether the class was at its ceiling in step `i` on some replica.
    pub fn at_ceiling_in(&self, i: usize) -> bool {
        self.at_ceiling.get(i).copied().flatten().is_some_and(|v| v > 0.0)
    }
}
