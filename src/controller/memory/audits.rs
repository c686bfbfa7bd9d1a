//! What each Bulkhead keeps between reconciles: the audit's counts, which the
//! next reconcile catches up from the snapshot's journal instead of counting
//! every pod again, and its last evaluation, reused while nothing it read
//! changed (`evaluate::evaluate_kept`).

use std::{collections::HashMap, sync::Mutex};

use crate::evaluate::Kept;

#[derive(Default)]
pub struct AuditCache(Mutex<HashMap<String, Kept>>);

impl AuditCache {
    /// The Bulkhead's state, taken out while its reconcile uses it (one
    /// reconcile per Bulkhead runs at a time).
    pub fn take(&self, bulkhead: &str) -> Kept {
        self.0.lock().ok().and_then(|mut kept| kept.remove(bulkhead)).unwrap_or_default()
    }

    pub fn put(&self, bulkhead: &str, state: Kept) {
        if let Ok(mut kept) = self.0.lock() {
            kept.insert(bulkhead.to_string(), state);
        }
    }

    /// Work on a Bulkhead's state in place; None when it has none.
    pub fn with<R>(&self, bulkhead: &str, f: impl FnOnce(&mut Kept) -> R) -> Option<R> {
        self.0.lock().ok().and_then(|mut kept| kept.get_mut(bulkhead).map(f))
    }

    pub fn forget(&self, bulkhead: &str) {
        if let Ok(mut kept) = self.0.lock() {
            kept.remove(bulkhead);
        }
    }
}
