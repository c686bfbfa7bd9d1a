//! The h2c upstream (`--upstream-protocol h2c`) spoken with the `h2` crate
//! directly: each forwarded request opens a stream on a shared connection
//! (`h2_pool`) and its response is awaited in the client's own task. hyper's pooled
//! client passes every request to its connection task through a channel and
//! spawns a task per response (with two oneshots); without that hand-off an
//! HTTP/2 request costs 0.7-0.9x the CPU (docs/benchmarks.md).

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use bytes::{Buf, Bytes};
use http::{uri::Authority, Request, Response};
use http_body::{Body, Frame, SizeHint};

use super::{
    dial::{dial, DialError, UpstreamFailure},
    h2_pool::{H2Pool, Picked, StreamSlot, CONNECTION_WINDOW, MAX_CONNECTIONS, STREAMS_PER_CONNECTION, STREAM_WINDOW},
    head::copy_head,
    idle::BoxError,
    recv_body::RecvBody,
    replay::{ReplayBudget, Replayable, REPLAY_BUDGET},
    timeouts::PIPE_END,
};

/// Why a request could not be sent or answered.
#[derive(Debug, thiserror::Error)]
pub(super) enum H2Error {
    #[error(transparent)]
    Dial(#[from] DialError),
    #[error("h2 handshake with the upstream")]
    Handshake(#[source] h2::Error),
    #[error("the upstream did not answer a PING (and send its SETTINGS) within the connect timeout")]
    Settings,
    #[error("upstream stream")]
    Stream(#[source] h2::Error),
    #[error("every upstream h2 connection taken failed to open a stream")]
    NoConnection,
}

impl H2Error {
    pub(super) fn failure(&self) -> UpstreamFailure {
        match self {
            H2Error::Dial(_) | H2Error::Handshake(_) | H2Error::Settings => UpstreamFailure::Connect,
            H2Error::Stream(_) | H2Error::NoConnection => UpstreamFailure::Exchange,
        }
    }
}

/// The largest response head an upstream may send (RFC 9113 6.5.2's list
/// size: names, values and 32 bytes a field).
const MAX_RESPONSE_HEAD: u32 = 400 << 10;

/// One upstream's HTTP/2 connections (see `H2Pool`), made again when gone.
#[derive(Debug)]
pub(super) struct H2Upstream {
    authority: Authority,
    connect_timeout: Duration,
    pool: Arc<H2Pool>,
    /// Held while connecting, so concurrent requests share one new connection.
    connecting: tokio::sync::Mutex<Dialing>,
    /// What request bodies kept to be sent again may hold at once.
    replay: Arc<ReplayBudget>,
    /// `--idle-timeout`: how long a request body may wait for the upstream's
    /// window (zero: no limit).
    idle: Duration,
}

#[derive(Debug, Default)]
struct Dialing {
    /// The number of the last connection made (so an old one's end forgets only itself).
    last_id: u64,
    /// When making one last failed: for `DIAL_BACKOFF` after, requests past
    /// the connections' limits wait on them instead of each dialling in turn.
    failed: Option<tokio::time::Instant>,
}

/// How long a failed dial keeps requests on the connections there are.
const DIAL_BACKOFF: Duration = Duration::from_secs(1);

impl H2Upstream {
    pub(super) fn new(authority: Authority, connect_timeout: Duration, idle: Duration) -> Arc<Self> {
        Arc::new(H2Upstream {
            authority,
            connect_timeout,
            pool: Arc::default(),
            connecting: tokio::sync::Mutex::default(),
            replay: ReplayBudget::new(REPLAY_BUDGET),
            idle,
        })
    }

    /// A connection with a stream free, made if none has one (then `true`).
    /// When one cannot be made, the least loaded there is takes the stream
    /// (h2 queues it until one of its streams ends): an upstream that refuses
    /// new connections while its open ones work (a connection cap, a full
    /// backlog) is then as before there were several, not a 502.
    async fn sender(self: &Arc<Self>) -> Result<(Picked, bool), H2Error> {
        if let Some(picked) = self.pool.pick() {
            return Ok((picked, false));
        }
        let mut dialing = self.connecting.lock().await;
        if let Some(picked) = self.pool.pick() {
            return Ok((picked, false));
        }
        if dialing.failed.is_some_and(|t| t.elapsed() < DIAL_BACKOFF) {
            if let Some(picked) = self.pool.least_loaded() {
                return Ok((picked, false));
            }
        }
        // Boxed: the handshake's state is large, and every request's future
        // (allocated and moved whole) would otherwise carry room for it.
        match Box::pin(self.connect(&mut dialing)).await {
            Ok(picked) => {
                dialing.failed = None;
                Ok((picked, true))
            }
            Err(e) => {
                dialing.failed = Some(tokio::time::Instant::now());
                match self.pool.least_loaded() {
                    Some(picked) => {
                        tracing::debug!(error = %e, "no new upstream h2 connection; waiting on one there is");
                        Ok((picked, false))
                    }
                    None => Err(e),
                }
            }
        }
    }

    /// Make a connection, wait for its SETTINGS, and take a stream on it.
    async fn connect(self: &Arc<Self>, dialing: &mut Dialing) -> Result<Picked, H2Error> {
        let tcp = dial(&self.authority, self.connect_timeout).await?;
        // Windows sized so that no stream waits for another's (see
        // `CONNECTION_WINDOW`); they bound what one connection buffers ahead
        // of slow readers. Where h2's defaults are loose: until the
        // upstream's SETTINGS arrive, open at most `STREAMS_PER_CONNECTION`
        // (RFC 9113 6.5.2 recommends a server allow 100); accept no pushed streams
        // (nothing reads them); and take a response head up to 400 KiB, about
        // what an HTTP/1.1 upstream gets (hyper's 408 KiB read buffer),
        // instead of 16 MiB. Past 4x that, h2 closes the whole connection, so
        // a limit near what real heads use would let one bad response fail
        // every request on it.
        let (send, mut conn) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_send_buffer_size(1 << 20)
            .initial_max_send_streams(STREAMS_PER_CONNECTION)
            .enable_push(false)
            .max_header_list_size(MAX_RESPONSE_HEAD)
            .handshake(tcp)
            .await
            .map_err(H2Error::Handshake)?;
        let ping = conn.ping_pong();
        dialing.last_id += 1;
        let id = dialing.last_id;
        let pool = Arc::downgrade(&self.pool);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream h2 connection ended");
            }
            if let Some(pool) = pool.upgrade() {
                pool.forget(id);
            }
        });
        // A server's SETTINGS come before its answer to a PING (RFC 9113
        // 3.4), so after one round trip the connection knows its stream
        // limit, and a burst is spread over connections by the upstream's
        // limit rather than by the 100 assumed until then.
        if let Some(mut ping) = ping {
            tokio::time::timeout(self.connect_timeout, ping.ping(h2::Ping::opaque()))
                .await
                .map_err(|_| H2Error::Settings)?
                .map_err(H2Error::Handshake)?;
        }
        Ok(self.pool.add(id, send))
    }

