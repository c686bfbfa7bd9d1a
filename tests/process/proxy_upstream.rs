//! `bulkhead proxy` against upstreams that do what real servers do: recycle
//! connections (GOAWAY, keep-alive limits, idle closes), limit streams, try to
//! push, send huge heads. None of it may cost a client's request or the shared
//! upstream connection. The real binary, loopback only, every wait bounded.

use crate::proxy_support;

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use http::Request;
use http_body_util::{BodyExt, Empty};
use proxy_support::*;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::{
    proxy_abuse::h2_get,
    proxy_hostile::{args, exchange, frame, in_flight_is, read_until, slots_free},
};

#[tokio::test]
async fn an_h2c_upstream_streams_both_ways_and_keeps_every_limit() {
    let up = Upstream::start().await;
    let config = ConfigDir::new(&pools(5));
    let url = up.url();
    let extra = ["--upstream-protocol", "h2c", "--response-timeout", "1500ms", "--idle-timeout", "300ms"];
    let proxy = Proxy::start(config.path(), &args(&url, &extra)).await;
    // Heads both ways, over either protocol in front.
    for client in [http1(), h2c()] {
        let res = send(&client, request(&proxy.url("/headers"), Some("search"))).await;
        assert_eq!(res.status(), 200);
        let body = String::from_utf8_lossy(&res.into_body().collect().await.expect("body").to_bytes()).into_owned();
        assert!(body.contains("x-class: search\n") && body.contains("x-forwarded-proto: http\n"), "{body}");
        // The client's host arrives as :authority, and only there.
        let host = format!("authority: {}\n", proxy.listen);
        assert!(body.contains(&host) && !body.contains("host:"), "{body}");
    }
    // A request body past the initial 64 KiB window: flow control both ways.
    let big = vec![b'x'; 300_000];
    let mut raw = format!(
        "POST /body HTTP/1.1\r\nhost: shop\r\nx-class: search\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        big.len()
    )
    .into_bytes();
    raw.extend_from_slice(&big);
    let (got, _) = exchange(proxy.listen, &raw, Duration::from_secs(5)).await;
    assert!(got.starts_with("HTTP/1.1 200") && got.ends_with("300000"), "{got:?}");
    // A streamed response: its slot is held until its end.
    let res = hold(&http1(), &proxy, Some("checkout")).await;
    assert_eq!(proxy.in_flight("checkout").await, 1.0);
    up.release();
    finish(res).await;
    slots_free(&proxy, "checkout").await;
    // No answer: 504; a stalled request body: 408; both free their slot.
    let res = send(&http1(), request(&proxy.url("/never"), Some("checkout"))).await;
    assert_eq!((res.status().as_u16(), header(&res, "x-bulkhead-reason")), (504, "upstream-timeout"));
    let (got, _) = exchange(
        proxy.listen,
        b"POST /body HTTP/1.1\r\nhost: shop\r\nx-class: checkout\r\ncontent-length: 1000000\r\n\r\nx",
        Duration::from_secs(3),
    )
    .await;
    assert!(got.starts_with("HTTP/1.1 408"), "{got:?}");
    slots_free(&proxy, "checkout").await;
    // An upstream that is not there: 502, named.
    let dead = format!("http://{}", free_port());
    let gone = Proxy::start(config.path(), &args(&dead, &["--upstream-protocol", "h2c"])).await;
    let res = send(&http1(), request(&gone.url("/"), Some("checkout"))).await;
    assert_eq!((res.status().as_u16(), header(&res, "x-bulkhead-reason")), (502, "upstream-connect"));
    slots_free(&gone, "checkout").await;
}

/// An h2c upstream that says GOAWAY on request, as a gRPC server does at its
/// `MAX_CONNECTION_AGE` or any server in a graceful restart: the connections
/// it had keep serving their open streams, and new connections are accepted.
/// `/hold` answers once the test releases it; anything else answers at once.
struct RecyclingUpstream {
    addr: SocketAddr,
    goaway: tokio::sync::watch::Sender<bool>,
    release: tokio::sync::watch::Sender<bool>,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl RecyclingUpstream {
    /// `max_streams`: the SETTINGS_MAX_CONCURRENT_STREAMS it announces.
    async fn start(max_streams: u32) -> Self {
        use std::sync::{atomic::Ordering, Arc};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind upstream");
        let addr = listener.local_addr().expect("addr");
        let (goaway, goaway_rx) = tokio::sync::watch::channel(false);
        let (release, release_rx) = tokio::sync::watch::channel(false);
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = Arc::clone(&connections);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let (mut goaway_rx, release_rx) = (goaway_rx.clone(), release_rx.clone());
                goaway_rx.mark_unchanged();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        let mut release_rx = release_rx.clone();
                        async move {
                            if req.uri().path() == "/hold" {
                                let _ = release_rx.wait_for(|r| *r).await;
                            }
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(http_body_util::Full::new(
                                bytes::Bytes::from_static(b"ok"),
                            )))
                        }
                    });
                    let conn = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .max_concurrent_streams(max_streams)
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                    let mut conn = std::pin::pin!(conn);
                    tokio::select! {
                        _ = conn.as_mut() => return,
                        _ = goaway_rx.changed() => conn.as_mut().graceful_shutdown(),
                    }
                    let _ = conn.await;
                });
            }
        });
        RecyclingUpstream { addr, goaway, release, connections }
    }
}

