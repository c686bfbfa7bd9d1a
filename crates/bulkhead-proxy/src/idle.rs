//! The idle timeout (`--idle-timeout`): a body, or an upgraded tunnel, that
//! moves no byte for that long is ended, so that its slot cannot be held by a
//! client (or upstream) that simply stops.

use std::{
    future::Future,
    io,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    task::{Context, Poll},
    time::Duration,
};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    time::{Instant, Sleep},
};

use super::timeouts::IdleTimeout;

pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

pin_project! {
    /// A body that fails with [`IdleTimeout`] when no frame comes for `idle`
    /// while it is being read; `stalled` is raised when that happens.
    pub struct IdleBody<B> {
        #[pin]
        inner: B,
        // Made at the first wait only: a body whose frames are all there when
        // read (most small responses) never registers a timer.
        // Boxed so the body is Unpin, as hyper's client wants.
        timer: Option<Pin<Box<Sleep>>>,
        timed: bool,
        // A frame came since the timer was last set.
        moved: bool,
        // The class's maximum duration: the body ends in an error past it.
        end: Option<Pin<Box<Sleep>>>,
        idle: Duration,
        stalled: Option<Arc<AtomicBool>>,
    }
}

impl<B: Body> IdleBody<B> {
    /// `idle` zero: never times out. A body known to be empty (a GET's) gets no timer.
    pub fn new(inner: B, idle: Duration, stalled: Option<Arc<AtomicBool>>) -> Self {
        let timed = !idle.is_zero() && !inner.is_end_stream();
        Self { inner, timer: None, timed, moved: false, end: None, idle, stalled }
    }

    /// Also fail at `end`, however busy the body is.
    pub fn until(mut self, end: Option<Instant>) -> Self {
        self.end = end.map(|at| Box::pin(tokio::time::sleep_until(at)));
        self
    }
}

impl<B> Body for IdleBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, BoxError>>> {
        let this = self.project();
        match this.inner.poll_frame(cx) {
            Poll::Ready(frame) => {
                *this.moved = true;
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                if *this.timed {
                    match this.timer {
                        None => *this.timer = Some(Box::pin(tokio::time::sleep(*this.idle))),
                        Some(timer) if *this.moved => timer.as_mut().reset(Instant::now() + *this.idle),
                        Some(_) => {}
                    }
                    *this.moved = false;
                }
                Self::waited(this.timer, this.end, *this.idle, this.stalled, cx)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> IdleBody<B> {
    /// The inner body is pending: has the idle timer or the maximum duration passed?
    fn waited<D>(
        timer: &mut Option<Pin<Box<Sleep>>>,
        end: &mut Option<Pin<Box<Sleep>>>,
        idle: Duration,
        stalled: &Option<Arc<AtomicBool>>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<D>, BoxError>>> {
        if end.as_mut().is_some_and(|e| e.as_mut().poll(cx).is_ready()) {
            return Poll::Ready(Some(Err(IdleTimeout(idle).into())));
        }
        match timer.as_mut().map(|t| t.as_mut().poll(cx)) {
            Some(Poll::Ready(())) => {
                if let Some(stalled) = stalled {
                    stalled.store(true, Ordering::Relaxed);
                }
                Poll::Ready(Some(Err(IdleTimeout(idle).into())))
            }
            _ => Poll::Pending,
        }
    }
}

/// Copy both ways between `a` and `b` until either closes, or until no byte
/// has moved either way for `idle` (zero: no limit).
pub(super) async fn splice<A, B>(a: A, b: B, idle: Duration) -> io::Result<(u64, u64)>
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let start = Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let mut a = Touch { inner: a, last: Arc::clone(&last), start };
    let mut b = Touch { inner: b, last: Arc::clone(&last), start };
    let copy = tokio::io::copy_bidirectional(&mut a, &mut b);
    tokio::pin!(copy);
    if idle.is_zero() {
        return copy.await;
    }
    loop {
        let quiet_since = start + Duration::from_millis(last.load(Ordering::Relaxed));
        tokio::select! {
            result = &mut copy => return result,
            () = tokio::time::sleep_until(quiet_since + idle) => {
                if start + Duration::from_millis(last.load(Ordering::Relaxed)) + idle <= Instant::now() {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, IdleTimeout(idle)));
                }
            }
        }
    }
}

/// Records when bytes last moved through an upgraded connection.
struct Touch<T> {
    inner: T,
    last: Arc<AtomicU64>,
    start: Instant,
}

impl<T> Touch<T> {
    fn touched(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::Relaxed);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Touch<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.touched();
        }
        poll
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Touch<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(poll, Poll::Ready(Ok(n)) if n > 0) {
            self.touched();
        }
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
