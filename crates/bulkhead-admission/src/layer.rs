//! The admission core as a tower Layer, for services that enforce the pools
//! in process, and the pieces the proxy shares with it: the [`Gate`] that
//! classifies and admits, the response future, and the body that holds the
//! permit until the response body ends.

use std::{
    borrow::Cow,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{ready, Context, Poll},
    time::Duration,
};

use http::{HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::sync::oneshot;

use super::{
    admission::{DrillHold, Permit, Pool},
    reject::Rejector,
};

/// Names the class of a request; None means unclassified.
pub trait Classify<B>: Send + Sync + 'static {
    /// The class of `req`, borrowed from it where it can be.
    fn classify<'r>(&'r self, req: &'r Request<B>) -> Option<Cow<'r, str>>;
}

/// Any `Fn(&Request<B>) -> Option<String>` classifies.
impl<B, F> Classify<B> for F
where
    F: Fn(&Request<B>) -> Option<String> + Send + Sync + 'static,
{
    fn classify<'r>(&'r self, req: &'r Request<B>) -> Option<Cow<'r, str>> {
        self(req).map(Cow::Owned)
    }
}

/// Classify, admit or refuse: what both the Layer and the proxy do first.
#[derive(Debug)]
pub struct Gate<C> {
    /// The pool that admits.
    pub pool: Arc<Pool>,
    /// What names a request's class.
    pub classify: C,
    /// How a refusal is answered.
    pub rejector: Rejector,
}

impl<C> Gate<C> {
    /// A gate over `pool`.
    pub fn new(pool: Arc<Pool>, classify: C, rejector: Rejector) -> Self {
        Self { pool, classify, rejector }
    }

    /// A permit, or the rejection response to send at once.
    pub fn admit<B>(&self, req: &Request<B>) -> Result<Permit, Response<()>>
    where
        C: Classify<B>,
    {
        let class = self.classify.classify(req);
        self.pool
            .admit(class.as_deref().map(str::as_bytes))
            .map_err(|rejection| self.rejector.response(req, &rejection))
    }
}

/// Put in an admitted request's extensions by [`Admission`], for the service
/// it wraps: the class the request counts against (never the client's
/// claim: the pool's own header value), the longest it may take, and a
/// drill's hold on it. The sidecar enforces the hold (it waits, slot taken,
/// before forwarding); a service that embeds the Layer may too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// The class as a header value, ready to send upstream.
    pub class: HeaderValue,
    /// The class's maximum duration (pools.json's maxDurationMs), if it has one.
    pub max_duration: Option<Duration>,
    /// A drill's fault on the class (pools.json's hold), if one is in force.
    pub hold: Option<DrillHold>,
}

impl Admitted {
    fn of(permit: &Permit) -> Self {
        Self { class: permit.class_header().clone(), max_duration: permit.max_duration(), hold: permit.drill_hold() }
    }
}

/// Put in a response's extensions by a service whose work goes on after the
/// response: for a 101 (an upgraded connection) the permit is sent there at
/// once instead of into the body; otherwise (a request body still being
/// sent upstream) when the response body ends. The receiver holds it until
/// it drops it.
#[derive(Clone, Debug)]
pub struct HoldPermit(Arc<Mutex<Option<oneshot::Sender<Permit>>>>);

impl HoldPermit {
    /// The extension, and where the permit will arrive.
    pub fn new() -> (Self, oneshot::Receiver<Permit>) {
        let (tx, rx) = oneshot::channel();
        (HoldPermit(Arc::new(Mutex::new(Some(tx)))), rx)
    }

    /// Hand the permit over; it comes back if nobody is there to hold it.
    fn hold(&self, permit: Permit) -> Option<Permit> {
        let sender = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        match sender {
            Some(tx) => tx.send(permit).err(),
            None => Some(permit),
        }
    }
}

pin_project! {
    /// A response body that gives back its permit when it ends, fails, or is
    /// dropped (the client went away). A rejection's body is empty.
    #[derive(Debug)]
    pub struct PermitBody<B> {
        #[pin]
        inner: Option<B>,
        slot: Slot,
    }
}

/// A response's permit, and where it goes when the response is over: to the
/// holder if one is there still (an upload that outlasts its response), or
/// back to the pool. Also when the body is dropped unread: a server drops
/// a body that is empty from the start without polling it.
#[derive(Debug)]
struct Slot {
    permit: Option<Permit>,
    holder: Option<HoldPermit>,
}