    /// A connection that can open a stream now. One that cannot (the
    /// upstream said GOAWAY, as gRPC servers do at their maximum connection
    /// age, or closed it) is forgotten and another taken: no stream was
    /// opened, so nothing of the request has been sent. Forgetting shrinks
    /// the pool, so only a new connection failing too ends the request
    /// (when an upstream restarts, every connection it had fails at once).
    async fn ready_sender(self: &Arc<Self>) -> Result<Picked, H2Error> {
        for _ in 0..=MAX_CONNECTIONS {
            let (Picked { id, send, slot }, fresh) = self.sender().await?;
            match send.ready().await {
                Ok(send) => return Ok(Picked { id, send, slot }),
                Err(e) => {
                    tracing::debug!(error = %e, "upstream h2 connection cannot open a stream; taking another");
                    self.pool.forget(id);
                    if fresh {
                        return Err(H2Error::Stream(e));
                    }
                }
            }
        }
        Err(H2Error::NoConnection)
    }

    /// Send `req` (its body streamed by a task of its own unless it is empty)
    /// and wait for the response head. A request the upstream did not
    /// process is sent again, up to `UNPROCESSED_RETRIES` times, if its body
    /// is empty or was kept whole so far (`replay`).
    pub(super) async fn send<B>(self: Arc<Self>, req: Request<B>) -> Result<Response<H2Body>, H2Error>
    where
        B: Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError> + Send,
    {
        let (parts, body) = req.into_parts();
        let head = Request::from_parts(parts, ());
        if !body.is_end_stream() {
            return self.send_with_body(head, body).await;
        }
        let mut retries = 0;
        loop {
            let (response, _, slot) = self.open(&head, true).await?;
            match response.await {
                Ok(res) => return Ok(into_response(res, slot)),
                Err(e) if unprocessed(&e) => {
                    self.refused(&e, &slot);
                    if retries == UNPROCESSED_RETRIES {
                        return Err(H2Error::Stream(e));
                    }
                    tracing::debug!(error = %e, "the upstream did not process a stream; sending it again");
                    retries += 1;
                }
                Err(e) => return Err(H2Error::Stream(e)),
            }
        }
    }

