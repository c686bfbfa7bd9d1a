//! What the reconciles of Bulkheads read of the drills: the fault each
//! running drill has placed (kept only in this process, so an operator that
//! restarts has placed none, and its first reconcile lifts any it finds),
//! and the drills the watch holds (for `VerifiedUnderLoad`).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use futures::Stream;
use kube::runtime::reflector::{self, store::Writer, Store};
use tokio::sync::Notify;

use crate::{crd::BulkheadDrill, plan::DrillFault};

pub struct Drills {
    reader: Store<BulkheadDrill>,
    writer: Mutex<Option<Writer<BulkheadDrill>>>,
    /// By Bulkhead: one drill per Bulkhead at a time.
    faults: Mutex<HashMap<String, DrillFault>>,
    changed: Arc<Notify>,
}

impl Default for Drills {
    fn default() -> Self {
        let (reader, writer) = reflector::store();
        Self { reader, writer: Mutex::new(Some(writer)), faults: Mutex::default(), changed: Arc::default() }
    }
}

impl Drills {
    fn faults(&self) -> std::sync::MutexGuard<'_, HashMap<String, DrillFault>> {
        self.faults.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The fault in place on `bulkhead`, if a drill of this process placed one.
    pub fn fault(&self, bulkhead: &str) -> Option<DrillFault> {
        self.faults().get(bulkhead).cloned()
    }

    /// Place `fault`; the Bulkhead's next reconcile writes it.
    pub(super) fn place(&self, fault: DrillFault) {
        self.faults().insert(fault.bulkhead.clone(), fault);
        self.changed.notify_one();
    }

    /// Lift whatever fault `drill` placed, anywhere.
    pub(super) fn lift(&self, drill: &str) {
        let before = {
            let mut faults = self.faults();
            let before = faults.len();
            faults.retain(|_, f| f.drill != drill);
            before != faults.len()
        };
        if before {
            self.changed.notify_one();
        }
    }

    /// Every drill the watch holds.
    pub fn all(&self) -> Vec<Arc<BulkheadDrill>> {
        self.reader.state()
    }

    /// The watch's writer, once.
    pub(super) fn take_writer(&self) -> Option<Writer<BulkheadDrill>> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    pub(super) fn notify(&self) {
        self.changed.notify_one();
    }

    /// Yields after a fault was placed or lifted, or a drill changed, at most every `every`.
    pub fn changed(&self, every: Duration) -> impl Stream<Item = ()> + Send + 'static {
        futures::stream::unfold(self.changed.clone(), move |changed| async move {
            changed.notified().await;
            tokio::time::sleep(every).await;
            Some(((), changed))
        })
    }
}

/// Lifts a running drill's fault however its task ends: done, failed, or
/// aborted because the drill was deleted.
pub(super) struct FaultGuard {
    pub drills: Arc<Drills>,
    pub drill: String,
}

impl Drop for FaultGuard {
    fn drop(&mut self) {
        self.drills.lift(&self.drill);
    }
}
