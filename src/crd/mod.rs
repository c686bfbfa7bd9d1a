//! The `Bulkhead` custom resource: its spec (what a platform team declares),
//! its status (what the operator reports) and the generated CRD.

mod conformance;
mod definition;
mod shard;
mod spec;
mod status;
mod vocabulary;
mod yaml;

pub use conformance::schema_errors;
pub use definition::{crd_yaml, definition};
pub use shard::*;
pub use spec::*;
pub use status::*;
pub use vocabulary::*;
pub use yaml::to_yaml;

/// Label put on everything the operator writes, so cleanup finds exactly that.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "bulkhead";
/// Names the Bulkhead a child object belongs to.
pub const BULKHEAD_LABEL: &str = "bulkhead.dev/bulkhead";
/// Names the class a child object belongs to.
pub const CLASS_LABEL: &str = "bulkhead.dev/class";
/// Finalizer that lets the operator remove what it made before a Bulkhead goes.
pub const FINALIZER: &str = "bulkhead.dev/cleanup";
/// Server-side apply field manager for everything the operator writes.
pub const FIELD_MANAGER: &str = "bulkhead";

/// Why a spec does not decode, with the JSON path of the field at fault
/// (`spec.classes[1].reserved: invalid type: string "ten", expected u32`).
pub fn locate_spec_error(spec: serde_json::Value) -> Option<String> {
    serde_path_to_error::deserialize::<_, BulkheadSpec>(spec).err().map(|e| format!("spec.{}: {}", e.path(), e.inner()))
}
