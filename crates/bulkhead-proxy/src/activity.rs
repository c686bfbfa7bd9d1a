//! A connection's idle timer (`--idle-timeout` with no request in flight):
//! HTTP/2 clients answer the keep-alive PINGs, so an h2c connection that
//! carries no stream would otherwise stay open for ever and count against
//! `--max-connections`. (An idle HTTP/1.1 connection already waits for its
//! next request head under `--header-timeout`.)
//!
//! And its stall timer: responses handed to hyper that the client takes
//! nothing of. hyper holds a frame it cannot send (an HTTP/2 stream with no
//! window) and never polls again, so neither the body's timers nor the
//! watchdog (`stall`) can end such a stream; only closing the connection
//! frees it. 1,000 such streams held 30 MB on one connection. Each response
//! is told apart: one the client keeps reading must not keep the unread
//! ones alive.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, MutexGuard, PoisonError,
    },
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

use super::unread::UnreadBudget;

/// Requests in flight on one connection, and when the last one ended.
#[derive(Debug)]
pub(super) struct Activity {
    start: Instant,
    /// Upper 32 bits: requests in flight; lower 32: milliseconds from
    /// `start` to when that count last fell to zero (wraps after 49 days,
    /// which only delays a close).
    state: AtomicU64,
    /// Raised when the connection must be closed at once (an HTTP/1.1
    /// response given up on: nothing else can go on it).
    closing: Arc<Notify>,
    /// Intervals of the stall timer so far, as in `handed`: read on every
    /// response frame to see whether its response already counts as moving
    /// in this interval (no clock read, no lock per frame).
    interval: AtomicU64,
    /// Responses handed to hyper and not yet ended.
    handed: Mutex<Handed>,
    /// Unread responses over every connection (`--max-unread-responses`).
    unread: Arc<UnreadBudget>,
}

/// Responses handed to hyper and not yet ended, by whether hyper took a
/// frame of theirs in the current interval (a response handed over counts
/// as moving); and how many of them this connection last counted in
/// [`UnreadBudget`].
#[derive(Debug, Default)]
struct Handed {
    interval: u64,
    moving: u32,
    still: u32,
    reported: u64,
}

/// Unread responses that close their connection even while other requests
/// on it wait for their heads: a client kept one request waiting beside
/// 1,000 unread small responses (4.7 MB), and they stayed as long as it did.
pub(crate) const STALLED_STREAMS: u64 = 32;

/// Why the stall timer closes a connection.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Stall {
    /// Every request on it is an unread response: nothing else to wait for.
    All,
    /// Unread responses beside requests that go on: 32 of them, or any
    /// once the process is past `--max-unread-responses`.
    Beside,
}

const ONE: u64 = 1 << 32;
const MILLIS: u64 = ONE - 1;

impl Activity {
    pub(super) fn new(unread: Arc<UnreadBudget>) -> Arc<Self> {
        Arc::new(Activity {
            start: Instant::now(),
            state: AtomicU64::new(0),
            closing: Arc::new(Notify::new()),
            interval: AtomicU64::new(0),
            handed: Mutex::default(),
            unread,
        })
    }

