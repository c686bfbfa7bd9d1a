//! How soon a failed watch tries again.
//!
//! kube's `StreamBackoff` resets its backoff on every `Ok` item, and a
//! watcher that restarts yields `Event::Init` before it sends any request:
//! so the wait was reset on every retry, and 13 watches retried every 0.1 s
//! while the API server was unreachable (~260 log lines a second). The
//! watch loops therefore wait themselves, with this schedule:
//! - 0.1 s doubling to a 5 s cap while failures repeat;
//! - back to 0.1 s only once the watch has delivered events for a while
//!   ([`HEALTHY`] since the last failure), not on the first event;
//! - when the server first answers again (a 1.20 server answers 503 for a
//!   custom resource until its CRD informer has synced), the next attempt is
//!   quick: the doubling starts over, as the failure is of a new kind. The
//!   503 reaches this schedule only because the client has no retry layer
//!   of its own (`client`).

use std::time::{Duration, Instant};

const FIRST: Duration = Duration::from_millis(100);
const CAP: Duration = Duration::from_secs(5);
/// How long a watch must have been failure-free for its next failure to start from [`FIRST`].
pub(in crate::controller) const HEALTHY: Duration = Duration::from_secs(30);

/// Why an attempt failed, as far as the wait is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::controller) enum Failure {
    /// No answer: connection refused, timed out, TLS.
    Unreachable,
    /// The API server answered with an error (503 while it starts, 410, 5xx...).
    Answered,
}

impl Failure {
    pub(in crate::controller) fn of(error: &kube::runtime::watcher::Error) -> Self {
        use kube::runtime::watcher::Error as W;
        match error {
            W::InitialListFailed(e) | W::WatchStartFailed(e) | W::WatchFailed(e) => Self::of_request(e),
            W::WatchError(_) => Failure::Answered,
            _ => Failure::Unreachable,
        }
    }

    /// One request's failure (API discovery before a watch).
    pub(in crate::controller) fn of_request(error: &kube::Error) -> Self {
        match error {
            kube::Error::Api(_) => Failure::Answered,
            _ => Failure::Unreachable,
        }
    }
}

#[derive(Debug, Clone)]
pub(in crate::controller) struct WatchBackoff {
    next: Duration,
    cap: Duration,
    last: Option<(Instant, Failure)>,
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self::with_cap(CAP)
    }
}

impl WatchBackoff {
    /// For a watch whose errors this module cannot see (the controller's
    /// own, through kube's `trigger_backoff`): a low cap keeps its first
    /// retry after a restart quick; it is one watch, so few lines.
    pub(in crate::controller) fn with_cap(cap: Duration) -> Self {
        Self { next: FIRST, cap, last: None }
    }

    /// An attempt failed at `now`: how long to wait before the next one.
    pub(in crate::controller) fn failed(&mut self, failure: Failure, now: Instant) -> Duration {
        let start_over = match self.last {
            None => true,
            Some((at, _)) if now.duration_since(at) >= HEALTHY => true,
            // Unreachable until now, and the server answers: try again soon.
            Some((_, Failure::Unreachable)) => failure == Failure::Answered,
            Some(_) => false,
        };
        if start_over {
            self.next = FIRST;
        }
        let wait = self.next;
        self.next = (self.next * 2).min(self.cap);
        self.last = Some((now, failure));
        wait
    }
}

/// kube's `StreamBackoff` calls `reset` on every event, including the
/// `Init` a restarting watcher yields before any request: ignore it and
/// start over only after [`HEALTHY`] without failures (in `failed`).
impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {}
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.failed(Failure::Unreachable, Instant::now()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waits(b: &mut WatchBackoff, failures: &[(u64, Failure)], start: Instant) -> Vec<u128> {
        failures.iter().map(|&(at, f)| b.failed(f, start + Duration::from_millis(at)).as_millis()).collect()
    }

    #[test]
    fn doubles_to_the_cap_while_failures_repeat() {
        let start = Instant::now();
        let mut b = WatchBackoff::default();
        let mut at = 0;
        let mut got = Vec::new();
        for _ in 0..9 {
            let wait = b.failed(Failure::Unreachable, start + Duration::from_millis(at));
            got.push(wait.as_millis());
            at += wait.as_millis() as u64;
        }
        assert_eq!(got, [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
    }

    #[test]
    fn starts_over_only_after_a_healthy_while() {
        let start = Instant::now();
        let mut b = WatchBackoff::default();
        let u = Failure::Unreachable;
        // Events in between do not reset it: a failure 10 s on still doubles.
        assert_eq!(waits(&mut b, &[(0, u), (100, u), (10_000, u)], start), [100, 200, 400]);
        // 30 s without a failure: from the start again.
        assert_eq!(waits(&mut b, &[(40_000, u)], start), [100]);
    }

    #[test]
    fn kube_resetting_it_on_every_event_changes_nothing() {
        use kube::runtime::utils::Backoff as _;
        let mut b = WatchBackoff::with_cap(Duration::from_secs(1));
        let mut got = Vec::new();
        for _ in 0..6 {
            got.push(b.next().expect("endless").as_millis());
            b.reset();
        }
        assert_eq!(got, [100, 200, 400, 800, 1000, 1000]);
    }

    #[test]
    fn the_first_answer_after_silence_is_retried_quickly() {
        let start = Instant::now();
        let mut b = WatchBackoff::default();
        let (u, a) = (Failure::Unreachable, Failure::Answered);
        assert_eq!(
            waits(&mut b, &[(0, u), (100, u), (300, u), (700, u), (1500, u)], start),
            [100, 200, 400, 800, 1600]
        );
        // The server is back and says 503: quick, then doubling again.
        assert_eq!(waits(&mut b, &[(3100, a), (3200, a), (3400, a)], start), [100, 200, 400]);
    }
}
