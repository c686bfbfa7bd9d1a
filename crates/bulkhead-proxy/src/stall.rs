//! The response side of `--idle-timeout`: a client that stops reading.
//!
//! hyper asks a response body for its next frame only when it can send it:
//! an HTTP/1.1 client that reads nothing (its socket full), or an HTTP/2
//! client that gives a stream no window, is never asked again. A timer inside
//! the body ([`super::idle::IdleBody`]) then never runs, and the request kept
//! its slot and its upstream for as long as the client stayed connected.
//!
//! So once a response has more to send than its first frame, a watchdog task
//! outside hyper's polling watches it: when hyper has taken no frame for the
//! idle timeout, the watchdog drops the upstream body and the slot. hyper's
//! next poll then gets an error (HTTP/2 resets the stream; the connection's
//! other streams go on). An HTTP/1.1 connection carries nothing else, so it
//! is closed at once.
//!
//! The watchdog counts frames, and the idle timeout is about bytes: hyper's
//! reads from an HTTP/1.1 upstream grow to hundreds of KiB, and a client
//! reading one such frame slowly but steadily would be cut while bytes still
//! moved. So data frames reach hyper in slices of at most [`SLICE`] (no copy),
//! and a cut means the client made room for less than [`SLICE`] in the whole
//! idle timeout. (An HTTP/2 client makes room in steps of half its stream
//! window, 32 KiB for the usual 64 KiB: a client reading 49 KB/s was cut at a
//! 500 ms timeout, one reading 115 KB/s was not.)