impl Slot {
    fn release(&mut self) {
        let permit = self.permit.take();
        if let (Some(permit), Some(holder)) = (permit, self.holder.take()) {
            // Dropped here (the slot freed) if nobody holds it there any more.
            drop(holder.hold(permit));
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.release();
    }
}

impl<B> PermitBody<B> {
    /// `inner`, holding `permit` until it ends.
    pub fn new(inner: B, permit: Option<Permit>) -> Self {
        Self { inner: Some(inner), slot: Slot { permit, holder: None } }
    }

    /// A body with no data and no slot (a rejection's).
    pub fn empty() -> Self {
        Self { inner: None, slot: Slot { permit: None, holder: None } }
    }
}

impl<B: Body> Body for PermitBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let Some(mut inner) = this.inner.as_pin_mut() else { return Poll::Ready(None) };
        let frame = ready!(inner.as_mut().poll_frame(cx));
        // The body ended (or broke): the slot is free from now on. So it is after the last
        // frame: the server may hold that frame for a client that gives it no room (an
        // HTTP/2 stream with no window) and never ask for the end.
        if !matches!(frame, Some(Ok(_))) || inner.is_end_stream() {
            this.slot.release();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.as_ref().map_or(SizeHint::with_exact(0), Body::size_hint)
    }
}

pin_project! {
    /// The response future: the inner service's, with the permit riding along
    /// into the body, or a rejection ready at once.
    // pin_project_lite accepts no doc comments on a variant's fields.
    #[allow(missing_docs)]
    #[project = ResponseProj]
    pub enum ResponseFuture<F> {
        /// The inner service's response is on its way.
        Admitted { #[pin] inner: F, permit: Option<Permit> },
        /// Refused: the answer is ready.
        Rejected { response: Option<Response<()>> },
    }
}

impl<F> ResponseFuture<F> {
    /// The inner service's future, holding `permit`.
    pub fn admitted(inner: F, permit: Permit) -> Self {
        ResponseFuture::Admitted { inner, permit: Some(permit) }
    }

    /// A refusal, answered at once.
    pub fn rejected(response: Response<()>) -> Self {
        ResponseFuture::Rejected { response: Some(response) }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<PermitBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            ResponseProj::Admitted { inner, permit } => {
                let mut res = ready!(inner.poll(cx))?;
                let mut permit = permit.take();
                let mut holder = res.extensions_mut().remove::<HoldPermit>();
                if res.status() == StatusCode::SWITCHING_PROTOCOLS {
                    if let Some(holder) = holder.take() {
                        // If the holder is gone already, the permit comes back and ends with the body.
                        permit = permit.and_then(|p| holder.hold(p));
                    }
                }
                Poll::Ready(Ok(res.map(|body| PermitBody { inner: Some(body), slot: Slot { permit, holder } })))
            }
            ResponseProj::Rejected { response } => {
                let res = response.take().unwrap_or_else(|| Response::new(()));
                Poll::Ready(Ok(res.map(|()| PermitBody::empty())))
            }
        }
    }
}

/// Wraps a service so each request is admitted against the pool (or refused
/// at once) and holds its slot until its response body ends.
///
/// ```
/// use std::{convert::Infallible, sync::Arc};
/// use bulkhead_admission::{AdmissionLayer, Pool, Unclassified};
/// use tower::{Layer, Service};
///
/// # fn config() -> bulkhead_admission::PoolConfig {
/// #     serde_json::from_str(r#"{"version":1,"bulkhead":"b","resource":"r","scope":"Instance","dividedBy":1,
/// #       "capacity":2,"sharedSurplus":1,"onCeiling":"reject",
/// #       "classes":[{"name":"checkout","reserved":1,"ceiling":2,"critical":false}]}"#).unwrap()
/// # }
/// let pool = Pool::new(config(), Unclassified::Reject).expect("a valid config");
/// let layer = AdmissionLayer::new(pool, |req: &http::Request<String>| {
///     req.headers().get("x-class").and_then(|v| v.to_str().ok()).map(str::to_owned)
/// });
/// let _service = layer.layer(tower::service_fn(|_req: http::Request<String>| async {
///     Ok::<_, Infallible>(http::Response::new(http_body_util::Full::new(bytes::Bytes::from("ok"))))
/// }));
/// ```
#[derive(Debug)]
pub struct AdmissionLayer<C> {
    gate: Arc<Gate<C>>,
}

impl<C> Clone for AdmissionLayer<C> {
    fn clone(&self) -> Self {
        Self { gate: Arc::clone(&self.gate) }
    }
}

