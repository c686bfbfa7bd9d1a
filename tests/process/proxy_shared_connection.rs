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

/// An HTTP/1.1 upstream that never reads the body of a request for `/a` (its
/// connection is held open, silent) and answers any other request once its
/// `content-length` bytes of body have come.
async fn body_reading_h1_upstream() -> SocketAddr {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut silent = Vec::new();
        while let Ok((mut tcp, _)) = listener.accept().await {
            let mut got = Vec::new();
            let mut buf = [0u8; 16 << 10];
            let head_end = loop {
                if let Some(at) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                    break Some(at + 4);
                }
                match tcp.read(&mut buf).await {
                    Ok(0) | Err(_) => break None,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            };
            let Some(head_end) = head_end else { continue };
            let head = String::from_utf8_lossy(&got[..head_end]).to_ascii_lowercase();
            if head.starts_with("post /a ") {
                silent.push(tcp);
                continue;
            }
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            tokio::spawn(async move {
                let mut body = got.len() - head_end;
                while body < length {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => body += n,
                    }
                }
                let _ = tcp.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok").await;
            });
        }
    });
    addr
}

/// One client's HTTP/2 connection carries requests of several classes (a
/// gRPC client, a front proxy), and the proxy's window for that connection
/// is shared by their bodies. A body the upstream does not read stays in
/// the proxy: with 1 MiB a stream and 1 MiB the connection (hyper's
/// defaults), one class's upload to a stalled handler took it all, and
/// every other class's request body on that connection (every gRPC call has
/// one) stalled until the idle timeout.
#[tokio::test]
async fn a_stalled_upload_of_one_class_does_not_stall_another_class_on_the_same_client_connection() {
    let up = body_reading_h1_upstream().await;
    let config = ConfigDir::new(&wide_pools());
    let proxy = Proxy::start(config.path(), &args(&format!("http://{up}"), &[])).await;
    let tcp = TcpStream::connect(proxy.listen).await.expect("connect");
    let (mut client, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(conn);
    let post = |path: &str, class: &str, length: usize| {
        http::Request::post(format!("http://shop{path}"))
            .header("x-class", class)
            .header("content-length", length)
            .body(())
            .expect("request")
    };
    let (_stalled, upload) = client.send_request(post("/a", "search", BIG), false).expect("upload sent");
    let uploaded = Arc::new(AtomicUsize::new(0));
    tokio::spawn(send_big(upload, Arc::clone(&uploaded)));
    let held = until_still(&uploaded, &proxy).await;
    assert!(held < BIG / 2, "the upload did not stall: {held} bytes sent");
    let mut client = tokio::time::timeout(WAIT, client.ready()).await.expect("in time").expect("a stream is free");
    let (response, mut body) = client.send_request(post("/b", "checkout", 1024), false).expect("sent");
    body.send_data(Bytes::from(vec![b'y'; 1024]), true).expect("body queued");
    let res = tokio::time::timeout(Duration::from_secs(5), response).await.unwrap_or_else(|_| {
        panic!("checkout's request body stalled behind search's upload ({held} bytes sent):\n{}", proxy.log())
    });
    assert_eq!(res.expect("a response").status(), 200);
}
