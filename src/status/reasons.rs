//! Condition types and reasons, in one place: they are an API (alerts and
//! scripts match on them), so they are named once and never by a literal.

/// Declares `ConditionType` from one list, so that its variants, `ALL` and
/// `as_str` cannot get out of step: the API spells each type as its variant.
macro_rules! condition_types {
    ($($(#[$doc:meta])* $variant:ident,)*) => {
        /// A condition type: what a status's `conditions[].type` says.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ConditionType {
            $($(#[$doc])* $variant,)*
        }

        impl ConditionType {
            /// Every condition type a status can carry, in this order.
            pub const ALL: [Self; [$(stringify!($variant)),*].len()] = [$(Self::$variant),*];

            /// The type as the API carries it.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => stringify!($variant),)*
                }
            }
        }
    };
}

// What each one says: docs/reference/conditions.md.
condition_types! {
    /// The pool config and quotas are up to date.
    Ready,
    /// Σ reserved + sharedSurplus fits in the capacity.
    Funded,
    /// The `critical` classes and their floors.
    ControlPlaneLane,
    /// Every quota counts only its own class's pods.
    QuotasScoped,
    /// Every node group holds its count (with placement only).
    NodeGroupsReady,
    /// Every workload of a class carries its placement (with placement only).
    Placed,
    /// Every layer in `spec.layers` is Separate for every pair of classes.
    Isolated,
    /// The selected workloads carry the sidecar (with `spec.workload.proxy` only).
    ProxyInjected,
    /// The running sidecars enforce the planned config (with `spec.workload.proxy` only).
    Enforced,
    /// Every tenant holds a shard of its own (with `spec.shuffleSharding` only).
    ShuffleSharded,
    /// Every class's reservation and ceiling match its use (in a cluster only).
    Sized,
    /// No class's latency rose while another sat at its ceiling (in a cluster only).
    IsolatedInUse,
    /// The last BulkheadDrill saturated a class and no other moved (with `spec.workload.proxy` only).
    VerifiedUnderLoad,
}

impl std::fmt::Display for ConditionType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// The types as strings, for the conditions built and matched by name.
pub const READY: &str = ConditionType::Ready.as_str();
pub const FUNDED: &str = ConditionType::Funded.as_str();
pub const CONTROL_PLANE_LANE: &str = ConditionType::ControlPlaneLane.as_str();
pub const QUOTAS_SCOPED: &str = ConditionType::QuotasScoped.as_str();
pub const NODE_GROUPS_READY: &str = ConditionType::NodeGroupsReady.as_str();
pub const PLACED: &str = ConditionType::Placed.as_str();
pub const ISOLATED: &str = ConditionType::Isolated.as_str();
pub const PROXY_INJECTED: &str = ConditionType::ProxyInjected.as_str();
pub const ENFORCED: &str = ConditionType::Enforced.as_str();
pub const SHUFFLE_SHARDED: &str = ConditionType::ShuffleSharded.as_str();
pub const SIZED: &str = ConditionType::Sized.as_str();
pub const ISOLATED_IN_USE: &str = ConditionType::IsolatedInUse.as_str();
pub const VERIFIED_UNDER_LOAD: &str = ConditionType::VerifiedUnderLoad.as_str();

/// Every condition type a status can carry, as the API spells it
/// (`ConditionType::ALL`).
pub const CONDITION_TYPES: [&str; ConditionType::ALL.len()] = {
    let mut out = [""; ConditionType::ALL.len()];
    let mut i = 0;
    while i < out.len() {
        out[i] = ConditionType::ALL[i].as_str();
        i += 1;
    }
    out
};

/// Reasons.
pub mod reason {
    /// The spec breaks a rule; the message names the field.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// A write to the API server failed; the message names the object.
    pub const APPLY_FAILED: &str = "ApplyFailed";
    /// Nothing is written until the design is funded.
    pub const NOT_FUNDED: &str = "NotFunded";
    /// No pool config is written; the message says why.
    pub const CONFIG_WITHHELD: &str = "ConfigWithheld";
    /// spec.workload matches no Deployment or StatefulSet.
    pub const WORKLOAD_NOT_FOUND: &str = "WorkloadNotFound";
    /// Everything planned is written.
    pub const RECONCILED: &str = "Reconciled";
    /// Floors plus surplus fit in the capacity.
    pub const FUNDED: &str = "Funded";
    /// Floors plus surplus exceed the capacity.
    pub const UNFUNDABLE: &str = "Unfundable";
    /// A Fleet floor split over the replicas rounds down to nothing.
    pub const FLOOR_ROUNDS_TO_ZERO: &str = "FloorRoundsToZero";
    /// No class is critical (no control-plane lane).
    pub const NO_CRITICAL_CLASS: &str = "NoCriticalClass";
    /// A critical class holds the control-plane lane.
    pub const CRITICAL_CLASS: &str = "CriticalClass";
    /// A critical class reserves nothing: the lane has no floor.
    pub const CRITICAL_CLASS_UNRESERVED: &str = "CriticalClassUnreserved";
    /// Every quota counts only its own class's pods.
    pub const QUOTAS_SCOPED: &str = "QuotasScoped";
    /// A shared namespace's quota sets a key a PriorityClass scope cannot carry.
    pub const QUOTA_NOT_SCOPABLE: &str = "QuotaNotScopable";
    /// Two classes' quotas would land in one namespace.
    pub const QUOTA_NAMESPACE_SHARED: &str = "QuotaNamespaceShared";
    /// No class asks for a node group.
    pub const NO_NODE_GROUPS: &str = "NoNodeGroups";
    /// Every node group holds its count.
    pub const NODES_CLAIMED: &str = "NodesClaimed";
    /// A node group is short of nodes.
    pub const INSUFFICIENT_NODES: &str = "InsufficientNodes";
    /// Another field manager owns a field placement would set.
    pub const PLACEMENT_CONFLICT: &str = "PlacementConflict";
    /// The API server refused a placement otherwise.
    pub const PLACEMENT_REJECTED: &str = "PlacementRejected";
    /// A workload matches two classes and is left alone.
    pub const WORKLOAD_IN_TWO_CLASSES: &str = "WorkloadInTwoClasses";
    /// A workload an older Bulkhead placed is left to it.
    pub const PLACED_BY_OLDER_BULKHEAD: &str = "PlacedByOlderBulkhead";
    /// A class names a RuntimeClass the cluster lacks.
    pub const RUNTIME_CLASS_NOT_FOUND: &str = "RuntimeClassNotFound";
    /// No workload matches a class's pods selectors.
    pub const NO_WORKLOADS: &str = "NoWorkloads";
    /// Every class workload carries its placement.
    pub const WORKLOADS_PLACED: &str = "WorkloadsPlaced";
    /// A required layer is Shared.
    pub const SHARED_LAYER_DETECTED: &str = "SharedLayerDetected";
    /// Only Unverified required layers remain.
    pub const SHARED_LAYER_UNVERIFIED: &str = "SharedLayerUnverified";
    /// Every required layer is Separate.
    pub const ALL_LAYERS_SEPARATE: &str = "AllLayersSeparate";
    /// Every workload of spec.workload carries the sidecar.
    pub const SIDECAR_INJECTED: &str = "SidecarInjected";
    /// The API server refused a sidecar injection (a conflict or a rejection).
    pub const INJECTION_REFUSED: &str = "InjectionRefused";
    /// An older Bulkhead's sidecar claims a workload this one selects: it is left to that one.
    pub const PROXY_OF_OLDER_BULKHEAD: &str = "ProxyOfOlderBulkhead";
    /// Neither the Bulkhead nor the operator (`--proxy-image`) names the sidecar's image.
    pub const NO_PROXY_IMAGE: &str = "NoProxyImage";
    /// spec.workload.proxy.image is neither the operator's own image nor on its allow-list (`--proxy-image-allow`).
    pub const IMAGE_NOT_ALLOWED: &str = "ImageNotAllowed";
    /// A namespace the Bulkhead would write in lacks the opt-in label (`--namespace-opt-in`).
    pub const NAMESPACE_NOT_OPTED_IN: &str = "NamespaceNotOptedIn";
    /// A Service reaches the workload's pods on the app's own port, around the proxy.
    pub const BYPASSED: &str = "Bypassed";
    /// Not known yet which pool config the sidecars enforce (none asked yet,
    /// no running pod, or no config planned); never a guess.
    pub const NOT_OBSERVED: &str = "NotObserved";
    /// Every running selected pod's sidecar enforces the planned pool config.
    pub const CONVERGED: &str = "Converged";
    /// Some sidecars still enforce another config past the grace period.
    pub const CONVERGING: &str = "Converging";
    /// A new config is on its way to the sidecars, within the grace period.
    pub const PROPAGATING: &str = "Propagating";
    /// A running selected pod has no bulkhead-proxy of this Bulkhead.
    pub const SIDECAR_MISSING: &str = "SidecarMissing";
    /// The operator cannot ask some sidecars (no route, refused, timed out).
    pub const UNREACHABLE: &str = "Unreachable";
    /// Every tenant holds a shard no other tenant holds.
    pub const SHARDS_ASSIGNED: &str = "ShardsAssigned";
    /// Some tenants hold the very same shard; the message names them.
    pub const IDENTICAL_SHARDS: &str = "IdenticalShards";
    /// Fewer candidate nodes than a shard needs (or no tenant): nothing is pinned.
    pub const TOO_FEW_SHARD_NODES: &str = "TooFewShardNodes";
    /// The telemetry shows no finding: the reservations match the use.
    pub const MATCHES_USE: &str = "MatchesUse";
    /// No Prometheus, or no proxy series in it: nothing is guessed.
    pub const NO_TELEMETRY: &str = "NoTelemetry";
    /// Prometheus answered, but the analysis failed; the message says how.
    pub const ANALYSIS_FAILED: &str = "AnalysisFailed";
    // A finding's kind (`usage::FindingKind::as_str`) is the reason of a
    // False Sized or IsolatedInUse: StarvedAtCeiling, UtilisationCollapse,
    // SurplusExhausted, ReservationIdle, IsolationLeak.
    /// No class reached its ceiling in the window: no saturation to test isolation against.
    pub const NO_SATURATION: &str = "NoSaturation";
    /// While a class sat at its ceiling, no other class's latency rose.
    pub const NO_LATENCY_COUPLING: &str = "NoLatencyCoupling";
    /// A drill saturated a class and another class's latency or errors moved.
    pub const LATENCY_COUPLED: &str = "LatencyCoupled";
    /// No drill has reached a verdict for the Bulkhead's current spec.
    pub const NOT_DRILLED: &str = "NotDrilled";
    /// The last drill could not judge; the message says why.
    pub const INCONCLUSIVE: &str = "Inconclusive";
}

#[cfg(test)]
mod tests {
    use super::ConditionType;

    /// `ALL`, `as_str` and the constants agree (the macro makes them from one list).
    #[test]
    fn all_lists_every_condition_type_once() {
        let mut names: Vec<&str> = ConditionType::ALL.map(ConditionType::as_str).to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ConditionType::ALL.len(), "two types spelled alike");
    }
}
