//! What forwarding does to a message's header fields: those that concern
//! one connection only go (RFC 9110 7.6.1), and the client's address is
//! appended to x-forwarded-for.

use std::str::FromStr;

use http::{header, HeaderMap, HeaderName, HeaderValue};

pub(super) fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE) && connection_tokens(headers).any(|t| t.eq_ignore_ascii_case("upgrade"))
}

fn connection_tokens(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers.get_all(header::CONNECTION).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).map(str::trim)
}

const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");

/// Remove the fields HTTP/2 forbids (RFC 9113 8.2.2) from a response sent
/// over it: h2 refuses to send them, and the proxy's own refusals may say
/// `connection: close`. Most responses carry none: one pass over the names.
pub(super) fn strip_connection_specific(headers: &mut HeaderMap) {
    let specific =
        [header::CONNECTION, header::UPGRADE, KEEP_ALIVE, PROXY_CONNECTION, header::TRANSFER_ENCODING, header::TE];
    if !headers.keys().any(|name| specific.contains(name)) {
        return;
    }
    for name in &specific[..5] {
        headers.remove(name);
    }
    if headers.get_all(header::TE).iter().any(|v| v != "trailers") {
        headers.remove(header::TE);
    }
}

/// Remove what concerns one connection only (RFC 9110 7.6.1); keep the
/// Upgrade handshake when splicing, and `te: trailers`, which gRPC needs.
pub(super) fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) {
    // Most messages carry none: one pass over the names costs less than a
    // hashed lookup for each (a Connection header is what can name others).
    let hop_by_hop = [
        header::CONNECTION,
        header::UPGRADE,
        KEEP_ALIVE,
        PROXY_CONNECTION,
        header::TRANSFER_ENCODING,
        header::PROXY_AUTHORIZATION,
        header::TE,
    ];
    if !headers.keys().any(|name| hop_by_hop.contains(name)) {
        return;
    }
    if headers.contains_key(header::CONNECTION) {
        let named: Vec<HeaderName> = connection_tokens(headers)
            .filter(|t| !t.eq_ignore_ascii_case("upgrade") && !t.eq_ignore_ascii_case("close"))
            .filter(|t| !t.eq_ignore_ascii_case("keep-alive"))
            // Host is for every recipient (RFC 9110 7.6.1 forbids naming it): naming it must
            // not swap the client's host for the upstream's address.
            .filter(|t| !t.eq_ignore_ascii_case("host"))
            .filter_map(|t| HeaderName::from_str(t).ok())
            .collect();
        for name in named {
            headers.remove(name);
        }
        if upgrade {
            // Only the handshake goes on: the client's other tokens would have the next
            // proxy remove fields (the class header among them) this one set.
            headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        } else {
            headers.remove(header::CONNECTION);
        }
    }
    if !upgrade {
        headers.remove(header::UPGRADE);
    }
    headers.remove(KEEP_ALIVE);
    headers.remove(PROXY_CONNECTION);
    headers.remove(header::TRANSFER_ENCODING);
    headers.remove(header::PROXY_AUTHORIZATION);
    if headers.get(header::TE).is_some_and(|v| v != "trailers") {
        headers.remove(header::TE);
    }
}

const FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub(super) const FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

pub(super) fn append_forwarded_for(headers: &mut HeaderMap, peer: &HeaderValue) {
    match headers.get(&FORWARDED_FOR).map(|v| [v.as_bytes(), b", ", peer.as_bytes()].concat()) {
        Some(joined) => {
            if let Ok(v) = HeaderValue::from_bytes(&joined) {
                headers.insert(FORWARDED_FOR, v);
            }
        }
        None => {
            headers.insert(FORWARDED_FOR, peer.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_go_and_end_to_end_ones_stay() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, x-private"),
            ("x-private", "1"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("te", "trailers"),
            ("upgrade", "websocket"),
            ("x-class", "search"),
        ] {
            h.insert(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h, false);
        let mut left: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, ["te", "x-class"]);
        append_forwarded_for(&mut h, &HeaderValue::from_static("10.0.0.1"));
        append_forwarded_for(&mut h, &HeaderValue::from_static("127.0.0.1"));
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, 127.0.0.1");
    }
}