#[tokio::test]
async fn an_h2c_upstream_that_says_goaway_costs_no_request() {
    use std::sync::atomic::Ordering;
    let up = RecyclingUpstream::start(100).await;
    let config = ConfigDir::new(&pools(5));
    let url = format!("http://{}", up.addr);
    let proxy = Proxy::start(config.path(), &args(&url, &["--upstream-protocol", "h2c"])).await;
    let client = h2c();
    let res = send(&client, request(&proxy.url("/"), Some("search"))).await;
    assert_eq!(res.status(), 200);
    res.into_body().collect().await.expect("body");
    // A long request keeps the first connection open past its GOAWAY.
    let held = tokio::spawn({
        let (client, url) = (client.clone(), proxy.url("/hold"));
        async move { send(&client, request(&url, Some("checkout"))).await }
    });
    in_flight_is(&proxy, "checkout", 1).await;
    up.goaway.send_replace(true);
    // Every request after the GOAWAY is answered, on a new connection.
    for i in 0..20 {
        let res = send(&client, request(&proxy.url("/"), Some("search"))).await;
        assert_eq!((i, res.status().as_u16(), header(&res, "x-bulkhead-reason").to_owned()), (i, 200, String::new()));
        res.into_body().collect().await.expect("body");
    }
    assert_eq!(up.connections.load(Ordering::SeqCst), 2, "one new connection after the GOAWAY");
    up.release.send_replace(true);
    let held = tokio::time::timeout(WAIT, held).await.expect("the held request ends").expect("joined");
    assert_eq!(held.status(), 200, "the stream open at the GOAWAY is served to its end");
    assert_eq!(held.into_body().collect().await.expect("body").to_bytes(), "ok");
}

/// A graceful restart says GOAWAY on every connection at once: the requests
/// after it go on a new connection, and those open at the GOAWAY end normally.
#[tokio::test]
async fn an_h2c_upstream_that_says_goaway_on_every_connection_at_once_costs_no_request() {
    use std::sync::atomic::Ordering;
    let up = RecyclingUpstream::start(2).await;
    let config = ConfigDir::new(&wide_pools());
    let url = format!("http://{}", up.addr);
    let proxy = Proxy::start(config.path(), &args(&url, &["--upstream-protocol", "h2c"])).await;
    let client = h2c();
    // Six held requests, one after another: two on each of three connections.
    let mut held = Vec::new();
    for n in 1..=6 {
        let (client, url) = (client.clone(), proxy.url("/hold"));
        held.push(tokio::spawn(async move { send(&client, request(&url, Some("search"))).await }));
        in_flight_is(&proxy, "search", n).await;
    }
    assert_eq!(up.connections.load(Ordering::SeqCst), 3);
    // One cancelled on each: every connection has a stream free when the GOAWAYs come,
    // so each is taken (and found gone) before a new one is made.
    for cancelled in [0, 2, 4] {
        held[cancelled].abort();
    }
    in_flight_is(&proxy, "search", 3).await;
    up.goaway.send_replace(true);
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in 0..20 {
        let res = send(&client, request(&proxy.url("/"), Some("search"))).await;
        assert_eq!((i, res.status().as_u16(), header(&res, "x-bulkhead-reason").to_owned()), (i, 200, String::new()));
        res.into_body().collect().await.expect("body");
    }
    assert_eq!(up.connections.load(Ordering::SeqCst), 4, "one new connection for all three that said GOAWAY");
    up.release.send_replace(true);
    for held in [held.remove(5), held.remove(3), held.remove(1)] {
        let res = tokio::time::timeout(WAIT, held).await.expect("a held request ends").expect("joined");
        assert_eq!(res.status(), 200, "a stream open at the GOAWAY is served to its end");
        assert_eq!(res.into_body().collect().await.expect("body").to_bytes(), "ok");
    }
}

/// A pool wide enough for a burst: `search` may hold 150 requests.
pub(super) fn wide_pools() -> String {
    r#"{"version":1,"bulkhead":"shop","resource":"requests","scope":"Instance","dividedBy":1,
  "capacity":160,"sharedSurplus":154,"onCeiling":"reject","classes":[
  {"name":"checkout","reserved":2,"ceiling":4,"critical":false},
  {"name":"search","reserved":2,"ceiling":156,"critical":false},
  {"name":"control-plane","reserved":2,"ceiling":2,"critical":true}]}"#
        .to_owned()
}

/// What an h2 test upstream does on each connection after `settings_delay`:
/// it allows `max_streams` streams at once and answers each with `head`
/// extra bytes in an `x-big` header (none if 0) and the body `ok`; if `push`,
/// it tries to push a stream first and counts the pushes the client let in.
#[derive(Clone, Copy)]
struct H2Behaviour {
    settings_delay: Duration,
    max_streams: u32,
    head: usize,
    push: bool,
}

