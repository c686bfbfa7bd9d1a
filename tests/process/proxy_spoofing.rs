//! `bulkhead proxy` against clients that try to steer what the upstream sees:
//! the class the proxy decided, the host, the path. The upstream must see
//! exactly the class the request was counted as (issue 21), however the
//! client spells its request: hop-by-hop lists, trailers, underscores,
//! absolute-form targets, path parameters.

use crate::proxy_hostile::{args, exchange};
use crate::proxy_support::*;

use std::time::Duration;

use http::Request;
use tokio::{io::AsyncWriteExt, net::TcpStream};

/// The upstream's echo (`/headers`, `/trailers`): the body of the answer to `raw`.
async fn echo(proxy: &Proxy, raw: &str) -> String {
    let (got, _) = exchange(proxy.listen, raw.as_bytes(), Duration::from_secs(3)).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{raw:?}: {got:?}");
    got.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default()
}

fn lines_named<'a>(seen: &'a str, name: &str) -> Vec<&'a str> {
    seen.lines().filter(|l| l.split(':').next().is_some_and(|n| n.eq_ignore_ascii_case(name))).collect()
}

/// RFC 9110 7.6.1 has a proxy remove the fields a `Connection` header names.
/// Naming the class header must not remove the one the proxy set, and naming
/// Host must not swap the client's host for the upstream's address.
#[tokio::test]
async fn a_connection_header_cannot_remove_the_decided_class_or_the_host() {
    let up = Upstream::start().await;
    let config = ConfigDir::new(&pools(5));
    let url = up.url();
    for protocol in ["http1", "h2c"] {
        let proxy = Proxy::start(config.path(), &args(&url, &["--upstream-protocol", protocol])).await;
        let seen = echo(
            &proxy,
            "GET /headers HTTP/1.1\r\nhost: shop\r\nx-class: search\r\nconnection: x-class, host, close\r\n\r\n",
        )
        .await;
        assert_eq!(lines_named(&seen, "x-class"), ["x-class: search"], "{protocol}: {seen}");
        let host = if protocol == "h2c" { "authority: shop" } else { "host: shop" };
        assert!(seen.lines().any(|l| l == host), "{protocol}: {seen}");
    }
}

/// A class header sent as a trailer would reach the upstream after the head
/// the proxy checked: it is dropped (from HTTP/1.1 and HTTP/2 clients, to
/// either upstream protocol), and other trailers still pass.
#[tokio::test]
async fn a_class_header_in_the_trailers_never_reaches_the_upstream() {
    let up = Upstream::start().await;
    let config = ConfigDir::new(&pools(5));
    let url = up.url();
    for protocol in ["http1", "h2c"] {
        let proxy = Proxy::start(config.path(), &args(&url, &["--upstream-protocol", protocol])).await;
        let seen = echo(
            &proxy,
            "POST /trailers HTTP/1.1\r\nhost: shop\r\nx-class: search\r\ntrailer: x-class, x_class, x-other\r\n\
             transfer-encoding: chunked\r\nconnection: close\r\n\r\n\
             5\r\nhello\r\n0\r\nx-class: control-plane\r\nx_class: control-plane\r\nx-other: kept\r\n\r\n",
        )
        .await;
        assert_eq!(seen, "x-other: kept\n", "{protocol}: HTTP/1.1 trailers");

        let tcp = TcpStream::connect(proxy.listen).await.expect("connect");
        let (send, conn) = h2::client::handshake(tcp).await.expect("handshake");
        tokio::spawn(conn);
        let mut send = send.ready().await.expect("ready");
        // (hyper sends an HTTP/1.1 upstream only the trailers a `Trailer` header declared.)
        let req = Request::post("http://shop/trailers")
            .header("x-class", "search")
            .header("trailer", "x-class, x-other")
            .body(())
            .expect("req");
        let (res, mut body) = send.send_request(req, false).expect("send");
        body.send_data(bytes::Bytes::from_static(b"hello"), false).expect("data");
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-class", http::HeaderValue::from_static("control-plane"));
        trailers.insert("x-other", http::HeaderValue::from_static("kept"));
        body.send_trailers(trailers).expect("trailers");
        let res = tokio::time::timeout(WAIT, res).await.expect("in time").expect("a response");
        assert_eq!(res.status(), 200);
        let mut body = res.into_body();
        let mut seen = Vec::new();
        while let Some(chunk) = tokio::time::timeout(WAIT, body.data()).await.expect("in time") {
            seen.extend_from_slice(&chunk.expect("data"));
        }
        assert_eq!(String::from_utf8_lossy(&seen), "x-other: kept\n", "{protocol}: HTTP/2 trailers");
    }
}

