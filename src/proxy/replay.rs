//! A request body that can be sent again: an h2c upstream may refuse a stream
//! it never processed (RST_STREAM REFUSED_STREAM, or a GOAWAY below its id:
//! RFC 9113 8.7), as servers do in a graceful restart. Such a request is safe
//! to send again whatever its method, but its body was already taken from the
//! client. So the first [`REPLAY_LIMIT`] bytes taken are kept (copied: a slice
//! of the client's read buffer would pin the whole buffer) until the upstream
//! answers; a body larger than that cannot be sent again, and its refusal
//! reaches the client as before (502).

use std::{
    collections::VecDeque,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    task::{Context, Poll},
};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

/// The most of a request body kept to send it again: one h2 stream window.
pub(super) const REPLAY_LIMIT: usize = 64 << 10;

/// `B`, with what was taken of it kept until [`Replayable::rewind`].
pub(super) struct Replayable<B> {
    body: B,
    /// Everything taken so far, while within the limit.
    kept: Vec<Kept>,
    kept_len: usize,
    /// Nothing is kept any more: more than the limit was taken, or the upstream answered.
    dropped: bool,
    /// What `rewind` put back, sent before anything new.
    again: VecDeque<Kept>,
    /// `body` ended (it may not be polled again).
    ended: bool,
    /// Raised once the upstream answered: nothing more is kept.
    answered: Arc<AtomicBool>,
}

#[derive(Clone)]
enum Kept {
    Data(Bytes),
    Trailers(HeaderMap),
}

impl Kept {
    fn into_frame(self) -> Frame<Bytes> {
        match self {
            Kept::Data(data) => Frame::data(data),
            Kept::Trailers(trailers) => Frame::trailers(trailers),
        }
    }

    fn len(&self) -> u64 {
        match self {
            Kept::Data(data) => data.len() as u64,
            Kept::Trailers(_) => 0,
        }
    }
}

impl<B> Replayable<B> {
    pub(super) fn new(body: B) -> Self {
        Self {
            body,
            kept: Vec::new(),
            kept_len: 0,
            dropped: false,
            again: VecDeque::new(),
            ended: false,
            answered: Arc::default(),
        }
    }

    /// Raise it once the upstream answered: what was kept is let go.
    pub(super) fn answered(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.answered)
    }

    /// Start again from the first byte; None if that is no longer possible.
    pub(super) fn rewind(mut self) -> Option<Self> {
        if self.dropped {
            return None;
        }
        // What was put back and not yet sent again follows what was sent again.
        let mut again: VecDeque<Kept> = std::mem::take(&mut self.kept).into();
        again.append(&mut self.again);
        self.again = again;
        Some(self)
    }

    fn keep(&mut self, frame: &Frame<Bytes>) {
        if self.dropped {
            return;
        }
        if self.answered.load(Ordering::Relaxed) {
            self.dropped = true;
            self.kept = Vec::new();
            return;
        }
        if let Some(data) = frame.data_ref() {
            self.kept_len += data.len();
            if self.kept_len > REPLAY_LIMIT {
                self.dropped = true;
                self.kept = Vec::new();
                return;
            }
            self.kept.push(Kept::Data(Bytes::copy_from_slice(data)));
        } else if let Some(trailers) = frame.trailers_ref() {
            self.kept.push(Kept::Trailers(trailers.clone()));
        }
    }
}

impl<B> Body for Replayable<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        if let Some(kept) = this.again.pop_front() {
            if !this.dropped {
                this.kept.push(kept.clone());
            }
            return Poll::Ready(Some(Ok(kept.into_frame())));
        }
        if this.ended {
            return Poll::Ready(None);
        }
        let frame = std::task::ready!(Pin::new(&mut this.body).poll_frame(cx));
        match &frame {
            Some(Ok(frame)) => this.keep(frame),
            None => this.ended = true,
            Some(Err(_)) => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.again.is_empty() && (self.ended || self.body.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let again = self.again.iter().map(Kept::len).sum::<u64>();
        let mut hint = if self.ended { SizeHint::with_exact(0) } else { self.body.size_hint() };
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper.saturating_add(again));
        }
        hint.set_lower(hint.lower().saturating_add(again));
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::stream;
    use http_body_util::{BodyExt, StreamBody};
    use std::convert::Infallible;

    type Frames = stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>;

    fn body(chunks: &[&'static [u8]]) -> StreamBody<Frames> {
        let frames: Vec<_> = chunks.iter().map(|c| Ok(Frame::data(Bytes::from_static(c)))).collect();
        StreamBody::new(stream::iter(frames))
    }

    async fn next_data<B: Body<Data = Bytes> + Unpin>(b: &mut B) -> Option<Bytes>
    where
        B::Error: std::fmt::Debug,
    {
        b.frame().await.map(|f| f.expect("frame").into_data().expect("data"))
    }

    #[tokio::test]
    async fn a_rewound_body_starts_again_from_its_first_byte_then_goes_on() {
        let mut b = Replayable::new(body(&[b"ab", b"cd", b"ef"]));
        assert_eq!(next_data(&mut b).await.as_deref(), Some(&b"ab"[..]));
        assert_eq!(next_data(&mut b).await.as_deref(), Some(&b"cd"[..]));
        let mut b = b.rewind().expect("kept");
        assert_eq!(next_data(&mut b).await.as_deref(), Some(&b"ab"[..]));
        // Rewound again part way through the first replay ("cd" not yet sent again).
        let b = b.rewind().expect("kept");
        let all = b.collect().await.expect("body").to_bytes();
        assert_eq!(all, "abcdef");
    }

    #[tokio::test]
    async fn a_body_that_ended_is_replayed_whole_and_ends_again() {
        let mut b = Replayable::new(body(&[b"xyz"]));
        assert_eq!(b.frame().await.map(|f| f.is_ok()), Some(true));
        assert!(b.frame().await.is_none());
        let b = b.rewind().expect("kept");
        assert!(!b.is_end_stream());
        assert_eq!(b.size_hint().exact(), Some(3));
        assert_eq!(b.collect().await.expect("body").to_bytes(), "xyz");
    }

    #[tokio::test]
    async fn past_the_limit_or_once_answered_nothing_can_be_sent_again() {
        static BIG: [u8; REPLAY_LIMIT] = [0; REPLAY_LIMIT];
        let mut b = Replayable::new(body(&[&BIG, b"!"]));
        next_data(&mut b).await;
        let mut b = b.rewind().expect("exactly the limit is kept");
        next_data(&mut b).await;
        next_data(&mut b).await;
        assert!(b.rewind().is_none(), "one byte past the limit");

        let mut b = Replayable::new(body(&[b"a", b"b"]));
        next_data(&mut b).await;
        b.answered().store(true, Ordering::Relaxed);
        next_data(&mut b).await;
        assert!(b.rewind().is_none(), "the upstream answered");
    }
}