use std::{
    pin::Pin,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, PoisonError,
    },
    task::{ready, Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use futures::task::AtomicWaker;
use http_body::{Body, Frame, SizeHint};
use tokio::{sync::Notify, task::AbortHandle, time::Instant};

use super::{idle::BoxError, timeouts::IdleTimeout};

/// The largest data frame handed to hyper: HTTP/2's default frame size.
const SLICE: usize = 16 << 10;

/// A response body watched once it streams; `B` is the body with its slot.
#[allow(unreachable_pub)] // named by `Counted`'s output, a public trait item
pub struct Watched<B> {
    state: State<B>,
    /// What is left of a data frame larger than [`SLICE`].
    rest: Bytes,
    idle: Duration,
    /// HTTP/1.1: raised to close the connection when the body is given up.
    close: Option<Arc<Notify>>,
}

enum State<B> {
    /// Not (yet) streaming: no watchdog, no lock.
    Direct(B),
    Watched {
        shared: Arc<Shared<B>>,
        watchdog: AbortHandle,
    },
    /// Only while changing state.
    Moving,
}

struct Shared<B> {
    /// None once the watchdog has given the body up.
    body: Mutex<Option<B>>,
    start: Instant,
    /// Milliseconds from `start` to when hyper last took a frame.
    taken: AtomicU64,
    /// hyper's task, woken when the body is given up while it waits on the upstream.
    waker: AtomicWaker,
}

impl<B> Shared<B> {
    fn last_taken(&self) -> Instant {
        self.start + Duration::from_millis(self.taken.load(Ordering::Relaxed))
    }

    fn took(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.taken.store(ms, Ordering::Relaxed);
    }
}

impl<B> Watched<B> {
    /// `idle` zero: never watched. `close`: the connection of an HTTP/1.1 request.
    pub(super) fn new(inner: B, idle: Duration, close: Option<Arc<Notify>>) -> Self {
        Self { state: State::Direct(inner), rest: Bytes::new(), idle, close }
    }
}

impl<B> Watched<B>
where
    B: Body + Unpin + Send + 'static,
{
    /// The body has sent a frame and has more: watch it from outside from now on.
    fn arm(&mut self) {
        let State::Direct(body) = std::mem::replace(&mut self.state, State::Moving) else { return };
        let shared = Arc::new(Shared {
            body: Mutex::new(Some(body)),
            start: Instant::now(),
            taken: AtomicU64::new(0),
            waker: AtomicWaker::new(),
        });
        let watchdog = tokio::spawn(watch(Arc::clone(&shared), self.idle, self.close.take())).abort_handle();
        self.state = State::Watched { shared, watchdog };
    }
}

/// Give the body up once hyper has taken nothing from it for `idle`.
async fn watch<B>(shared: Arc<Shared<B>>, idle: Duration, close: Option<Arc<Notify>>) {
    loop {
        let due = shared.last_taken() + idle;
        tokio::time::sleep_until(due).await;
        if shared.last_taken() + idle <= Instant::now() {
            break;
        }
    }
    let given_up = shared.body.lock().unwrap_or_else(PoisonError::into_inner).take();
    if given_up.is_none() {
        return;
    }
    // Dropped outside the lock: this frees the slot and cancels the upstream request.
    drop(given_up);
    tracing::debug!(?idle, "the client took nothing of its response for the idle timeout: given up");
    shared.waker.wake();
    if let Some(connection) = close {
        connection.notify_one();
    }
}

impl<B> Body for Watched<B>
where
    B: Body<Data = Bytes> + Unpin + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if !this.rest.is_empty() {
            if let State::Watched { shared, .. } = &this.state {
                if shared.body.lock().unwrap_or_else(PoisonError::into_inner).is_none() {
                    return Poll::Ready(Some(Err(IdleTimeout(this.idle).into())));
                }
                shared.took();
            }
            return Poll::Ready(Some(Ok(Frame::data(next_slice(&mut this.rest)))));
        }
        match &mut this.state {
            State::Direct(body) => {
                let frame = ready!(Pin::new(&mut *body).poll_frame(cx));
                let frame = frame.map(|f| f.map(|f| slice(f, &mut this.rest)).map_err(Into::into));
                let more = !this.rest.is_empty() || !body.is_end_stream();
                if matches!(frame, Some(Ok(_))) && !this.idle.is_zero() && more {
                    this.arm();
                }
                Poll::Ready(frame)
            }
            State::Watched { shared, watchdog } => {
                let mut body = shared.body.lock().unwrap_or_else(PoisonError::into_inner);
                let Some(inner) = body.as_mut() else {
                    return Poll::Ready(Some(Err(IdleTimeout(this.idle).into())));
                };
                let frame = match Pin::new(inner).poll_frame(cx) {
                    Poll::Ready(frame) => frame,
                    Poll::Pending => {
                        shared.waker.register(cx.waker());
                        return Poll::Pending;
                    }
                };
                if matches!(frame, Some(Ok(_))) {
                    shared.took();
                } else {
                    // Ended: the slot is free now, and nothing is left to watch.
                    *body = None;
                    watchdog.abort();
                }
                Poll::Ready(frame.map(|f| f.map(|f| slice(f, &mut this.rest)).map_err(Into::into)))
            }
            State::Moving => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        if !self.rest.is_empty() {
            return false;
        }
        match &self.state {
            State::Direct(body) => body.is_end_stream(),
            // Given up: not ended, so that hyper asks for the error rather than end the stream cleanly.
            State::Watched { shared, .. } => {
                shared.body.lock().unwrap_or_else(PoisonError::into_inner).as_ref().is_some_and(Body::is_end_stream)
            }
            State::Moving => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = match &self.state {
            State::Direct(body) => body.size_hint(),
            State::Watched { shared, .. } => shared
                .body
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .map_or_else(SizeHint::default, Body::size_hint),
            State::Moving => SizeHint::with_exact(0),
        };
        let rest = self.rest.len() as u64;
        if rest > 0 {
            if let Some(upper) = hint.upper() {
                hint.set_upper(upper.saturating_add(rest));
            }
            hint.set_lower(hint.lower().saturating_add(rest));
        }
        hint
    }
}

/// A data frame cut to its first [`SLICE`], the remainder left in `rest` (which is empty).
fn slice(frame: Frame<Bytes>, rest: &mut Bytes) -> Frame<Bytes> {
    match frame.into_data() {
        Ok(mut data) => {
            let first = next_slice(&mut data);
            *rest = data;
            Frame::data(first)
        }
        Err(other) => other,
    }
}

/// The next [`SLICE`] of `rest` (no copy).
fn next_slice(rest: &mut Bytes) -> Bytes {
    if rest.len() > SLICE {
        rest.split_to(SLICE)
    } else {
        std::mem::take(rest)
    }
}

impl<B> Drop for Watched<B> {
    fn drop(&mut self) {
        if let State::Watched { watchdog, .. } = &self.state {
            watchdog.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};

    #[tokio::test]
    async fn a_large_frame_reaches_hyper_in_slices_and_keeps_its_length() {
        let body = Full::new(Bytes::from(vec![7u8; 2 * SLICE + 100]));
        let mut watched = Watched::new(body, Duration::from_secs(60), None);
        assert_eq!(watched.size_hint().exact(), Some(2 * SLICE as u64 + 100));
        let mut sizes = Vec::new();
        while let Some(frame) = watched.frame().await {
            let data = frame.expect("a frame").into_data().expect("data");
            assert!(data.iter().all(|&b| b == 7));
            sizes.push(data.len());
            assert_eq!(watched.is_end_stream(), sizes.iter().sum::<usize>() == 2 * SLICE + 100);
        }
        assert_eq!(sizes, [SLICE, SLICE, 100]);
    }
}
