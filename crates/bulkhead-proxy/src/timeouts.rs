//! Every deadline of the proxy, in one place: the flags' (`--header-timeout`,
//! `--response-timeout`, `--idle-timeout`, `--drain-timeout`), the fixed ones,
//! and one request's, which the class's maximum duration (pools.json's
//! maxDurationMs) shortens. The timers that enforce them live with what they
//! time: bodies and tunnels (`idle`), responses the client stops reading
//! (`stall`), a connection's requests (`activity`). A zero flag turns its
//! limit off, where waiting without it is safe (see `duration`).

use std::time::Duration;

use tokio::time::Instant;

/// Opening a connection to an upstream (dial, handshake, an h2c server's SETTINGS).
pub(crate) const UPSTREAM_CONNECT: Duration = Duration::from_secs(5);
/// An idle HTTP/1.1 upstream connection older than this is closed instead of used (hyper-util's default).
pub(crate) const UPSTREAM_IDLE: Duration = Duration::from_secs(90);
/// How long a refused h2c stream's pipe may take to give its body back (to send it again).
pub(crate) const PIPE_END: Duration = Duration::from_secs(1);
/// A probe or a scrape sends its head at once: an admin connection waits at most this for it.
const ADMIN_HEAD: Duration = Duration::from_secs(5);

/// The deadlines the flags set, for every listener and connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Timeouts {
    /// `--header-timeout`: a new connection's first bytes, each HTTP/1.1
    /// request head; the HTTP/2 ping interval and the wait for its answer.
    pub(crate) header: Duration,
    /// `--response-timeout`: from forwarding a request to the response head (0: none).
    pub(crate) response: Duration,
    /// `--idle-timeout`: no byte moving in a body or tunnel, no request on a
    /// connection; twice it, responses the client takes nothing of (0: none).
    pub(crate) idle: Duration,
    /// `--drain-timeout`: on SIGTERM, how long in-flight requests may take.
    pub(crate) drain: Duration,
}

impl Timeouts {
    /// An admin connection's request head: the header timeout, at most 5 s.
    pub(crate) fn admin_head(&self) -> Duration {
        self.header.min(ADMIN_HEAD)
    }

    /// Responses unread for this long close their connection (zero: never).
    /// Twice the idle timeout, so that the watchdog gives a stalled stream up
    /// first and the connection's other streams go on.
    pub(crate) fn stall(&self) -> Duration {
        self.idle.saturating_mul(2)
    }

    /// One request's deadlines; `max`: its class's maximum duration.
    pub(crate) fn stream(&self, max: Option<Duration>) -> StreamTimeouts {
        let response = Some(self.response).filter(|t| !t.is_zero());
        let response_headers = match (response, max) {
            (Some(t), Some(m)) => Some(t.min(m)),
            (t, m) => t.or(m),
        };
        StreamTimeouts { response_headers, response_end: max.map(|m| Instant::now() + m), idle: self.idle }
    }
}

/// One forwarded request's deadlines (as linkerd2-proxy's `StreamTimeouts`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StreamTimeouts {
    /// The response head must come within this, or the client gets 504.
    pub(crate) response_headers: Option<Duration>,
    /// The class's maximum duration ends here, body and tunnel included.
    pub(crate) response_end: Option<Instant>,
    /// `--idle-timeout` for the bodies and a tunnel (0: none).
    pub(crate) idle: Duration,
}

/// Why a body or tunnel was cut: nothing moved for the idle timeout (or the
/// class's maximum duration passed).
#[derive(Debug, thiserror::Error)]
#[error("no data for {0:?} (idle timeout)")]
pub(crate) struct IdleTimeout(pub(crate) Duration);

/// How long one admin connection may last before it is asked to close (it
/// finishes the request it is on), and how long after that it is cut.
pub(crate) const ADMIN_LIFETIME: Duration = Duration::from_secs(30);
pub(crate) const ADMIN_CUT_AFTER: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_class_maximum_shortens_the_response_timeout_and_ends_the_stream() {
        let secs = Duration::from_secs;
        let t = Timeouts { header: secs(30), response: secs(60), idle: secs(10), drain: secs(30) };
        assert_eq!((t.admin_head(), t.stall()), (secs(5), secs(20)));
        assert_eq!(t.stream(None).response_headers, Some(secs(60)));
        assert_eq!(t.stream(None).response_end, None);
        let capped = t.stream(Some(secs(2)));
        assert_eq!(capped.response_headers, Some(secs(2)));
        assert_eq!(capped.response_end, Some(Instant::now() + secs(2)));
        let off = Timeouts { response: Duration::ZERO, idle: Duration::ZERO, ..t };
        assert_eq!((off.stream(None).response_headers, off.stall()), (None, Duration::ZERO));
        assert_eq!(off.stream(Some(secs(90))).response_headers, Some(secs(90)));
    }
}
