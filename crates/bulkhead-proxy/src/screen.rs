//! What a proxy must not forward or classify, refused before admission (the
//! 400s), and class headers an untrusted peer sent, dropped: a request is
//! classified only by what the proxy trusts.

use std::{borrow::Cow, net::IpAddr, sync::Arc};

use http::{header, uri::PathAndQuery, Method, Request, Uri, Version};

use bulkhead_admission::{
    classify::{Classifier, Rule},
    normalize,
};

use super::{class_headers::ClassHeaders, options::Cidr, refusal::Refusal};

/// One listener's checks of a request before its class is named.
pub(super) struct Screen {
    /// The headers that name a class: the classifier's, or x-bulkhead-class.
    class_headers: Arc<ClassHeaders>,
    /// Peers that may name a class by header; None: any peer.
    class_header_from: Option<Arc<[Cidr]>>,
    /// Path rules classify: the path is normalised first, and forwarded so.
    by_path: bool,
}

impl Screen {
    pub(super) fn new(
        classifier: &Classifier,
        class_headers: Arc<ClassHeaders>,
        class_header_from: Option<Arc<[Cidr]>>,
    ) -> Self {
        let by_path =
            matches!(classifier, Classifier::Rules(rules) if rules.iter().any(|r| matches!(r, Rule::Path(_))));
        Self { class_headers, class_header_from, by_path }
    }

    /// Refuse what a proxy must not forward or classify (the 400s), and drop
    /// class headers an untrusted peer sent.
    pub(super) fn check<B>(&self, req: &mut Request<B>, peer: IpAddr) -> Result<(), Refusal> {
        // CONNECT would have the upstream open a tunnel to a host the client names.
        if req.method() == Method::CONNECT {
            return Err(Refusal::Connect);
        }
        let mut hosts = req.headers().get_all(header::HOST).iter();
        let host = hosts.next();
        // RFC 9112 3.2: an HTTP/1.1 request without exactly one Host is refused, as is a Host
        // that is not `host[:port]` (a list, user info, a path); so is a target's or
        // :authority's authority with user info, which would become the upstream's Host.
        let missing = host.is_none() && req.version() == Version::HTTP_11;
        let bad_authority = req.uri().authority().is_some_and(|a| !is_host(a.as_str().as_bytes()));
        if missing || bad_authority || hosts.next().is_some() || host.is_some_and(|h| !is_host(h.as_bytes())) {
            return Err(Refusal::BadHost);
        }
        for name in self.class_headers.names() {
            // A front proxy that appends the trusted value must not lose to the client's.
            if req.headers().get_all(name).iter().nth(1).is_some() {
                return Err(Refusal::RepeatedClassHeader);
            }
        }
        if self.by_path {
            normalize_path(req)?;
        }
        let trusted = self.class_header_from.as_ref().is_none_or(|nets| nets.iter().any(|n| n.contains(peer)));
        if !trusted {
            self.class_headers.remove(req.headers_mut());
        }
        Ok(())
    }
}

/// `host [ ":" port ]` (RFC 9110 7.2): a name or IPv4 address of letters,
/// digits and `-._~%`, or an IPv6 literal in brackets; then at most one port
/// of up to five digits. Empty is allowed (a target with no authority). No
/// allocation: this runs for every request.
fn is_host(value: &[u8]) -> bool {
    let (host, port) = match value.strip_prefix(b"[") {
        Some(literal) => match literal.iter().position(|&c| c == b']') {
            Some(end) if literal[..end].iter().all(|&c| c.is_ascii_hexdigit() || c == b':' || c == b'.') => {
                (&[][..], &literal[end + 1..])
            }
            _ => return false,
        },
        None => match value.iter().position(|&c| c == b':') {
            Some(colon) => (&value[..colon], &value[colon..]),
            None => (value, &[][..]),
        },
    };
    let name = host.iter().all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~' | b'%'));
    let port = match port.strip_prefix(b":") {
        Some(digits) => (1..=5).contains(&digits.len()) && digits.iter().all(u8::is_ascii_digit),
        None => port.is_empty(),
    };
    name && port
}

/// Rewrite the request's path to its normal form (the upstream then sees the
/// path the rules matched), or refuse an ambiguous one.
fn normalize_path<B>(req: &mut Request<B>) -> Result<(), Refusal> {
    let path = req.uri().path();
    let normal = match normalize::normalize(path) {
        Ok(Cow::Borrowed(_)) => return Ok(()),
        Ok(Cow::Owned(normal)) => normal,
        Err(_) => return Err(Refusal::AmbiguousPath),
    };
    let target = match req.uri().query() {
        Some(q) => format!("{normal}?{q}"),
        None => normal,
    };
    let mut parts = req.uri().clone().into_parts();
    parts.path_and_query = Some(PathAndQuery::try_from(target).map_err(|_| Refusal::AmbiguousPath)?);
    *req.uri_mut() = Uri::from_parts(parts).map_err(|_| Refusal::AmbiguousPath)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::is_host;

    #[test]
    fn a_host_is_a_name_or_address_and_at_most_one_port() {
        for good in ["shop", "shop.example:8080", "10.0.0.1:80", "[::1]:8443", "[fe80::1]", "my_host", ""] {
            assert!(is_host(good.as_bytes()), "{good}");
        }
        for bad in ["a, b", "a,b:1:2", "user@shop", "u:p@evil.example", "shop/x", "shop:", "shop:123456", "[::1", "[x]"]
        {
            assert!(!is_host(bad.as_bytes()), "{bad}");
        }
    }
}
