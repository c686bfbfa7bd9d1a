//! The pure tests in one binary: the planner, placement, injection, the
//! audit (full and incremental), shuffle sharding, the generated corpus, the
//! generated artifacts and the module order. No process, no cluster.
//! `cargo test --test pure planner::` runs one file's tests.

mod architecture;
mod artifacts;
mod audit;
mod audit_incremental;
mod check_corpus;
mod fixtures;
mod injection;
mod placement;
mod planner;
mod shard;
mod sharding;
