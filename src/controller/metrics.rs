//! Prometheus metrics: reconcile counts, errors by kind, durations, and the
//! planned numbers per class.

use std::time::Duration;

use prometheus_client::{
    encoding::{text::encode, EncodeLabelSet},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

use crate::plan::CapacityPlan;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabels {
    pub bulkhead: String,
    pub class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub kind: String,
    pub verb: String,
}

pub struct Metrics {
    registry: Registry,
    pub reconciles: Counter,
    pub errors: Family<ErrorLabels, Counter>,
    pub duration: Histogram,
    pub writes: Family<WriteLabels, Counter>,
    pub reserved: Family<ClassLabels, Gauge>,
    pub ceiling: Family<ClassLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("bulkhead");
        let reconciles = Counter::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let duration = Histogram::new([0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0]);
        let writes = Family::<WriteLabels, Counter>::default();
        let reserved = Family::<ClassLabels, Gauge>::default();
        let ceiling = Family::<ClassLabels, Gauge>::default();
        registry.register("reconciles", "Reconciles started", reconciles.clone());
        registry.register("reconcile_errors", "Reconciles that failed, by error kind", errors.clone());
        registry.register_with_unit(
            "reconcile_duration",
            "Time a reconcile took",
            prometheus_client::registry::Unit::Seconds,
            duration.clone(),
        );
        registry.register("writes", "Objects written to the API server, by kind and verb", writes.clone());
        registry.register("class_reserved", "Planned floor per class and replica", reserved.clone());
        registry.register("class_ceiling", "Planned ceiling per class and replica", ceiling.clone());
        Self { registry, reconciles, errors, duration, writes, reserved, ceiling }
    }
}

impl Metrics {
    pub fn observe_duration(&self, took: Duration) {
        self.duration.observe(took.as_secs_f64());
    }

    pub fn record_plan(&self, bulkhead: &str, plan: &CapacityPlan) {
        for class in &plan.classes {
            let labels = ClassLabels { bulkhead: bulkhead.into(), class: class.name.clone() };
            self.reserved.get_or_create(&labels).set(i64::from(class.reserved_per_replica));
            self.ceiling.get_or_create(&labels).set(i64::from(class.ceiling_per_replica));
        }
    }

    /// Drop the per-class series of a deleted Bulkhead.
    pub fn forget(&self, bulkhead: &str, classes: impl IntoIterator<Item = String>) {
        for class in classes {
            let labels = ClassLabels { bulkhead: bulkhead.into(), class };
            self.reserved.remove(&labels);
            self.ceiling.remove(&labels);
        }
    }

    pub fn record_write(&self, kind: &str, verb: &str) {
        self.writes.get_or_create(&WriteLabels { kind: kind.into(), verb: verb.into() }).inc();
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}
