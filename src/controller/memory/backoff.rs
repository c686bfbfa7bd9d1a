//! Per-object backoff: kube's error_policy keeps no state, so failures are
//! counted here, per Bulkhead, and reset by a successful reconcile.

use std::{collections::HashMap, sync::Mutex, time::Duration};

#[derive(Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    const BASE: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(300);

    /// Record one more failure of `name`; returns how long to wait before retrying.
    pub fn next(&self, name: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = failures.entry(name.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        Self::BASE.saturating_mul(2u32.saturating_pow(*n - 1)).min(Self::MAX)
    }

    pub fn reset(&self, name: &str) {
        self.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_per_object_up_to_the_cap_and_resets() {
        let b = Backoff::default();
        assert_eq!(b.next("a"), Duration::from_secs(1));
        assert_eq!(b.next("a"), Duration::from_secs(2));
        assert_eq!(b.next("a"), Duration::from_secs(4));
        assert_eq!(b.next("other"), Duration::from_secs(1), "objects back off independently");
        for _ in 0..20 {
            b.next("a");
        }
        assert_eq!(b.next("a"), Duration::from_secs(300));
        b.reset("a");
        assert_eq!(b.next("a"), Duration::from_secs(1));
    }
}
