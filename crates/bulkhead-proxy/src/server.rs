//! Listeners: accept, serve HTTP/1.1 (hyper) or h2c (`h2_server`) on each
//! connection, each request (each HTTP/2 stream) through the listener's
//! stack (`stack`).

use std::{
    future::Future,
    net::SocketAddr,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use http::HeaderValue;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use pin_project_lite::pin_project;
use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
};

use super::{
    activity::{Activity, Stall},
    connections::Connections,
    h2_server::{h2_builder, H2Connection},
    idle::BoxError,
    stack::{Conn, Listener},
    timeouts::Timeouts,
    unread::UnreadBudget,
    woken::WhenWoken,
};

/// The largest HTTP/1.1 request head: hyper's read buffer, which a client
/// holding a partial head fills. hyper's default (408 KiB) let 290 such
/// connections take a sidecar past its 128Mi; 32 KiB is nginx's default
/// (4 × 8 KiB) and twice the HTTP/2 header list allowed (`h2_server`).
const MAX_HEAD: usize = 32 << 10;

/// How client connections are served: HTTP/1.1 by hyper, HTTP/2 (prior
/// knowledge, h2c) by `h2_server`.
///
/// `header_timeout` bounds each HTTP/1.1 request head and is the HTTP/2 ping
/// interval and ping timeout (a dead peer's connection is closed).
pub(super) struct Protocols {
    http1: http1::Builder,
    h2: h2::server::Builder,
    keepalive: Duration,
}

impl Protocols {
    pub(super) fn new(header_timeout: Duration) -> Self {
        let mut http1 = http1::Builder::new();
        // The buffer bounds memory; the head's own limit makes the bound exact (a head that
        // arrives whole in one read can be parsed past a buffer's limit).
        http1
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            .max_buf_size(MAX_HEAD)
            .max_header_size(MAX_HEAD);
        Self { http1, h2: h2_builder(), keepalive: header_timeout }
    }

    fn serve(&self, stream: TcpStream, h2: bool, conn: Conn) -> Served {
        if h2 {
            Served::H2 { conn: H2Connection::new(&self.h2, stream, conn, self.keepalive) }
        } else {
            Served::Http1 { conn: self.http1.serve_connection(TokioIo::new(stream), conn).with_upgrades() }
        }
    }
}

pin_project! {
    /// One client connection being served.
    #[project = ServedProj]
    enum Served {
        Http1 { #[pin] conn: http1::UpgradeableConnection<TokioIo<TcpStream>, Conn> },
        H2 { conn: H2Connection },
    }
}

impl Served {
    /// HTTP/1.1: close after the current request; HTTP/2: GOAWAY.
    fn graceful_shutdown(self: Pin<&mut Self>) {
        match self.project() {
            ServedProj::Http1 { conn } => conn.graceful_shutdown(),
            ServedProj::H2 { conn } => conn.graceful_shutdown(),
        }
    }
}

impl Future for Served {
    type Output = Result<(), BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            ServedProj::Http1 { conn } => conn.poll(cx).map_err(Into::into),
            ServedProj::H2 { conn } => Pin::new(conn).poll(cx).map_err(Into::into),
        }
    }
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
    protocols: Arc<Protocols>,
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
        let (protocols, mut stop, drain) = (Arc::clone(&protocols), stop.clone(), drain.clone());
        let timeouts = limits.timeouts;
        tokio::spawn(async move {
            // A silent connection, or one that sends part of the HTTP/2 preface, is held here
            // for at most this.
            let Ok(h2) = tokio::time::timeout(timeouts.header, is_h2(&stream)).await else {
                return;
            };
            let served = protocols.serve(stream, h2, conn);
            tokio::pin!(served);
            // Looked at only when one of them woke (`woken`), not at every wake of the task.
            let guards = WhenWoken::new(async {
                tokio::select! {
                    () = stopped(&mut stop) => Guard::Stop,
                    () = activity.closed() => Guard::GivenUp,
                    stall = stalled_for(&activity, timeouts.stall()) => Guard::Stalled(stall),
                    () = idle_for(&activity, timeouts.idle) => Guard::Idle,
                }
            });
            let result = tokio::select! {
                biased;
                result = served.as_mut() => result,
                guard = guards => match guard {
                    Guard::Stop => {
                        served.as_mut().graceful_shutdown();
                        served.await
                    }
                    // An HTTP/1.1 response given up on (`stall`): nothing else can use the connection.
                    Guard::GivenUp => Ok(()),
                    // Responses wait and the client takes nothing of them: streams held for
                    // window end only with the connection (`Timeouts::stall`).
                    Guard::Stalled(stall) => {
                        tracing::debug!(%peer, ?stall, "responses unread for twice the idle timeout: closed");
                        if stall == Stall::All {
                            Ok(())
                        } else {
                            // Other requests go on: GOAWAY, and they have one idle timeout to end.
                            served.as_mut().graceful_shutdown();
                            tokio::time::timeout(timeouts.idle, served.as_mut()).await.unwrap_or(Ok(()))
                        }
                    }
                    Guard::Idle => {
                        // HTTP/2: GOAWAY, then close; nothing is in flight to wait for.
                        served.as_mut().graceful_shutdown();
                        served.await
                    }
                },
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
pub(super) async fn accept_next(tcp: &TcpListener) -> (TcpStream, SocketAddr) {
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

/// Whether the connection opens with the HTTP/2 preface (h2c with prior
/// knowledge); anything else, or a close, is HTTP/1.1's to answer. Resolves
/// once the bytes tell: a peer that sends the preface in pieces is rare, and
/// is peeked at again every 10 ms.
async fn is_h2(stream: &TcpStream) -> bool {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let mut seen = [0u8; PREFACE.len()];
    loop {
        match stream.peek(&mut seen).await {
            Ok(n) if n > 0 && n < PREFACE.len() && PREFACE.starts_with(&seen[..n]) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Ok(n) => return n == PREFACE.len() && seen == PREFACE,
            Err(_) => return false,
        }
    }
}

/// What ends a connection besides its client.
enum Guard {
    /// The proxy stops.
    Stop,
    /// A response was given up on.
    GivenUp,
    Stalled(Stall),
    Idle,
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
