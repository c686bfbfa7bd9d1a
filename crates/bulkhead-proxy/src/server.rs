//! Listeners: accept, serve HTTP/1.1 and h2c on each connection, each
//! request (each HTTP/2 stream) through the listener's stack (`stack`).

use std::{net::SocketAddr, sync::Arc, time::Duration};

use http::HeaderValue;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto,
};
use tokio::{net::TcpListener, sync::watch};

use super::{
    activity::{Activity, Stall},
    connections::Connections,
    stack::{Conn, Listener},
    timeouts::Timeouts,
    unread::UnreadBudget,
};

/// Streams one client connection may have open at once: 128, nginx's
/// default (HAProxy's and Envoy's edge guide: 100). A stream whose response
/// the client leaves unread lasts until the stall timer closes its
/// connection; 1,024 let one connection hold 1,000 small ones (4.7 MB).
const CLIENT_STREAMS: u32 = 128;
/// What a client may send on one stream before the proxy has passed it on:
/// 64 KiB, as Envoy's edge-proxy guide recommends.
const CLIENT_STREAM_WINDOW: u32 = 64 << 10;

/// The largest HTTP/1.1 request head: hyper's read buffer, which a client
/// holding a partial head fills. hyper's default (408 KiB) let 290 such
/// connections take a sidecar past its 128Mi; 32 KiB is nginx's default
/// (4 × 8 KiB) and twice the HTTP/2 header list hyper allows.
const MAX_HEAD: usize = 32 << 10;

/// `header_timeout` bounds each HTTP/1.1 request head and is the HTTP/2 ping
/// interval and ping timeout (a dead peer's connection is closed).
///
/// One client connection (a gRPC client, a front proxy) carries requests of
/// several classes, and a body the upstream is slow to take waits in the
/// proxy, holding the connection's window as well as its stream's. The
/// connection's window holds every stream's (8 MiB), so one class's
/// stalled upload never holds up another class's request bodies (with
/// hyper's 1 MiB for both, one did). Memory stays bounded by the streams:
/// only an admitted request's body is read, so at most 64 KiB per request in
/// flight waits here.
pub(super) fn http_builder(header_timeout: Duration) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(header_timeout).max_buf_size(MAX_HEAD);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(CLIENT_STREAMS)
        .initial_stream_window_size(CLIENT_STREAM_WINDOW)
        .initial_connection_window_size(CLIENT_STREAM_WINDOW * CLIENT_STREAMS)
        .keep_alive_interval(Some(header_timeout))
        .keep_alive_timeout(header_timeout);
    builder
}

/// Limits of the accept loop: `--max-connections` (shared by every
/// listener), and the connections' deadlines: the first byte, no request,
/// unread responses.
#[derive(Clone)]
pub(super) struct Accept {
    pub connections: Arc<Connections>,
    pub timeouts: Timeouts,
    /// `--max-unread-responses`, shared by every connection.
    pub unread: Arc<UnreadBudget>,
}

/// Accept until `stop` turns true; then each connection finishes the requests
/// it has (HTTP/1.1 closes after the current one, HTTP/2 sends GOAWAY). Every
/// task holds a clone of `drain`, so its sender sees when all have ended.
pub(super) async fn accept(
    tcp: TcpListener,
    listener: Arc<Listener>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    limits: Accept,
    mut stop: watch::Receiver<bool>,
    drain: watch::Receiver<()>,
) {
    loop {
        let (stream, peer) = tokio::select! {
            accepted = accept_next(&tcp) => accepted,
            _ = stop.changed() => return,
        };
        // Past --max-connections a connection is closed at once: each costs memory until it ends.
        let Some(slot) = limits.connections.admit() else {
            tracing::debug!(%peer, "connection limit reached: closed");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let activity = Activity::new(Arc::clone(&limits.unread));
        let conn =
            Conn::new(Arc::clone(&listener), peer_value(peer), peer.ip(), Arc::clone(&activity), limits.timeouts.idle);
        let (builder, mut stop, drain) = (Arc::clone(&builder), stop.clone(), drain.clone());
        let timeouts = limits.timeouts;
        tokio::spawn(async move {
            // hyper-util's protocol detection reads with no timer: a silent connection, or
            // one that sends part of the HTTP/2 preface, is held here for at most this.
            if tokio::time::timeout(timeouts.header, detectable(&stream)).await.is_err() {
                return;
            }
            let served = builder.serve_connection_with_upgrades(TokioIo::new(stream), conn);
            tokio::pin!(served);
            let result = tokio::select! {
                result = served.as_mut() => result,
                () = stopped(&mut stop) => {
                    served.as_mut().graceful_shutdown();
                    served.await
                }
                // An HTTP/1.1 response given up on (`stall`): nothing else can use the connection.
                () = activity.closed() => Ok(()),
                // Responses wait and the client takes nothing of them: streams hyper holds for
                // window end only with the connection (`Timeouts::stall`).
                stall = stalled_for(&activity, timeouts.stall()) => {
                    tracing::debug!(%peer, ?stall, "responses unread for twice the idle timeout: closed");
                    if stall == Stall::All {
                        Ok(())
                    } else {
                        // Other requests go on: GOAWAY, and they have one idle timeout to end.
                        served.as_mut().graceful_shutdown();
                        tokio::time::timeout(timeouts.idle, served.as_mut()).await.unwrap_or(Ok(()))
                    }
                }
                () = idle_for(&activity, timeouts.idle) => {
                    // HTTP/2: GOAWAY, then close; nothing is in flight to wait for.
                    served.as_mut().graceful_shutdown();
                    served.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop((drain, slot));
        });
    }
}

/// The next connection; a failed accept (out of file descriptors and the
/// like) is logged and retried after a short pause, the listener kept.
pub(super) async fn accept_next(tcp: &TcpListener) -> (tokio::net::TcpStream, SocketAddr) {
    loop {
        match tcp.accept().await {
            Ok(accepted) => return accepted,
            Err(e) => {
                tracing::warn!(error = %e, listen = ?tcp.local_addr().ok(), "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Resolves once hyper-util can tell the protocol without waiting: the bytes
/// are not (or not only) a prefix of the HTTP/2 preface, or the connection
/// closed. A peer that sends the preface in pieces is rare; it is peeked at
/// again every 10 ms.
async fn detectable(stream: &tokio::net::TcpStream) {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let mut seen = [0u8; PREFACE.len()];
    loop {
        match stream.peek(&mut seen).await {
            Ok(n) if n > 0 && n < PREFACE.len() && PREFACE.starts_with(&seen[..n]) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            _ => return,
        }
    }
}

/// Never resolves when `stall` is zero.
async fn stalled_for(activity: &Activity, stall: Duration) -> Stall {
    if stall.is_zero() {
        return std::future::pending().await;
    }
    activity.stalled_for(stall).await
}

/// Never resolves when `idle` is zero.
async fn idle_for(activity: &Activity, idle: Duration) {
    if idle.is_zero() {
        return std::future::pending().await;
    }
    activity.idle_for(idle).await;
}

async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

fn peer_value(peer: SocketAddr) -> HeaderValue {
    // An IP address is always a valid header value.
    HeaderValue::from_str(&peer.ip().to_string()).unwrap_or(HeaderValue::from_static("unknown"))
}
