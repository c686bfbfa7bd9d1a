//! Everything the controller remembers about one Bulkhead between
//! reconciles, in one place: its retry backoff, the refusals it remembers,
//! its last evaluation and audit counts, and its latest usage analysis. A
//! deleted Bulkhead is forgotten by one call, so no map outlives it.

use std::sync::Arc;

use super::audits::AuditCache;
use super::backoff::Backoff;
use super::enforcement::Enforcement;
use super::refusals::RefusalMemory;
use super::usage::Usage;

pub struct Memory {
    /// Failures since the last good reconcile, per Bulkhead.
    pub backoff: Backoff,
    /// Placement and injection refusals, so they are not retried in a loop.
    pub refusals: RefusalMemory,
    /// Each Bulkhead's audit counts and last evaluation.
    pub audits: Arc<AuditCache>,
    /// Each Bulkhead's latest analysis of its proxies' telemetry.
    pub usage: Arc<Usage>,
    /// Each Bulkhead's latest answers from its sidecars (which config they enforce).
    pub enforcement: Arc<Enforcement>,
}

impl Memory {
    pub fn new(usage: Arc<Usage>, enforcement: Arc<Enforcement>) -> Self {
        Self {
            backoff: Backoff::default(),
            refusals: RefusalMemory::default(),
            audits: Arc::default(),
            usage,
            enforcement,
        }
    }

    /// Drop everything kept about `bulkhead`.
    pub fn forget(&self, bulkhead: &str) {
        self.backoff.reset(bulkhead);
        self.refusals.replace(bulkhead, &[]);
        self.audits.forget(bulkhead);
        self.usage.forget(bulkhead);
        self.enforcement.forget(bulkhead);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{
        controller::{enforcement::EnforcementOptions, metrics::Metrics, usage::UsageOptions},
        evaluate::Kept,
        status::Sizing,
    };

    #[test]
    fn one_forget_drops_everything_kept_about_a_bulkhead_and_nothing_else() {
        let options = UsageOptions::prometheus("http://127.0.0.1:1", Duration::from_secs(60), Duration::from_secs(600))
            .expect("a valid URL");
        let metrics = Arc::new(Metrics::default());
        let enforcement = Arc::new(Enforcement::new(EnforcementOptions::default(), metrics.clone()));
        let memory = Memory::new(Arc::new(Usage::new(options, metrics)), enforcement);
        for name in ["gone", "kept"] {
            memory.backoff.next(name);
            assert_eq!(memory.backoff.next(name), Duration::from_secs(2));
            memory.audits.put(name, Kept::default());
            memory.usage.set(name, Sizing::NoTelemetry("no Prometheus".into()));
        }
        memory.forget("gone");
        assert_eq!(memory.backoff.next("gone"), Duration::from_secs(1), "the backoff starts again");
        assert_eq!(memory.audits.with("gone", |_| ()), None, "no audit state");
        assert_eq!(*memory.usage.sizing("gone"), Sizing::Pending, "no analysis");
        assert_eq!(memory.backoff.next("kept"), Duration::from_secs(4), "another Bulkhead keeps its backoff");
        assert_eq!(memory.audits.with("kept", |_| ()), Some(()));
        assert_ne!(*memory.usage.sizing("kept"), Sizing::Pending);
    }
}
