//! Label selectors, parsed once, with the spec field they came from named in
//! the error.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};

use super::SpecError;
use crate::snapshot::Labels;

/// A parsed selector. `None` in a spec means "everything".
#[derive(Clone, Debug)]
pub struct Matcher(Option<Selector>);

impl Matcher {
    pub fn parse(selector: Option<&LabelSelector>, field: &str) -> Result<Self, SpecError> {
        selector
            .map(|s| {
                Selector::try_from(s.clone()).map_err(|e| SpecError::new(field, format!("invalid label selector: {e}")))
            })
            .transpose()
            .map(Matcher)
    }

    pub fn everything() -> Self {
        Matcher(None)
    }

    pub fn matches(&self, labels: &Labels) -> bool {
        self.0.as_ref().is_none_or(|s| s.matches(labels))
    }

    /// True when the spec named no selector at all.
    pub fn is_unset(&self) -> bool {
        self.0.is_none()
    }
}
