//! What a request goes through, in one place. Outermost first, each
//! layer's response body wrapping the next's:
//!
//! | layer | what it does | its body |
//! |---|---|---|
//! | [`Counted`] | counts the request on its connection (idle and stall timers) until its body ends; watches a body the client stops reading | [`CountedBody`], [`Watched`] |
//! | [`Screen`] | refuses what must not be forwarded or classified (the 400s), drops untrusted class headers | — |
//! | [`Admission`] | the admission crate's tower Layer: classify, admit or refuse (503), hold the slot until the body ends | [`PermitBody`] |
//! | [`ToUpstream`] | forwards the admitted request as [`Admitted`] names it (after a drill's hold, `held`) | [`ProxyBody`] |
//!
//! so every response of the proxy has one type, [`ResponseBody`].

use std::{
    convert::Infallible,
    net::IpAddr,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use http::{HeaderValue, Request, Response, Version};
use hyper::body::Incoming;
use tower_layer::Layer;
use tower_service::Service;

use bulkhead_admission::{
    admission::Reason,
    classify::Classifier,
    layer::{Admission, AdmissionLayer, Admitted, PermitBody, ResponseFuture},
    synthetic::is_grpc,
};

use super::{
    activity::Activity,
    counted::{Counted, CountedBody},
    forward::{Forward, ForwardFuture, ProxyBody},
    held,
    inbound::Inbound,
    refusal::Refusal,
    screen::Screen,
    stall::Watched,
};

/// The body of every response the proxy sends.
pub(super) type ResponseBody = CountedBody<Watched<PermitBody<ProxyBody>>>;
/// A response on its way through the stack.
pub(super) type StackFuture = Counted<ResponseFuture<ForwardFuture>>;

/// What one listener does with a request: its screen, its admission (over
/// the pool it shares with every listener) and its upstream.
pub(super) struct Listener {
    screen: Screen,
    admission: AdmissionLayer<Classifier>,
    forward: Arc<Forward>,
}

impl Listener {
    pub(super) fn new(screen: Screen, admission: AdmissionLayer<Classifier>, forward: Forward) -> Self {
        Self { screen, admission, forward: Arc::new(forward) }
    }
}

/// The innermost service: forwards an admitted request upstream, counted
/// as the class [`Admission`] decided.
#[derive(Clone)]
pub(super) struct ToUpstream {
    forward: Arc<Forward>,
    /// The client's address, for x-forwarded-for.
    peer: HeaderValue,
}

impl Service<Request<Inbound>> for ToUpstream {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = ForwardFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<Inbound>) -> ForwardFuture {
        match req.extensions_mut().remove::<Admitted>() {
            Some(mut admitted) => match admitted.hold.take() {
                None => self.forward.call(req, &self.peer, &admitted.class, admitted.max_duration),
                // A drill's fault on the class: held, slot taken, then forwarded.
                Some(hold) => held::forward_after(Arc::clone(&self.forward), req, self.peer.clone(), admitted, hold),
            },
            // Only Admission calls this, and it always says the class; never forward without one.
            None => ForwardFuture::refused(Refusal::Admission(Reason::Unclassified), is_grpc(&req)),
        }
    }
}

/// One connection's service: the listener's stack for this peer, and the
/// requests in flight, for the connection's idle and stall timers.
pub(super) struct Conn {
    listener: Arc<Listener>,
    admission: Admission<ToUpstream, Classifier>,
    peer_ip: IpAddr,
    activity: Arc<Activity>,
    /// `--idle-timeout`, for response bodies the client stops reading.
    idle: Duration,
}

impl Conn {
    pub(super) fn new(
        listener: Arc<Listener>,
        peer: HeaderValue,
        peer_ip: IpAddr,
        activity: Arc<Activity>,
        idle: Duration,
    ) -> Self {
        let admission = listener.admission.layer(ToUpstream { forward: Arc::clone(&listener.forward), peer });
        Self { listener, admission, peer_ip, activity, idle }
    }
}

impl Conn {
    /// One request through the stack, whichever protocol brought it.
    pub(super) fn call(&self, mut req: Request<Inbound>) -> StackFuture {
        let http1 = req.version() < Version::HTTP_2;
        let admitted = match self.listener.screen.check(&mut req, self.peer_ip) {
            Err(refusal) => ResponseFuture::rejected(refusal.response(is_grpc(&req))),
            // A tower service is called through `&mut`: each request gets its own handle (two
            // Arcs). No poll_ready: ToUpstream is always ready, and Admission asks only it.
            Ok(()) => self.admission.clone().call(req),
        };
        Counted::new(admitted, self.activity.begin(), self.idle, http1)
    }
}

/// HTTP/1.1, served by hyper.
impl hyper::service::Service<Request<Incoming>> for Conn {
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = StackFuture;

    fn call(&self, req: Request<Incoming>) -> StackFuture {
        Conn::call(self, req.map(Inbound::Http1))
    }
}
