//! `spec.shuffleSharding`: each tenant class on its own subset (shard) of the
//! candidate nodes, so that one tenant's bad nodes fully take down only the
//! tenants that hold the very same shard.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most nodes in one shard.
pub const MAX_SHARD_SIZE: u32 = 64;

/// Shuffle sharding of a Tenant Bulkhead's classes over candidate nodes.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShuffleShardingSpec {
    /// The candidate nodes. A node leaves the shards only when it is deleted,
    /// stops matching, or has no kubernetes.io/hostname label; cordoning or a
    /// NotReady spell does not re-shard (that would roll every tenant on it twice).
    pub nodes: ShardNodes,
    /// Nodes in each tenant's shard (1 to 64). Every class that is not critical
    /// gets one and its workloads are pinned to it by required node affinity.
    #[schemars(range(min = 1, max = 64))]
    pub shard_size: u32,
}

/// Which nodes shards are drawn from.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardNodes {
    /// Candidate nodes, by label.
    pub selector: LabelSelector,
}