    fn handed(&self) -> MutexGuard<'_, Handed> {
        self.handed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Resolves once responses have waited for a whole `stall` (between `stall`
    /// and twice that after the client last took anything of them) with the
    /// client taking nothing of them, when they are every request in flight,
    /// [`STALLED_STREAMS`] at least, or the process is past its
    /// [`UnreadBudget`]. One request still waiting for its head (a long poll,
    /// an upload) or read beside a few unread streams is the client's and the
    /// upstream's business, not a stall; but it must not keep unread streams
    /// alive without bound.
    pub(super) async fn stalled_for(&self, stall: Duration) -> Stall {
        loop {
            tokio::time::sleep(stall).await;
            let in_flight = self.state.load(Ordering::Relaxed) >> 32;
            let (still, over_budget) = {
                let mut handed = self.handed();
                let still = u64::from(handed.still);
                let over_budget = self.unread.report(handed.reported, still);
                handed.reported = still;
                // A new interval: every response is still until hyper takes a frame of it.
                handed.still = handed.still.saturating_add(handed.moving);
                handed.moving = 0;
                handed.interval += 1;
                self.interval.store(handed.interval, Ordering::Relaxed);
                (still, over_budget)
            };
            if still == 0 {
                continue;
            }
            if still == in_flight {
                return Stall::All;
            }
            if still >= STALLED_STREAMS || over_budget {
                return Stall::Beside;
            }
        }
    }

    /// Count a request until the guard is dropped (its response body ended).
    pub(super) fn begin(self: &Arc<Self>) -> Active {
        self.state.fetch_add(ONE, Ordering::Relaxed);
        Active { activity: Arc::clone(self), moved_in: None }
    }

    fn end(&self) {
        let now = self.millis();
        let _ = self.state.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
            let open = (s >> 32).saturating_sub(1);
            Some(if open == 0 { now } else { open << 32 | (s & MILLIS) })
        });
    }

    fn millis(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX) & MILLIS
    }

    /// Resolves once the connection was asked to close (`closing` raised).
    pub(super) async fn closed(&self) {
        self.closing.notified().await;
    }

    /// Resolves once the connection has carried no request for `idle`.
    pub(super) async fn idle_for(&self, idle: Duration) {
        let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(MILLIS);
        loop {
            let s = self.state.load(Ordering::Relaxed);
            let wait = if s >> 32 > 0 {
                idle
            } else {
                let quiet = self.millis().wrapping_sub(s & MILLIS) & MILLIS;
                if quiet >= idle_ms {
                    return;
                }
                Duration::from_millis(idle_ms - quiet)
            };
            tokio::time::sleep(wait).await;
        }
    }
}

impl Drop for Activity {
    fn drop(&mut self) {
        let reported = self.handed.get_mut().unwrap_or_else(PoisonError::into_inner).reported;
        self.unread.report(reported, 0);
    }
}

/// One request counted on its connection.
#[derive(Debug)]
pub(super) struct Active {
    activity: Arc<Activity>,
    /// Once its response is handed to hyper: the interval in which hyper
    /// last took a frame of it.
    moved_in: Option<u64>,
}

impl Active {
    /// Raised to close an HTTP/1.1 connection whose response was given up.
    pub(super) fn closing(&self) -> Arc<Notify> {
        Arc::clone(&self.activity.closing)
    }

    /// The response is handed to hyper: count it for the stall timer.
    pub(super) fn streaming(&mut self) {
        let mut handed = self.activity.handed();
        handed.moving = handed.moving.saturating_add(1);
        self.moved_in = Some(handed.interval);
    }

