//! The connection's count of a request, carried from the response future
//! into the response body: the request stays in flight (for the idle and
//! stall timers, `activity`) until its body ends or is dropped, and each frame
//! hyper takes tells the stall timer the client is reading.

use std::{
    future::Future,
    pin::Pin,
    task::{ready, Context, Poll},
    time::Duration,
};

use http::Response;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::{activity::Active, stall::Watched};

pin_project! {
    /// A response future whose request stays counted until the body ends;
    /// its body is watched for a client that stops reading (`stall`).
    pub struct Counted<F> {
        #[pin]
        inner: F,
        active: Option<Active>,
        idle: Duration,
        http1: bool,
    }
}

impl<F> Counted<F> {
    /// `idle`: the idle timeout; `http1`: the request came over HTTP/1.x.
    pub(super) fn new(inner: F, active: Active, idle: Duration, http1: bool) -> Self {
        Self { inner, active: Some(active), idle, http1 }
    }
}

impl<F, B, E> Future for Counted<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<CountedBody<Watched<B>>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let res = ready!(this.inner.poll(cx))?;
        let mut active = this.active.take();
        if let Some(active) = &mut active {
            active.streaming();
        }
        let close = active.as_ref().filter(|_| *this.http1).map(Active::closing);
        let idle = *this.idle;
        Poll::Ready(Ok(res.map(|inner| CountedBody { inner: Watched::new(inner, idle, close), active })))
    }
}

pin_project! {
    /// A response body that ends its request's count when it ends or is dropped.
    pub struct CountedBody<B> {
        #[pin]
        inner: B,
        active: Option<Active>,
    }
}

impl<B: Body> Body for CountedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let frame = ready!(this.inner.poll_frame(cx));
        if !matches!(frame, Some(Ok(_))) {
            *this.active = None;
        } else if let Some(active) = this.active {
            active.took();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
