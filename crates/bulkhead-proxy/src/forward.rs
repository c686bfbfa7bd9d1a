//! The upstream side: keep-alive connections (HTTP/1.1 or h2c), requests
//! forwarded without hop-by-hop headers, bodies streamed both ways, upgrades
//! spliced, and a 502 naming the failure when the upstream cannot answer.

use std::{
    convert::Infallible,
    future::Future,
    pin::Pin,
    str::FromStr,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    task::{ready, Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use http::{
    header, uri::Authority, uri::PathAndQuery, uri::Scheme, HeaderMap, HeaderValue, Request, Response, StatusCode, Uri,
    Version,
};
use http_body_util::{Either, Empty};
use hyper_util::rt::TokioIo;
use tokio::{sync::watch, time::Sleep};

use bulkhead_admission::{layer::HoldPermit, synthetic::is_grpc};

use super::{
    class_headers::ClassHeaders,
    dial::UpstreamFailure,
    h1_upstream::{H1Body, H1Upstream},
    h2_upstream::{H2Body, H2Upstream},
    hop_headers::{append_forwarded_for, is_upgrade, strip_hop_by_hop, FORWARDED_PROTO},
    idle::{self, IdleBody},
    inbound::Inbound,
    refusal::Refusal,
    timeouts::{StreamTimeouts, Timeouts, UPSTREAM_CONNECT},
    upload::Upload,
};

/// The body the proxy answers with: the upstream's, or empty (502, 504, 408).
pub type ProxyBody = Either<IdleBody<UpstreamBody>, Empty<Bytes>>;

/// An upstream's response body, over HTTP/1.1 or h2c.
pub type UpstreamBody = Either<H1Body, H2Body>;

/// The time limits and upgrade policy of forwarding.
#[derive(Clone, Debug)]
pub(crate) struct Limits {
    pub(crate) timeouts: Timeouts,
    /// `--allow-upgrade`: protocols tunnelled, lower case; h2c never is.
    pub(crate) allow_upgrade: Arc<[String]>,
}

/// How the proxy speaks to an upstream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum UpstreamProtocol {
    #[default]
    Http1,
    /// HTTP/2 without TLS (prior knowledge), as gRPC upstreams need.
    H2c,
}

/// An upstream base address, `http://HOST:PORT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upstream {
    scheme: Scheme,
    authority: Authority,
}

#[derive(Debug, thiserror::Error)]
#[error("upstream {value:?}: {why} (expected http://HOST:PORT)")]
pub struct UpstreamError {
    value: String,
    why: &'static str,
}

impl FromStr for Upstream {
    type Err = UpstreamError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why| UpstreamError { value: s.to_owned(), why };
        let uri: Uri = s.parse().map_err(|_| err("not a URL"))?;
        if uri.scheme() != Some(&Scheme::HTTP) {
            return Err(err("only http:// is supported"));
        }
        if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
            return Err(err("a path is not supported"));
        }
        let authority = uri.authority().cloned().ok_or_else(|| err("no host"))?;
        Ok(Upstream { scheme: Scheme::HTTP, authority })
    }
}

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.scheme, self.authority)
    }
}

/// Forwards requests to one upstream.
#[derive(Clone, Debug)]
pub struct Forward {
    via: Via,
    upstream: Upstream,
    limits: Limits,
    /// Set to the class the proxy decided, after the client's fields are stripped.
    class_headers: Arc<ClassHeaders>,
    /// Held by each spliced upgrade, so a drain waits for those too.
    drain: watch::Receiver<()>,
    /// True once the proxy stops: a drill's hold ends then (`held`).
    stop: watch::Receiver<bool>,
}

/// The upstream's connections.
#[derive(Clone, Debug)]
enum Via {
    H1(Arc<H1Upstream>),
    H2(Arc<H2Upstream>),
}

impl Forward {
    pub(super) fn new(
        upstream: Upstream,
        protocol: UpstreamProtocol,
        limits: Limits,
        class_headers: Arc<ClassHeaders>,
        drain: watch::Receiver<()>,
        stop: watch::Receiver<bool>,
    ) -> Self {
        let authority = upstream.authority.clone();
        let via = match protocol {
            UpstreamProtocol::Http1 => Via::H1(H1Upstream::new(authority, UPSTREAM_CONNECT)),
            UpstreamProtocol::H2c => Via::H2(H2Upstream::new(authority, UPSTREAM_CONNECT, limits.timeouts.idle)),
        };
        Self { via, upstream, limits, class_headers, drain, stop }
    }