    /// hyper took a frame of the response.
    pub(super) fn took(&mut self) {
        let Some(moved_in) = self.moved_in else { return };
        if moved_in == self.activity.interval.load(Ordering::Relaxed) {
            return;
        }
        let mut handed = self.activity.handed();
        if moved_in != handed.interval {
            handed.still = handed.still.saturating_sub(1);
            handed.moving = handed.moving.saturating_add(1);
            self.moved_in = Some(handed.interval);
        }
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        if let Some(moved_in) = self.moved_in {
            let mut handed = self.activity.handed();
            if moved_in == handed.interval {
                handed.moving = handed.moving.saturating_sub(1);
            } else {
                handed.still = handed.still.saturating_sub(1);
            }
        }
        self.activity.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_only_with_nothing_in_flight_for_the_whole_timeout() {
        let a = Activity::new(UnreadBudget::new(u64::MAX));
        let idle = Duration::from_secs(10);
        let held = a.begin();
        tokio::time::advance(Duration::from_secs(30)).await;
        let waited = tokio::time::timeout(Duration::from_secs(15), a.idle_for(idle)).await;
        assert!(waited.is_err(), "idle with a request in flight");
        drop(held);
        let started = Instant::now();
        a.idle_for(idle).await;
        assert_eq!(started.elapsed().as_secs(), 10);
        // Two overlapping requests: idle counts from the end of the last.
        let (x, y) = (a.begin(), a.begin());
        drop(x);
        tokio::time::advance(Duration::from_secs(20)).await;
        let started = Instant::now();
        drop(y);
        a.idle_for(idle).await;
        assert_eq!(started.elapsed().as_secs(), 10);
    }

    #[tokio::test(start_paused = true)]
    async fn stalled_only_while_responses_wait_and_the_client_takes_nothing() {
        let a = Activity::new(UnreadBudget::new(u64::MAX));
        let stall = Duration::from_secs(10);
        // A request waiting for its upstream (no response handed over) is not a stall.
        let mut waiting = a.begin();
        let waited = tokio::time::timeout(Duration::from_secs(30), a.stalled_for(stall)).await;
        assert!(waited.is_err(), "stalled with no response handed over");
        waiting.streaming();
        let started = Instant::now();
        let stalled = a.stalled_for(stall);
        tokio::pin!(stalled);
        // A frame taken 6 s in: the first whole quiet interval ends at 20 s.
        assert!(tokio::time::timeout(Duration::from_secs(6), stalled.as_mut()).await.is_err());
        waiting.took();
        assert_eq!(stalled.await, Stall::All);
        assert_eq!(started.elapsed().as_secs(), 20, "a whole interval with nothing taken");
        // A request waiting for its head beside a stalled response: not a stall.
        let other = a.begin();
        let waited = tokio::time::timeout(Duration::from_secs(30), a.stalled_for(stall)).await;
        assert!(waited.is_err(), "stalled with another request in flight");
        // Beside STALLED_STREAMS of them it is, and beside a response read all along too.
        let mut unread: Vec<_> = (1..STALLED_STREAMS)
            .map(|_| {
                let mut r = a.begin();
                r.streaming();
                r
            })
            .collect();
        let mut read = a.begin();
        read.streaming();
        let started = Instant::now();
        let stalled = a.stalled_for(stall);
        tokio::pin!(stalled);
        for _ in 0..2 {
            assert!(tokio::time::timeout(Duration::from_secs(7), stalled.as_mut()).await.is_err());
            read.took();
        }
        // Handed over before the timer started: still from its first interval on, 10 to 20 s.
        assert_eq!(tokio::time::timeout(Duration::from_secs(30), stalled.as_mut()).await.ok(), Some(Stall::Beside));
        assert_eq!(started.elapsed().as_secs(), 20, "stalled beside a waiting request and a read one");
        // One fewer than STALLED_STREAMS is not.
        drop(read);
        unread.pop();
        let waited = tokio::time::timeout(Duration::from_secs(30), a.stalled_for(stall)).await;
        assert!(waited.is_err(), "stalled with {} unread beside others", STALLED_STREAMS - 1);
        drop(unread);
        drop((waiting, other));
        let waited = tokio::time::timeout(Duration::from_secs(30), a.stalled_for(stall)).await;
        assert!(waited.is_err(), "stalled with nothing handed over");
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_budget_any_unread_response_closes_its_connection() {
        let budget = UnreadBudget::new(3);
        let stall = Duration::from_secs(10);
        // Two connections, each with a request waiting and two unread responses: 4 in all.
        let (a, b) = (Activity::new(Arc::clone(&budget)), Activity::new(Arc::clone(&budget)));
        let mut held = Vec::new();
        for c in [&a, &b] {
            held.push(c.begin());
            for _ in 0..2 {
                let mut r = c.begin();
                r.streaming();
                held.push(r);
            }
        }
        // a's timer counts its two first: 2 of 3, not past the budget.
        let first = tokio::time::timeout(Duration::from_secs(25), a.stalled_for(stall)).await;
        assert!(first.is_err(), "closed within the budget");
        // b's counts two more: 4 of 3.
        let second = tokio::time::timeout(Duration::from_secs(25), b.stalled_for(stall)).await;
        assert_eq!(second.ok(), Some(Stall::Beside));
        assert_eq!(budget.total(), 4);
        // A connection that ends gives its count back.
        drop(held);
        drop(b);
        assert_eq!(budget.total(), 2);
        drop(a);
        assert_eq!(budget.total(), 0);
    }
}
