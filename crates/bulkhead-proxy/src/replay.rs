//! A request body that can be sent again: an h2c upstream may refuse a stream
//! it never processed (RST_STREAM REFUSED_STREAM, or a GOAWAY below its id:
//! RFC 9113 8.7), as servers do in a graceful restart. Such a request is safe
//! to send again whatever its method, but its body was already taken from the
//! client. So the first [`REPLAY_LIMIT`] bytes taken are kept (copied: a slice
//! of the client's read buffer would pin the whole buffer) until the upstream
//! answers, in one buffer whatever the number of frames (a body sent a byte a
//! frame must not cost a frame's overhead per byte); a body larger than that
//! cannot be sent again, and its refusal reaches the client as before (502).
//! What all requests keep at once is
//! bounded too ([`ReplayBudget`]): past it a request keeps nothing, so many
//! bodied requests waiting on a slow upstream cannot grow the sidecar.

use std::{
    collections::VecDeque,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc,
    },
    task::{Context, Poll},
};

use bytes::{Bytes, BytesMut};
use futures::task::AtomicWaker;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

/// The most of a request body kept to send it again: one h2 stream window.
pub(super) const REPLAY_LIMIT: usize = 64 << 10;

/// The most kept by all requests to one upstream at once: 64 bodies at the
/// limit, or thousands of small ones; 3 % of the injected 128Mi.
pub(super) const REPLAY_BUDGET: usize = 4 << 20;

/// Bytes kept by every [`Replayable`] of one upstream, within a cap.
#[derive(Debug)]
pub(super) struct ReplayBudget {
    cap: usize,
    used: AtomicUsize,
}

impl ReplayBudget {
    pub(super) fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self { cap, used: AtomicUsize::new(0) })
    }

    /// Take `n` bytes of the budget; false (nothing taken) if they do not fit.
    fn take(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(n).filter(|total| *total <= self.cap)
            })
            .is_ok()
    }

    fn give_back(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::Relaxed);
    }

    #[cfg(test)]
    fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

/// `B`, with what was taken of it kept until [`Replayable::rewind`].
pub(super) struct Replayable<B> {
    body: B,
    /// The data taken so far, while within the limit, as one buffer.
    kept_data: BytesMut,
    /// The trailers, if the body ended with them.
    kept_trailers: Option<HeaderMap>,
    /// Data bytes kept (in `kept_data` and `again`), taken from `budget`.
    kept_len: usize,
    budget: Arc<ReplayBudget>,
    /// Nothing is kept any more: more than the limit was taken, the budget
    /// was spent, or the upstream answered.
    dropped: bool,
    /// What `rewind` put back, sent before anything new.
    again: VecDeque<Kept>,
    /// `body` ended (it may not be polled again).
    ended: bool,
    /// Raised once the upstream answered: nothing more is kept.
    answered: Arc<Answered>,
}

/// Raised once the upstream answered. It wakes the body's task, so that what
/// was kept is let go (and its budget given back) then, not at the body's
/// next frame, which a paused client may not send for a long while.
#[derive(Debug, Default)]
pub(super) struct Answered {
    raised: AtomicBool,
    waker: AtomicWaker,
}

impl Answered {
    pub(super) fn raise(&self) {
        self.raised.store(true, Ordering::Release);
        self.waker.wake();
    }

    fn is_raised(&self) -> bool {
        self.raised.load(Ordering::Acquire)
    }
}

/// A frame put back by `rewind`, to be sent again.
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
    pub(super) fn new(body: B, budget: Arc<ReplayBudget>) -> Self {
        Self {
            body,
            kept_data: BytesMut::new(),
            kept_trailers: None,
            kept_len: 0,
            budget,
            dropped: false,
            again: VecDeque::new(),
            ended: false,
            answered: Arc::default(),
        }
    }

    /// Raise it once the upstream answered: what was kept is let go.
    pub(super) fn answered(&self) -> Arc<Answered> {
        Arc::clone(&self.answered)
    }

    /// Start again from the first byte; None if that is no longer possible.
    pub(super) fn rewind(mut self) -> Option<Self> {
        if self.dropped {
            return None;
        }
        // What was put back and not yet sent again follows what was sent again.
        let mut again = VecDeque::with_capacity(self.again.len() + 2);
        if !self.kept_data.is_empty() {
            again.push_back(Kept::Data(self.kept_data.split().freeze()));
        }
        again.extend(self.kept_trailers.take().map(Kept::Trailers));
        again.append(&mut self.again);
        self.again = again;
        Some(self)
    }

    fn keep(&mut self, frame: &Frame<Bytes>) {
        if self.dropped {
            return;
        }
        if self.answered.is_raised() {
            return self.let_go();
        }
        if let Some(data) = frame.data_ref() {
            if self.kept_len + data.len() > REPLAY_LIMIT || !self.budget.take(data.len()) {
                return self.let_go();
            }
            self.kept_len += data.len();
            self.kept_data.extend_from_slice(data);
        } else if let Some(trailers) = frame.trailers_ref() {
            self.kept_trailers = Some(trailers.clone());
        }
    }

    /// A frame put back by `rewind` is sent again: it is kept again, after what was.
    fn keep_again(&mut self, kept: &Kept) {
        match kept {
            Kept::Data(data) => self.kept_data.extend_from_slice(data),
            Kept::Trailers(trailers) => self.kept_trailers = Some(trailers.clone()),
        }
    }

    /// Keep nothing from now on, and give back what was kept. (What `rewind`
    /// put back is still sent, though it can no longer be sent yet again.)
    fn let_go(&mut self) {
        self.dropped = true;
        self.kept_data = BytesMut::new();
        self.kept_trailers = None;
        self.budget.give_back(std::mem::take(&mut self.kept_len));
    }
}

