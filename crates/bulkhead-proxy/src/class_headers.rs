//! The headers that carry a class to the upstream: the classifier's
//! `header:NAME` rules, or `x-bulkhead-class`. The upstream sees exactly one
//! of each, naming the class the proxy decided, however the client spells
//! its own: repeated (refused earlier), listed in `Connection`, sent as a
//! trailer, or with `_` for any `-` (CGI, WSGI, PHP and Rack fold the two
//! into one name, so `x_bulkhead_class` or `x-bulkhead_class` would reach
//! such an application as the class header).

use http::{HeaderMap, HeaderName, HeaderValue};

use bulkhead_admission::{
    classify::{Classifier, Rule},
    synthetic::CLASS_HEADER,
};

#[derive(Debug)]
pub(super) struct ClassHeaders {
    names: Vec<HeaderName>,
}

impl ClassHeaders {
    pub(super) fn new(classify: &Classifier) -> Self {
        let mut names: Vec<HeaderName> = match classify {
            Classifier::Rules(rules) => rules
                .iter()
                .filter_map(|r| match r {
                    Rule::Header(name) => Some(name.clone()),
                    _ => None,
                })
                .collect(),
            Classifier::Fixed(_) => Vec::new(),
        };
        if names.is_empty() {
            names.push(CLASS_HEADER);
        }
        Self { names }
    }

    pub(super) fn names(&self) -> &[HeaderName] {
        &self.names
    }

    /// Set every class header to `class`, and remove their underscore spellings.
    pub(super) fn set(&self, headers: &mut HeaderMap, class: &HeaderValue) {
        self.remove_underscored(headers);
        for name in &self.names {
            headers.insert(name, class.clone());
        }
    }

    /// Remove every class header, in any spelling.
    pub(super) fn remove(&self, headers: &mut HeaderMap) {
        self.remove_underscored(headers);
        for name in &self.names {
            headers.remove(name);
        }
    }

    /// Remove the fields that are a class header with some `-` spelled `_`.
    /// One pass over the names, comparing lengths first (such a field is
    /// rare), no allocation then.
    fn remove_underscored(&self, headers: &mut HeaderMap) {
        let spelled = |key: &HeaderName| {
            let key = key.as_str().as_bytes();
            self.names.iter().any(|n| underscored(key, n.as_str().as_bytes()))
        };
        if !headers.keys().any(spelled) {
            return;
        }
        let found: Vec<HeaderName> = headers.keys().filter(|k| spelled(k)).cloned().collect();
        for key in found {
            headers.remove(key);
        }
    }

    /// How many headers `set` may add.
    pub(super) fn len(&self) -> usize {
        self.names.len()
    }
}

/// `key` is `name` with one or more `-` spelled `_`.
fn underscored(key: &[u8], name: &[u8]) -> bool {
    key.len() == name.len() && key != name && key.iter().zip(name).all(|(k, n)| k == n || (*k == b'_' && *n == b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_class_the_proxy_decided_replaces_every_spelling_of_the_clients() {
        let rules = vec![Rule::Header(HeaderName::from_static("x-tenant")), Rule::Port];
        let headers = ClassHeaders::new(&Classifier::Rules(rules));
        let mut sent = HeaderMap::new();
        sent.insert("x-tenant", HeaderValue::from_static("gold"));
        sent.insert("x_tenant", HeaderValue::from_static("gold"));
        sent.insert("x_other", HeaderValue::from_static("kept"));
        sent.insert("x-other", HeaderValue::from_static("kept"));
        headers.set(&mut sent, &HeaderValue::from_static("bronze"));
        let mut seen: Vec<_> = sent.iter().map(|(n, v)| format!("{n}: {}", v.to_str().unwrap_or("?"))).collect();
        seen.sort();
        assert_eq!(seen, ["x-other: kept", "x-tenant: bronze", "x_other: kept"]);
        headers.remove(&mut sent);
        assert_eq!(sent.len(), 2);
    }

    #[test]
    fn without_header_rules_the_class_goes_in_x_bulkhead_class() {
        let headers = ClassHeaders::new(&Classifier::Rules(vec![Rule::Port]));
        assert_eq!(headers.names(), [CLASS_HEADER]);
        let mut sent = HeaderMap::new();
        for spelling in ["x_bulkhead_class", "x-bulkhead_class", "x_bulkhead-class"] {
            sent.insert(spelling, HeaderValue::from_static("gold"));
        }
        headers.remove(&mut sent);
        assert!(sent.is_empty(), "{sent:?}");
    }
}
