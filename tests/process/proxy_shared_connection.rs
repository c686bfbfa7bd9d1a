//! Every class's requests go on the proxy's few connections to an h2c
//! upstream, and an HTTP/2 connection has one flow-control window for all its
//! streams. Whatever one class's clients do with their streams, another
//! class's responses must still come through. The real binary, loopback only.

use crate::proxy_support;

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use http_body_util::BodyExt;
use proxy_support::*;
use tokio::{io::AsyncWriteExt, net::TcpStream};

use crate::{
    proxy_hostile::args,
    proxy_upstream::{wide_pools, HoldingH2Upstream},
};

/// What `/big` answers with: far more than the proxy, the kernel and the
/// stalled clients' sockets can hold together.
const BIG: usize = 64 << 20;

/// An h2c upstream (the h2 crate) answering `/big` with `BIG` bytes, sent as
/// fast as the proxy's windows let it, and any other path with `ok`; returns
/// its address and the bytes of `/big` it has sent.
async fn streaming_h2_upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&sent);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let sent = Arc::clone(&counter);
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(tcp).await else { return };
                while let Some(Ok((req, mut respond))) = conn.accept().await {
                    let big = req.uri().path() == "/big";
                    let Ok(body) = respond.send_response(http::Response::new(()), false) else { continue };
                    if big {
                        tokio::spawn(send_big(body, Arc::clone(&sent)));
                    } else {
                        let mut body = body;
                        let _ = body.send_data(Bytes::from_static(b"ok"), true);
                    }
                }
            });
        }
    });
    (addr, sent)
}

async fn send_big(mut body: h2::SendStream<Bytes>, sent: Arc<AtomicUsize>) {
    let chunk = Bytes::from(vec![b'x'; 16 << 10]);
    let mut left = BIG;
    while left > 0 {
        body.reserve_capacity(chunk.len().min(left));
        let n = match std::future::poll_fn(|cx| body.poll_capacity(cx)).await {
            Some(Ok(room)) => room.min(left).min(chunk.len()),
            _ => return,
        };
        if body.send_data(chunk.slice(..n), false).is_err() {
            return;
        }
        sent.fetch_add(n, Ordering::SeqCst);
        left -= n;
    }
    let _ = body.send_data(Bytes::new(), true);
}

/// Wait until `sent` has not moved for half a second: the stalled streams
/// hold all the upstream may send them.
async fn until_still(sent: &AtomicUsize, proxy: &Proxy) -> usize {
    let deadline = Instant::now() + WAIT;
    let mut last = usize::MAX;
    loop {
        let now = sent.load(Ordering::SeqCst);
        if now == last {
            return now;
        }
        assert!(Instant::now() < deadline, "the upstream never stopped sending ({now} bytes):\n{}", proxy.log());
        last = now;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Clients that ask for large responses and stop reading leave the data the
/// upstream sent them unread in the proxy. With 2 MiB a stream against 5 MiB
/// the connection, three such streams took the connection's whole window, and
/// every other class's response on that connection stalled until the idle
/// timeout ended them: a bulkhead defeated by the connection under it.
#[tokio::test]
async fn clients_of_one_class_that_stop_reading_do_not_stall_another_class_on_the_shared_h2c_connection() {
    let (up, sent) = streaming_h2_upstream().await;
    let config = ConfigDir::new(&wide_pools());
    let url = format!("http://{up}");
    let proxy = Proxy::start(config.path(), &args(&url, &["--upstream-protocol", "h2c"])).await;
    let mut stalled = Vec::new();
    for _ in 0..6 {
        let mut tcp = TcpStream::connect(proxy.listen).await.expect("connect");
        tcp.write_all(b"GET /big HTTP/1.1\r\nhost: shop\r\nx-class: search\r\n\r\n").await.expect("write");
        stalled.push(tcp);
    }
    let held = until_still(&sent, &proxy).await;
    assert!(held < 6 * BIG / 2, "the clients did not stall: {held} bytes sent");
    let answer = tokio::time::timeout(Duration::from_secs(5), async {
        let res = send(&h2c(), request(&proxy.url("/small"), Some("checkout"))).await;
        let status = res.status();
        (status, res.into_body().collect().await.map(|b| b.to_bytes()))
    })
    .await;
    let (status, body) = answer.unwrap_or_else(|_| {
        panic!("checkout's response stalled behind search's unread streams ({held} bytes sent):\n{}", proxy.log())
    });
    assert_eq!(status, 200);
    assert_eq!(body.expect("body"), "ok");
    drop(stalled);
}

/// The windows above hold only while a connection carries at most 64
/// streams, so past 64 the proxy opens another even when the upstream allows
/// more (gRPC servers often set no limit).
#[tokio::test]
async fn a_connection_to_an_h2c_upstream_carries_at_most_64_streams_whatever_the_upstream_allows() {
    let up = HoldingH2Upstream::start(1000).await;
    let config = ConfigDir::new(&wide_pools());
    let url = format!("http://{}", up.addr);
    let proxy = Proxy::start(config.path(), &args(&url, &["--upstream-protocol", "h2c"])).await;
    let client = h2c();
    let requests: Vec<_> = (0..100)
        .map(|_| {
            let (client, url) = (client.clone(), proxy.url("/"));
            tokio::spawn(async move { send(&client, request(&url, Some("search"))).await })
        })
        .collect();
    let deadline = Instant::now() + WAIT;
    while up.held.load(Ordering::SeqCst) < 100 {
        assert!(Instant::now() < deadline, "{} of 100 held:\n{}", up.held.load(Ordering::SeqCst), proxy.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(up.connections.load(Ordering::SeqCst), 2, "100 streams at 64 a connection");
    up.release.send_replace(true);
    for request in requests {
        let res = tokio::time::timeout(WAIT, request).await.expect("answered in time").expect("joined");
        assert_eq!(res.status(), 200);
    }
}