    /// Turns true when the proxy stops.
    pub(super) fn stop(&self) -> watch::Receiver<bool> {
        self.stop.clone()
    }

    fn protocol(&self) -> UpstreamProtocol {
        match self.via {
            Via::H1(_) => UpstreamProtocol::Http1,
            Via::H2(_) => UpstreamProtocol::H2c,
        }
    }

    /// Send `req` upstream, counted as `class`; `peer` is the client's address for x-forwarded-for.
    /// `max`: the class's maximum duration, which bounds the response head and body too.
    pub(super) fn call(
        &self,
        mut req: Request<Inbound>,
        peer: &HeaderValue,
        class: &HeaderValue,
        max: Option<Duration>,
    ) -> ForwardFuture {
        let protocol = self.protocol();
        let upgrade = protocol == UpstreamProtocol::Http1 && self.upgrade_allowed(req.headers());
        let inbound = upgrade.then(|| hyper::upgrade::on(&mut req));
        let mut original_authority = req.uri().authority().cloned();
        let h2 = req.version() == Version::HTTP_2;
        let grpc = is_grpc(&req);
        let (mut parts, body) = req.into_parts();
        // Room for what forwarding adds (class headers, x-forwarded-for and -proto, Host) at once:
        // hyper and h2 size a request's map to the fields it came with, and each insert into a
        // full map grows it again.
        parts.headers.reserve(self.class_headers.len() + 3);
        let target = std::mem::take(&mut parts.uri).into_parts().path_and_query;
        let target = target.unwrap_or_else(|| PathAndQuery::from_static("/"));
        parts.uri = match protocol {
            // Origin form; the host goes in Host, below.
            UpstreamProtocol::Http1 => Uri::from(target),
            // An HTTP/2 upstream reads the host from :authority (RFC 9113 8.3.1): the client's, as
            // HAProxy sends it (the connection does not depend on it).
            UpstreamProtocol::H2c => {
                let host = parts.headers.remove(header::HOST);
                let authority = original_authority
                    .take()
                    .or_else(|| host.and_then(|h| Authority::try_from(h.as_bytes()).ok()))
                    .unwrap_or_else(|| self.upstream.authority.clone());
                let mut uri = http::uri::Parts::default();
                uri.scheme = Some(self.upstream.scheme.clone());
                uri.authority = Some(authority);
                uri.path_and_query = Some(target);
                match Uri::from_parts(uri) {
                    Ok(uri) => uri,
                    Err(_) => return ForwardFuture::ready(answer(Refusal::BadRequestTarget, grpc)),
                }
            }
        };
        parts.version = match protocol {
            UpstreamProtocol::Http1 => Version::HTTP_11,
            UpstreamProtocol::H2c => Version::HTTP_2,
        };
        if h2 {
            // h2 refuses a message with connection-specific headers (RFC 9113 8.2.2) before it gets here.
            parts.headers.remove(header::PROXY_AUTHORIZATION);
        } else {
            strip_hop_by_hop(&mut parts.headers, upgrade);
        }
        // (An h2c upstream has the host in :authority, above.)
        if protocol == UpstreamProtocol::Http1
            && (original_authority.is_some() || !parts.headers.contains_key(header::HOST))
        {
            // An HTTP/2 client's :authority wins over a Host header (RFC 9113 8.3.1), as does an
            // absolute-form target's authority (RFC 9112 3.2.2); an HTTP/1.0 client may name no
            // host at all: then the upstream's.
            let authority = original_authority.unwrap_or_else(|| self.upstream.authority.clone());
            if let Ok(host) = HeaderValue::from_str(authority.as_str()) {
                parts.headers.insert(header::HOST, host);
            }
        }
        // After the stripping: a Connection header naming the class header must not remove it.
        self.class_headers.set(&mut parts.headers, class);
        append_forwarded_for(&mut parts.headers, peer);
        // The listener speaks plain HTTP; a client's own claim is replaced.
        parts.headers.insert(FORWARDED_PROTO, HeaderValue::from_static("http"));
        // Only a body that can carry data (a GET's cannot) can stall, carry trailers and
        // outlast the response: nothing to allocate for the others.
        let timeouts = self.limits.timeouts.stream(max);
        let idle = timeouts.idle;
        let (stalled, hand_off, body) = if http_body::Body::is_end_stream(&body) {
            (None, None, Upload::new(IdleBody::new(body, idle, None), None, None))
        } else {
            let stalled = (!idle.is_zero()).then(Arc::<AtomicBool>::default);
            let (holder, slot) = HoldPermit::new();
            let trailers = Some(Arc::clone(&self.class_headers));
            (stalled.clone(), Some(holder), Upload::new(IdleBody::new(body, idle, stalled), trailers, Some(slot)))
        };
        let req = Request::from_parts(parts, body);
        let inner = match &self.via {
            Via::H1(h1) => Pending::H1(Box::pin(Arc::clone(h1).send(req))),
            Via::H2(h2) => Pending::H2(Box::pin(Arc::clone(h2).send(req))),
        };
        let deadline = timeouts.response_headers.map(|d| Box::pin(tokio::time::sleep(d)));
        ForwardFuture {
            hand_off,
            state: State::Waiting { inner, inbound, drain: self.drain.clone(), deadline, stalled, grpc, timeouts },
        }
    }

