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
}

impl ShardError {
    /// The `bulkhead shard` flag this error is about.
    pub fn flag(&self) -> &'static str {
        match self {
            ShardError::NoNodes | ShardError::DuplicateNode(_) => "--nodes",
            ShardError::ZeroShardSize | ShardError::ShardLargerThanNodes { .. } => "--shard-size",
            ShardError::NoTenants | ShardError::DuplicateTenant(_) => "--tenants",
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