/// An h2c upstream (the h2 crate, as real servers' own stacks are) with
/// `behaviour`; returns its address and the count of accepted pushes.
async fn h2_upstream(behaviour: H2Behaviour) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::{atomic::Ordering, Arc};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    let pushed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = Arc::clone(&pushed);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                // Until the handshake the client's preface and requests wait in the socket.
                tokio::time::sleep(behaviour.settings_delay).await;
                let handshake = h2::server::Builder::new()
                    .max_concurrent_streams(behaviour.max_streams)
                    .handshake::<_, bytes::Bytes>(stream);
                let Ok(mut conn) = handshake.await else { return };
                while let Some(Ok((_req, mut respond))) = conn.accept().await {
                    if behaviour.push {
                        let promise = Request::get("http://upstream/pushed").body(()).expect("push request");
                        if respond.push_request(promise).is_ok() {
                            count.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    let mut res = http::Response::new(());
                    if behaviour.head > 0 {
                        let big = http::HeaderValue::from_str(&"a".repeat(behaviour.head)).expect("value");
                        res.headers_mut().insert("x-big", big);
                    }
                    if let Ok(mut body) = respond.send_response(res, false) {
                        let _ = body.send_data(bytes::Bytes::from_static(b"ok"), true);
                    }
                }
            });
        }
    });
    (addr, pushed)
}

const PROMPT: H2Behaviour = H2Behaviour { settings_delay: Duration::ZERO, max_streams: 100, head: 0, push: false };

/// h2's client opens unlimited streams until the server's SETTINGS arrive;
/// a server that allows 100 (nginx allows 128, Go 250) refuses the rest of a
/// burst that reaches a new connection before its SETTINGS.
#[tokio::test]
async fn a_burst_on_a_new_h2c_upstream_connection_stays_within_the_streams_every_server_allows() {
    let (up, _) = h2_upstream(H2Behaviour { settings_delay: Duration::from_secs(1), ..PROMPT }).await;
    let config = ConfigDir::new(&wide_pools());
    let url = format!("http://{up}");
    let proxy = Proxy::start(config.path(), &args(&url, &["--upstream-protocol", "h2c"])).await;
    let client = h2c();
    let burst = (0..150).map(|_| {
        let (client, url) = (client.clone(), proxy.url("/"));
        async move {
            let res = send(&client, request(&url, Some("search"))).await;
            (res.status().as_u16(), header(&res, "x-bulkhead-reason").to_owned())
        }
    });
    let answers = futures::future::join_all(burst).await;
    let failed: Vec<_> = answers.iter().filter(|(status, _)| *status != 200).collect();
    assert!(failed.is_empty(), "{} of 150 failed, e.g. {:?}:\n{}", failed.len(), failed.first(), proxy.log());
}

#[tokio::test]
async fn an_h2c_upstream_can_neither_push_streams_nor_send_an_unbounded_response_head() {
    let (up, pushed) = h2_upstream(H2Behaviour { push: true, ..PROMPT }).await;
    let config = ConfigDir::new(&pools(5));
    let url = format!("http://{up}");
    let proxy = Proxy::start(config.path(), &args(&url, &["--upstream-protocol", "h2c"])).await;
    let res = send(&h2c(), request(&proxy.url("/"), Some("search"))).await;
    assert_eq!(res.status(), 200, "{}", proxy.log());
    assert_eq!(pushed.load(std::sync::atomic::Ordering::SeqCst), 0, "the proxy told the upstream not to push");

    // A head within 400 KiB passes; one past it is a 502 for that request only, not 16 MiB
    // held per stream (h2's default) and not the end of the shared upstream connection.
    for (head, status) in [(390 << 10, 200), (420 << 10, 502)] {
        let (up, _) = h2_upstream(H2Behaviour { head, ..PROMPT }).await;
        let url = format!("http://{up}");
        let proxy = Proxy::start(config.path(), &args(&url, &["--upstream-protocol", "h2c"])).await;
        assert_eq!(
            h2_get(proxy.listen, None).await.map(|r| r.status().as_u16()).ok(),
            Some(status),
            "a {head}-byte header:\n{}",
            proxy.log()
        );
    }
}

/// A raw HTTP/1.1 upstream that counts its connections and answers `ok` to
/// each request head; with `close_after_answer` it closes every connection
/// right after its first answer, without saying so (no `Connection: close`),
/// as a server does when its keep-alive timeout fires between two requests.
async fn counting_h1_upstream(
    close_after_answer: bool,
) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::{atomic::Ordering, Arc};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = Arc::clone(&connections);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").expect("a head") + 4;
                    buf.drain(..end);
                    if stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await.is_err()
                        || close_after_answer
                    {
                        return;
                    }
                }
            });
        }
    });
    (addr, connections)
}

#[tokio::test]
async fn an_http1_upstream_keeps_its_connections_and_one_it_closed_costs_no_request() {
    use std::sync::atomic::Ordering;
    let config = ConfigDir::new(&pools(5));
    // Kept alive: forty requests, one after another, over one connection.
    let (addr, connections) = counting_h1_upstream(false).await;
    let url = format!("http://{addr}");
    let proxy = Proxy::start(config.path(), &args(&url, &[])).await;
    for client in [http1(), h2c()] {
        for i in 0..20 {
            let res = send(&client, request(&proxy.url("/"), Some("search"))).await;
            assert_eq!((i, res.status().as_u16()), (i, 200));
            assert_eq!(res.into_body().collect().await.expect("body").to_bytes(), "ok");
        }
    }
    assert_eq!(connections.load(Ordering::SeqCst), 1, "sequential requests share one upstream connection");
    // Closed by the upstream after every answer: each request finds that out
    // before it is sent, or is sent again on a new connection.
    let (addr, connections) = counting_h1_upstream(true).await;
    let url = format!("http://{addr}");
    let proxy = Proxy::start(config.path(), &args(&url, &[])).await;
    let client = http1();
    for i in 0..20 {
        let res = send(&client, request(&proxy.url("/"), Some("search"))).await;
        assert_eq!((i, res.status().as_u16(), header(&res, "x-bulkhead-reason").to_owned()), (i, 200, String::new()));
        res.into_body().collect().await.expect("body");
    }
    assert_eq!(connections.load(Ordering::SeqCst), 20);
}

