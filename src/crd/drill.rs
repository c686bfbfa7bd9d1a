//! The `BulkheadDrill` custom resource: the pattern's verification step as
//! an object. A drill saturates one class of a Bulkhead (its sidecars hold
//! the class's requests like a hung dependency), measures every other class
//! against a baseline taken just before, and reports whether any moved.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::spec::DNS_LABEL_PATTERN;

/// Saturate one class of a Bulkhead and verify that the others do not notice.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "bulkhead.dev",
    version = "v1alpha1",
    kind = "BulkheadDrill",
    plural = "bulkheaddrills",
    doc = "A BulkheadDrill saturates one class of a Bulkhead and reports whether any other class's latency moved.",
    shortname = "bhd",
    category = "bulkhead-dev",
    status = "BulkheadDrillStatus",
    printcolumn = r#"{"name":"Bulkhead","type":"string","jsonPath":".spec.bulkhead"}"#,
    printcolumn = r#"{"name":"Class","type":"string","jsonPath":".spec.class"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Verdict","type":"string","jsonPath":".status.verdict"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Message","type":"string","priority":1,"jsonPath":".status.message"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct BulkheadDrillSpec {
    /// The Bulkhead drilled (it needs spec.workload.proxy: its sidecars place the fault).
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub bulkhead: String,
    /// The class to saturate. Never a critical class: that lane is what a drill must not harm.
    #[schemars(length(min = 1, max = 63))]
    pub class: String,
    /// How long the sidecars hold each of the class's admitted requests before forwarding it, like
    /// a dependency that hangs (a duration such as 30s; at most 10m). Default 30s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 16))]
    pub hold: Option<String>,
    /// How long the class is held saturated and the others measured (at most 10m). Default 60s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 16))]
    pub duration: Option<String>,
    /// How long the baseline is measured before the fault is placed (at most 2m). Default 20s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 16))]
    pub baseline: Option<String>,
    /// The traffic the drill sends itself, from the operator to every selected pod. Required:
    /// the verdict is measured from the client side, where a worker pool shared behind the
    /// sidecar shows (the sidecar's own figures cannot see it).
    pub load: DrillLoad,
}

/// The drill's own load: closed-loop HTTP/1.1 requests to each selected pod.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrillLoad {
    /// The pods' port the requests go to: the app's own port for an Egress proxy (the app calls
    /// out through its sidecar), or the proxy's port for an Ingress one.
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
    /// Request path; `{class}` is replaced by the class's name (e.g. /call/{class}). Default /.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256), regex(pattern = "^/[!-~]*$"))]
    pub path: Option<String>,
    /// A request header that names the class (the Ingress proxy's classifyHeader); none by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), regex(pattern = "^[A-Za-z0-9-]+$"))]
    pub class_header: Option<String>,
    /// The classes measured (the drilled class is always loaded). Default: every class. A
    /// critical class listed here is watched: any error or rejection of it aborts the drill.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub classes: Vec<String>,
    /// Requests per second sent to each measured class, over all pods (1 to 200). Default 20.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 200))]
    pub rate: Option<u32>,
    /// Requests of the drilled class kept in flight, over all pods (1 to 256). Default: its
    /// ceiling on every pod, plus 1, so that it reaches the ceiling and sees rejections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 256))]
    pub saturate: Option<u32>,
    /// The longest a measured request may take before it counts as an error (a duration;
    /// at most 60s). Default 5s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 16))]
    pub timeout: Option<String>,
}

/// What the drill found, as it went.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BulkheadDrillStatus {
    /// Pending, Baseline, Holding (the fault is in place), Lifting, Complete, or Refused (the
    /// spec cannot be drilled; the message names the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Isolated, Leak (the message names the classes that moved and by how much),
    /// Inconclusive (the message says why) or Aborted (the message says what stopped it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// What the drill is doing, or found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The Bulkhead's metadata.generation the drill ran against; a change of it aborts the drill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bulkhead_generation: Option<i64>,
    /// When the drill began, and when the fault was confirmed in place on every pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the fault was in force on every pod (the sidecars reported its config hash).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault_time: Option<Time>,
    /// When the verdict was reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// The pool-config hash that carried the fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault_config_hash: Option<String>,
    /// Most requests of the drilled class held at once on one pod, and its ceiling there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_peak: Option<u32>,
    /// The drilled class's ceiling on one pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<u32>,
    /// Each class's figures, before and during the fault.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<DrillClassFigures>,
    /// Complete: True once the drill reached a verdict (or was refused or aborted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// One class's figures in a drill.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrillClassFigures {
    /// The class.
    pub name: String,
    /// Whether this is the class the drill saturated.
    #[serde(default)]
    pub drilled: bool,
    /// Before the fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<DrillWindow>,
    /// While the fault held the drilled class saturated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub during: Option<DrillWindow>,
}

/// Latency and outcomes of one class over one window, measured by the drill's client.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrillWindow {
    /// Requests completed (answered or timed out).
    pub requests: u64,
    /// Median latency, milliseconds.
    pub p50_ms: f64,
    /// 99th-percentile latency, milliseconds.
    pub p99_ms: f64,
    /// Answers 503 or 429 (the bulkhead's rejection), percent of requests.
    pub rejected_percent: f64,
    /// Other failures: no connection, a timeout, another 5xx; percent of requests.
    pub error_percent: f64,
}

/// The drill phases, as status.phase spells them.
pub mod drill_phase {
    /// Not started yet.
    pub const PENDING: &str = "Pending";
    /// Measuring every class before the fault.
    pub const BASELINE: &str = "Baseline";
    /// The fault holds the drilled class; the others are measured.
    pub const HOLDING: &str = "Holding";
    /// The fault is being taken off every pod.
    pub const LIFTING: &str = "Lifting";
    /// The drill is over: status.verdict says how it went.
    pub const COMPLETE: &str = "Complete";
    /// The spec cannot be drilled; nothing was done.
    pub const REFUSED: &str = "Refused";
}

/// The verdicts, as status.verdict spells them.
pub mod drill_verdict {
    /// No other class's latency or errors moved while the class was saturated.
    pub const ISOLATED: &str = "Isolated";
    /// Another class's latency or errors moved: a layer below the pool is shared.
    pub const LEAK: &str = "Leak";
    /// The drill could not judge (the class never saturated, too little traffic).
    pub const INCONCLUSIVE: &str = "Inconclusive";
    /// The drill stopped before a verdict; the fault was lifted.
    pub const ABORTED: &str = "Aborted";
}