    /// `send` for a request with a body: the body is piped by a task of its
    /// own, which gives it back when the stream ends first, so that a refused
    /// stream can be sent again from its first byte.
    async fn send_with_body<B>(self: Arc<Self>, head: Request<()>, body: B) -> Result<Response<H2Body>, H2Error>
    where
        B: Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError> + Send,
    {
        let mut body = Replayable::new(body, Arc::clone(&self.replay));
        let mut retries = 0;
        loop {
            let (response, stream, slot) = self.open(&head, false).await?;
            let answered = body.answered();
            let piping = tokio::spawn(pipe(body, stream, self.idle));
            // Dropped with this future (a 504, a client gone) before the head came: the pipe
            // ends too, and with it the upstream stream (RST_STREAM CANCEL).
            let abort = AbortOnDrop(Some(piping.abort_handle()));
            let e = match response.await {
                Ok(res) => {
                    // No sending again from here: what was kept is let go. The body goes on.
                    answered.raise();
                    abort.disarm();
                    return Ok(into_response(res, slot));
                }
                Err(e) => e,
            };
            if !unprocessed(&e) {
                return Err(H2Error::Stream(e));
            }
            self.refused(&e, &slot);
            if retries == UNPROCESSED_RETRIES {
                return Err(H2Error::Stream(e));
            }
            // The stream is reset, so the pipe ends at once (bounded all the same).
            let rest = tokio::time::timeout(PIPE_END, piping).await.ok().and_then(Result::ok).flatten();
            let Some(again) = rest.and_then(Replayable::rewind) else {
                tracing::debug!(
                    error = %e,
                    "the refused stream cannot be sent again: its body was not kept whole (past the limit or the \
                     budget), failed, or did not come back in time"
                );
                return Err(H2Error::Stream(e));
            };
            tracing::debug!(error = %e, "the upstream did not process a stream; sending it again");
            body = again;
            retries += 1;
        }
    }

    /// The upstream did not process a stream: a connection that said GOAWAY
    /// is not taken again while its other streams end.
    fn refused(&self, e: &h2::Error, slot: &StreamSlot) {
        if e.is_go_away() {
            self.pool.forget(slot.connection());
        }
    }

    /// Open a stream for `head` on a connection that can take one. A
    /// connection that fails to open it after `ready` (a GOAWAY or a close
    /// its task, on another worker, read in between) is forgotten and
    /// another taken, as in `ready_sender`: nothing of the request was sent.
    async fn open(
        self: &Arc<Self>,
        head: &Request<()>,
        eos: bool,
    ) -> Result<(h2::client::ResponseFuture, h2::SendStream<Bytes>, StreamSlot), H2Error> {
        let mut failed = 0;
        loop {
            let Picked { id, mut send, slot } = self.ready_sender().await?;
            match send.send_request(copy_head(head), eos) {
                Ok((response, stream)) => return Ok((response, stream, slot)),
                Err(e) => {
                    self.pool.forget(id);
                    failed += 1;
                    if !(e.is_go_away() || e.is_io()) || failed > MAX_CONNECTIONS {
                        return Err(H2Error::Stream(e));
                    }
                    tracing::debug!(error = %e, "upstream h2 connection ended as a stream opened; taking another");
                }
            }
        }
    }
}

