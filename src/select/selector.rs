//! Label selectors (matchLabels + matchExpressions), parsed once, with the
//! spec field they came from named in the error. Matching works on any label
//! store, so the lean, interned labels of watched pods need no conversion.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::SpecError;
use crate::snapshot::LabelLookup;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed selector. No selector in a spec means "everything".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matcher(Option<Vec<Requirement>>);

impl Matcher {
    pub fn parse(selector: Option<&LabelSelector>, field: &str) -> Result<Self, SpecError> {
        let Some(selector) = selector else { return Ok(Matcher(None)) };
        let mut reqs: Vec<Requirement> =
            selector.match_labels.iter().flatten().map(|(k, v)| Requirement::In(k.clone(), vec![v.clone()])).collect();
        for (i, e) in selector.match_expressions.iter().flatten().enumerate() {
            let values = e.values.clone().unwrap_or_default();
            let here = || format!("{field}.matchExpressions[{i}]");
            let req = match e.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(SpecError::new(here(), format!("operator {} needs values", e.operator)))
                }
                "In" => Requirement::In(e.key.clone(), values),
                "NotIn" => Requirement::NotIn(e.key.clone(), values),
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(SpecError::new(here(), format!("operator {} takes no values", e.operator)))
                }
                "Exists" => Requirement::Exists(e.key.clone()),
                "DoesNotExist" => Requirement::DoesNotExist(e.key.clone()),
                other => {
                    return Err(SpecError::new(
                        here(),
                        format!("invalid label selector: unknown operator {other:?} (In, NotIn, Exists, DoesNotExist)"),
                    ))
                }
            };
            reqs.push(req);
        }
        Ok(Matcher(Some(reqs)))
    }

    /// A Service-style selector: every label must equal.
    pub fn from_labels(labels: &crate::snapshot::Labels) -> Self {
        Matcher(Some(labels.iter().map(|(k, v)| Requirement::In(k.clone(), vec![v.clone()])).collect()))
    }

    /// Matches no labels at all (stands in for a selector that did not parse).
    pub fn nothing() -> Self {
        Matcher(Some(vec![Requirement::In(String::new(), Vec::new())]))
    }

    pub fn matches(&self, labels: &impl LabelLookup) -> bool {
        let Some(reqs) = &self.0 else { return true };
        reqs.iter().all(|r| match r {
            Requirement::In(k, vs) => labels.label(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            Requirement::NotIn(k, vs) => labels.label(k).is_none_or(|v| vs.iter().all(|x| x != v)),
            Requirement::Exists(k) => labels.label(k).is_some(),
            Requirement::DoesNotExist(k) => labels.label(k).is_none(),
        })
    }
}