/// CGI, WSGI, PHP and Rack fold `x_class` and `x-class` into one name, so a
/// client's `x_class` would reach such an application as the class header:
/// the underscore spelling is dropped, from trusted and untrusted peers alike.
#[tokio::test]
async fn an_underscore_spelling_of_the_class_header_never_reaches_the_upstream() {
    let up = Upstream::start().await;
    let config = ConfigDir::new(&pools(5));
    let url = up.url();
    let trusted = Proxy::start(config.path(), &args(&url, &[])).await;
    let untrusted =
        Proxy::start(config.path(), &args(&url, &["--class-header-from", "10.0.0.0/8", "--unclassified", "search"]))
            .await;
    for proxy in [&trusted, &untrusted] {
        let seen = echo(
            proxy,
            "GET /headers HTTP/1.1\r\nhost: shop\r\nx-class: search\r\nx_class: control-plane\r\nX_Class: control-plane\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(lines_named(&seen, "x_class"), Vec::<&str>::new(), "{seen}");
        assert_eq!(lines_named(&seen, "x-class"), ["x-class: search"], "{seen}");
    }
    // The injected sidecar's header has two hyphens: any mix of spellings folds into it.
    let injected =
        Proxy::start(config.path(), &["--upstream", &url, "--workers", "1", "--classify", "header:x-bulkhead-class"])
            .await;
    let seen = echo(
        &injected,
        "GET /headers HTTP/1.1\r\nhost: shop\r\nx-bulkhead-class: search\r\nx-bulkhead_class: control-plane\r\n\
         x_bulkhead-class: control-plane\r\nx_bulkhead_class: control-plane\r\nconnection: close\r\n\r\n",
    )
    .await;
    let class_lines: Vec<_> = seen.lines().filter(|l| l.replace('_', "-").starts_with("x-bulkhead-class:")).collect();
    assert_eq!(class_lines, ["x-bulkhead-class: search"], "{seen}");
}

/// RFC 9112 3.2.2: a proxy replaces Host with an absolute-form target's
/// authority. And a Host that is not a host (a list, user info) is refused.
#[tokio::test]
async fn an_absolute_form_target_names_the_host_and_a_host_that_is_not_one_is_refused() {
    let up = Upstream::start().await;
    let config = ConfigDir::new(&pools(5));
    let url = up.url();
    let proxy = Proxy::start(config.path(), &args(&url, &[])).await;
    let seen = echo(
        &proxy,
        "GET http://shop.example/headers HTTP/1.1\r\nhost: evil.example\r\nx-class: search\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(lines_named(&seen, "host"), ["host: shop.example"], "{seen}");
    for host in ["a, b", "a,b:1:2", "user@shop", "shop/x"] {
        let raw = format!("GET / HTTP/1.1\r\nhost: {host}\r\nx-class: search\r\nconnection: close\r\n\r\n");
        let (got, _) = exchange(proxy.listen, raw.as_bytes(), Duration::from_secs(3)).await;
        assert!(got.starts_with("HTTP/1.1 400") && got.contains("x-bulkhead-reason: bad-host"), "{host}: {got:?}");
    }
    // User info in the target would become the upstream's Host.
    let raw = "GET http://user:pw@evil.example:80/headers HTTP/1.1\r\nhost: shop\r\nx-class: search\r\n\r\n";
    let (got, _) = exchange(proxy.listen, raw.as_bytes(), Duration::from_secs(3)).await;
    assert!(got.starts_with("HTTP/1.1 400") && got.contains("x-bulkhead-reason: bad-host"), "{got:?}");
    // CONNECT would have the upstream open a tunnel where the client says.
    let raw = "CONNECT evil.example:443 HTTP/1.1\r\nhost: evil.example:443\r\nx-class: search\r\n\r\n";
    let (got, _) = exchange(proxy.listen, raw.as_bytes(), Duration::from_secs(3)).await;
    assert!(got.starts_with("HTTP/1.1 400") && got.contains("x-bulkhead-reason: connect"), "{got:?}");
}

/// An allowed upgrade keeps its `Connection` header, but only as the
/// handshake: the client's other tokens would have a proxy behind this one
/// remove the class header (and Host) that this one set.
#[tokio::test]
async fn an_upgrade_forwards_connection_as_the_handshake_only() {
    let up = Upstream::start().await;
    let config = ConfigDir::new(&pools(5));
    let url = up.url();
    let proxy = Proxy::start(config.path(), &args(&url, &[])).await;
    // The upstream answers 200 (no switch), echoing the head it got.
    let seen = echo(
        &proxy,
        "GET /headers HTTP/1.1\r\nhost: shop\r\nx-class: search\r\nupgrade: websocket\r\n\
         connection: upgrade, x-class, host, x-forwarded-for\r\n\r\n",
    )
    .await;
    assert_eq!(lines_named(&seen, "connection"), ["connection: upgrade"], "{seen}");
    assert_eq!(lines_named(&seen, "upgrade"), ["upgrade: websocket"], "{seen}");
    assert_eq!(lines_named(&seen, "x-class"), ["x-class: search"], "{seen}");
    assert_eq!(lines_named(&seen, "host"), ["host: shop"], "{seen}");
}

/// Servlet containers drop `;params` from each segment before routing:
/// `/checkout/..;/search` is `/search` to Tomcat but a checkout path to a
/// naive prefix match, so such a dot segment is refused; a raw `\` (a
/// separator to some servers, like `%5C`) is refused; and `/admin;x/...` is
/// classified as `/admin`, where such servers route it.
#[tokio::test]
async fn path_parameters_and_backslashes_cannot_move_a_request_to_another_class() {
    let up = Upstream::start().await;
    let config = ConfigDir::new(&pools(5));
    let url = up.url();
    let rules = "path:/admin=control-plane,/checkout=checkout,/=search";
    let proxy = Proxy::start(config.path(), &["--upstream", &url, "--workers", "1", "--classify", rules]).await;
    for path in ["/checkout/..;/admin/headers", "/checkout/.;x/../admin", "/checkout\\..\\admin/headers"] {
        let raw = format!("GET {path} HTTP/1.1\r\nhost: shop\r\nconnection: close\r\n\r\n");
        let (got, _) = exchange(proxy.listen, raw.as_bytes(), Duration::from_secs(3)).await;
        assert!(got.starts_with("HTTP/1.1 400") && got.contains("ambiguous-path"), "{path}: {got:?}");
    }
    let mut tcp = TcpStream::connect(proxy.listen).await.expect("connect");
    tcp.write_all(b"GET /admin;jsessionid=1/headers HTTP/1.1\r\nhost: shop\r\nconnection: close\r\n\r\n")
        .await
        .expect("write");
    let (got, _) = crate::proxy_hostile::read_until_closed(&mut tcp, Duration::from_secs(3)).await;
    assert!(got.starts_with("HTTP/1.1 200") && got.contains("x-bulkhead-class: control-plane\n"), "{got:?}");
}