    /// An Upgrade is tunnelled only if every protocol it offers is allowed; h2c never is
    /// (it would carry HTTP/2 streams past classification).
    fn upgrade_allowed(&self, headers: &HeaderMap) -> bool {
        if !is_upgrade(headers) {
            return false;
        }
        let mut offered = headers
            .get_all(header::UPGRADE)
            .iter()
            .flat_map(|v| v.to_str().unwrap_or("h2c").split(','))
            .map(|p| p.trim().split('/').next().unwrap_or(""))
            .peekable();
        offered.peek().is_some()
            && offered.all(|p| {
                !p.eq_ignore_ascii_case("h2c") && self.limits.allow_upgrade.iter().any(|a| a.eq_ignore_ascii_case(p))
            })
    }
}

/// The forwarded request's answer; never fails (failures become a 502).
pub struct ForwardFuture {
    state: State,
    /// Put in the response: its permit goes to the request body if that is
    /// still being sent when the response ends (see `upload`).
    hand_off: Option<HoldPermit>,
}

/// A held request's answer: the hold, then the forwarded request's (`held`).
type HeldAnswer = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>>;

/// The upstream's answer on its way.
enum Pending {
    H1(Pin<Box<dyn Future<Output = Result<Response<H1Body>, super::h1_upstream::H1Error>> + Send>>),
    H2(Pin<Box<dyn Future<Output = Result<Response<H2Body>, super::h2_upstream::H2Error>> + Send>>),
}

impl Pending {
    /// The response, or why there is none.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<Response<UpstreamBody>, UpstreamFailure>> {
        let failed = |e: &dyn std::error::Error| tracing::debug!(error = %e, "upstream failed");
        match self {
            Pending::H1(f) => f.as_mut().poll(cx).map(|r| match r {
                Ok(res) => Ok(res.map(Either::Left)),
                Err(e) => {
                    failed(&e);
                    Err(e.failure())
                }
            }),
            Pending::H2(f) => f.as_mut().poll(cx).map(|r| match r {
                Ok(res) => Ok(res.map(Either::Right)),
                Err(e) => {
                    failed(&e);
                    Err(e.failure())
                }
            }),
        }
    }
}

enum State {
    Waiting {
        inner: Pending,
        inbound: Option<hyper::upgrade::OnUpgrade>,
        drain: watch::Receiver<()>,
        /// `--response-timeout`, boxed because a Sleep is not Unpin.
        deadline: Option<Pin<Box<Sleep>>>,
        /// Raised by the request body when the client stopped sending it.
        stalled: Option<Arc<AtomicBool>>,
        grpc: bool,
        timeouts: StreamTimeouts,
    },
    Ready(Option<Response<ProxyBody>>),
    /// Held by a drill's fault; boxed, so a request that is not held pays nothing for it.
    Held(HeldAnswer),
}

impl ForwardFuture {
    fn ready(res: Response<ProxyBody>) -> Self {
        ForwardFuture { state: State::Ready(Some(res)), hand_off: None }
    }

    /// The proxy's own answer, nothing forwarded.
    pub(super) fn refused(refusal: Refusal, grpc: bool) -> Self {
        Self::ready(answer(refusal, grpc))
    }

    /// The answer of a request a drill's fault holds (the inner future hands its permit on itself).
    pub(super) fn held(answer: HeldAnswer) -> Self {
        ForwardFuture { state: State::Held(answer), hand_off: None }
    }
}

