//! bulkhead: partitioned capacity and verified isolation for Kubernetes.
//!
//! Imports flow one way (`tests/architecture.rs` checks it):
//! `crd → {pool_config, snapshot} → select → {plan, audit} → status →
//! {controller, offline}`. Everything left of `controller` is pure and shared
//! by the controller and the offline CLI. `proxy` enforces a pool config at
//! run time and depends only on `pool_config`; `shard` (shuffle sharding) is
//! pure and stands alone; `logging` sets up log output for both binaries' modes;
//! `usage` turns the proxies' telemetry into sizing advice (pure as well).

#![forbid(unsafe_code)]

pub mod audit;
pub mod controller;
pub mod crd;
pub mod error_chain;
pub mod logging;
pub mod offline;
pub mod plan;
pub mod pool_config;
pub mod prometheus;
pub mod proxy;
pub mod select;
pub mod shard;
pub mod snapshot;
pub mod status;
pub mod usage;
