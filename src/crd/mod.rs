//! The `Bulkhead` custom resource: its spec (what a platform team declares),
//! its status (what the operator reports) and the generated CRD.

mod conformance;
mod definition;
mod drill;
mod shard;
mod spec;
mod status;
mod vocabulary;
mod yaml;

pub use conformance::schema_errors;
pub use definition::{crd_yaml, definition, drill_crd_yaml, drill_definition};
pub use drill::*;
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
/// Names the operator that acts on a Bulkhead (`bulkhead run --operator-name`);
/// a Bulkhead without it belongs to the operator started without a name.
pub const OPERATOR_LABEL: &str = "bulkhead.dev/operator";

/// The label selector of the Bulkheads the operator named `name` acts on.
/// Two different names (or a name and none) select disjoint sets, so two
/// operators named apart never act on the same Bulkhead.
pub fn operator_selector(name: Option<&str>) -> String {
    match name {
        Some(name) => format!("{OPERATOR_LABEL}={name}"),
        None => format!("!{OPERATOR_LABEL}"),
    }
}

/// Whether a Bulkhead with these labels belongs to the operator named `name`.
pub fn belongs_to(labels: Option<&std::collections::BTreeMap<String, String>>, name: Option<&str>) -> bool {
    labels.and_then(|l| l.get(OPERATOR_LABEL)).map(String::as_str) == name
}

/// Finalizer that lets the operator remove what it made before a Bulkhead goes.
pub const FINALIZER: &str = "bulkhead.dev/cleanup";
/// Server-side apply field manager for everything the operator writes.
pub const FIELD_MANAGER: &str = "bulkhead";

/// Why a spec does not decode, with the JSON path of the field at fault
/// (`spec.classes[1].reserved: invalid type: string "ten", expected u32`).
pub fn locate_spec_error(spec: serde_json::Value) -> Option<String> {
    serde_path_to_error::deserialize::<_, BulkheadSpec>(spec).err().map(|e| format!("spec.{}: {}", e.path(), e.inner()))
}

#[cfg(test)]
mod operator_tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn operators_named_apart_select_disjoint_bulkheads() {
        assert_eq!(operator_selector(None), "!bulkhead.dev/operator");
        assert_eq!(operator_selector(Some("team-b")), "bulkhead.dev/operator=team-b");
        let labelled = |v: &str| BTreeMap::from([(OPERATOR_LABEL.to_string(), v.to_string())]);
        let other = BTreeMap::from([("app".to_string(), "x".to_string())]);
        for (labels, owner) in [
            (None, None),
            (Some(&other), None),
            (Some(&labelled("team-b")), Some("team-b")),
            (Some(&labelled("")), Some("")),
        ] {
            for name in [None, Some("team-b"), Some("team-c")] {
                assert_eq!(belongs_to(labels, name), owner == name, "{labels:?} {name:?}");
            }
        }
    }
}
