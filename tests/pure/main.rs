//! The pure tests in one binary: the planner, placement, injection, the
//! audit (full and incremental), shuffle sharding, the generated corpus, the
//! generated artifacts, the module order and the usage analysis. No process, no cluster.
//! `cargo test --test pure planner::` runs one file's tests.

mod admission;
mod architecture;
mod artifacts;
mod audit;
mod audit_incremental;
mod check_corpus;
mod drill;
mod endpoint_slices;
mod enforcement;
mod injection;
mod network_policy;
mod patches;
mod placement;
mod planner;
mod scope;
mod shard;
mod sharding;
mod sidecar_args;
mod usage;

// The shared support, from the test kit (testkit/).
use bulkhead_testkit::{chart as chart_support, fixtures};
