//! The HTTP/1.1 upstream spoken with hyper's connection API: idle connections
//! wait on a stack (the last used is taken first), a request takes one that is
//! ready or makes a new one, and its response body puts the connection back as
//! it ends. hyper-util's pooled client does the same through a map keyed by
//! scheme and host, hashed byte by byte with SipHash at every checkout and
//! return, and a task that waits for each connection to be ready again; that
//! was about a tenth of an HTTP/1.1 request's instructions (docs/benchmarks.md).
//! A connection idle past `UPSTREAM_IDLE` is closed by a reaper task even when
//! no request comes to look at it, as HAProxy purges its idle server
//! connections: a quiet proxy does not hold an upstream's sockets for ever.

use std::{
    collections::VecDeque,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{ready, Context, Poll},
    time::{Duration, Instant},
};

use bytes::Bytes;
use http::{uri::Authority, Method, Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Empty};
use hyper::{body::Incoming, client::conn::http1::SendRequest};
use hyper_util::rt::TokioIo;

use super::{
    dial::{dial, DialError, UpstreamFailure},
    head::copy_head,
    timeouts::UPSTREAM_IDLE,
    upload::Upload,
};

/// A forwarded request's body: the client's, under the idle timeout.
pub(super) type ClientBody = Upload;
/// What goes to the upstream: the client's body, or none for a request sent again.
type Outgoing = Either<ClientBody, Empty<Bytes>>;

/// Idle connections kept at most; past it the oldest is closed.
const MAX_IDLE: usize = 512;
/// Idle connections looked at in one checkout before making a new one.
const CHECKOUT_SCAN: usize = 4;
/// The reaper looks this many times per idle timeout: a connection closes
/// between one and 1 1/6 idle timeouts after its last use.
const REAPS_PER_TIMEOUT: u32 = 6;

/// Why a request could not be sent or answered.
#[derive(Debug, thiserror::Error)]
pub(super) enum H1Error {
    #[error(transparent)]
    Dial(#[from] DialError),
    #[error("HTTP/1.1 handshake with the upstream")]
    Handshake(#[source] hyper::Error),
    #[error("upstream request")]
    Request(#[source] hyper::Error),
}

impl H1Error {
    pub(super) fn failure(&self) -> UpstreamFailure {
        match self {
            H1Error::Dial(_) | H1Error::Handshake(_) => UpstreamFailure::Connect,
            H1Error::Request(_) => UpstreamFailure::Exchange,
        }
    }
}

struct Idle {
    sender: SendRequest<Outgoing>,
    since: Instant,
}

/// The idle connections, oldest first, and whether a reaper is running for them.
#[derive(Default)]
struct IdleStack {
    entries: VecDeque<Idle>,
    reaping: bool,
}

/// One upstream's keep-alive connections.
pub(super) struct H1Upstream {
    authority: Authority,
    connect_timeout: Duration,
    idle_timeout: Duration,
    idle: Mutex<IdleStack>,
}

impl std::fmt::Debug for H1Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H1Upstream").field("authority", &self.authority).finish_non_exhaustive()
    }
}

impl H1Upstream {
    pub(super) fn new(authority: Authority, connect_timeout: Duration) -> Arc<Self> {
        Self::with_idle_timeout(authority, connect_timeout, UPSTREAM_IDLE)
    }

    fn with_idle_timeout(authority: Authority, connect_timeout: Duration, idle_timeout: Duration) -> Arc<Self> {
        Arc::new(H1Upstream { authority, connect_timeout, idle_timeout, idle: Mutex::default() })
    }

    /// The most recently used connection that is ready for a request. One
    /// that is not ready yet (its last response is ending on another thread)
    /// stays; closed and expired ones are dropped.
    fn checkout(&self) -> Option<SendRequest<Outgoing>> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let mut busy = Vec::new();
        let mut found = None;
        for _ in 0..CHECKOUT_SCAN {
            let Some(entry) = idle.entries.pop_back() else { break };
            if entry.since.elapsed() >= self.idle_timeout {
                continue;
            }
            if entry.sender.is_ready() {
                found = Some(entry.sender);
                break;
            }
            if !entry.sender.is_closed() {
                busy.push(entry);
            }
        }
        idle.entries.extend(busy.into_iter().rev());
        found
    }

