//! `status` of a Bulkhead: what the operator (or `bulkhead check`) found.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::vocabulary::{Layer, Scope};

/// What the operator planned and found. Written only by the operator.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BulkheadStatus {
    /// The metadata.generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready, Funded, ControlPlaneLane, QuotasScoped, NodeGroupsReady, Placed,
    /// Isolated, ProxyInjected, Enforced, ShuffleSharded (those that apply to
    /// the spec), Sized and IsolatedInUse (from the proxies' telemetry, in a
    /// cluster), VerifiedUnderLoad (from the last BulkheadDrill).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Number of classes (a printer column).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_count: Option<u32>,
    /// The planned pool as a whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolStatus>,
    /// The planned numbers per class.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<ClassStatus>,
    /// Per layer of the stack, whether the classes share it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<LayerStatus>,
    /// With spec.workload.proxy, in a cluster: which pool config the running
    /// pods' sidecars enforce, as the operator asked them (the `Enforced`
    /// condition says what to make of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<EnforcementStatus>,
}

/// What the sidecars of the selected pods enforce.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnforcementStatus {
    /// Content hash of the planned pool config (FNV-1a 64 of pools.json, hex),
    /// as each sidecar reports it on /readyz and in bulkhead_proxy_config_info.
    pub config_hash: String,
    /// Running pods spec.workload selects.
    pub pods: u32,
    /// Of those, the pods whose sidecar reported the planned config.
    pub converged: u32,
    /// Pods not (yet) known to enforce it: lagging, unreachable, without the
    /// sidecar (the first 10, by name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lagging: Vec<String>,
    /// Seconds from the operator's write of a pool config until every pod
    /// enforced it, for the last config that got there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_convergence_seconds: Option<f64>,
}

/// The planned pool.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolStatus {
    /// Scope of spec.pool.
    pub scope: Scope,
    /// spec.pool.capacity.
    pub capacity: u32,
    /// Sum of the classes' reservations.
    pub reserved_total: u64,
    /// The shared surplus in force (spec or default).
    pub shared_surplus: u32,
    /// Current desired replicas of spec.workload, when it was found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u64>,
    /// maxReplicas of HorizontalPodAutoscalers that target the workload, summed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<u64>,
    /// Capacity one replica enforces (Fleet: capacity split over the replicas
    /// that run: the desired count, or the running pods while there are more).
    pub per_replica_capacity: u32,
    /// Capacity the whole fleet may hold: at the current replica count, and at maxReplicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet_capacity: Option<u64>,
    /// Fleet capacity at maxReplicas (Instance scope multiplies with replicas;
    /// a Fleet pool is split again over maxReplicas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet_capacity_at_max: Option<u64>,
}

/// Planned numbers of one class.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassStatus {
    /// Class name.
    pub name: String,
    /// Floor, as declared (per replica for Instance, fleet-wide for Fleet).
    pub reserved: u32,
    /// Ceiling in force (declared or reserved + sharedSurplus).
    pub ceiling: u32,
    /// Units the class may borrow from the shared surplus (ceiling - reserved).
    pub borrowable: u32,
    /// Units left to every other class when this one saturates (capacity - ceiling).
    pub left_to_others: u32,
    /// Floor one replica enforces.
    pub reserved_per_replica: u32,
    /// Ceiling one replica enforces.
    pub ceiling_per_replica: u32,
    /// Under spec.shuffleSharding: the nodes of this class's shard, in the
    /// order they were drawn (the operator keeps it while those nodes last).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shard: Vec<String>,
    /// What the proxies' telemetry showed of this class over the last
    /// analysis window (only with the operator's --prometheus-url; the
    /// Sized condition says what to make of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ClassUsageStatus>,
}

/// One class's use over the analysis window, per replica as a proxy counts
/// it; `recommended*` are in the units of spec.classes[] (never applied by
/// the operator). A fixed set of figures, so its size does not grow with
/// the window or the traffic.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassUsageStatus {
    /// Highest in-flight on any one replica.
    pub peak_in_flight: u32,
    /// 95th percentile of the per-replica in-flight samples.
    pub p95_in_flight: u32,
    /// Requests rejected at the class's ceiling.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub rejected_at_ceiling: u64,
    /// Requests rejected for any other reason (the surplus exhausted, say).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub rejected_other: u64,
    /// Share of the window spent at the ceiling, in thousandths (0-1000).
    pub time_at_ceiling_permille: u32,
    /// Most surplus units the class held at once on one replica.
    pub borrowed_peak: u32,
    /// Reservation the telemetry supports (fundable with the others').
    pub recommended_reserved: u32,
    /// Ceiling the telemetry supports.
    pub recommended_ceiling: u32,
}

/// One layer's verdict.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LayerStatus {
    /// The layer.
    pub name: Layer,
    /// Whether spec.layers requires it.
    pub required: bool,
    /// Separate, Shared or Unverified.
    pub state: LayerState,
    /// Pairs of classes that are not Separate, with evidence: at most 10,
    /// Shared first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pairs: Vec<PairStatus>,
    /// Pairs that are not Separate beyond those listed. The status lists a
    /// bounded number per layer so that it stays small (etcd holds an object
    /// of at most 1.5 MiB) whatever the number of classes; `state` and the
    /// Isolated condition count every pair.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unlisted_pairs: u32,
    /// Node only, when a class holds a node group: Enforced when the operator's admission
    /// webhook refuses pods that reach another class's nodes. Absent: node groups are only
    /// audited (what runs is reported after the fact).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<NodeAdmission>,
}

/// How node groups are kept beyond the audit (one way so far: the webhook).
// No doc comments on the variants: schemars would make a described `oneOf`
// branch of each, which a CRD's structural schema forbids.
#[allow(missing_docs)]
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum NodeAdmission {
    Enforced,
}

/// Pairs a status lists per layer (see `LayerStatus::unlisted_pairs`).
pub const MAX_PAIRS_LISTED: usize = 10;

impl LayerStatus {
    /// A copy as a status lists it: at most `MAX_PAIRS_LISTED` pairs, Shared
    /// before Unverified (each in its own order), the rest counted; the
    /// pairs left out are not copied.
    pub fn bounded(&self) -> LayerStatus {
        let shared = self.pairs.iter().filter(|p| p.state == LayerState::Shared);
        let rest = self.pairs.iter().filter(|p| p.state != LayerState::Shared);
        let pairs: Vec<PairStatus> = shared.chain(rest).take(MAX_PAIRS_LISTED).cloned().collect();
        let unlisted = u32::try_from(self.pairs.len() - pairs.len()).unwrap_or(u32::MAX);
        LayerStatus {
            name: self.name,
            required: self.required,
            state: self.state,
            pairs,
            unlisted_pairs: self.unlisted_pairs.saturating_add(unlisted),
            admission: self.admission,
        }
    }
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// Whether two classes share a layer, as far as the API can tell.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema)]
pub enum LayerState {
    /// The API shows evidence that they do not share it.
    Separate,
    /// The API shows that they share it; the evidence names the objects.
    Shared,
    /// The API cannot tell.
    Unverified,
}

/// One pair of classes in a layer.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PairStatus {
    /// The two classes.
    pub classes: Vec<String>,
    /// Their state in this layer.
    pub state: LayerState,
    /// The objects that show it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
}
