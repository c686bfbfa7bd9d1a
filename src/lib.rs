//! bulkhead: partitioned capacity and verified isolation for Kubernetes.
//!
//! The core (`crd`, `snapshot`, `plan`) is pure and shared by the controller
//! (`controller`) and the offline CLI (`offline`). `proxy` enforces a pool
//! config at run time and depends only on `pool_config`.

pub mod audit;
pub mod controller;
pub mod crd;
pub mod offline;
pub mod plan;
pub mod pool_config;
pub mod proxy;
pub mod snapshot;
pub mod status;
