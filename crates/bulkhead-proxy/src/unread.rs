//! `--max-unread-responses`: responses the clients take nothing of, counted
//! over every connection. Each connection's stall timer (`activity`) reports
//! its own; past the budget, every connection holding one is closed.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

/// Responses the clients took nothing of for a whole stall interval, over
/// every connection, as each connection's timer last counted them. Below
/// `activity::STALLED_STREAMS` per connection, a connection kept open by a request
/// of another kind holds its unread responses for as long as it is kept
/// open: past `budget` in all, every connection holding one is closed.
#[derive(Debug)]
pub(crate) struct UnreadBudget {
    total: AtomicU64,
    budget: u64,
}

impl UnreadBudget {
    pub(crate) fn new(budget: u64) -> Arc<Self> {
        Arc::new(UnreadBudget { total: AtomicU64::new(0), budget })
    }

    /// This connection now counts `now` where it counted `before`; whether
    /// the total is past the budget.
    pub(crate) fn report(&self, before: u64, now: u64) -> bool {
        let total = if now >= before {
            self.total.fetch_add(now - before, Ordering::Relaxed) + (now - before)
        } else {
            self.total.fetch_sub(before - now, Ordering::Relaxed).saturating_sub(before - now)
        };
        total > self.budget
    }
}

#[cfg(test)]
impl UnreadBudget {
    /// What every connection counts now.
    pub(crate) fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
}
