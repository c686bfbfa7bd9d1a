//! How soon a failed watch tries again. kube's default (client-go's: 0.8 s
//! doubling to 30 s, reset after 2 min of quiet) is kind to a struggling API
//! server but leaves the operator blind for up to half a minute after a
//! restart: a change made the moment the API server is back waited 27 s.
//! One API server and a dozen watches of one operator are no thundering
//! herd, so retry quickly and cap the wait at one second.

use std::time::Duration;

use kube::runtime::utils::Backoff;

const FIRST: Duration = Duration::from_millis(100);
const CAP: Duration = Duration::from_secs(1);

/// 0.1 s doubling to 1 s; back to 0.1 s after any successful event.
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    next: Duration,
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self { next: FIRST }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let wait = self.next;
        self.next = (self.next * 2).min(CAP);
        Some(wait)
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_one_second_and_resets() {
        let mut b = WatchBackoff::default();
        let waits: Vec<u128> = b.by_ref().take(6).map(|d| d.as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000]);
        b.reset();
        assert_eq!(b.next(), Some(FIRST));
    }
}