impl<B> Drop for Replayable<B> {
    fn drop(&mut self) {
        self.budget.give_back(self.kept_len);
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
                this.keep_again(&kept);
            }
            return Poll::Ready(Some(Ok(kept.into_frame())));
        }
        if this.ended {
            return Poll::Ready(None);
        }
        if !this.dropped {
            // Checked again after registering: a raise in between is not missed.
            this.answered.waker.register(cx.waker());
            if this.answered.is_raised() {
                this.let_go();
            }
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
        let mut b = Replayable::new(body(&[b"ab", b"cd", b"ef"]), ReplayBudget::new(REPLAY_BUDGET));
        assert_eq!(next_data(&mut b).await.as_deref(), Some(&b"ab"[..]));
        assert_eq!(next_data(&mut b).await.as_deref(), Some(&b"cd"[..]));
        let mut b = b.rewind().expect("kept");
        assert_eq!(next_data(&mut b).await.as_deref(), Some(&b"abcd"[..]), "what was kept, as one frame");
        // Rewound again, then again before anything was sent again.
        let b = b.rewind().expect("kept");
        let b = b.rewind().expect("kept");
        let all = b.collect().await.expect("body").to_bytes();
        assert_eq!(all, "abcdef");
    }

    #[tokio::test]
    async fn frames_are_kept_as_one_buffer_whatever_their_number() {
        let chunks = vec![&b"x"[..]; 1000];
        let mut b = Replayable::new(body(&chunks), ReplayBudget::new(REPLAY_BUDGET));
        while next_data(&mut b).await.is_some() {}
        let mut b = b.rewind().expect("kept");
        assert_eq!(next_data(&mut b).await.map(|d| d.len()), Some(1000), "one frame of every byte");
        assert!(next_data(&mut b).await.is_none());
        // Sent again, it is kept again (once more as one buffer).
        let mut b = b.rewind().expect("kept again");
        assert_eq!(next_data(&mut b).await.map(|d| d.len()), Some(1000));
    }

    #[tokio::test]
    async fn a_body_that_ended_is_replayed_whole_and_ends_again() {
        let mut b = Replayable::new(body(&[b"xyz"]), ReplayBudget::new(REPLAY_BUDGET));
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
        let budget = ReplayBudget::new(REPLAY_BUDGET);
        let mut b = Replayable::new(body(&[&BIG, b"!"]), Arc::clone(&budget));
        next_data(&mut b).await;
        let mut b = b.rewind().expect("exactly the limit is kept");
        next_data(&mut b).await;
        next_data(&mut b).await;
        assert!(b.rewind().is_none(), "one byte past the limit");
        assert_eq!(budget.used(), 0, "what was kept is given back");

        let mut b = Replayable::new(body(&[b"a", b"b"]), Arc::clone(&budget));
        next_data(&mut b).await;
        assert_eq!(budget.used(), 1);
        b.answered().raise();
        next_data(&mut b).await;
        assert_eq!(budget.used(), 0);
        assert!(b.rewind().is_none(), "the upstream answered");
    }

    #[tokio::test]
    async fn what_was_kept_is_let_go_when_the_upstream_answers_though_the_body_waits() {
        let budget = ReplayBudget::new(REPLAY_BUDGET);
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Frame<Bytes>, Infallible>>();
        tx.unbounded_send(Ok(Frame::data(Bytes::from_static(b"kept")))).expect("open");
        let mut b = Replayable::new(StreamBody::new(rx), Arc::clone(&budget));
        let answered = b.answered();
        let driving = tokio::spawn(async move {
            next_data(&mut b).await;
            // The client pauses: this waits for a frame that does not come.
            next_data(&mut b).await;
        });
        while budget.used() == 0 {
            tokio::task::yield_now().await;
        }
        answered.raise();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while budget.used() != 0 {
            assert!(std::time::Instant::now() < deadline, "still kept after the answer");
            tokio::task::yield_now().await;
        }
        driving.abort();
        drop(tx);
    }

    #[tokio::test]
    async fn bodies_keep_nothing_past_their_shared_budget_and_give_it_back_when_dropped() {
        let budget = ReplayBudget::new(5);
        let mut first = Replayable::new(body(&[b"abc"]), Arc::clone(&budget));
        let mut second = Replayable::new(body(&[b"def"]), Arc::clone(&budget));
        let mut third = Replayable::new(body(&[b"gh"]), Arc::clone(&budget));
        next_data(&mut first).await;
        next_data(&mut second).await;
        next_data(&mut third).await;
        assert!(second.rewind().is_none(), "3 + 3 bytes do not fit in 5");
        let third = third.rewind().expect("3 + 2 fit");
        assert_eq!(budget.used(), 5);
        drop(first);
        drop(third);
        assert_eq!(budget.used(), 0);
    }
}
