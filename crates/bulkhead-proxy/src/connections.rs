//! The client connections and their cap (`--max-connections`), shared by
//! every app listener, and their figures on `/metrics`: how many are open,
//! the cap in force (lowered at start to what RLIMIT_NOFILE allows, so a
//! sidecar whose runtime gives few descriptors shows it), and how many were
//! closed at once because the cap was reached (Envoy's
//! `downstream_cx_overflow`).

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{counter::ConstCounter, gauge::ConstGauge},
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

#[derive(Debug)]
pub(super) struct Connections {
    limit: usize,
    slots: Arc<Semaphore>,
    refused: AtomicU64,
    /// pools.json's `bulkhead` at start, the label of the proxy's own series.
    bulkhead: String,
}

impl Connections {
    pub(super) fn new(limit: usize, bulkhead: String) -> Arc<Self> {
        Arc::new(Self { limit, slots: Arc::new(Semaphore::new(limit)), refused: AtomicU64::new(0), bulkhead })
    }

    /// A slot for one more connection, held until it ends; None (counted) past the cap.
    pub(super) fn admit(&self) -> Option<OwnedSemaphorePermit> {
        let slot = Arc::clone(&self.slots).try_acquire_owned().ok();
        if slot.is_none() {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        slot
    }
}

/// Registers [`Connections`] in the proxy's registry.
#[derive(Debug)]
pub(super) struct ConnectionCollector(pub Arc<Connections>);

impl Collector for ConnectionCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let c = &self.0;
        let labels = [("bulkhead", c.bulkhead.as_str())];
        let open = c.limit.saturating_sub(c.slots.available_permits());
        let gauge = |n: usize| ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX));
        let mut series = |name: &str, help: &str, metric: &dyn EncodeMetric| {
            metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?.encode_family(&labels)?)
        };
        series("connections", "Client connections open on the app listeners", &gauge(open))?;
        series(
            "connections_limit",
            "Client connections allowed at once: --max-connections, lowered to what RLIMIT_NOFILE allows",
            &gauge(c.limit),
        )?;
        series(
            "connections_refused",
            "Client connections closed at once because the limit was reached",
            &ConstCounter::new(c.refused.load(Ordering::Relaxed)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::{encoding::text::encode, registry::Registry};

    #[test]
    fn open_limit_and_refused_connections_are_counted() {
        let c = Connections::new(2, "shop".into());
        let held: Vec<_> = (0..3).map(|_| c.admit()).collect();
        assert_eq!(held.iter().filter(|s| s.is_some()).count(), 2);
        let mut registry = Registry::with_prefix("bulkhead_proxy");
        registry.register_collector(Box::new(ConnectionCollector(Arc::clone(&c))));
        let mut out = String::new();
        encode(&mut out, &registry).expect("encode");
        assert!(out.contains("bulkhead_proxy_connections{bulkhead=\"shop\"} 2\n"), "{out}");
        assert!(out.contains("bulkhead_proxy_connections_limit{bulkhead=\"shop\"} 2\n"), "{out}");
        assert!(out.contains("bulkhead_proxy_connections_refused_total{bulkhead=\"shop\"} 1\n"), "{out}");
        drop(held);
        let mut out = String::new();
        encode(&mut out, &registry).expect("encode");
        assert!(out.contains("bulkhead_proxy_connections{bulkhead=\"shop\"} 0\n"), "{out}");
    }
}
