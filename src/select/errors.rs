//! Problems the planner finds in a spec, each naming the field at fault.

use std::fmt;

/// A spec problem the CRD schema cannot express, reported in the Ready
/// condition (and by the offline CLI) with the field named.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct SpecError {
    /// JSON path of the field, e.g. `spec.classes[1].ceiling`.
    pub field: String,
    pub message: String,
}

impl SpecError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}
