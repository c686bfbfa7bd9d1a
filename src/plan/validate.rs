//! Spec rules the CRD schema cannot state (or that offline input skipped the
//! schema for). Each error names its field. Selectors are checked where they
//! are parsed (`select::Selection`).

use std::collections::BTreeSet;

use bulkhead_admission::Unclassified;

use crate::{
    crd::Scope,
    select::{is_dns_label, is_qualified_name, Selection, SpecError},
};

/// Longest Bulkhead name: it becomes a label value on everything the operator writes.
pub(super) const MAX_NAME_LEN: usize = 63;
/// Most classes: the audit's pairs grow with the square, and status must fit in an object.
pub(super) const MAX_CLASSES: usize = 64;
/// Most database URLs per class.
pub(super) const MAX_DATABASES: usize = 16;

/// Every spec problem: the rules below, then the selectors that did not parse.
pub fn validate(selection: &Selection<'_>) -> Vec<SpecError> {
    let mut errors = rules(selection);
    errors.extend(selection.errors.iter().cloned());
    errors
}

fn rules(selection: &Selection<'_>) -> Vec<SpecError> {
    let bulkhead = selection.bulkhead;
    let spec = &bulkhead.spec;
    let mut errors = Vec::new();
    let name = bulkhead.metadata.name.as_deref().unwrap_or_default();
    if name.is_empty() {
        errors.push(SpecError::new("metadata.name", "is required"));
    } else if name.len() > MAX_NAME_LEN || !is_dns_label(name) {
        errors.push(SpecError::new(
            "metadata.name",
            format!("{name:?} must be a DNS label of at most {MAX_NAME_LEN} characters (it is used as a label value)"),
        ));
    }
    if !is_dns_label(&spec.pool.resource) {
        errors.push(SpecError::new("spec.pool.resource", format!("{:?} must be a DNS label", spec.pool.resource)));
    }
    if spec.pool.capacity == 0 {
        // The schema admits 0 (objects stored before this rule must stay
        // readable); the planner refuses it: every class would admit nothing.
        errors.push(SpecError::new(
            "spec.pool.capacity",
            "must be at least 1: a pool of 0 admits no request of any class",
        ));
    }
    if spec.classes.is_empty() {
        errors.push(SpecError::new("spec.classes", "at least one class is required"));
    }
    if spec.classes.len() > MAX_CLASSES {
        errors.push(SpecError::new(
            "spec.classes",
            format!("{} classes; at most {MAX_CLASSES} are supported", spec.classes.len()),
        ));
    }
    if spec.pool.scope == Scope::Fleet && spec.workload.is_none() {
        errors.push(SpecError::new(
            "spec.workload",
            "is required when spec.pool.scope is Fleet (its replicas divide the pool)",
        ));
    }
    if let Some(workload) = &spec.workload {
        if !is_dns_label(&workload.namespace) {
            errors.push(SpecError::new(
                "spec.workload.namespace",
                format!("{:?} must be a DNS label", workload.namespace),
            ));
        }
    }
    if let Some(proxy) = spec.workload.as_ref().and_then(|w| w.proxy.as_ref()) {
        let classes: Vec<&str> = spec.classes.iter().map(|c| c.name.as_str()).collect();
        let unclassified = selection.unclassified.as_ref().unwrap_or(&Unclassified::Reject);
        errors.extend(super::injection::validate_proxy(proxy, unclassified, &classes));
        errors.extend(super::network_policy::validate_network_policy(proxy));
    }
    errors.extend(super::shard::validate_sharding(spec));
    let places = super::places_workloads(spec);
    if places {
        errors.extend(super::priority::validate_priorities(spec));
        if super::nodes::RESERVED_KEYS.contains(&super::claim_key(name).as_str()) {
            errors.push(SpecError::new(
                "metadata.name",
                format!("{name:?} is reserved: bulkhead.dev/{name} already labels the operator's own objects"),
            ));
        }
    }
    let mut seen = BTreeSet::new();
    for (i, class) in spec.classes.iter().enumerate() {
        let field = |f: &str| format!("spec.classes[{i}].{f}");
        if !is_dns_label(&class.name) {
            errors.push(SpecError::new(field("name"), format!("{:?} must be a DNS label", class.name)));
        }
        if class.databases.len() > MAX_DATABASES {
            errors.push(SpecError::new(field("databases"), format!("at most {MAX_DATABASES} URLs")));
        }
        for (j, url) in class.databases.iter().enumerate() {
            if let Err(problem) = check_database_url(url) {
                errors.push(SpecError::new(field(&format!("databases[{j}]")), format!("{url:?} {problem}")));
            }
        }
        for (resource, quantity) in class.quota.iter().flat_map(|q| &q.hard) {
            let here = || field(&format!("quota.hard.{resource}"));
            if !is_qualified_name(resource) {
                errors.push(SpecError::new(
                    here(),
                    format!("{resource:?} is not a resource name (like cpu, requests.memory, pods)"),
                ));
            }
            if !is_quantity(&quantity.0) {
                errors.push(SpecError::new(
                    here(),
                    format!("{:?} is not a non-negative Kubernetes quantity (like 500m, 2 or 4Gi)", quantity.0),
                ));
            }
        }
        if !seen.insert(class.name.as_str()) {
            errors.push(SpecError::new(field("name"), format!("duplicate class name {:?}", class.name)));
        }
        if places && class.pods.as_ref().is_some_and(|p| p.pod_selector.is_none()) {
            errors.push(SpecError::new(
                field("pods.podSelector"),
                "is required when the Bulkhead places workloads: without it every workload of the selected \
                 namespaces would be patched",
            ));
        }
        if let Some(group) = &class.nodes {
            if group.count == 0 {
                errors.push(SpecError::new(field("nodes.count"), "must be at least 1"));
            }
        }
        if let Some(a) = &class.anti_affinity {
            if !is_qualified_name(&a.topology_key) {
                errors.push(SpecError::new(
                    field("antiAffinity.topologyKey"),
                    format!("{:?} is not a label key (like kubernetes.io/hostname)", a.topology_key),
                ));
            }
        }
        if class.priority.is_some_and(|p| p.unsigned_abs() > super::priority::MAX_PRIORITY.unsigned_abs()) {
            errors.push(SpecError::new(field("priority"), "must lie between -1000000000 and 1000000000"));
        }
        if class.quota.is_some() && class.pods.as_ref().and_then(|p| p.namespace_selector.as_ref()).is_none() {
            errors.push(SpecError::new(
                field("quota"),
                "needs pods.namespaceSelector to say which namespaces receive the quota",
            ));
        }
    }
    errors
}

