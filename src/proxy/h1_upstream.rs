//! The HTTP/1.1 upstream spoken with hyper's connection API: idle connections
//! wait on a stack (the last used is taken first), a request takes one that is
//! ready or makes a new one, and its response body puts the connection back as
//! it ends. hyper-util's pooled client does the same through a map keyed by
//! scheme and host, hashed byte by byte with SipHash at every checkout and
//! return, and a task that waits for each connection to be ready again; that
//! was about a tenth of an HTTP/1.1 request's instructions (docs/benchmarks.md).

use std::{
    collections::VecDeque,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{ready, Context, Poll},
    time::{Duration, Instant},
};

use bytes::Bytes;
use http::{uri::Authority, Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::{body::Incoming, client::conn::http1::SendRequest};
use hyper_util::rt::TokioIo;

use super::{
    dial::{dial, DialError},
    idle::IdleBody,
};

/// A forwarded request's body: the client's, under the idle timeout.
type Outgoing = IdleBody<Incoming>;

/// Idle connections kept at most; past it the oldest is closed.
const MAX_IDLE: usize = 512;
/// An idle connection older than this is closed instead of used (hyper-util's default).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Idle connections looked at in one checkout before making a new one.
const CHECKOUT_SCAN: usize = 4;

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
    pub(super) fn is_connect(&self) -> bool {
        matches!(self, H1Error::Dial(_) | H1Error::Handshake(_))
    }
}

struct Idle {
    sender: SendRequest<Outgoing>,
    since: Instant,
}

/// One upstream's keep-alive connections.
pub(super) struct H1Upstream {
    authority: Authority,
    connect_timeout: Duration,
    idle: Mutex<VecDeque<Idle>>,
}

impl std::fmt::Debug for H1Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H1Upstream").field("authority", &self.authority).finish_non_exhaustive()
    }
}

impl H1Upstream {
    pub(super) fn new(authority: Authority, connect_timeout: Duration) -> Arc<Self> {
        Arc::new(H1Upstream { authority, connect_timeout, idle: Mutex::new(VecDeque::new()) })
    }

    /// The most recently used connection that is ready for a request. One
    /// that is not ready yet (its last response is ending on another thread)
    /// stays; closed and expired ones are dropped.
    fn checkout(&self) -> Option<SendRequest<Outgoing>> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let mut busy = Vec::new();
        let mut found = None;
        for _ in 0..CHECKOUT_SCAN {
            let Some(entry) = idle.pop_back() else { break };
            if entry.since.elapsed() >= IDLE_TIMEOUT {
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
        idle.extend(busy.into_iter().rev());
        found
    }

    fn checkin(&self, sender: SendRequest<Outgoing>) {
        if sender.is_closed() {
            return;
        }
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        while idle.front().is_some_and(|e| now.duration_since(e.since) >= IDLE_TIMEOUT) || idle.len() >= MAX_IDLE {
            idle.pop_front();
        }
        idle.push_back(Idle { sender, since: now });
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
    /// head. A kept connection that the upstream closed before the request
    /// went out costs nothing: the request is sent once more on a new one.
    pub(super) async fn send(self: Arc<Self>, req: Request<Outgoing>) -> Result<Response<H1Body>, H1Error> {
        let (mut sender, kept) = match self.checkout() {
            Some(sender) => (sender, true),
            None => (self.connect().await?, false),
        };
        let res = match sender.try_send_request(req).await {
            Ok(res) => res,
            Err(mut e) => match e.take_message() {
                Some(req) if kept => {
                    tracing::debug!(error = %e.error(), "kept upstream connection closed; sending on a new one");
                    sender = self.connect().await?;
                    sender.send_request(req).await.map_err(H1Error::Request)?
                }
                _ => return Err(H1Error::Request(e.into_error())),
            },
        };
        Ok(res.map(|body| H1Body { body, back: Some((self, sender)) }))
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
