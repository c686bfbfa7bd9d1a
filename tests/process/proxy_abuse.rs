//! `bulkhead proxy` against protocol abuse that hyper and h2 stop before a
//! request is admitted: rapid reset, CONTINUATION floods, oversized heads,
//! request smuggling, and class names that would multiply metric series.
//! Issue 21 found that these held; the tests keep them holding across
//! upgrades of hyper and h2 (each limit is one of their settings or checks).

use crate::proxy_support;

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use http::Request;
use proxy_support::*;
use tokio::{io::AsyncWriteExt, net::TcpStream};

use super::proxy_hostile::{args, exchange, frame, read_until_closed, slots_free, RawH2};

/// Requests admitted to `search` so far, from either pool.
async fn admitted(proxy: &Proxy) -> f64 {
    let mut total = 0.0;
    for pool in ["floor", "surplus"] {
        total += proxy.metric(&format!(r#"bulkhead_proxy_admitted_total{{class="search",pool="{pool}"}}"#)).await;
    }
    total
}

/// A classified GET on a new connection still gets through.
async fn still_serves(proxy: &Proxy) {
    let res = send(&http1(), request(&proxy.url("/"), Some("search"))).await;
    assert_eq!(res.status(), 200, "the proxy stopped serving:\n{}", proxy.log());
}

async fn h2_connect(proxy: &Proxy) -> h2::client::SendRequest<bytes::Bytes> {
    let tcp = TcpStream::connect(proxy.listen).await.expect("connect");
    let (send, conn) = h2::client::handshake(tcp).await.expect("handshake");
    tokio::spawn(conn);
    send
}

fn get(proxy: SocketAddr, extra: Option<(&str, String)>) -> Request<()> {
    let mut req = Request::get(format!("http://{proxy}/")).header("x-class", "search");
    if let Some((name, value)) = extra {
        req = req.header(name, value);
    }
    req.body(()).expect("request")
}

/// A classified GET with one `extra` header over a new h2c connection, by a
/// client that takes response heads up to 1 MiB (hyper's client stops at
/// 16 KiB): its response head, or the error that ended the stream.
pub(super) async fn h2_get(
    proxy: SocketAddr,
    extra: Option<(&str, String)>,
) -> Result<http::Response<h2::RecvStream>, h2::Error> {
    let tcp = TcpStream::connect(proxy).await.expect("connect");
    let (send, conn) = h2::client::Builder::new()
        .max_header_list_size(1 << 20)
        .handshake::<_, bytes::Bytes>(tcp)
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let mut send = send.ready().await.expect("ready");
    let (res, _) = send.send_request(get(proxy, extra), true).expect("send");
    tokio::time::timeout(WAIT, res).await.expect("in time")
}

/// CVE-2023-44487: streams opened and reset at once. h2 allows 20 streams
/// at once reset before they were accepted, then sends GOAWAY.
#[tokio::test]
async fn rapid_reset_gets_the_connection_closed_and_takes_no_slot() {
    let up = Upstream::start().await;
    let config = ConfigDir::new(&pools(5));
    let proxy = Proxy::start(config.path(), &args(&up.url(), &[])).await;
    let mut send = h2_connect(&proxy).await;
    let mut opened = 0;
    let ended = loop {
        assert!(opened < 20_000, "20,000 streams opened and reset, and the connection is still open");
        send = match send.ready().await {
            Ok(send) => send,
            Err(e) => break e,
        };
        match send.send_request(get(proxy.listen, None), true) {
            Ok((_, mut stream)) => stream.send_reset(h2::Reason::CANCEL),
            Err(e) => break e,
        }
        opened += 1;
        if opened % 100 == 0 {
            // Batches of 100 with a pause, so that a proxy slow to get the CPU
            // still reads each batch before the next (the bound below is on it).
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    assert!(opened < 5_000, "closed only after {opened} streams");
    // The proxy sends GOAWAY and closes; a client still writing may meet the
    // close (a broken pipe) before it reads the GOAWAY.
    let calm = ended.is_go_away() && ended.is_remote() && ended.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM);
    assert!(calm || ended.is_io(), "ended by {ended:?} after {opened} streams");
    slots_free(&proxy, "search").await;
    still_serves(&proxy).await;
}

/// CVE-2024-27316 and kin: a header block that never ends. h2 stops after
/// 5 CONTINUATION frames (its floor at a 16 KiB header list) or at four
/// times the header-list limit, whichever is first.
#[tokio::test]
async fn a_continuation_flood_is_cut_at_the_header_list_limit() {
    let up = Upstream::start().await;
    let config = ConfigDir::new(&pools(5));
    let proxy = Proxy::start(config.path(), &args(&up.url(), &[])).await;
    let mut raw = RawH2::connect(proxy.listen, true).await;
    // HEADERS without END_HEADERS: :method GET, :scheme http, then literals.
    let mut block = vec![0x82, 0x86];
    for (name, value) in [(":path", "/"), (":authority", "shop"), ("x-class", "search")] {
        block.push(0x00);
        for s in [name, value] {
            block.push(u8::try_from(s.len()).expect("short"));
            block.extend_from_slice(s.as_bytes());
        }
    }
    raw.tcp.write_all(&frame(1, 0x1, 1, &block)).await.expect("headers");
    // Then up to 11 MB of CONTINUATION frames, each one more 100-byte field.
    let mut sent = 0usize;
    let flood = Instant::now() + WAIT;
    for i in 0..100_000u32 {
        let mut field = vec![0x00, 8];
        field.extend_from_slice(format!("x-{i:06}").as_bytes());
        field.push(100);
        field.extend_from_slice(&[b'a'; 100]);
        match tokio::time::timeout_at(flood.into(), raw.tcp.write_all(&frame(9, 0, 1, &field))).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => break,
            Err(_) => panic!("the proxy stopped reading after {sent} CONTINUATION frames without closing"),
        }
        sent += 1;
    }
    assert!(raw.run(Duration::from_secs(5)).await, "still open after {sent} CONTINUATION frames");
    // What the socket buffers took before the close reached us is not all of it.
    assert!(sent < 100_000, "all 100,000 CONTINUATION frames were taken");
    assert_eq!(admitted(&proxy).await, 0.0, "a request without an end of headers was admitted");
    still_serves(&proxy).await;
}

/// Request heads are bounded before admission: HTTP/1.1 by a 32 KiB read
/// buffer (431), HTTP/2 by the 16 KiB header list (431, and GOAWAY for one
/// far past it).
#[tokio::test]
async fn oversized_request_heads_are_refused_before_admission() {
    let up = Upstream::start().await;
    let config = ConfigDir::new(&pools(5));
    let proxy = Proxy::start(config.path(), &args(&up.url(), &[])).await;
    let head = |kib: usize| {
        format!("GET / HTTP/1.1\r\nHost: shop\r\nx-class: search\r\nx-big: {}\r\n\r\n", "a".repeat(kib << 10))
    };
    let (got, _) = exchange(proxy.listen, head(30).as_bytes(), Duration::from_secs(3)).await;
    assert!(got.starts_with("HTTP/1.1 200 "), "a 30 KiB HTTP/1.1 head: {got:.60}");
    for kib in [40, 500] {
        // The proxy may close before the whole head is written: keep what it answered.
        let mut tcp = TcpStream::connect(proxy.listen).await.expect("connect");
        let _ = tcp.write_all(head(kib).as_bytes()).await;
        let (got, closed) = read_until_closed(&mut tcp, Duration::from_secs(3)).await;
        assert!(got.starts_with("HTTP/1.1 431 ") && closed, "a {kib} KiB HTTP/1.1 head: {got:.60}, closed {closed}");
    }

    for (kib, status) in [(10, 200), (20, 431)] {
        let res = h2_get(proxy.listen, Some(("x-big", "a".repeat(kib << 10)))).await.expect("a response");
        assert_eq!(res.status(), status, "a {kib} KiB HTTP/2 header list");
    }
    let err =
        h2_get(proxy.listen, Some(("x-big", "a".repeat(100 << 10)))).await.expect_err("a 100 KiB HTTP/2 header list");
    assert!(err.is_go_away() && err.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM), "{err:?}");

    assert_eq!(admitted(&proxy).await, 2.0, "only the two heads within the limits were admitted");
    still_serves(&proxy).await;
}

/// Ambiguous framing gets 400 or is read one way and the connection closed
/// (RFC 9112 6.1, 6.3): nothing after it on the connection can be read as
/// a second request, so the upstream never sees a request the proxy did not.
#[tokio::test]
async fn ambiguous_framing_is_refused_or_ends_the_connection() {
    let up = Upstream::start().await;
    let config = ConfigDir::new(&pools(5));
    let proxy = Proxy::start(config.path(), &args(&up.url(), &[])).await;
    let head = "POST / HTTP/1.1\r\nHost: shop\r\nx-class: search\r\n";
    let smuggled = "GET /smuggled HTTP/1.1\r\nHost: shop\r\nx-class: search\r\n\r\n";
    let cases = [
        // Both lengths: chunked wins and the connection closes after the answer.
        ("Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "200"),
        ("Content-Length: 6\r\nContent-Length: 5\r\n\r\nabcdef", "400"),
        ("Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", "400"),
        ("Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", "400"),
        ("Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n", "400"),
        ("Content-Length: +6\r\n\r\nabcdef", "400"),
        ("\tfolded: x\r\n\r\n", "400"),
    ];
    for (rest, status) in cases {
        let raw = format!("{head}{rest}{smuggled}");
        let (got, closed) = exchange(proxy.listen, raw.as_bytes(), Duration::from_secs(3)).await;
        let answers: Vec<&str> = got.lines().filter(|l| l.starts_with("HTTP/1.1 ")).collect();
        assert_eq!(answers.len(), 1, "{rest:?}: {answers:?}");
        assert!(
            answers[0].starts_with(&format!("HTTP/1.1 {status} ")) && closed,
            "{rest:?}: {answers:?}, closed {closed}"
        );
    }
    assert_eq!(admitted(&proxy).await, 1.0, "only the chunked request was forwarded");
}

/// A class name the pools do not have is unclassified; it never becomes a
/// label, so a client cannot multiply the metric series.
#[tokio::test]
async fn unknown_class_names_add_no_metric_series() {
    let up = Upstream::start().await;
    let config = ConfigDir::new(&pools(5));
    let proxy = Proxy::start(config.path(), &args(&up.url(), &["--unclassified", "search"])).await;
    let series = |text: String| text.lines().filter(|l| !l.starts_with('#')).count();
    let before = series(proxy.metrics().await);
    let client = http1();
    for i in 0..300 {
        let res = send(&client, request(&proxy.url("/"), Some(&format!("class-{i}")))).await;
        assert_eq!(res.status(), 200);
    }
    let metrics = proxy.metrics().await;
    assert!(!metrics.contains("class-"), "a client's class name became a label");
    assert_eq!(series(metrics), before, "300 unknown class names added series");
    assert_eq!(admitted(&proxy).await, 300.0, "counted as the --unclassified class");
}
