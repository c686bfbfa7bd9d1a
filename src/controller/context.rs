//! What every reconcile shares: the client, the snapshot, the operator's
//! configuration and what is kept about each Bulkhead.

use std::sync::Arc;

use kube::Client;

use crate::controller::{
    drill::Drills, memory::kept::Memory, reconcile::recorder::EventRecorder, runtime::metrics::Metrics,
    watch::observe::SharedSnapshot,
};

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    pub events: EventRecorder,
    pub metrics: Arc<Metrics>,
    pub snapshot: Arc<SharedSnapshot>,
    pub config: crate::evaluate::Config,
    /// What is kept about each Bulkhead between reconciles.
    pub memory: Memory,
    /// The operator's name: it acts only on the Bulkheads labelled with it.
    pub operator_name: Option<String>,
    /// The drills: the faults running ones placed, and the drills watched.
    pub drills: Arc<Drills>,
}