    fn checkin(self: &Arc<Self>, sender: SendRequest<Outgoing>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        // The oldest are at the front (dropping one closes it). Age is the
        // reaper's to see to, and a checkout's, which skips the expired.
        while idle.entries.len() >= MAX_IDLE {
            idle.entries.pop_front();
        }
        idle.entries.push_back(Idle { sender, since: Instant::now() });
        // Started and stopped under the lock, so a connection put back is
        // never left without a reaper. (Outside a runtime, as a body dropped
        // at shutdown may be, there is nothing left to reap for.)
        if !idle.reaping {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                idle.reaping = true;
                runtime.spawn(reap(Arc::downgrade(self), self.idle_timeout / REAPS_PER_TIMEOUT));
            }
        }
    }

    async fn connect(&self) -> Result<SendRequest<Outgoing>, H1Error> {
        let tcp = dial(&self.authority, self.connect_timeout).await?;
        let (sender, conn) = hyper::client::conn::http1::Builder::new()
            .handshake(TokioIo::new(tcp))
            .await
            .map_err(H1Error::Handshake)?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "upstream connection ended");
            }
        });
        Ok(sender)
    }

    /// Send `req` (origin-form target, Host set) and wait for the response
    /// head. A kept connection that the upstream closed costs the request
    /// nothing: sent once more on a new connection if the request never went
    /// out, or if it went out, the connection ended (closed or reset) before
    /// a response head came back, and it can be sent twice
    /// safely (no body, an idempotent method; RFC 9110 9.2.2). An upstream
    /// that closes idle connections before our idle timeout (Node's 5 s)
    /// would otherwise turn the request that meets the close into a 502.
    pub(super) async fn send(self: Arc<Self>, req: Request<ClientBody>) -> Result<Response<H1Body>, H1Error> {
        let (mut sender, kept) = match self.checkout() {
            Some(sender) => (sender, true),
            None => (self.connect().await?, false),
        };
        let replay = kept.then(|| replayable_head(&req)).flatten();
        let res = match sender.try_send_request(req.map(Either::Left)).await {
            Ok(res) => res,
            Err(mut e) => {
                let again = match (e.take_message(), replay) {
                    (Some(unsent), _) if kept => unsent,
                    (_, Some(head)) if closed_without_answer(e.error()) => head.map(|()| Either::Right(Empty::new())),
                    _ => return Err(H1Error::Request(e.into_error())),
                };
                tracing::debug!(error = %e.error(), "kept upstream connection closed; sending on a new one");
                sender = self.connect().await?;
                sender.send_request(again).await.map_err(H1Error::Request)?
            }
        };
        Ok(res.map(|body| H1Body { body, back: Some((self, sender)) }))
    }
}

/// The upstream closed the connection before it answered: with a FIN (the
/// request may have gone out first), or with a reset, as a kernel does when
/// the upstream closes with our request unread in its buffer.
fn closed_without_answer(e: &hyper::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
    if e.is_incomplete_message() {
        return true;
    }
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return matches!(io.kind(), ConnectionReset | BrokenPipe | ConnectionAborted);
        }
        source = cause.source();
    }
    false
}

/// A copy of the head of a request that may be sent twice: no body and an
/// idempotent method.
fn replayable_head(req: &Request<ClientBody>) -> Option<Request<()>> {
    let idempotent = matches!(
        *req.method(),
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    );
    if !idempotent || !req.body().is_end_stream() {
        return None;
    }
    Some(copy_head(req))
}

/// Close expired idle connections every `period` until none is left idle
/// (the next one put back starts a reaper again) or the upstream is gone.
async fn reap(upstream: std::sync::Weak<H1Upstream>, period: Duration) {
    loop {
        tokio::time::sleep(period).await;
        let Some(upstream) = upstream.upgrade() else { return };
        let mut idle = upstream.idle.lock().unwrap_or_else(PoisonError::into_inner);
        // All of them: a busy entry a checkout passed over went back behind newer ones.
        let now = Instant::now();
        idle.entries.retain(|e| now.duration_since(e.since) < upstream.idle_timeout);
        if idle.entries.is_empty() {
            idle.reaping = false;
            return;
        }
    }
}

