//! Selection: which namespaces, workloads, pods and nodes a Bulkhead's
//! selectors reach. The layer below both the planner and the audit, so that
//! neither imports the other.

mod errors;
mod members;
mod selector;
mod spec;
mod workload;

pub use errors::SpecError;
pub use members::{members, Members, Source};
pub use selector::Matcher;
pub use spec::{ClassSelection, PodSelection, Selection};
pub use workload::{resolve_workload, Replicas, WorkloadMatch};
