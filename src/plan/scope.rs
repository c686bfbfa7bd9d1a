//! What a Bulkhead may make the operator do. Whoever can create a Bulkhead
//! can make the operator write what they could not write themselves: a
//! sidecar image into other teams' workloads, quotas and NetworkPolicies into
//! their namespaces, labels and taints onto nodes. Three limits keep the
//! operator from being that confused deputy, each set by whoever runs it:
//!
//! - the images a Bulkhead may name for its sidecar (`--proxy-image-allow`;
//!   the operator's own `--proxy-image` is always allowed);
//! - the label a namespace must carry before the operator writes anything
//!   there (`--namespace-opt-in`, default `bulkhead.dev/enabled=true`);
//! - the label a node must carry before a node group claims it
//!   (`--node-opt-in`, default `bulkhead.dev/claimable=true`).
//!
//! The library's `PlanConfig::default()` requires neither label (the pure
//! tests' default); the binary and the chart require both.

use std::collections::BTreeMap;

use crate::snapshot::{LabelLookup, Snapshot};

/// `--namespace-opt-in`'s default.
pub const DEFAULT_NAMESPACE_OPT_IN: &str = "bulkhead.dev/enabled=true";
/// `--node-opt-in`'s default. Its key is reserved: a Bulkhead named
/// `claimable` cannot claim nodes (its claim key would be this label).
pub const DEFAULT_NODE_OPT_IN: &str = "bulkhead.dev/claimable=true";

/// A label an object must carry before the operator acts on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptIn {
    pub key: String,
    pub value: String,
}

impl std::fmt::Display for OptIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.key, self.value)
    }
}

impl OptIn {
    /// `KEY=VALUE`; `""` or `none`: no label is required (None).
    pub fn parse(s: &str) -> Result<Option<OptIn>, String> {
        let s = s.trim();
        if s.is_empty() || s == "none" {
            return Ok(None);
        }
        let Some((key, value)) = s.split_once('=') else {
            return Err(format!("{s:?}: expected LABEL=VALUE (or none)"));
        };
        label_key(key).map_err(|e| format!("{s:?}: {e}"))?;
        if value.is_empty() || !label_value(value) {
            return Err(format!(
                "{s:?}: the value must be 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter \
                 or digit"
            ));
        }
        Ok(Some(OptIn { key: key.to_string(), value: value.to_string() }))
    }

    pub fn admits(&self, labels: &impl LabelLookup) -> bool {
        labels.label(&self.key) == Some(self.value.as_str())
    }
}

/// Whether `opt_in` (None: none required) admits an object with `labels`.
pub(super) fn opted_in(opt_in: Option<&OptIn>, labels: &impl LabelLookup) -> bool {
    opt_in.is_none_or(|o| o.admits(labels))
}

/// Whether the operator may write in `namespace`: it exists and carries the
/// opt-in label (when one is required). A namespace the snapshot lacks has
/// nothing in it to write or delete.
pub fn namespace_opted_in(opt_in: Option<&OptIn>, snapshot: &Snapshot, namespace: &str) -> bool {
    match opt_in {
        None => true,
        Some(o) => snapshot.namespaces.get(namespace).is_some_and(|ns| o.admits(&ns.labels)),
    }
}

fn label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let ok = !prefix.is_empty()
            && prefix.len() <= 253
            && prefix.split('.').all(|part| {
                !part.is_empty()
                    && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            });
        if !ok {
            return Err(format!("the key's prefix {prefix:?} is not a DNS subdomain"));
        }
    }
    if name.is_empty() || !label_value(name) {
        return Err(format!("the key's name {name:?} is not a label name"));
    }
    Ok(())
}

/// A label value (or a key's name): at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends.
fn label_value(v: &str) -> bool {
    let alnum = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
    v.len() <= 63
        && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && alnum(v.bytes().next())
        && alnum(v.bytes().last())
}

/// `--proxy-image-allow`: the images a Bulkhead may name in
/// spec.workload.proxy.image, besides the operator's own `--proxy-image`.
/// An entry ending in `*` is a prefix: `registry.example/bulkhead:*` allows
/// every tag (and digest) of that repository; end a prefix with `:`, `/` or
/// `@`, since `registry.example/bulk*` also allows `registry.example/bulk-evil`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageAllowList {
    entries: Vec<String>,
}