impl Future for ForwardFuture {
    type Output = Result<Response<ProxyBody>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Ok(mut res) = ready!(self.as_mut().answer(cx));
        // A tunnel holds its permit itself (`splice`).
        if res.status() != StatusCode::SWITCHING_PROTOCOLS {
            if let Some(hand_off) = self.hand_off.take() {
                res.extensions_mut().insert(hand_off);
            }
        }
        Poll::Ready(Ok(res))
    }
}

impl ForwardFuture {
    fn answer(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Response<ProxyBody>, Infallible>> {
        // Every field is Unpin (the client's future is boxed).
        let (inner, inbound, drain, deadline, stalled, grpc, timeouts) = match &mut self.state {
            State::Ready(res) => {
                return Poll::Ready(Ok(res.take().unwrap_or_else(|| answer(Refusal::Upstream, false))))
            }
            State::Held(held) => return held.as_mut().poll(cx),
            State::Waiting { inner, inbound, drain, deadline, stalled, grpc, timeouts } => {
                (inner, inbound, drain, deadline, stalled, *grpc, *timeouts)
            }
        };
        let mut res = match inner.poll(cx) {
            Poll::Ready(Ok(res)) => res,
            Poll::Ready(Err(failure)) => {
                let refusal = if stalled.as_ref().is_some_and(|s| s.load(Ordering::Relaxed)) {
                    Refusal::RequestBodyIdle
                } else {
                    failure.refusal()
                };
                return Poll::Ready(Ok(answer(refusal, grpc)));
            }
            Poll::Pending => {
                if let Some(deadline) = deadline {
                    ready!(deadline.as_mut().poll(cx));
                    // Dropping the client's future (with this state) cancels the upstream request.
                    return Poll::Ready(Ok(answer(Refusal::UpstreamTimeout, grpc)));
                }
                return Poll::Pending;
            }
        };
        // h2 refused a response with connection-specific headers already.
        let from_h2 = res.version() == Version::HTTP_2;
        // The client's connection has its own version; an HTTP/1.0 upstream must not downgrade it.
        *res.version_mut() = Version::HTTP_11;
        let upgraded = res.status() == StatusCode::SWITCHING_PROTOCOLS;
        match inbound.take() {
            Some(inbound) if upgraded => splice(inbound, &mut res, drain.clone(), timeouts),
            // A 101 to a request that was not tunnelled would leave both sides speaking different protocols.
            None if upgraded => return Poll::Ready(Ok(answer(Refusal::UpstreamUpgrade, grpc))),
            _ if from_h2 => {}
            _ => strip_hop_by_hop(res.headers_mut(), false),
        }
        let (idle, end) = (timeouts.idle, timeouts.response_end);
        Poll::Ready(Ok(res.map(|body| Either::Left(IdleBody::new(body, idle, None).until(end)))))
    }
}

/// Join the client's and the upstream's upgraded connections, holding the
/// request's permit (sent through [`HoldPermit`]) until either side closes,
/// the tunnel idles out, or the class's maximum duration passes.
fn splice(
    inbound: hyper::upgrade::OnUpgrade,
    res: &mut Response<UpstreamBody>,
    drain: watch::Receiver<()>,
    timeouts: StreamTimeouts,
) {
    let (idle, end) = (timeouts.idle, timeouts.response_end);
    let outbound = hyper::upgrade::on(&mut *res);
    let (holder, rx) = HoldPermit::new();
    res.extensions_mut().insert(holder);
    tokio::spawn(async move {
        let permit = rx.await.ok();
        if let (Ok(client), Ok(upstream)) = (inbound.await, outbound.await) {
            let spliced = idle::splice(TokioIo::new(client), TokioIo::new(upstream), idle);
            let result = match end {
                Some(end) => tokio::time::timeout_at(end, spliced).await.unwrap_or_else(|_| {
                    Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the class's maximum duration"))
                }),
                None => spliced.await,
            };
            tracing::debug!(?result, "upgraded connection closed");
        }
        drop((permit, drain));
    });
}

/// A response the proxy makes itself, with an empty body.
fn answer(refusal: Refusal, grpc: bool) -> Response<ProxyBody> {
    refusal.response(grpc).map(|()| Either::Right(Empty::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_urls() {
        let u: Upstream = "http://127.0.0.1:8080".parse().expect("url");
        assert_eq!(u.to_string(), "http://127.0.0.1:8080");
        assert!("https://x:1".parse::<Upstream>().is_err());
        assert!("http://x:1/api".parse::<Upstream>().is_err());
        assert!("x:1".parse::<Upstream>().is_err());
    }
}