/// What a raw h2c upstream does with the streams of each connection.
#[derive(Clone, Copy)]
struct StreamPolicy {
    /// Reset this many first streams, with this error code (7: REFUSED_STREAM).
    refuse_first: usize,
    refuse_with: u32,
    /// On the first stream: a GOAWAY naming it (so it was processed), then close.
    hang_up: bool,
    /// Answer at most this many, then say GOAWAY naming the last one answered
    /// and ignore later streams: nginx at its `keepalive_requests` (1000 by
    /// default) does exactly this, in one step, so the streams a client sent
    /// meanwhile were never processed.
    answer_at_most: usize,
    /// Allow no stream at all (SETTINGS_MAX_CONCURRENT_STREAMS 0), as a
    /// server does while it sheds load.
    no_streams: bool,
    /// Say GOAWAY (last stream 0) with the first SETTINGS and ignore every
    /// stream, as a server in a restart loop does on each new connection.
    goaway_at_once: bool,
    /// Answer with a head that never ends: HEADERS without END_HEADERS,
    /// then CONTINUATION frames without end (the 2024 CONTINUATION flood).
    endless_head: bool,
}

/// A raw h2c upstream with `policy`: it answers (`:status 200`, no body)
/// whatever streams arrived once the connection has been quiet for 100 ms.
/// Counts connections and streams.
struct RawH2Upstream {
    addr: SocketAddr,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    streams: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl RawH2Upstream {
    async fn start(policy: StreamPolicy) -> Self {
        use std::sync::{atomic::Ordering, Arc};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind upstream");
        let addr = listener.local_addr().expect("addr");
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let streams = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (conns, count) = (Arc::clone(&connections), Arc::clone(&streams));
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                conns.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve_raw_h2(tcp, policy, Arc::clone(&count)));
            }
        });
        RawH2Upstream { addr, connections, streams }
    }

    fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn streams(&self) -> usize {
        self.streams.load(std::sync::atomic::Ordering::SeqCst)
    }
}

async fn serve_raw_h2(mut tcp: TcpStream, policy: StreamPolicy, count: std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let mut preface = [0u8; 24];
    let settings: &[u8] = if policy.no_streams { &[0, 3, 0, 0, 0, 0] } else { &[] };
    let mut hello = frame(4, 0, 0, settings);
    if policy.goaway_at_once {
        hello.extend(frame(7, 0, 0, &[0; 8]));
    }
    if tcp.read_exact(&mut preface).await.is_err() || tcp.write_all(&hello).await.is_err() {
        return;
    }
    let (mut seen, mut answered, mut last, mut goaway) = (0, 0, 0u32, policy.goaway_at_once);
    let mut pending = Vec::new();
    loop {
        let mut head = [0u8; 9];
        match tokio::time::timeout(Duration::from_millis(100), tcp.read_exact(&mut head)).await {
            Ok(Err(_)) => return,
            Err(_) => {
                // Quiet: answer what came, within the policy.
                let mut out = Vec::new();
                for id in pending.drain(..) {
                    if policy.endless_head {
                        flood_continuation(&mut tcp, id).await;
                        return;
                    }
                    if answered < policy.answer_at_most {
                        out.extend(frame(1, 0x5, id, &[0x88]));
                        (answered, last) = (answered + 1, id);
                    }
                }
                if answered == policy.answer_at_most && !goaway {
                    let mut payload = last.to_be_bytes().to_vec();
                    payload.extend_from_slice(&0u32.to_be_bytes());
                    out.extend(frame(7, 0, 0, &payload));
                    goaway = true;
                }
                if !out.is_empty() && tcp.write_all(&out).await.is_err() {
                    return;
                }
                continue;
            }
            Ok(Ok(_)) => {}
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0u8; len];
        if tcp.read_exact(&mut payload).await.is_err() {
            return;
        }
        let (kind, flags) = (head[3], head[4]);
        let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let reply = match kind {
            4 if flags & 1 == 0 => Some(frame(4, 1, 0, &[])),
            6 if flags & 1 == 0 => Some(frame(6, 1, 0, &payload)),
            1 if !goaway => {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                seen += 1;
                if policy.hang_up {
                    let mut payload = id.to_be_bytes().to_vec();
                    payload.extend_from_slice(&0u32.to_be_bytes());
                    let _ = tcp.write_all(&frame(7, 0, 0, &payload)).await;
                    return;
                }
                if seen <= policy.refuse_first {
                    Some(frame(3, 0, id, &policy.refuse_with.to_be_bytes()))
                } else {
                    pending.push(id);
                    None
                }
            }
            // After its GOAWAY nginx ignores new streams.
            _ => None,
        };
        if let Some(reply) = reply {
            if tcp.write_all(&reply).await.is_err() {
                return;
            }
        }
    }
}

