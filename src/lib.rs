//! bulkhead: partitioned capacity and verified isolation for Kubernetes.
//!
//! Imports flow one way (`tests/pure/architecture.rs` checks it):
//! `crd → {pool_config, snapshot} → select → {plan, audit} → status →
//! evaluate → {controller, offline}`. Everything left of `controller` is pure and shared
//! by the controller and the offline CLI. `proxy` (the `bulkhead-proxy`
//! crate) enforces a pool config at run time around the admission core of
//! the `bulkhead-admission` crate (which holds `pool_config` and knows
//! nothing of Kubernetes); `shard` (shuffle sharding) is
//! pure and stands alone; `logging` sets up log output for both binaries' modes;
//! `usage` turns the proxies' telemetry into sizing advice (pure as well).

#![forbid(unsafe_code)]

pub mod audit;
pub mod controller;
pub mod crd;
pub mod error_chain;
pub mod evaluate;
pub mod logging;
pub mod offline;
pub mod plan;
pub mod prometheus;
pub mod select;
pub mod shard;
pub mod snapshot;
pub mod status;
pub mod usage;

/// The enforcement sidecar, a crate of its own (`bulkhead-proxy`): it links
/// no Kubernetes client and no planner.
pub use bulkhead_proxy as proxy;
/// The one duration grammar of every flag, from the sidecar's crate.
pub use bulkhead_proxy::duration;

/// The pool-config schema, from the admission crate (`bulkhead-admission`),
/// which the compiler keeps free of Kubernetes.
pub use bulkhead_admission::pool_config;
