//! Listeners: accept, serve HTTP/1.1 and h2c on each connection, admit every
//! request (every HTTP/2 stream) through the gate, forward the admitted.

use std::{
    borrow::Cow,
    convert::Infallible,
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use http::{header, uri::PathAndQuery, HeaderValue, Method, Request, Response, Uri, Version};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto,
};
use tokio::{net::TcpListener, sync::watch};

use super::{
    activity::{Activity, Stall},
    class_headers::ClassHeaders,
    classify::{Classifier, Rule},
    connections::Connections,
    counted::{Counted, CountedBody},
    forward::{Forward, ForwardFuture, ProxyBody},
    layer::{Gate, PermitBody, ResponseFuture},
    normalize,
    options::Cidr,
    refusal::Refusal,
    stall::Watched,
    synthetic::is_grpc,
    timeouts::Timeouts,
    unread::UnreadBudget,
};

/// What one listener does with a request.
pub(super) struct Listener {
    pub gate: Gate<Classifier>,
    pub forward: Forward,
    /// Peers that may name a class by header; None: any peer.
    pub class_header_from: Option<Arc<[Cidr]>>,
    /// The headers that name a class: the classifier's, or x-bulkhead-class.
    class_headers: Arc<ClassHeaders>,
    /// Path rules classify: the path is normalised first, and forwarded so.
    by_path: bool,
}

impl Listener {
    pub(super) fn new(
        gate: Gate<Classifier>,
        forward: Forward,
        class_headers: Arc<ClassHeaders>,
        class_header_from: Option<Arc<[Cidr]>>,
    ) -> Self {
        let by_path =
            matches!(&gate.classify, Classifier::Rules(rules) if rules.iter().any(|r| matches!(r, Rule::Path(_))));
        Self { gate, forward, class_header_from, class_headers, by_path }
    }

    /// Refuse what a proxy must not forward or classify (the 400s), and drop
    /// class headers an untrusted peer sent.
    fn screen<B>(&self, req: &mut Request<B>, peer: IpAddr) -> Result<(), Refusal> {
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

/// One connection's service: the listener plus the peer, for x-forwarded-for,
/// and the requests in flight, for the connection's idle timer.
struct Conn {
    listener: Arc<Listener>,
    peer: HeaderValue,
    peer_ip: IpAddr,
    activity: Arc<Activity>,
    /// `--idle-timeout`, for response bodies the client stops reading.
    idle: Duration,
}

impl hyper::service::Service<Request<Incoming>> for Conn {
    type Response = Response<CountedBody<Watched<PermitBody<ProxyBody>>>>;
    type Error = Infallible;
    type Future = Counted<ResponseFuture<ForwardFuture>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let http1 = req.version() < Version::HTTP_2;
        Counted::new(self.admit(req), self.activity.begin(), self.idle, http1)
    }
}

impl Conn {
    fn admit(&self, mut req: Request<Incoming>) -> ResponseFuture<ForwardFuture> {
        if let Err(refusal) = self.listener.screen(&mut req, self.peer_ip) {
            return ResponseFuture::rejected(refusal.response(is_grpc(&req)));
        }
        match self.listener.gate.admit(&req) {
            Ok(permit) => {
                let forwarded =
                    self.listener.forward.call(req, &self.peer, permit.class_header(), permit.max_duration());
                ResponseFuture::admitted(forwarded, permit)
            }
            Err(rejection) => ResponseFuture::rejected(rejection),
        }
    }
}

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
        let conn = Conn {
            listener: Arc::clone(&listener),
            peer: peer_value(peer),
            peer_ip: peer.ip(),
            activity: Arc::clone(&activity),
            idle: limits.timeouts.idle,
        };
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