/// A response head on stream `id` that never ends: up to 100,000 empty
/// CONTINUATION frames (900 KB), until the client stops reading.
async fn flood_continuation(tcp: &mut TcpStream, id: u32) {
    let mut out = frame(1, 0x1, id, &[0x88]);
    for _ in 0..100_000 {
        out.extend(frame(9, 0, id, &[]));
        if out.len() >= 64 << 10 {
            if tcp.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
    }
}

/// RFC 9113 8.7: a stream refused (RST_STREAM REFUSED_STREAM) or past a
/// GOAWAY's last stream id was not processed, so sending it again is safe
/// whatever its method. Without that, every keep-alive limit nginx reaches
/// (each 1000 requests by default) turns the requests in flight into 502s.
#[tokio::test]
async fn streams_an_h2c_upstream_did_not_process_are_sent_again() {
    let config = ConfigDir::new(&wide_pools());
    // Ten at once on one connection that answers five, then says GOAWAY.
    let up = RawH2Upstream::start(StreamPolicy { answer_at_most: 5, ..ANSWER_ALL }).await;
    let url = format!("http://{}", up.addr);
    let proxy = Proxy::start(config.path(), &args(&url, &["--upstream-protocol", "h2c"])).await;
    let client = h2c();
    let burst = (0..10).map(|_| {
        let (client, url) = (client.clone(), proxy.url("/"));
        async move {
            let res = send(&client, request(&url, Some("search"))).await;
            (res.status().as_u16(), header(&res, "x-bulkhead-reason").to_owned())
        }
    });
    let answers = futures::future::join_all(burst).await;
    assert!(answers.iter().all(|a| a.0 == 200), "{answers:?}\n{}", proxy.log());
    assert_eq!((up.connections(), up.streams()), (2, 15), "the five not processed sent again, on a new connection");

    // A refused stream goes again on the same connection; a POST too.
    let up = RawH2Upstream::start(StreamPolicy { refuse_first: 1, ..ANSWER_ALL }).await;
    let url = format!("http://{}", up.addr);
    let proxy = Proxy::start(config.path(), &args(&url, &["--upstream-protocol", "h2c"])).await;
    let post = Request::post(proxy.url("/")).header("x-class", "search").body(Empty::new()).expect("request");
    let res = send(&h2c(), post).await;
    assert_eq!(res.status(), 200, "{}", proxy.log());
    assert_eq!((up.connections(), up.streams()), (1, 2));

    // Not for ever: an upstream that refuses everything costs three streams, then a 502.
    let up = RawH2Upstream::start(StreamPolicy { refuse_first: usize::MAX, ..ANSWER_ALL }).await;
    let url = format!("http://{}", up.addr);
    let proxy = Proxy::start(config.path(), &args(&url, &["--upstream-protocol", "h2c"])).await;
    let res = send(&h2c(), request(&proxy.url("/"), Some("search"))).await;
    assert_eq!((res.status().as_u16(), header(&res, "x-bulkhead-reason")), (502, "upstream"));
    assert_eq!(up.streams(), 3);
    slots_free(&proxy, "search").await;

    // Never what the upstream may have acted on: a stream reset with another
    // code, or one a GOAWAY names before the connection closes, is one 502.
    let acted_on = [
        StreamPolicy { refuse_first: usize::MAX, refuse_with: 2, ..ANSWER_ALL },
        StreamPolicy { hang_up: true, ..ANSWER_ALL },
    ];
    for policy in acted_on {
        let up = RawH2Upstream::start(policy).await;
        let url = format!("http://{}", up.addr);
        let proxy = Proxy::start(config.path(), &args(&url, &["--upstream-protocol", "h2c"])).await;
        let res = send(&h2c(), request(&proxy.url("/"), Some("search"))).await;
        assert_eq!((res.status().as_u16(), up.streams()), (502, 1), "{}", proxy.log());
    }
}

/// Bad days of an h2c upstream that answers nothing: one that allows no
/// stream (SETTINGS_MAX_CONCURRENT_STREAMS 0) and one that says GOAWAY on
/// every new connection. Each request ends within --response-timeout, frees
/// its slot, and costs a bounded number of connections: the first waits at
/// the 16-connection cap and ends as 504, the second is one dial and a 502
/// per request; neither dials a broken upstream in a loop.
#[tokio::test]
async fn an_h2c_upstream_that_takes_no_stream_costs_bounded_time_and_connections() {
    let config = ConfigDir::new(&wide_pools());
    for policy in [StreamPolicy { no_streams: true, ..ANSWER_ALL }, StreamPolicy { goaway_at_once: true, ..ANSWER_ALL }]
    {
        let up = RawH2Upstream::start(policy).await;
        let url = format!("http://{}", up.addr);
        let extra = ["--upstream-protocol", "h2c", "--response-timeout", "1s"];
        let proxy = Proxy::start(config.path(), &args(&url, &extra)).await;
        let client = h2c();
        let started = Instant::now();
        let burst = (0..20).map(|_| {
            let (client, url) = (client.clone(), proxy.url("/"));
            async move {
                let res = send(&client, request(&url, Some("search"))).await;
                (res.status().as_u16(), header(&res, "x-bulkhead-reason").to_owned())
            }
        });
        let answers = futures::future::join_all(burst).await;
        let took = started.elapsed();
        let (status, reason, most_connections) =
            if policy.no_streams { (504, "upstream-timeout", 16) } else { (502, "upstream-connect", 20) };
        let seen = format!("{answers:?} in {took:?}, {} connections:\n{}", up.connections(), proxy.log());
        assert!(answers.iter().all(|(s, r)| (*s, r.as_str()) == (status, reason)), "{seen}");
        assert!(took < Duration::from_secs(3), "{seen}");
        assert!(up.connections() <= most_connections, "{seen}");
        assert_eq!(up.streams(), 0, "the upstream took no stream");
        slots_free(&proxy, "search").await;
    }
}

/// An h2c upstream whose response head never ends (endless CONTINUATION
/// frames) costs that request a 502 at once and its slot back, and the proxy
/// drops that connection rather than read on.
#[tokio::test]
async fn an_h2c_upstream_whose_response_head_never_ends_costs_one_502() {
    let config = ConfigDir::new(&wide_pools());
    let up = RawH2Upstream::start(StreamPolicy { endless_head: true, ..ANSWER_ALL }).await;
    let url = format!("http://{}", up.addr);
    let proxy =
        Proxy::start(config.path(), &args(&url, &["--upstream-protocol", "h2c", "--response-timeout", "5s"])).await;
    // Twice: the connection that sent the flood is dropped, the next request dials anew.
    for connections in [1, 2] {
        let started = Instant::now();
        let res = send(&h2c(), request(&proxy.url("/"), Some("search"))).await;
        let took = started.elapsed();
        assert_eq!((res.status().as_u16(), header(&res, "x-bulkhead-reason")), (502, "upstream"), "{}", proxy.log());
        assert!(took < Duration::from_secs(2), "cut off by the flood guard, not the 5 s timeout: {took:?}");
        assert_eq!(up.connections(), connections);
        slots_free(&proxy, "search").await;
    }
}

/// An h2c upstream (the h2 crate) that reads `read_first` bytes of the
/// first stream's body, then refuses it (REFUSED_STREAM); it answers every
/// later stream with the length of the body it read. Counts streams.
async fn refusing_h2_upstream(read_first: usize) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::{atomic::Ordering, Arc};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    let streams = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = Arc::clone(&streams);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::Builder::new().handshake::<_, bytes::Bytes>(tcp).await else { return };
                while let Some(Ok((req, mut respond))) = conn.accept().await {
                    let first = count.fetch_add(1, Ordering::SeqCst) == 0;
                    tokio::spawn(async move {
                        let mut body = req.into_body();
                        let mut read = 0;
                        while !(first && read >= read_first) {
                            let Some(Ok(data)) = body.data().await else { break };
                            read += data.len();
                            let _ = body.flow_control().release_capacity(data.len());
                        }
                        if first {
                            respond.send_reset(h2::Reason::REFUSED_STREAM);
                            return;
                        }
                        if let Ok(mut send) = respond.send_response(http::Response::new(()), false) {
                            let _ = send.send_data(bytes::Bytes::from(read.to_string()), true);
                        }
                    });
                }
            });
        }
    });
    (addr, streams)
}