/// An upstream response body; its connection goes back to the idle stack
/// when the body ends (or is dropped: a connection left mid-response is
/// closed by hyper and not taken again).
pub struct H1Body {
    body: Incoming,
    back: Option<(Arc<H1Upstream>, SendRequest<Outgoing>)>,
}

impl std::fmt::Debug for H1Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H1Body").field("body", &self.body).finish_non_exhaustive()
    }
}

impl H1Body {
    fn give_back(&mut self) {
        if let Some((upstream, sender)) = self.back.take() {
            upstream.checkin(sender);
        }
    }
}

impl Drop for H1Body {
    fn drop(&mut self) {
        self.give_back();
    }
}

impl Body for H1Body {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
        if frame.is_none() {
            self.give_back();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::{
        convert::Infallible,
        io::{Read, Write},
        net::{TcpListener, TcpStream},
        sync::mpsc,
        thread,
    };

    use http_body_util::{BodyExt, Empty};

    use super::*;

    use crate::{idle::IdleBody, inbound::Inbound};

    /// An empty request body of the type the proxy forwards (hyper makes
    /// `Incoming` only for what it reads, so one is read off a connection).
    async fn empty_body() -> ClientBody {
        let (client, server) = tokio::io::duplex(4096);
        let service =
            hyper::service::service_fn(|_| async { Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new())) });
        tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(server), service));
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(client)).await.expect("handshake");
        tokio::spawn(conn);
        let res = send.send_request(Request::new(Empty::<Bytes>::new())).await.expect("response");
        Upload::new(IdleBody::new(Inbound::Http1(res.into_body()), Duration::ZERO, None), None, None)
    }

    async fn get(authority: &Authority) -> Request<ClientBody> {
        Request::get("/").header("host", authority.as_str()).body(empty_body().await).expect("request")
    }

    /// Answer requests on `conn` with `200 ok` until `count` are answered or it closes.
    fn answer(conn: &mut TcpStream, count: usize) {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        for _ in 0..count {
            head.clear();
            while !head.ends_with(b"\r\n\r\n") {
                match conn.read(&mut byte) {
                    Ok(1) => head.push(byte[0]),
                    _ => return,
                }
            }
            conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").expect("write");
        }
    }

    fn listener() -> (TcpListener, Authority) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let authority = listener.local_addr().expect("addr").to_string().parse().expect("authority");
        (listener, authority)
    }

    async fn status_and_body(res: Result<Response<H1Body>, H1Error>) -> (u16, Bytes) {
        let res = res.expect("response");
        let status = res.status().as_u16();
        (status, res.into_body().collect().await.expect("body").to_bytes())
    }

    /// Send `method /` on a kept connection that the upstream has closed,
    /// with the close still unread on the proxy's socket when the request
    /// takes the connection (the race an upstream's own keep-alive timeout
    /// makes). The result, and how many connections the upstream saw.
    async fn send_on_a_connection_the_upstream_closed(
        method: Method,
        how: Close,
    ) -> (Result<(u16, Bytes), String>, usize) {
        let (listener, authority) = listener();
        let (close, closing) = mpsc::channel::<()>();
        let (closed, has_closed) = mpsc::channel::<()>();
        let upstream = thread::spawn(move || {
            let (mut first, _) = listener.accept().expect("accept");
            answer(&mut first, 1);
            closing.recv().expect("told to close");
            match how {
                Close::Fin => first.shutdown(std::net::Shutdown::Both).expect("shutdown"),
                Close::Reset => reset_on_close(&first),
            }
            drop(first);
            closed.send(()).expect("report");
            listener.set_nonblocking(true).expect("nonblocking");
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                if let Ok((mut second, _)) = listener.accept() {
                    second.set_nonblocking(false).expect("blocking");
                    answer(&mut second, 1);
                    return 2;
                }
                thread::sleep(Duration::from_millis(10));
            }
            1
        });

        let up = H1Upstream::new(authority.clone(), Duration::from_secs(2));
        let first = Arc::clone(&up).send(get(&authority).await).await;
        assert_eq!(status_and_body(first).await, (200, Bytes::from_static(b"ok")));
        // The connection task sees the response end and offers the connection again.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(up.idle.lock().expect("lock").entries.len(), 1, "the connection is kept");

        let mut second = get(&authority).await;
        *second.method_mut() = method;
        // The runtime's only thread is blocked from here to the send, so the
        // connection's task cannot read the close before the checkout.
        close.send(()).expect("close");
        has_closed.recv_timeout(Duration::from_secs(5)).expect("upstream closed");
        thread::sleep(Duration::from_millis(100));
        let res = tokio::time::timeout(Duration::from_secs(5), Arc::clone(&up).send(second)).await.expect("in time");
        let res = match res {
            Ok(res) => Ok(status_and_body(Ok(res)).await),
            Err(e) => Err(format!("{:?}", e)),
        };
        (res, upstream.join().expect("upstream thread"))
    }

    #[derive(Clone, Copy, Debug)]
    enum Close {
        /// A FIN: the proxy reads the end of the stream.
        Fin,
        /// A reset, as when the upstream closes with bytes unread: the proxy's read or write fails.
        Reset,
    }

    /// Make the socket's close a reset (SO_LINGER with a zero timeout).
    fn reset_on_close(conn: &TcpStream) {
        socket2::SockRef::from(conn).set_linger(Some(Duration::ZERO)).expect("SO_LINGER");
    }

    #[tokio::test]
    async fn an_idempotent_request_that_met_the_upstreams_close_is_sent_again_on_a_new_connection() {
        for how in [Close::Fin, Close::Reset] {
            let (res, connections) = send_on_a_connection_the_upstream_closed(Method::GET, how).await;
            assert_eq!(res, Ok((200, Bytes::from_static(b"ok"))), "{how:?}");
            assert_eq!(connections, 2, "{how:?}");
        }
    }

    #[tokio::test]
    async fn a_post_that_met_the_upstreams_close_is_not_sent_twice() {
        for how in [Close::Fin, Close::Reset] {
            let (res, connections) = send_on_a_connection_the_upstream_closed(Method::POST, how).await;
            let err = res.expect_err("a POST is not repeated");
            assert!(err.contains("IncompleteMessage") || err.contains("ConnectionReset"), "{how:?}: {err}");
            assert_eq!(connections, 1, "{how:?}: no second connection for it");
        }
    }

    /// A connection left idle is closed after the idle timeout with no
    /// further request to notice it, and the reaper then stops.
    #[tokio::test]
    async fn an_idle_connection_is_closed_without_traffic_after_the_idle_timeout() {
        let (listener, authority) = listener();
        let (ended, has_ended) = mpsc::channel::<Duration>();
        let upstream = thread::spawn(move || {
            let (mut conn, _) = listener.accept().expect("accept");
            answer(&mut conn, 1);
            let answered = Instant::now();
            let mut rest = Vec::new();
            // Read until the proxy closes: what it sends after the answer must be nothing.
            conn.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
            let read = conn.read_to_end(&mut rest);
            assert!(read.is_ok() && rest.is_empty(), "{read:?} {rest:?}");
            ended.send(answered.elapsed()).expect("report");
        });

        let timeout = Duration::from_millis(600);
        let up = H1Upstream::with_idle_timeout(authority.clone(), Duration::from_secs(2), timeout);
        let res = Arc::clone(&up).send(get(&authority).await).await;
        assert_eq!(status_and_body(res).await, (200, Bytes::from_static(b"ok")));
        assert!(up.idle.lock().expect("lock").reaping, "a reaper runs while a connection is idle");

        let mut waited = Duration::ZERO;
        let idle_for = loop {
            if let Ok(d) = has_ended.try_recv() {
                break d;
            }
            assert!(waited < Duration::from_secs(5), "the idle connection was never closed");
            tokio::time::sleep(Duration::from_millis(20)).await;
            waited += Duration::from_millis(20);
        };
        assert!(idle_for >= timeout, "closed after {idle_for:?}, before the idle timeout");
        assert!(idle_for < timeout * 4, "closed after {idle_for:?}");
        let idle = up.idle.lock().expect("lock");
        assert!(idle.entries.is_empty() && !idle.reaping, "nothing left idle, and the reaper stopped");
        drop(idle);
        upstream.join().expect("upstream thread");
    }
}
