//! Prometheus metrics: reconcile counts, errors by kind, durations, the
//! planned numbers per class, and each Bulkhead's conditions (what the chart's
//! PrometheusRule alerts on), the usage analyses, plus the conventions of every operator:
//! reconciles by result, build_info, a leader gauge and process_*.

use std::time::Duration;

use prometheus_client::{
    encoding::{
        text::{encode_eof, encode_registry},
        EncodeLabelSet,
    },
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::{
    crd::{Layer, LayerState, LayerStatus},
    plan::CapacityPlan,
};

/// The statuses a condition can have; each gets a series (1 for the current one).
const CONDITION_STATUSES: [&str; 3] = ["True", "False", "Unknown"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// The watched kind (Pod, Node, Bulkhead, ...).
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// success or error, as controller-runtime's reconcile_total counts them.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(in crate::controller) struct BuildLabels {
    pub version: &'static str,
}

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
pub struct LayerLabels {
    pub bulkhead: String,
    pub layer: String,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabels {
    pub bulkhead: String,
    pub condition: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub kind: String,
    pub verb: String,
}

pub struct Metrics {
    registry: Registry,
    /// Unprefixed: process_* are named the same in every program.
    process: Registry,
    /// Classes each Bulkhead last reported, so a removed class's series go too.
    classes: std::sync::Mutex<std::collections::HashMap<String, Vec<String>>>,
    /// Condition types each Bulkhead last reported, for the same reason.
    condition_types: std::sync::Mutex<std::collections::HashMap<String, Vec<String>>>,
    /// Reconciles finished, by result.
    pub reconciles: Family<ResultLabels, Counter>,
    /// 1 while this replica reconciles (holds the Lease, or runs without
    /// leader election); 0 on a standby.
    pub leader: Gauge,
    /// Reconciles that reused the last evaluation (nothing it read changed).
    pub evaluations_reused: Counter,
    /// Reconciles that reused the last plan and ran only the audit again.
    pub plans_reused: Counter,
    pub errors: Family<ErrorLabels, Counter>,
    pub duration: Histogram,
    pub writes: Family<WriteLabels, Counter>,
    pub reserved: Family<ClassLabels, Gauge>,
    pub ceiling: Family<ClassLabels, Gauge>,
    pub layers: Family<LayerLabels, Gauge>,
    pub conditions: Family<ConditionLabels, Gauge>,
    /// Usage analyses finished, by what they found (`advised`, `no_telemetry`, `failed`).
    pub analyses: Family<ResultLabels, Counter>,
    /// Time one usage analysis took (its Prometheus queries and the analysis).
    pub analysis_duration: Histogram,
    /// From the operator's write of a pool config until every running pod's
    /// sidecar reported it (`controller::enforcement`).
    pub config_convergence: Histogram,
    /// Sidecars asked which config they enforce, by outcome (`answered`, `unreachable`).
    pub enforcement_probes: Family<ResultLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("bulkhead");
        let (reconciles, leader) = register_conventions(&mut registry);
        let evaluations_reused = Counter::default();
        let plans_reused = Counter::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let duration = Histogram::new([0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0]);
        let writes = Family::<WriteLabels, Counter>::default();
        let reserved = Family::<ClassLabels, Gauge>::default();
        let ceiling = Family::<ClassLabels, Gauge>::default();
        let layers = Family::<LayerLabels, Gauge>::default();
        let conditions = Family::<ConditionLabels, Gauge>::default();
        let analyses = Family::<ResultLabels, Counter>::default();
        let analysis_duration = Histogram::new([0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0]);
        // The goal is 2 s, the kubelet's periodic sync about 60 s.
        let config_convergence = Histogram::new([0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0]);
        let enforcement_probes = Family::<ResultLabels, Counter>::default();
        registry.register(
            "enforcement_probes",
            "Sidecars asked on their admin port which pool config they enforce, by outcome (answered, unreachable)",
            enforcement_probes.clone(),
        );
        registry.register_with_unit(
            "config_convergence",
            "Time from the operator's write of a pool config until every running selected pod's sidecar enforced it",
            prometheus_client::registry::Unit::Seconds,
            config_convergence.clone(),
        );
        registry.register(
            "usage_analyses",
            "Usage analyses finished (--prometheus-url), by result (advised, no_telemetry, failed)",
            analyses.clone(),
        );
        registry.register_with_unit(
            "usage_analysis_duration",
            "Time one usage analysis took: its Prometheus queries and the analysis",
            prometheus_client::registry::Unit::Seconds,
            analysis_duration.clone(),
        );
        registry.register(
            "evaluations_reused",
            "Reconciles that reused the Bulkhead's last evaluation: nothing it reads had changed",
            evaluations_reused.clone(),
        );
        registry.register(
            "plans_reused",
            "Reconciles that reused the Bulkhead's last plan and ran only the audit again: only pods changed, \
             and the plan had read none",
            plans_reused.clone(),
        );
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
        registry.register(
            "layer_state",
            "1 for the state (Separate, Shared, Unverified) each layer of each Bulkhead is in, else 0",
            layers.clone(),
        );
        registry.register(
            "condition",
            "1 for the status (True, False, Unknown) each condition of each Bulkhead has, else 0",
            conditions.clone(),
        );
        let mut process = Registry::default();
        process.register_collector(Box::new(super::process_metrics::ProcessCollector));
        Self {
            registry,
            process,
            classes: Default::default(),
            condition_types: Default::default(),
            reconciles,
            leader,
            evaluations_reused,
            plans_reused,
            errors,
            duration,
            writes,
            reserved,
            ceiling,
            layers,
            conditions,
            analyses,
            analysis_duration,
            config_convergence,
            enforcement_probes,
        }
    }
}

/// What every operator exports (controller-runtime, cert-manager, Kueue):
/// reconciles by result, the build, and whether this replica leads.
impl Metrics {
    /// Counts the snapshot's failed watch attempts (the family lives with the
    /// watches, which start before the metrics do).
    pub fn register_watch_failures(&mut self, failures: Family<KindLabels, Counter>) {
        self.registry.register("watch_failures", "Failed watch attempts, by kind", failures);
    }
}

fn register_conventions(registry: &mut Registry) -> (Family<ResultLabels, Counter>, Gauge) {
    let reconciles = Family::<ResultLabels, Counter>::default();
    registry.register("reconciles", "Reconciles finished, by result (success, error)", reconciles.clone());
    let build = Family::<BuildLabels, Gauge>::default();
    build.get_or_create(&BuildLabels { version: env!("CARGO_PKG_VERSION") }).set(1);
    registry.register("build_info", "1, labelled with the version of the running operator", build);
    let leader = Gauge::default();
    registry.register(
        "leader",
        "1 while this replica reconciles (holds the leader Lease, or runs without leader election), else 0",
        leader.clone(),
    );
    (reconciles, leader)
}

impl Metrics {
    /// One reconcile finished.
    pub fn record_reconcile(&self, succeeded: bool) {
        let result = if succeeded { "success" } else { "error" };
        self.reconciles.get_or_create(&ResultLabels { result }).inc();
    }

    pub fn observe_duration(&self, took: Duration) {
        self.duration.observe(took.as_secs_f64());
    }

    /// One usage analysis finished with `result`, after `took`.
    pub fn record_analysis(&self, result: &'static str, took: Duration) {
        self.analyses.get_or_create(&ResultLabels { result }).inc();
        self.analysis_duration.observe(took.as_secs_f64());
    }

    pub fn record_plan(&self, bulkhead: &str, plan: &CapacityPlan) {
        let now: Vec<String> = plan.classes.iter().map(|c| c.name.clone()).collect();
        let before = self
            .classes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(bulkhead.to_string(), now.clone())
            .unwrap_or_default();
        for gone in before.into_iter().filter(|c| !now.contains(c)) {
            let labels = ClassLabels { bulkhead: bulkhead.into(), class: gone };
            self.reserved.remove(&labels);
            self.ceiling.remove(&labels);
        }
        for class in &plan.classes {
            let labels = ClassLabels { bulkhead: bulkhead.into(), class: class.name.clone() };
            self.reserved.get_or_create(&labels).set(i64::from(class.reserved_per_replica));
            self.ceiling.get_or_create(&labels).set(i64::from(class.ceiling_per_replica));
        }
    }

    pub fn record_layers<'a>(&self, bulkhead: &str, layers: impl IntoIterator<Item = &'a LayerStatus>) {
        for layer in layers {
            for state in [LayerState::Separate, LayerState::Shared, LayerState::Unverified] {
                let labels = LayerLabels {
                    bulkhead: bulkhead.into(),
                    layer: format!("{:?}", layer.name),
                    state: format!("{state:?}"),
                };
                self.layers.get_or_create(&labels).set(i64::from(layer.state == state));
            }
        }
    }

    /// The conditions a Bulkhead's status reports now; a condition it no
    /// longer reports loses its series.
    pub fn record_conditions(&self, bulkhead: &str, conditions: &[Condition]) {
        let now: Vec<String> = conditions.iter().map(|c| c.type_.clone()).collect();
        let before = self
            .condition_types
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(bulkhead.to_string(), now.clone())
            .unwrap_or_default();
        for gone in before.into_iter().filter(|c| !now.contains(c)) {
            self.forget_condition(bulkhead, &gone);
        }
        for c in conditions {
            for status in CONDITION_STATUSES {
                let labels =
                    ConditionLabels { bulkhead: bulkhead.into(), condition: c.type_.clone(), status: status.into() };
                self.conditions.get_or_create(&labels).set(i64::from(c.status == status));
            }
        }
    }

    fn forget_condition(&self, bulkhead: &str, condition: &str) {
        for status in CONDITION_STATUSES {
            self.conditions.remove(&ConditionLabels {
                bulkhead: bulkhead.into(),
                condition: condition.into(),
                status: status.into(),
            });
        }
    }

    /// Drop the per-class series of a deleted Bulkhead.
    pub fn forget(&self, bulkhead: &str, classes: impl IntoIterator<Item = String>) {
        let known = self.classes.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(bulkhead);
        let conditions =
            self.condition_types.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(bulkhead);
        for condition in conditions.into_iter().flatten() {
            self.forget_condition(bulkhead, &condition);
        }
        for class in classes.into_iter().chain(known.into_iter().flatten()) {
            let labels = ClassLabels { bulkhead: bulkhead.into(), class };
            self.reserved.remove(&labels);
            self.ceiling.remove(&labels);
        }
        for layer in Layer::ALL {
            for state in [LayerState::Separate, LayerState::Shared, LayerState::Unverified] {
                self.layers.remove(&LayerLabels {
                    bulkhead: bulkhead.into(),
                    layer: format!("{layer:?}"),
                    state: format!("{state:?}"),
                });
            }
        }
    }

    pub fn record_write(&self, kind: &str, verb: &str) {
        self.writes.get_or_create(&WriteLabels { kind: kind.into(), verb: verb.into() }).inc();
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = encode_registry(&mut out, &self.registry)
            .and_then(|()| encode_registry(&mut out, &self.process))
            .and_then(|()| encode_eof(&mut out));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{crd::BulkheadSpec, plan::plan_capacity};

    fn spec(classes: &[&str]) -> BulkheadSpec {
        let classes: Vec<String> = classes.iter().map(|c| format!("{{name: {c}, reserved: 1}}")).collect();
        serde_saphyr::from_str(&format!(
            "dimension: Tenant\npool: {{resource: c, capacity: 10}}\nclasses: [{}]",
            classes.join(", ")
        ))
        .expect("spec")
    }

    /// Value of one sample line, e.g. `bulkhead_leader 0`.
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn reconciles_by_result_build_info_leader_and_process_metrics_are_exported() {
        let m = Metrics::default();
        m.record_reconcile(true);
        m.record_reconcile(true);
        m.record_reconcile(false);
        m.leader.set(1);
        let text = m.encode();
        assert_eq!(sample(&text, r#"bulkhead_reconciles_total{result="success"}"#), Some(2.0), "{text}");
        assert_eq!(sample(&text, r#"bulkhead_reconciles_total{result="error"}"#), Some(1.0), "{text}");
        let build = format!(r#"bulkhead_build_info{{version="{}"}}"#, env!("CARGO_PKG_VERSION"));
        assert_eq!(sample(&text, &build), Some(1.0), "{text}");
        assert_eq!(sample(&text, "bulkhead_leader"), Some(1.0), "{text}");
        // A test process may not have used a whole clock tick yet.
        assert!(sample(&text, "process_cpu_seconds_total").is_some_and(|v| v >= 0.0), "{text}");
        for unprefixed in [
            "process_resident_memory_bytes",
            "process_virtual_memory_bytes",
            "process_start_time_seconds",
            "process_open_fds",
            "process_max_fds",
            "process_threads",
        ] {
            assert!(sample(&text, unprefixed).is_some_and(|v| v > 0.0), "{unprefixed} in:\n{text}");
        }
        // One exposition: a single EOF, at the end.
        assert_eq!(text.matches("# EOF").count(), 1);
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn a_removed_class_loses_its_series_and_a_deleted_bulkhead_all_of_them() {
        let m = Metrics::default();
        m.record_plan("bh", &plan_capacity(&spec(&["a", "b"]), None).0);
        assert!(m.encode().contains(r#"class="b""#));
        m.record_plan("bh", &plan_capacity(&spec(&["a"]), None).0);
        let text = m.encode();
        assert!(text.contains(r#"bulkhead_class_reserved{bulkhead="bh",class="a"} 1"#), "{text}");
        assert!(!text.contains(r#"class="b""#), "{text}");
        m.forget("bh", Vec::new());
        assert!(!m.encode().contains(r#"bulkhead="bh""#));
    }

    fn condition(type_: &str, status: &str) -> Condition {
        serde_json::from_value(serde_json::json!({
            "type": type_, "status": status, "reason": "R", "message": "",
            "lastTransitionTime": "2026-12-03T00:00:00Z"
        }))
        .expect("condition")
    }

    #[test]
    fn each_condition_has_one_series_at_one_per_status_and_a_dropped_condition_loses_them() {
        let m = Metrics::default();
        m.record_conditions("bh", &[condition("Ready", "False"), condition("Funded", "True")]);
        let text = m.encode();
        for line in [
            r#"bulkhead_condition{bulkhead="bh",condition="Ready",status="False"} 1"#,
            r#"bulkhead_condition{bulkhead="bh",condition="Ready",status="True"} 0"#,
            r#"bulkhead_condition{bulkhead="bh",condition="Ready",status="Unknown"} 0"#,
            r#"bulkhead_condition{bulkhead="bh",condition="Funded",status="True"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing in:\n{text}");
        }
        m.record_conditions("bh", &[condition("Ready", "True")]);
        let text = m.encode();
        assert!(text.contains(r#"bulkhead_condition{bulkhead="bh",condition="Ready",status="True"} 1"#), "{text}");
        assert!(!text.contains(r#"condition="Funded""#), "{text}");
        m.forget("bh", Vec::new());
        assert!(!m.encode().contains(r#"bulkhead_condition{"#), "{}", m.encode());
    }
}