impl ImageAllowList {
    /// Comma-separated image references; empty: none beyond `--proxy-image`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut entries = Vec::new();
        for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let body = entry.strip_suffix('*').unwrap_or(entry);
            if body.contains('*') {
                return Err(format!("{entry:?}: only a trailing * is allowed (a prefix)"));
            }
            if body.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) {
                return Err(format!("{entry:?}: not an image reference"));
            }
            entries.push(entry.to_string());
        }
        Ok(Self { entries })
    }

    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(entries: I) -> Self {
        Self { entries: entries.into_iter().map(Into::into).collect() }
    }

    pub fn entries(&self) -> &[String] {
        &self.entries
    }

    /// Whether `image` is on the list (the operator's own image aside).
    pub fn allows(&self, image: &str) -> bool {
        self.entries.iter().any(|e| match e.strip_suffix('*') {
            Some(prefix) => image.starts_with(prefix),
            None => image == e,
        })
    }
}

/// A Bulkhead's sidecar image the operator will not inject.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedImage {
    pub image: String,
    /// What is allowed: the operator's own image first, then the list.
    pub allowed: Vec<String>,
}

impl super::PlanConfig {
    /// The refusal of a sidecar image a Bulkhead names, when it is neither
    /// the operator's own nor on the allow-list.
    pub(super) fn refused_image(&self, image: &str) -> Option<RefusedImage> {
        if self.proxy_image.as_deref() == Some(image) || self.proxy_image_allow.allows(image) {
            return None;
        }
        let allowed = self.proxy_image.iter().chain(self.proxy_image_allow.entries()).cloned().collect();
        Some(RefusedImage { image: image.to_string(), allowed })
    }
}

/// What the plan held back in namespaces that have not opted in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotOptedIn {
    pub namespace: String,
    /// What would have been written there: `the pool config`, `ResourceQuota …`, `Deployment ns/name`.
    pub held: Vec<String>,
}

/// Collects what the plan held back, by namespace.
#[derive(Default)]
pub(super) struct HeldBack(BTreeMap<String, Vec<String>>);

impl HeldBack {
    pub(super) fn add(&mut self, namespace: &str, what: impl Into<String>) {
        let what = what.into();
        let held = self.0.entry(namespace.to_string()).or_default();
        if !held.contains(&what) {
            held.push(what);
        }
    }

    pub(super) fn into_vec(self) -> Vec<NotOptedIn> {
        self.0.into_iter().map(|(namespace, held)| NotOptedIn { namespace, held }).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_opt_in_is_a_label_or_none() {
        assert_eq!(OptIn::parse("none"), Ok(None));
        assert_eq!(OptIn::parse(""), Ok(None));
        let o = OptIn::parse(DEFAULT_NAMESPACE_OPT_IN).expect("the default parses").expect("a label");
        assert_eq!((o.key.as_str(), o.value.as_str()), ("bulkhead.dev/enabled", "true"));
        assert_eq!(o.to_string(), DEFAULT_NAMESPACE_OPT_IN);
        assert!(OptIn::parse("team").is_err(), "a value is required");
        assert!(OptIn::parse("team=").is_err());
        assert!(OptIn::parse("Bad_Prefix/x=y").is_err());
        assert!(OptIn::parse("example.com/ok=yes").expect("valid").is_some());
    }

    #[test]
    fn an_allow_list_entry_is_an_image_or_a_prefix() {
        let list = ImageAllowList::parse("registry.example/bulkhead:*, other.example/proxy:1.0").expect("valid");
        assert!(list.allows("registry.example/bulkhead:1.2"));
        assert!(list.allows("registry.example/bulkhead:1.2@sha256:abc"));
        assert!(!list.allows("registry.example/bulkhead-evil:1.2"));
        assert!(list.allows("other.example/proxy:1.0"));
        assert!(!list.allows("other.example/proxy:1.0-evil"));
        assert!(ImageAllowList::parse("").expect("empty").entries().is_empty());
        assert!(ImageAllowList::parse("a*b").is_err());
    }
}
