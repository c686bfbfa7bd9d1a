//! Each Bulkhead's audit counts, kept between reconciles: the next reconcile
//! catches them up from the snapshot's journal instead of counting every pod
//! again (`audit::audit_cached` rebuilds them on a new spec or a relist).

use std::{collections::HashMap, sync::Mutex};

use crate::audit::AuditState;

#[derive(Default)]
pub struct AuditCache(Mutex<HashMap<String, AuditState>>);

impl AuditCache {
    /// The Bulkhead's state, taken out while its reconcile uses it (one
    /// reconcile per Bulkhead runs at a time).
    pub fn take(&self, bulkhead: &str) -> Option<AuditState> {
        self.0.lock().ok()?.remove(bulkhead)
    }

    pub fn put(&self, bulkhead: &str, state: AuditState) {
        if let Ok(mut kept) = self.0.lock() {
            kept.insert(bulkhead.to_string(), state);
        }
    }

    pub fn forget(&self, bulkhead: &str) {
        if let Ok(mut kept) = self.0.lock() {
            kept.remove(bulkhead);
        }
    }
}