/// A refused stream is sent again with its body, from its first byte, when
/// the proxy kept that body whole (the first 64 KiB taken from the client):
/// an upstream's graceful restart costs no upload. A larger body already
/// partly sent cannot be: that refusal is a 502, never a truncated request.
#[tokio::test]
async fn a_refused_stream_is_sent_again_with_its_body_when_the_body_was_kept() {
    let config = ConfigDir::new(&wide_pools());
    let cases = [
        // (body length, bytes the upstream reads before refusing, status, upstream streams)
        (1_000, 0, "HTTP/1.1 200", 2),
        (60_000, 30_000, "HTTP/1.1 200", 2),
        (300_000, 200_000, "HTTP/1.1 502", 1),
    ];
    for (length, read_first, status, streams) in cases {
        let (addr, seen) = refusing_h2_upstream(read_first).await;
        let url = format!("http://{addr}");
        let proxy = Proxy::start(config.path(), &args(&url, &["--upstream-protocol", "h2c"])).await;
        let mut raw = format!(
            "POST /body HTTP/1.1\r\nhost: shop\r\nx-class: search\r\ncontent-length: {length}\r\nconnection: close\r\n\r\n"
        )
        .into_bytes();
        raw.extend(std::iter::repeat_n(b'x', length));
        let (got, _) = exchange(proxy.listen, &raw, Duration::from_secs(5)).await;
        assert!(got.starts_with(status), "{length} bytes: {got:?}\n{}", proxy.log());
        if status.ends_with("200") {
            // Chunked: one chunk with the length the upstream read.
            assert!(got.ends_with(&format!("\r\n{length}\r\n0\r\n\r\n")), "{length} bytes: the upstream read {got:?}");
        }
        assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), streams, "{length} bytes");
        slots_free(&proxy, "search").await;
    }
}

