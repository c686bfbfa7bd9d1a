//! HTTP/2 from clients, served with the h2 crate directly, as the upstream
//! side already is (`h2_upstream`). hyper's server spawns a task for every
//! stream and moves its request and response through it; here a
//! connection's streams are futures inside the connection's own task,
//! polled only when woken: no spawn, no task and no hand-off between tasks
//! for a request (docs/benchmarks.md has what that saves).
//!
//! What hyper's server did that the proxy relies on is done here too: the
//! limits of [`h2_builder`]; PINGs that find a dead peer; a stream its
//! client resets drops its request, and with it the slot and the upstream
//! stream; a response body sent only as the client's flow control lets it;
//! Date on every response; no connection-specific field in a response.

use std::{
    future::Future,
    pin::Pin,
    task::{ready, Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use h2::{
    server::{Connection, Handshake, SendResponse},
    Ping, PingPong, Reason, RecvStream, SendStream,
};
use http::{header, HeaderValue, Request, Response};
use http_body::Body;
use tokio::{
    net::TcpStream,
    time::{Instant, Sleep},
};

use super::{
    date,
    hop_headers::strip_connection_specific,
    idle::BoxError,
    inbound::Inbound,
    recv_body::RecvBody,
    stack::{Conn, ResponseBody, StackFuture},
};

/// Streams one client connection may have open at once: 128, nginx's
/// default (HAProxy's and Envoy's edge guide: 100). A stream whose response
/// the client leaves unread lasts until the stall timer closes its
/// connection; 1,024 let one connection hold 1,000 small ones (4.7 MB).
const CLIENT_STREAMS: u32 = 128;
/// What a client may send on one stream before the proxy has passed it on:
/// 64 KiB, as Envoy's edge-proxy guide recommends.
const CLIENT_STREAM_WINDOW: u32 = 64 << 10;
/// The largest request header list (RFC 9113 6.5.2): hyper's 16 KiB.
const MAX_HEADER_LIST: u32 = 16 << 10;
/// Streams the proxy itself may reset on a connection (a client's protocol
/// errors) before it closes it: hyper's bound against a flood of them.
const MAX_LOCAL_RESETS: usize = 1024;
/// What a connection buffers of responses before their streams wait for
/// the client's window: hyper's 400 KiB.
const MAX_SEND_BUFFER: usize = 400 << 10;

/// The settings of every client connection.
///
/// One client connection (a gRPC client, a front proxy) carries requests of
/// several classes, and a body the upstream is slow to take waits in the
/// proxy, holding the connection's window as well as its stream's. The
/// connection's window holds every stream's (8 MiB), so one class's stalled
/// upload never holds up another class's request bodies (with hyper's 1 MiB
/// for both, one did). Memory stays bounded by the streams: only an admitted
/// request's body is read, so at most 64 KiB per request in flight waits
/// here. Reset floods (rapid reset) are bounded by h2's own default of 20
/// streams reset before they are accepted.
pub(super) fn h2_builder() -> h2::server::Builder {
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(CLIENT_STREAMS)
        .initial_window_size(CLIENT_STREAM_WINDOW)
        .initial_connection_window_size(CLIENT_STREAM_WINDOW * CLIENT_STREAMS)
        .max_header_list_size(MAX_HEADER_LIST)
        .max_local_error_reset_streams(Some(MAX_LOCAL_RESETS))
        .max_send_buffer_size(MAX_SEND_BUFFER);
    builder
}

/// One client connection over HTTP/2, until it closes; `graceful_shutdown`
/// sends GOAWAY and lets the streams there are end.
pub(super) struct H2Connection {
    state: State,
    service: Conn,
    /// The PING interval and timeout.
    keepalive: Duration,
    /// GOAWAY was asked for during the handshake.
    closing: bool,
}

// Serving is large (h2's connection state); the connection's task holds it
// in place once made, so it is not boxed.
#[allow(clippy::large_enum_variant)]
enum State {
    Handshaking(Pin<Box<Handshake<TcpStream, Bytes>>>),
    Serving(Serving),
    Done,
}

struct Serving {
    conn: Connection<TcpStream, Bytes>,
    streams: FuturesUnordered<Exchange>,
    keepalive: Option<KeepAlive>,
    /// Once a peer failed to answer a PING: the most its GOAWAY may take to be written.
    dead: Option<Pin<Box<Sleep>>>,
}

impl H2Connection {
    pub(super) fn new(builder: &h2::server::Builder, io: TcpStream, service: Conn, keepalive: Duration) -> Self {
        let handshake = Box::pin(builder.handshake(io));
        Self { state: State::Handshaking(handshake), service, keepalive, closing: false }
    }

    pub(super) fn graceful_shutdown(&mut self) {
        match &mut self.state {
            State::Serving(serving) => serving.conn.graceful_shutdown(),
            _ => self.closing = true,
        }
    }
}

impl Future for H2Connection {
    type Output = Result<(), h2::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        loop {
            match &mut this.state {
                State::Handshaking(handshake) => {
                    let result = ready!(handshake.as_mut().poll(cx));
                    let mut conn = match result {
                        Ok(conn) => conn,
                        Err(e) => {
                            this.state = State::Done;
                            return Poll::Ready(Err(e));
                        }
                    };
                    if this.closing {
                        conn.graceful_shutdown();
                    }
                    let keepalive = conn.ping_pong().map(|pong| KeepAlive::new(pong, this.keepalive));
                    this.state =
                        State::Serving(Serving { conn, streams: FuturesUnordered::new(), keepalive, dead: None });
                }
                State::Serving(serving) => {
                    let done = ready!(serving.poll(cx, &this.service));
                    this.state = State::Done;
                    return Poll::Ready(done);
                }
                State::Done => return Poll::Ready(Ok(())),
            }
        }
    }
}

impl Serving {
    fn poll(&mut self, cx: &mut Context<'_>, service: &Conn) -> Poll<Result<(), h2::Error>> {
        if let Some(keepalive) = &mut self.keepalive {
            if keepalive.poll_dead(cx).is_ready() {
                tracing::debug!("the client did not answer a PING in time: closed");
                self.conn.abrupt_shutdown(Reason::NO_ERROR);
                self.keepalive = None;
                // GOAWAY is written if the socket takes it; a peer that reads nothing does not hold the connection.
                self.dead = Some(Box::pin(tokio::time::sleep(DEAD_PEER_GOAWAY)));
            }
        }
        if let Some(dead) = &mut self.dead {
            if dead.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(()));
            }
        }
        loop {
            // Streams first: what they send, polling the connection below writes.
            while let Poll::Ready(Some(())) = self.streams.poll_next_unpin(cx) {}
            let mut accepted = false;
            loop {
                match self.conn.poll_accept(cx) {
                    Poll::Ready(Some(Ok((req, respond)))) => {
                        accepted = true;
                        if let Some(keepalive) = &mut self.keepalive {
                            keepalive.seen = true;
                        }
                        self.streams.push(Exchange::new(service.call(inbound(req)), respond));
                    }
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                    Poll::Ready(None) => return Poll::Ready(Ok(())),
                    Poll::Pending => break,
                }
            }
            // New streams are polled at once: their first poll sends the admitted request upstream.
            if !accepted {
                return Poll::Pending;
            }
        }
    }
}

