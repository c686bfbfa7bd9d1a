//! The thresholds behind the findings and the recommendation, named so that
//! every message can quote the one it crossed.

/// When a figure becomes a finding. `Default` is what `bulkhead advise` and
/// the operator use.
#[derive(Clone, Debug, PartialEq)]
pub struct Thresholds {
    /// StarvedAtCeiling: at its ceiling (and rejecting there) for more than this share of the window.
    pub starved_share: f64,
    /// ReservationIdle: p95 under this share of the reservation (while another class starved).
    pub idle_ratio: f64,
    /// UtilisationCollapse: rejections while overall occupancy was under this share.
    pub collapse_occupancy: f64,
    /// UtilisationCollapse: at least this many such rejections (a stray one is not a collapse).
    pub collapse_min_rejections: u64,
    /// SurplusExhausted: the surplus fully borrowed for more than this share of the window.
    pub surplus_exhausted_share: f64,
    /// A starved class's ceiling grows by this factor (its true demand is above what was seen).
    pub ceiling_growth: f64,
    /// IsolationLeak: another class's latency at least this many times its baseline…
    pub leak_ratio: f64,
    /// …and at least this much above it, in seconds (a rise from 1 ms to 2 ms is noise)…
    pub leak_min_rise_seconds: f64,
    /// …in at least this share of the saturated windows…
    pub leak_consistency: f64,
    /// …of which there are at least this many (and as many baseline windows).
    pub leak_min_windows: usize,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            starved_share: 0.05,
            idle_ratio: 0.5,
            collapse_occupancy: 0.5,
            collapse_min_rejections: 10,
            surplus_exhausted_share: 0.25,
            ceiling_growth: 1.5,
            leak_ratio: 1.5,
            leak_min_rise_seconds: 0.005,
            leak_consistency: 0.75,
            leak_min_windows: 3,
        }
    }
}
