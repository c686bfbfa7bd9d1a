//! Selection: which namespaces, workloads, pods and nodes a Bulkhead's
//! selectors reach. The layer below both the planner and the audit, so that
//! neither imports the other.

mod errors;
mod members;
mod selector;
mod spec;
mod syntax;
mod workload;

pub use errors::SpecError;
pub use members::{members, Members, Source};
pub use selector::Matcher;
pub use spec::{unclassified, ClassSelection, PodSelection, Selection};
pub use syntax::{is_dns_label, is_label_value, is_qualified_name};
pub use workload::{resolve_workload, Replicas, WorkloadMatch};