/// How long a peer that stopped answering PINGs is given to take the GOAWAY.
const DEAD_PEER_GOAWAY: Duration = Duration::from_secs(1);

/// The request as the stack takes it.
fn inbound(req: Request<RecvStream>) -> Request<Inbound> {
    let (parts, recv) = req.into_parts();
    let body = RecvBody::sized(recv, &parts.headers);
    Request::from_parts(parts, Inbound::H2(body))
}

/// PINGs that tell a dead peer: after an interval in which no stream came,
/// a PING; no answer within the interval, and the peer is taken for dead.
struct KeepAlive {
    pong: PingPong,
    every: Duration,
    timer: Pin<Box<Sleep>>,
    /// A PING is out, and the timer is its deadline.
    waiting: bool,
    /// A stream came since the timer was set: the peer is there.
    seen: bool,
}

impl KeepAlive {
    fn new(pong: PingPong, every: Duration) -> Self {
        let timer = Box::pin(tokio::time::sleep(every));
        Self { pong, every, timer, waiting: false, seen: false }
    }

    /// Ready once a PING went unanswered for the interval.
    fn poll_dead(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.every.is_zero() {
            return Poll::Pending;
        }
        loop {
            if self.waiting {
                match self.pong.poll_pong(cx) {
                    Poll::Ready(Ok(_)) => {
                        self.waiting = false;
                        self.timer.as_mut().reset(Instant::now() + self.every);
                    }
                    // The connection failed: it ends by itself.
                    Poll::Ready(Err(_)) => return Poll::Pending,
                    Poll::Pending => {}
                }
            }
            ready!(self.timer.as_mut().poll(cx));
            if self.waiting {
                return Poll::Ready(());
            }
            self.timer.as_mut().reset(Instant::now() + self.every);
            if std::mem::take(&mut self.seen) {
                continue;
            }
            if self.pong.send_ping(Ping::opaque()).is_ok() {
                self.waiting = true;
            }
        }
    }
}

