//! The headers that carry a class to the upstream: the classifier's
//! `header:NAME` rules, or `x-bulkhead-class`. The upstream sees exactly one
//! of each, naming the class the proxy decided, however the client spells
//! its own: repeated (refused earlier), listed in `Connection`, sent as a
//! trailer, or with `_` for `-` (CGI, WSGI, PHP and Rack fold the two into
//! one name, so `x_bulkhead_class` would reach such an application as the
//! class header).

use http::{HeaderMap, HeaderName, HeaderValue};

use super::{
    classify::{Classifier, Rule},
    reject::CLASS_HEADER,
};

#[derive(Debug)]
pub(super) struct ClassHeaders {
    names: Vec<HeaderName>,
    /// Each name spelled with `_` for `-`, where that differs.
    underscored: Vec<HeaderName>,
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
        let underscored = names
            .iter()
            .filter(|n| n.as_str().contains('-'))
            .filter_map(|n| HeaderName::from_bytes(n.as_str().replace('-', "_").as_bytes()).ok())
            .collect();
        Self { names, underscored }
    }

    pub(super) fn names(&self) -> &[HeaderName] {
        &self.names
    }

    /// Set every class header to `class`, and remove their underscore spellings.
    pub(super) fn set(&self, headers: &mut HeaderMap, class: &HeaderValue) {
        for name in &self.underscored {
            headers.remove(name);
        }
        for name in &self.names {
            headers.insert(name, class.clone());
        }
    }

    /// Remove every class header, in either spelling.
    pub(super) fn remove(&self, headers: &mut HeaderMap) {
        for name in self.names.iter().chain(&self.underscored) {
            headers.remove(name);
        }
    }

    /// How many headers `set` may add.
    pub(super) fn len(&self) -> usize {
        self.names.len()
    }
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
        sent.insert("x-other", HeaderValue::from_static("kept"));
        headers.set(&mut sent, &HeaderValue::from_static("bronze"));
        let mut seen: Vec<_> = sent.iter().map(|(n, v)| format!("{n}: {}", v.to_str().unwrap_or("?"))).collect();
        seen.sort();
        assert_eq!(seen, ["x-other: kept", "x-tenant: bronze"]);
        headers.remove(&mut sent);
        assert_eq!(sent.len(), 1);
    }

    #[test]
    fn without_header_rules_the_class_goes_in_x_bulkhead_class() {
        let headers = ClassHeaders::new(&Classifier::Rules(vec![Rule::Port]));
        assert_eq!(headers.names(), [CLASS_HEADER]);
        let mut sent = HeaderMap::new();
        sent.insert("x_bulkhead_class", HeaderValue::from_static("gold"));
        headers.remove(&mut sent);
        assert!(sent.is_empty());
    }
}
