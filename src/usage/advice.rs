//! The advice for one Bulkhead over one window: per-class figures, the
//! fundable recommendation, and the findings a person should act on. The
//! same shape is printed by `bulkhead advise -o json` and kept in status.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The analysis of one Bulkhead over one window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Advice {
    pub bulkhead: String,
    /// Length of the window analysed, in seconds.
    pub window_seconds: u64,
    /// Length of one step of the window: the unit of timeAtCeiling and of a leak's windows.
    pub step_seconds: u64,
    /// Distinct proxy replicas that reported in the window.
    pub replicas_seen: u32,
    /// spec.pool.capacity (spec units).
    pub capacity: u32,
    /// The shared surplus in force (spec units).
    pub shared_surplus: u32,
    /// Capacity minus the recommended floors: the surplus once the advice is applied.
    pub recommended_shared_surplus: u32,
    pub classes: Vec<ClassUsage>,
    pub findings: Vec<Finding>,
}

impl Advice {
    /// Whether any class had a request in the window (in flight or
    /// rejected): without one there is nothing to advise on.
    pub fn saw_traffic(&self) -> bool {
        self.classes.iter().any(|c| c.peak_in_flight > 0 || c.rejected.values().any(|n| *n > 0))
    }
}

/// One class's use against its reservation. `reserved`, `ceiling` and the
/// recommendations are in the units of `spec.classes[]` (so a patch applies
/// them as they are); the in-flight figures are per replica, as a proxy
/// counts them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassUsage {
    pub name: String,
    pub reserved: u32,
    pub ceiling: u32,
    /// Highest in-flight on any one replica in the window.
    pub peak_in_flight: u32,
    /// 95th percentile of the per-replica in-flight samples.
    pub p95_in_flight: u32,
    /// Requests rejected in the window, by reason (`ceiling`, `surplus-exhausted`).
    pub rejected: BTreeMap<String, u64>,
    /// Share of the window (0–1) this class spent at its ceiling.
    pub time_at_ceiling: f64,
    /// Most surplus units this class held at once on one replica.
    pub borrowed_peak: u32,
    pub recommended_reserved: u32,
    pub recommended_ceiling: u32,
}

/// Something the window shows that a person should act on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    pub kind: FindingKind,
    /// The classes involved: for `IsolationLeak`, the saturated class first.
    pub classes: Vec<String>,
    /// The numbers behind the finding, in one sentence.
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
pub enum FindingKind {
    /// Rejected at its ceiling for more than the allowed share of the window.
    StarvedAtCeiling,
    /// p95 under half its reservation while another class was starved.
    ReservationIdle,
    /// Rejections while overall occupancy stayed under half of capacity.
    UtilisationCollapse,
    /// The shared surplus was fully borrowed for a long share of the window.
    SurplusExhausted,
    /// Another class's latency rose while one class sat at its ceiling.
    IsolationLeak,
}

impl FindingKind {
    /// The name used as a condition reason and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::StarvedAtCeiling => "StarvedAtCeiling",
            FindingKind::ReservationIdle => "ReservationIdle",
            FindingKind::UtilisationCollapse => "UtilisationCollapse",
            FindingKind::SurplusExhausted => "SurplusExhausted",
            FindingKind::IsolationLeak => "IsolationLeak",
        }
    }
}