/// The copy of a request body kept for a replay is let go when the upstream
/// answers. It once stayed until the body's next frame: 64 requests answered
/// after their first 64 KiB, whose clients then paused, held the whole 4 MiB
/// replay budget, and a small POST the upstream refused got a 502 instead of
/// being sent again.
#[tokio::test]
async fn the_copy_kept_for_a_replay_is_let_go_when_the_upstream_answers() {
    use std::sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    };
    const HOGS: usize = 64;
    const KEPT: usize = 64 << 10;
    // Answers a stream once it has read 64 KiB of it (and goes on reading), refuses the
    // first small body it sees whole, and answers later small ones with their length.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    let refused = Arc::new(AtomicBool::new(false));
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let refused = Arc::clone(&refused);
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::Builder::new().handshake::<_, bytes::Bytes>(tcp).await else { return };
                while let Some(Ok((req, mut respond))) = conn.accept().await {
                    let refused = Arc::clone(&refused);
                    tokio::spawn(async move {
                        let mut body = req.into_body();
                        let mut read = 0;
                        let mut answered = false;
                        while let Some(Ok(data)) = body.data().await {
                            read += data.len();
                            let _ = body.flow_control().release_capacity(data.len());
                            if read >= KEPT && !answered {
                                answered = true;
                                if let Ok(mut send) = respond.send_response(http::Response::new(()), false) {
                                    let _ = send.send_data(bytes::Bytes::from_static(b"big"), true);
                                }
                            }
                        }
                        if answered {
                            return;
                        }
                        if !refused.swap(true, Ordering::SeqCst) {
                            respond.send_reset(h2::Reason::REFUSED_STREAM);
                        } else if let Ok(mut send) = respond.send_response(http::Response::new(()), false) {
                            let _ = send.send_data(bytes::Bytes::from(read.to_string()), true);
                        }
                    });
                }
            });
        }
    });
    let config = ConfigDir::new(&wide_pools());
    let url = format!("http://{addr}");
    let proxy = Proxy::start(config.path(), &args(&url, &["--upstream-protocol", "h2c"])).await;
    let mut hogs = Vec::with_capacity(HOGS);
    for _ in 0..HOGS {
        let mut tcp = TcpStream::connect(proxy.listen).await.expect("connect");
        let mut raw =
            b"POST /body HTTP/1.1\r\nhost: shop\r\nx-class: search\r\ncontent-length: 1000000\r\n\r\n".to_vec();
        raw.extend(std::iter::repeat_n(b'x', KEPT));
        tcp.write_all(&raw).await.expect("write");
        // Answered after its first 64 KiB; the client then sends nothing more.
        read_until(&mut tcp, "big").await;
        hogs.push(tcp);
    }
    let (got, _) = exchange(
        proxy.listen,
        b"POST /body HTTP/1.1\r\nhost: shop\r\nx-class: search\r\ncontent-length: 7\r\nconnection: close\r\n\r\nreplay!",
        Duration::from_secs(5),
    )
    .await;
    assert!(got.starts_with("HTTP/1.1 200") && got.ends_with("\r\n7\r\n0\r\n\r\n"), "{got:?}\n{}", proxy.log());
    drop(hogs);
}

/// Answers every stream.
const ANSWER_ALL: StreamPolicy = StreamPolicy {
    refuse_first: 0,
    refuse_with: 7,
    hang_up: false,
    answer_at_most: usize::MAX,
    no_streams: false,
    goaway_at_once: false,
    endless_head: false,
};

/// An h2c upstream (the h2 crate) that allows `max_streams` streams a
/// connection and holds every request until released; counts the requests
/// it holds, its connections and those still open.
pub(super) struct HoldingH2Upstream {
    pub(super) addr: SocketAddr,
    pub(super) held: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    pub(super) connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    open: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    pub(super) release: tokio::sync::watch::Sender<bool>,
}

impl HoldingH2Upstream {
    pub(super) async fn start(max_streams: u32) -> Self {
        Self::serving(max_streams, usize::MAX).await
    }

