//! Kubernetes name and label syntax, checked where a spec names labels
//! (selectors, quota resource names, topology keys) so that the planner and
//! the API server agree on what is valid.

/// DNS-1123 label: lower-case alphanumerics and '-', starting and ending alphanumeric, 1-63 long.
pub fn is_dns_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// A label key (and a qualified name in general): an optional DNS-subdomain
/// prefix and `/`, then a name of at most 63 alphanumerics, '-', '_' or '.',
/// starting and ending alphanumeric.
pub fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let prefix_ok = prefix.is_none_or(|p| !p.is_empty() && p.len() <= 253 && p.split('.').all(is_dns_label));
    prefix_ok && !name.is_empty() && is_label_value(name)
}

/// A label value: empty, or at most 63 alphanumerics, '-', '_' or '.',
/// starting and ending alphanumeric.
pub fn is_label_value(s: &str) -> bool {
    s.is_empty()
        || s.len() <= 63
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && s.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys_and_values_follow_the_api_server() {
        for ok in ["app", "kubernetes.io/hostname", "a.b-c_d", "example.com/x.y", "count/deployments.apps"] {
            assert!(is_qualified_name(ok), "{ok}");
        }
        for bad in ["", "/app", "a/b/c", "-app", "app-", "Example.com/x", "a b", &"x".repeat(64)] {
            assert!(!is_qualified_name(bad), "{bad}");
        }
        for ok in ["", "v1", "a.b_c-d", &"x".repeat(63)] {
            assert!(is_label_value(ok), "{ok}");
        }
        for bad in ["-v", "v-", "a b", "ä", &"x".repeat(64)] {
            assert!(!is_label_value(bad), "{bad}");
        }
    }
}
