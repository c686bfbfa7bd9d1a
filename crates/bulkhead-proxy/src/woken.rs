//! A future polled only once its own waker has fired. A connection's task
//! wakes several times for every request it serves, and `tokio::select!`
//! polls every branch at each wake: the connection's four guards (the
//! proxy stopping, a given-up response, the stall and idle timers) cost an
//! HTTP/1.1 request about 1,700 instructions that way, though they fire
//! almost never. Behind this they cost a flag check.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    task::{Context, Poll, Wake, Waker},
};

use futures::task::AtomicWaker;

pub(super) struct WhenWoken<F> {
    inner: Pin<Box<F>>,
    flag: Arc<Flag>,
    /// `flag` as a waker, made once.
    waker: Waker,
}

struct Flag {
    woken: AtomicBool,
    /// The task polling the `WhenWoken`.
    parent: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.parent.wake();
    }
}

impl<F: Future> WhenWoken<F> {
    pub(super) fn new(inner: F) -> Self {
        // Woken to begin with: the first poll registers the inner future's wakers.
        let flag = Arc::new(Flag { woken: AtomicBool::new(true), parent: AtomicWaker::new() });
        let waker = Waker::from(Arc::clone(&flag));
        Self { inner: Box::pin(inner), flag, waker }
    }
}

impl<F: Future> Future for WhenWoken<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        this.flag.parent.register(cx.waker());
        if !this.flag.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        this.inner.as_mut().poll(&mut Context::from_waker(&this.waker))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_inner_future_is_polled_only_when_it_woke() {
        let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&polls);
        let sleep = Box::pin(tokio::time::sleep(Duration::from_secs(5)));
        let inner = std::future::poll_fn({
            let mut sleep = sleep;
            move |cx| {
                counted.fetch_add(1, Ordering::Relaxed);
                sleep.as_mut().poll(cx)
            }
        });
        let mut guarded = Box::pin(WhenWoken::new(inner));
        let noop = Waker::noop();
        let mut cx = Context::from_waker(noop);
        // Polled at first, then not again however often the task polls, until its timer fires.
        for _ in 0..10 {
            assert!(guarded.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::Relaxed), 1);
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert!(guarded.as_mut().poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::Relaxed), 2);
    }
}