    /// Past `serve` connections, each new one is closed at once, as by a
    /// server at its connection cap.
    async fn serving(max_streams: u32, serve: usize) -> Self {
        use std::sync::{atomic::Ordering, Arc};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind upstream");
        let addr = listener.local_addr().expect("addr");
        let (release, release_rx) = tokio::sync::watch::channel(false);
        let held = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (holding, conns, live) = (Arc::clone(&held), Arc::clone(&connections), Arc::clone(&open));
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                if conns.fetch_add(1, Ordering::SeqCst) >= serve {
                    drop(tcp);
                    continue;
                }
                live.fetch_add(1, Ordering::SeqCst);
                let (holding, live, release_rx) = (Arc::clone(&holding), Arc::clone(&live), release_rx.clone());
                tokio::spawn(async move {
                    let handshake = h2::server::Builder::new()
                        .max_concurrent_streams(max_streams)
                        .handshake::<_, bytes::Bytes>(tcp);
                    if let Ok(mut conn) = handshake.await {
                        while let Some(Ok((_req, mut respond))) = conn.accept().await {
                            let (holding, mut release_rx) = (Arc::clone(&holding), release_rx.clone());
                            tokio::spawn(async move {
                                holding.fetch_add(1, Ordering::SeqCst);
                                let _ = release_rx.wait_for(|r| *r).await;
                                let _ = respond.send_response(http::Response::new(()), true);
                            });
                        }
                    }
                    live.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        HoldingH2Upstream { addr, held, connections, open, release }
    }
}

/// Past an upstream's SETTINGS_MAX_CONCURRENT_STREAMS (Go's servers allow
/// 250, nginx 128) the proxy opens another connection, as Envoy and HAProxy
/// do. On one connection h2 queued the rest inside the proxy, one line for
/// every class: admitted requests that never reached the upstream.
#[tokio::test]
async fn past_an_h2c_upstreams_stream_limit_requests_go_on_another_connection() {
    use std::sync::atomic::Ordering;
    let up = HoldingH2Upstream::start(10).await;
    let config = ConfigDir::new(&wide_pools());
    let url = format!("http://{}", up.addr);
    let proxy = Proxy::start(config.path(), &args(&url, &["--upstream-protocol", "h2c"])).await;
    let client = h2c();
    let requests: Vec<_> = (0..25)
        .map(|_| {
            let (client, url) = (client.clone(), proxy.url("/"));
            tokio::spawn(async move { send(&client, request(&url, Some("search"))).await })
        })
        .collect();
    let deadline = Instant::now() + WAIT;
    while up.held.load(Ordering::SeqCst) < 25 {
        assert!(
            Instant::now() < deadline,
            "{} of 25 admitted requests reached the upstream (10 streams a connection, {} connections):\n{}",
            up.held.load(Ordering::SeqCst),
            up.connections.load(Ordering::SeqCst),
            proxy.log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(up.connections.load(Ordering::SeqCst), 3, "25 streams at 10 a connection");
    up.release.send_replace(true);
    for request in requests {
        let res = tokio::time::timeout(WAIT, request).await.expect("answered in time").expect("joined");
        assert_eq!(res.status(), 200);
    }
    // The connections stay for the next burst: no new one for the same load.
    let again: Vec<_> = (0..25).map(|_| send(&client, request(&proxy.url("/"), Some("search")))).collect();
    for res in futures::future::join_all(again).await {
        assert_eq!(res.status(), 200);
    }
    assert_eq!(up.connections.load(Ordering::SeqCst), 3);
    // Unused for 5-10 s, the two made for the burst are closed, the first kept.
    let deadline = Instant::now() + Duration::from_secs(15);
    while up.open.load(Ordering::SeqCst) > 1 {
        assert!(Instant::now() < deadline, "{} connections still open", up.open.load(Ordering::SeqCst));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let res = send(&client, request(&proxy.url("/"), Some("search"))).await;
    assert_eq!(res.status(), 200);
    assert_eq!((up.open.load(Ordering::SeqCst), up.connections.load(Ordering::SeqCst)), (1, 3));
}

/// The connections to one upstream stop at 16: past them a request waits on
/// one of them (each lets the upstream send 4 MiB ahead of the clients).
#[tokio::test]
async fn an_h2c_upstream_gets_at_most_16_connections() {
    use std::sync::atomic::Ordering;
    let up = HoldingH2Upstream::start(1).await;
    let config = ConfigDir::new(&wide_pools());
    let url = format!("http://{}", up.addr);
    let proxy = Proxy::start(config.path(), &args(&url, &["--upstream-protocol", "h2c"])).await;
    let client = h2c();
    let requests: Vec<_> = (0..20)
        .map(|_| {
            let (client, url) = (client.clone(), proxy.url("/"));
            tokio::spawn(async move { send(&client, request(&url, Some("search"))).await })
        })
        .collect();
    let deadline = Instant::now() + WAIT;
    while up.held.load(Ordering::SeqCst) < 16 {
        assert!(Instant::now() < deadline, "{} held:\n{}", up.held.load(Ordering::SeqCst), proxy.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!((up.held.load(Ordering::SeqCst), up.connections.load(Ordering::SeqCst)), (16, 16));
    up.release.send_replace(true);
    for request in requests {
        let res = tokio::time::timeout(WAIT, request).await.expect("answered in time").expect("joined");
        assert_eq!(res.status(), 200);
    }
    assert_eq!((up.held.load(Ordering::SeqCst), up.connections.load(Ordering::SeqCst)), (20, 16));
}

/// An upstream that takes no more connections (a cap, a full backlog) while
/// the one it has works: requests past its stream limit wait on that one, as
/// before the proxy made more, instead of failing with 502.
#[tokio::test]
async fn when_no_new_h2c_connection_can_be_made_requests_wait_on_the_one_there_is() {
    use std::sync::atomic::Ordering;
    let up = HoldingH2Upstream::serving(2, 1).await;
    let config = ConfigDir::new(&wide_pools());
    let url = format!("http://{}", up.addr);
    let proxy = Proxy::start(config.path(), &args(&url, &["--upstream-protocol", "h2c"])).await;
    let client = h2c();
    let requests: Vec<_> = (0..5)
        .map(|_| {
            let (client, url) = (client.clone(), proxy.url("/"));
            tokio::spawn(async move { send(&client, request(&url, Some("search"))).await })
        })
        .collect();
    let deadline = Instant::now() + WAIT;
    while up.connections.load(Ordering::SeqCst) < 2 || up.held.load(Ordering::SeqCst) < 2 {
        assert!(Instant::now() < deadline, "the proxy never tried a second connection:\n{}", proxy.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    up.release.send_replace(true);
    for request in requests {
        let res = tokio::time::timeout(WAIT, request).await.expect("answered in time").expect("joined");
        assert_eq!((res.status().as_u16(), header(&res, "x-bulkhead-reason").to_owned()), (200, String::new()));
    }
    assert_eq!(up.held.load(Ordering::SeqCst), 5);
}
