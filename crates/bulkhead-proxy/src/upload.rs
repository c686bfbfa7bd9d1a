//! A forwarded request's body on its way upstream: under the idle timeout,
//! without class headers in its trailers (they would reach the upstream past
//! every check of the head), and holding the request's slot when the
//! response ends first. An upstream may answer (a 404, a 413) before it has
//! read the body; the upload still goes on, on an upstream connection or
//! stream, and the slot that counts it must not be free for another request.

use std::{
    pin::Pin,
    sync::Arc,
    task::{ready, Context, Poll},
};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::sync::oneshot;

use bulkhead_admission::admission::Permit;

use super::{
    class_headers::ClassHeaders,
    idle::{BoxError, IdleBody},
    inbound::Inbound,
};

pin_project! {
    pub(super) struct Upload {
        #[pin]
        inner: IdleBody<Inbound>,
        // Removed from the trailers, if any come.
        not_in_trailers: Option<Arc<ClassHeaders>>,
        // Where the permit comes once the response has ended; it is held
        // until this is dropped, at the body's end.
        slot: Option<oneshot::Receiver<Permit>>,
    }
}

impl Upload {
    pub(super) fn new(
        inner: IdleBody<Inbound>,
        not_in_trailers: Option<Arc<ClassHeaders>>,
        slot: Option<oneshot::Receiver<Permit>>,
    ) -> Self {
        Self { inner, not_in_trailers, slot }
    }
}

impl Body for Upload {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        let mut frame = ready!(this.inner.as_mut().poll_frame(cx));
        if let (Some(Ok(frame)), Some(headers)) = (&mut frame, this.not_in_trailers.as_deref()) {
            if let Some(trailers) = frame.trailers_mut() {
                headers.remove(trailers);
            }
        }
        if !matches!(frame, Some(Ok(_))) || this.inner.is_end_stream() {
            // The upload is over: a slot handed over by an ended response is free now.
            *this.slot = None;
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