impl<C> AdmissionLayer<C> {
    /// Rejections say `Retry-After: 1`; see [`AdmissionLayer::with_rejector`].
    pub fn new(pool: Arc<Pool>, classify: C) -> Self {
        Self::with_rejector(pool, classify, Rejector::default())
    }

    /// As [`AdmissionLayer::new`], with rejections answered by `rejector`.
    pub fn with_rejector(pool: Arc<Pool>, classify: C, rejector: Rejector) -> Self {
        Self { gate: Arc::new(Gate::new(pool, classify, rejector)) }
    }
}

impl<S, C> tower_layer::Layer<S> for AdmissionLayer<C> {
    type Service = Admission<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        Admission { inner, gate: Arc::clone(&self.gate) }
    }
}

/// The service [`AdmissionLayer`] makes.
#[derive(Debug)]
pub struct Admission<S, C> {
    inner: S,
    gate: Arc<Gate<C>>,
}

impl<S: Clone, C> Clone for Admission<S, C> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone(), gate: Arc::clone(&self.gate) }
    }
}

impl<S, C, B, ResBody> tower_service::Service<Request<B>> for Admission<S, C>
where
    S: tower_service::Service<Request<B>, Response = Response<ResBody>>,
    C: Classify<B>,
{
    type Response = Response<PermitBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        match self.gate.admit(&req) {
            Ok(permit) => {
                req.extensions_mut().insert(Admitted::of(&permit));
                ResponseFuture::admitted(self.inner.call(req), permit)
            }
            Err(rejection) => ResponseFuture::rejected(rejection),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{convert::Infallible, sync::Mutex};

    use bytes::Bytes;
    use futures::channel::mpsc;
    use http_body_util::{BodyExt, StreamBody};
    use tower::{Layer, Service, ServiceExt};

    use super::*;
    use crate::admission::{tests::example, Unclassified};

    type Chunks = mpsc::UnboundedSender<Result<Frame<Bytes>, Infallible>>;

    fn class_header(req: &Request<()>) -> Option<String> {
        req.headers().get("x-class").and_then(|v| v.to_str().ok()).map(str::to_owned)
    }

    fn request(class: &str) -> Request<()> {
        Request::builder().header("x-class", class).body(()).expect("request")
    }

    fn in_use(pool: &Pool, class: &str) -> u32 {
        pool.snapshot().class(class).map_or(0, |c| c.floor_in_use + c.surplus_in_use)
    }

    #[tokio::test]
    async fn the_slot_is_held_until_the_body_ends_or_is_dropped() {
        let mut config = example();
        config.classes[2].ceiling = 11;
        let pool = Pool::new(config, Unclassified::Reject).expect("valid");
        // The upstream streams each body through a channel the test ends.
        let senders: Arc<Mutex<Vec<Chunks>>> = Arc::default();
        let upstream = {
            let senders = Arc::clone(&senders);
            tower::service_fn(move |_req: Request<()>| {
                let (tx, rx) = mpsc::unbounded();
                senders.lock().expect("test lock").push(tx);
                async move { Ok::<_, Infallible>(Response::new(StreamBody::new(rx))) }
            })
        };
        let mut svc = AdmissionLayer::new(Arc::clone(&pool), class_header).layer(upstream);
        let mut responses = Vec::new();
        for _ in 0..11 {
            let res = svc.ready().await.expect("ready").call(request("reports")).await.expect("response");
            assert_eq!(res.status(), 200);
            responses.push(res);
        }
        assert_eq!(in_use(&pool, "reports"), 11, "the response heads are out, the slots still held");
        let refused = svc.ready().await.expect("ready").call(request("reports")).await.expect("response");
        assert_eq!(refused.status(), 503);
        assert_eq!(refused.headers()["x-bulkhead-reason"], "ceiling");
        assert!(refused.into_body().is_end_stream());

        // A chunk goes through; the slot stays until the stream ends.
        let first = senders.lock().expect("test lock").remove(0);
        first.unbounded_send(Ok(Frame::data(Bytes::from_static(b"hello")))).expect("open");
        let mut body = responses.remove(0).into_body();
        let chunk = body.frame().await.expect("a frame").expect("no error");
        assert_eq!(chunk.into_data().ok(), Some(Bytes::from_static(b"hello")));
        assert_eq!(in_use(&pool, "reports"), 11);
        drop(first);
        assert!(body.frame().await.is_none());
        assert_eq!(in_use(&pool, "reports"), 10, "released at the end of the body, before it is dropped");
        drop(body);

        // A client that goes away drops the body: released too.
        drop(responses.pop());
        assert_eq!(in_use(&pool, "reports"), 9);
        drop(responses);
        assert_eq!(in_use(&pool, "reports"), 0);
        let unclassified = svc.ready().await.expect("ready").call(Request::new(())).await.expect("response");
        assert_eq!(unclassified.headers()["x-bulkhead-reason"], "unclassified");
    }

    #[tokio::test]
    async fn the_slot_is_free_once_the_last_frame_is_taken() {
        let pool = Pool::new(example(), Unclassified::Reject).expect("valid");
        let upstream = tower::service_fn(|_req: Request<()>| async {
            Ok::<_, Infallible>(Response::new(http_body_util::Full::new(Bytes::from_static(b"ok"))))
        });
        let mut svc = AdmissionLayer::new(Arc::clone(&pool), class_header).layer(upstream);
        let res = svc.ready().await.expect("ready").call(request("reports")).await.expect("response");
        let mut body = res.into_body();
        assert_eq!(in_use(&pool, "reports"), 1);
        // A server that knows the body ended (is_end_stream) need not ask for the end: it may
        // hold this frame for a client that gives it no room, for as long as that client likes.
        let frame = body.frame().await.expect("a frame").expect("no error");
        assert_eq!(frame.into_data().ok(), Some(Bytes::from_static(b"ok")));
        assert!(body.is_end_stream());
        assert_eq!(in_use(&pool, "reports"), 0, "released with the last frame, not when the body is dropped");
    }

    #[tokio::test]
    async fn the_inner_service_is_told_the_class_its_maximum_duration_and_its_hold() {
        let mut config = example();
        config.classes[2].max_duration_ms = Some(1500);
        let until = crate::pool_config::now_unix_ms() + 60_000;
        config.classes[2].hold = Some(crate::pool_config::Hold { drill: "d".into(), ms: 1000, until_unix_ms: until });
        let pool = Pool::new(config, Unclassified::Reject).expect("valid");
        let seen: Arc<Mutex<Vec<Option<Admitted>>>> = Arc::default();
        let upstream = {
            let seen = Arc::clone(&seen);
            tower::service_fn(move |req: Request<()>| {
                seen.lock().expect("test lock").push(req.extensions().get::<Admitted>().cloned());
                async { Ok::<_, Infallible>(Response::new(http_body_util::Empty::<Bytes>::new())) }
            })
        };
        let mut svc = AdmissionLayer::new(pool, class_header).layer(upstream);
        for class in ["reports", "search"] {
            svc.ready().await.expect("ready").call(request(class)).await.expect("response");
        }
        let mut seen = std::mem::take(&mut *seen.lock().expect("test lock")).into_iter().flatten();
        let reports = seen.next().expect("reports");
        assert_eq!(reports.class, "reports");
        assert_eq!(reports.max_duration, Some(Duration::from_millis(1500)));
        assert_eq!(reports.hold.map(|h| h.duration()), Some(Duration::from_millis(1000)));
        let search = Admitted { class: HeaderValue::from_static("search"), max_duration: None, hold: None };
        assert_eq!(seen.next(), Some(search));
    }

    #[tokio::test]
    async fn a_holder_in_the_response_takes_the_slot_when_the_body_ends() {
        let pool = Pool::new(example(), Unclassified::Reject).expect("valid");
        let (holder, held) = HoldPermit::new();
        let holder = Arc::new(Mutex::new(Some(holder)));
        let upstream = tower::service_fn(move |_req: Request<()>| {
            let holder = holder.lock().expect("test lock").take();
            async move {
                let mut res = Response::new(http_body_util::Full::new(Bytes::from_static(b"ok")));
                if let Some(holder) = holder {
                    res.extensions_mut().insert(holder);
                }
                Ok::<_, Infallible>(res)
            }
        });
        let mut svc = AdmissionLayer::new(Arc::clone(&pool), class_header).layer(upstream);
        let res = svc.ready().await.expect("ready").call(request("reports")).await.expect("response");
        let mut body = res.into_body();
        body.frame().await.expect("a frame").expect("no error");
        drop(body);
        assert_eq!(in_use(&pool, "reports"), 1, "the work after the response (an upload) holds the slot");
        drop(held);
        assert_eq!(in_use(&pool, "reports"), 0);
        // With the holder gone before the body ends, the slot is freed with the body.
        let (holder, held) = HoldPermit::new();
        drop(held);
        let permit = pool.admit(Some(b"reports")).expect("a slot");
        assert!(holder.hold(permit).is_some(), "nobody to hold it: it comes back");
    }
}
