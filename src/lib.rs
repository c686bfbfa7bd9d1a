//! bulkhead: partitioned capacity and verified isolation for Kubernetes.
//!
//! The core (`crd`, `snapshot`, `plan`) is pure and shared by the controller
//! (`controller`) and the offline CLI (`offline`). `shard` (shuffle sharding)
//! is pure and stands alone.

pub mod audit;
pub mod controller;
pub mod crd;
pub mod offline;
pub mod plan;
pub mod pool_config;
pub mod shard;
pub mod snapshot;
pub mod status;
