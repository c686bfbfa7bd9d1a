//! Shuffle sharding: each tenant gets its own subset (shard) of K of the N
//! nodes, so a tenant is fully hit by another's failure only when it holds the
//! very same shard, one of C(N, K).
//!
//! Pure and self-contained (no other module of the crate): `calculator` gives
//! the expected blast radius of the three assignments, `assign` computes a
//! deterministic, stable, spread assignment, and `report` measures one.

mod assign;
mod calculator;
mod hash;
mod index;
mod report;

pub use assign::{assign, Assignment};
pub use calculator::{binomial, Calculation, Impact};
pub use hash::{fnv1a64, SplitMix64};
pub use report::{report, ShardReport, WorstTenant};

/// Input that cannot be sharded. `flag()` names the CLI flag at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    #[error("the number of nodes must be at least 1")]
    NoNodes,
    #[error("the shard size must be at least 1")]
    ZeroShardSize,
    #[error("the shard size {shard_size} exceeds the {nodes} node(s)")]
    ShardLargerThanNodes { shard_size: usize, nodes: usize },
    #[error("the number of tenants must be at least 1")]
    NoTenants,
    #[error("tenant {0:?} is listed twice")]
    DuplicateTenant(String),
    #[error("node {0:?} is listed twice")]
    DuplicateNode(String),
    #[error("{nodes} nodes is more than the calculator takes ({max}; Kubernetes is tested to 5,000)")]
    TooManyNodes { nodes: usize, max: usize },
    #[error("the shard size {shard_size} is more than a Bulkhead allows ({max})")]
    ShardSizeTooLarge { shard_size: usize, max: usize },
    #[error("{tenants} tenants is more than the calculator takes ({max})")]
    TooManyTenants { tenants: u64, max: u64 },
}

/// The calculator's bounds: its work grows with the shard size, and its
/// figures must stay exact and fit their columns. The shard size is the
/// CRD's own bound (spec.shuffleSharding.shardSize).
pub const MAX_SHARD_SIZE: usize = 64;
pub const MAX_NODES: usize = 100_000;
pub const MAX_TENANTS: u64 = 1_000_000_000;

impl ShardError {
    /// The `bulkhead shard` flag this error is about.
    pub fn flag(&self) -> &'static str {
        match self {
            ShardError::NoNodes | ShardError::DuplicateNode(_) | ShardError::TooManyNodes { .. } => "--nodes",
            ShardError::ZeroShardSize
            | ShardError::ShardLargerThanNodes { .. }
            | ShardError::ShardSizeTooLarge { .. } => "--shard-size",
            ShardError::NoTenants | ShardError::DuplicateTenant(_) | ShardError::TooManyTenants { .. } => "--tenants",
        }
    }
}

/// The checks shared by the calculator and `assign`.
fn check_sizes(nodes: usize, shard_size: usize) -> Result<(), ShardError> {
    if nodes == 0 {
        return Err(ShardError::NoNodes);
    }
    if shard_size == 0 {
        return Err(ShardError::ZeroShardSize);
    }
    if shard_size > nodes {
        return Err(ShardError::ShardLargerThanNodes { shard_size, nodes });
    }
    Ok(())
}