/// What a ResourceQuota's hard limit accepts: a quantity as the API server
/// parses it (no spaces), not below zero.
fn is_quantity(q: &str) -> bool {
    !q.is_empty() && q.trim() == q && super::quantity::nano_units(q).is_some_and(|n| n >= 0)
}

/// A database URL the audit can resolve: `scheme://[user[:password]@]host[:port][/path][?query]`,
/// with a port from 1 to 65535. The CRD states the same as a pattern.
pub(super) fn check_database_url(url: &str) -> Result<(), String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err("is not a URL (scheme://host[:port][/database])".into());
    };
    let scheme_ok = scheme.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
        && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'.' | b'-'));
    if !scheme_ok {
        return Err(format!("has no valid scheme ({scheme:?})"));
    }
    if url.chars().any(char::is_whitespace) {
        return Err("contains white space".into());
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or("has an unclosed [ in its host")?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or("has text after its IPv6 host")?),
        };
        (host, port)
    } else {
        match hostport.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if host.is_empty() || host.contains(['[', ']', '@']) {
        return Err("names no host".into());
    }
    let bracketed = hostport.starts_with('[');
    if bracketed && !host.bytes().all(|b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.')) {
        return Err(format!("has [{host}] for a host, not an IPv6 address"));
    }
    if let Some(port) = port {
        let valid =
            // No leading zero: the CRD's pattern refuses one, and both must agree.
            port.bytes().all(|b| b.is_ascii_digit())
                && !port.starts_with('0')
                && port.parse::<u32>().is_ok_and(|p| (1..=65535).contains(&p));
        if !valid {
            return Err(format!("has port {port:?}, not a number from 1 to 65535 (without leading zeros)"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::check_database_url;
    use crate::crd::DATABASE_URL_PATTERN;

    fn schema_accepts(url: &str) -> bool {
        regex::Regex::new(DATABASE_URL_PATTERN).expect("the CRD's pattern compiles").is_match(url)
    }

    #[test]
    fn database_urls_name_a_host_and_a_port_in_range() {
        for ok in ["postgres://orders-db.shop.svc:5432/orders", "mysql://u:p@db/x", "redis://[::1]:6379", "pg://db"] {
            assert_eq!(check_database_url(ok), Ok(()), "{ok}");
            assert!(schema_accepts(ok), "{ok}");
        }
        for bad in [
            "orders-db:5432",
            "postgres://:5432/x",
            "pg://db:0",
            "pg://db:65536",
            "pg://db:01",
            "pg://db:x",
            "pg://a b",
            "1pg://db",
            "pg://[g]",
        ] {
            assert!(check_database_url(bad).is_err(), "{bad}");
            assert!(!schema_accepts(bad), "{bad}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

        /// The cluster (the CRD's pattern) and the planner agree on every URL.
        #[test]
        fn the_crd_pattern_and_the_planner_agree(
            url in "([a-z][a-z0-9+.-]{0,5}|[0-9+]{1,2})?(://|:/|//)?([a-z]{1,3}(:[a-z]{0,3})?@)?([a-z.-]{0,8}|\\[[0-9a-gz:.]{0,6}\\]?)(:[0-9a-z]{0,6})?([/?#][a-z /]{0,5})?",
        ) {
            prop_assert_eq!(check_database_url(&url).is_ok(), schema_accepts(&url), "{:?}: {:?}", url, check_database_url(&url));
        }
    }
}