/// One stream: the stack's answer, then its body sent within the client's
/// flow control. Dropped (with what it holds) when the client resets it.
struct Exchange {
    respond: SendResponse<Bytes>,
    step: Step,
}

enum Step {
    Answering(StackFuture),
    Sending {
        body: ResponseBody,
        tx: SendStream<Bytes>,
        /// A data frame taken from the body, waiting for window.
        pending: Option<(Bytes, bool)>,
    },
}

impl Exchange {
    fn new(answer: StackFuture, respond: SendResponse<Bytes>) -> Self {
        Self { respond, step: Step::Answering(answer) }
    }
}

impl Future for Exchange {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        loop {
            let res = match &mut this.step {
                Step::Sending { body, tx, pending } => return send_body(cx, body, tx, pending),
                Step::Answering(answer) => match Pin::new(answer).poll(cx) {
                    Poll::Ready(Ok(res)) => res,
                    Poll::Ready(Err(never)) => match never {},
                    Poll::Pending => {
                        // A reset stream's request is dropped here, and with it its slot and upstream stream.
                        if this.respond.poll_reset(cx).is_ready() {
                            return Poll::Ready(());
                        }
                        return Poll::Pending;
                    }
                },
            };
            let (parts, body) = res.into_parts();
            let mut head = Response::from_parts(parts, ());
            let headers = head.headers_mut();
            // The proxy's own refusals may say `connection: close`, meaningless here (RFC 9113 8.2.2).
            strip_connection_specific(headers);
            headers.entry(header::DATE).or_insert_with(date::now);
            let end = body.is_end_stream();
            if !end {
                if let Some(len) = body.size_hint().exact() {
                    headers.entry(header::CONTENT_LENGTH).or_insert_with(|| HeaderValue::from(len));
                }
            }
            match this.respond.send_response(head, end) {
                Ok(tx) if !end => this.step = Step::Sending { body, tx, pending: None },
                Ok(_) => return Poll::Ready(()),
                Err(e) => {
                    tracing::debug!(error = %e, "response head not sent");
                    this.respond.send_reset(Reason::INTERNAL_ERROR);
                    return Poll::Ready(());
                }
            }
        }
    }
}

/// Send `body` on `tx`: a frame is taken from the body only once the one
/// before it is sent, and sent once the client gives the stream window (the
/// stall timer, `stall`, counts the frames taken).
fn send_body(
    cx: &mut Context<'_>,
    body: &mut ResponseBody,
    tx: &mut SendStream<Bytes>,
    pending: &mut Option<(Bytes, bool)>,
) -> Poll<()> {
    loop {
        if let Poll::Ready(reason) = tx.poll_reset(cx) {
            tracing::debug!(?reason, "the client reset a stream mid-response");
            return Poll::Ready(());
        }
        if let Some((data, end)) = pending.take() {
            while tx.capacity() == 0 {
                match tx.poll_capacity(cx) {
                    Poll::Ready(Some(Ok(0))) => {}
                    Poll::Ready(Some(Ok(_))) => break,
                    Poll::Ready(Some(Err(_)) | None) => return Poll::Ready(()),
                    Poll::Pending => {
                        *pending = Some((data, end));
                        return Poll::Pending;
                    }
                }
            }
            if tx.send_data(data, end).is_err() || end {
                return Poll::Ready(());
            }
            continue;
        }
        let frame = match ready!(Pin::new(&mut *body).poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            Some(Err(e)) => {
                tracing::debug!(error = %e, "response body failed: stream reset");
                tx.send_reset(reason(&e));
                return Poll::Ready(());
            }
            None => {
                let _ = tx.send_data(Bytes::new(), true);
                return Poll::Ready(());
            }
        };
        match frame.into_data() {
            Ok(data) => {
                let end = body.is_end_stream();
                if data.is_empty() {
                    if tx.send_data(data, end).is_err() || end {
                        return Poll::Ready(());
                    }
                    continue;
                }
                tx.reserve_capacity(1);
                *pending = Some((data, end));
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    tx.reserve_capacity(0);
                    let _ = tx.send_trailers(trailers);
                    return Poll::Ready(());
                }
            }
        }
    }
}

/// The reset code for a body that failed: an upstream stream's own, else
/// INTERNAL_ERROR.
fn reason(e: &BoxError) -> Reason {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e.as_ref());
    while let Some(err) = source {
        if let Some(h2) = err.downcast_ref::<h2::Error>() {
            return h2.reason().unwrap_or(Reason::INTERNAL_ERROR);
        }
        source = err.source();
    }
    Reason::INTERNAL_ERROR
}