/// Times a bodiless request is sent again when the upstream did not process
/// it: once is what a GOAWAY usually needs, twice covers a retry that meets
/// the next connection's limit, and a bound stops an upstream that refuses
/// everything from keeping a request for ever.
const UNPROCESSED_RETRIES: u32 = 2;

/// Whether the upstream said it never processed the stream (RFC 9113 8.7):
/// RST_STREAM REFUSED_STREAM, or a GOAWAY whose last stream id is below it
/// (h2 fails exactly those streams with the remote GOAWAY). Any other error
/// may come after the upstream acted on the request.
fn unprocessed(e: &h2::Error) -> bool {
    e.is_remote() && (e.is_go_away() || (e.is_reset() && e.reason() == Some(h2::Reason::REFUSED_STREAM)))
}

fn into_response(res: Response<h2::RecvStream>, slot: StreamSlot) -> Response<H2Body> {
    res.map(|recv| H2Body { body: RecvBody::new(recv), _slot: slot })
}

/// Aborts a task when dropped, unless disarmed.
struct AbortOnDrop(Option<tokio::task::AbortHandle>);

impl AbortOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

/// Copy a request body into its stream, within the peer's flow control; a
/// body that fails (the client stalled), or an upstream that gives it no
/// window for `idle`, resets the stream. The body is given back (unless it
/// failed), to be sent again if the stream was refused.
async fn pipe<B>(mut body: Replayable<B>, mut stream: h2::SendStream<Bytes>, idle: Duration) -> Option<Replayable<B>>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError> + Send,
{
    loop {
        let frame = std::future::poll_fn(|cx| {
            if stream.poll_reset(cx).is_ready() {
                return Poll::Ready(None);
            }
            Pin::new(&mut body).poll_frame(cx).map(Some)
        })
        .await;
        let frame = match frame {
            None => return Some(body),
            Some(None) => {
                let _ = stream.send_data(Bytes::new(), true);
                return Some(body);
            }
            Some(Some(Err(_))) => {
                stream.send_reset(h2::Reason::CANCEL);
                return None;
            }
            Some(Some(Ok(frame))) => frame,
        };
        let frame = match frame.into_data() {
            Ok(mut data) => {
                while data.has_remaining() {
                    stream.reserve_capacity(data.len());
                    let capacity = std::future::poll_fn(|cx| stream.poll_capacity(cx));
                    let room = if idle.is_zero() {
                        capacity.await
                    } else {
                        match tokio::time::timeout(idle, capacity).await {
                            Ok(room) => room,
                            Err(_) => {
                                // The upstream took nothing for the idle timeout: the upload ends,
                                // and with it whatever slot it holds.
                                stream.send_reset(h2::Reason::CANCEL);
                                return None;
                            }
                        }
                    };
                    let room = match room {
                        Some(Ok(n)) => n,
                        _ => return Some(body),
                    };
                    let chunk = data.split_to(room.min(data.len()));
                    if stream.send_data(chunk, false).is_err() {
                        return Some(body);
                    }
                }
                continue;
            }
            Err(frame) => frame,
        };
        if let Ok(trailers) = frame.into_trailers() {
            let _ = stream.send_trailers(trailers);
            return Some(body);
        }
    }
}

/// An upstream response body (`RecvBody`), holding its stream's place on
/// the connection while it lives.
#[derive(Debug)]
pub struct H2Body {
    body: RecvBody,
    /// The stream counts against its connection's limit while the body lives.
    _slot: StreamSlot,
}

impl Body for H2Body {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
