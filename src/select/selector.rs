//! Label selectors (matchLabels + matchExpressions), parsed once, with the
//! spec field they came from named in the error. Matching works on any label
//! store, so the lean, interned labels of watched pods need no conversion.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::{is_label_value, is_qualified_name, SpecError};
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
        for (k, v) in selector.match_labels.iter().flatten() {
            check_label(&format!("{field}.matchLabels"), k, Some(v))?;
        }
        let mut reqs: Vec<Requirement> =
            selector.match_labels.iter().flatten().map(|(k, v)| Requirement::In(k.clone(), vec![v.clone()])).collect();
        for (i, e) in selector.match_expressions.iter().flatten().enumerate() {
            let values = e.values.clone().unwrap_or_default();
            let here = || format!("{field}.matchExpressions[{i}]");
            check_label(&format!("{}.key", here()), &e.key, None)?;
            for (j, v) in values.iter().enumerate() {
                if !is_label_value(v) {
                    return Err(SpecError::new(format!("{}.values[{j}]", here()), label_value_message(v)));
                }
            }
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

/// The API server's rules for a label key and, when given, its value.
fn check_label(field: &str, key: &str, value: Option<&str>) -> Result<(), SpecError> {
    if !is_qualified_name(key) {
        return Err(SpecError::new(
            field,
            format!(
                "{key:?} is not a valid label key (an optional DNS-subdomain prefix and /, then at most 63 \
                 alphanumerics, '-', '_' or '.', starting and ending alphanumeric)"
            ),
        ));
    }
    match value {
        Some(v) if !is_label_value(v) => Err(SpecError::new(format!("{field}.{key}"), label_value_message(v))),
        _ => Ok(()),
    }
}

fn label_value_message(value: &str) -> String {
    format!(
        "{value:?} is not a valid label value (at most 63 alphanumerics, '-', '_' or '.', starting and ending \
         alphanumeric)"
    )
}
