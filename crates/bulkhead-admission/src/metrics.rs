//! Prometheus metrics, prefix `bulkhead_proxy_`. The per-class numbers are
//! read from the pool's own counters at scrape time, so a request pays no
//! metric update beyond the integers it changes under the admission lock
//! (and one histogram observation when its slot is given back).

use std::sync::Arc;

use prometheus_client::{
    collector::Collector,
    encoding::{text::encode, DescriptorEncoder, EncodeLabelSet, EncodeMetric},
    metrics::{
        counter::{ConstCounter, Counter},
        family::Family,
        gauge::{ConstGauge, Gauge},
        MetricType,
    },
    registry::{Registry, Unit},
};

use super::admission::Pool;

/// Labels of the reload counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `applied`, `invalid` or `unreadable`.
    pub result: &'static str,
}

/// Labels of the proxy's upstream-failure counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabels {
    /// What failed (`connect`, `timeout`, ...).
    pub reason: &'static str,
}

/// The proxy's registry: the pool's counters plus reload bookkeeping.
#[derive(Debug)]
pub struct ProxyMetrics {
    registry: Registry,
    /// Config reloads, by result.
    pub reloads: Family<ResultLabels, Counter>,
    /// Unix seconds of the last config applied (at start or by a reload).
    pub last_good_reload: Gauge<f64, std::sync::atomic::AtomicU64>,
}

impl ProxyMetrics {
    /// A registry (prefix `bulkhead_proxy`) with `pool`'s counters in it.
    pub fn new(pool: Arc<Pool>) -> Self {
        let mut registry = Registry::with_prefix("bulkhead_proxy");
        let reloads = Family::<ResultLabels, Counter>::default();
        let last_good_reload = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        // The pool's series carry the bulkhead of the config in force; these
        // two, the one the proxy started with (a reload never renames it: the
        // ConfigMap is named after the Bulkhead).
        let bulkhead = pool.config().bulkhead.clone();
        let own = registry.sub_registry_with_label(("bulkhead".into(), bulkhead.into()));
        own.register("reloads", "Config reloads by result (applied, invalid, unreadable)", reloads.clone());
        own.register_with_unit(
            "last_good_reload_timestamp",
            "When the config in force was applied (unix time)",
            Unit::Seconds,
            last_good_reload.clone(),
        );
        registry.register_collector(Box::new(PoolCollector(pool)));
        Self { registry, reloads, last_good_reload }
    }

    /// Adds series of the embedding program's own (the sidecar's connections).
    pub fn register_collector(&mut self, collector: Box<dyn Collector>) {
        self.registry.register_collector(collector);
    }

    /// Counts one reload with that result.
    pub fn reload(&self, result: &'static str) {
        self.reloads.get_or_create(&ResultLabels { result }).inc();
    }

    /// Records that a config was applied now.
    pub fn applied_now(&self) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        self.last_good_reload.set(now.as_secs_f64());
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// Encodes a pool's counters, limits and durations, every series labelled
/// with pools.json's `bulkhead`; register it in any registry (the in-process
/// Layer's users can too). Each encode is a scrape: it restarts the
/// high-water marks (see `Pool::scrape`).
#[derive(Debug)]
pub struct PoolCollector(pub Arc<Pool>);

impl Collector for PoolCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = self.0.scrape();
        let b = s.bulkhead.as_str();
        let bulkhead = [("bulkhead", b)];
        let class = |class: &str| [("bulkhead", b.to_owned()), ("class", class.to_owned())];
        let class_pool = |class: &str, pool: &'static str| {
            [("bulkhead", b.to_owned()), ("class", class.to_owned()), ("pool", pool.to_owned())]
        };
        let counter = ConstCounter::new(0u64).metric_type();
        let gauge = ConstGauge::new(0i64).metric_type();

        let mut m = encoder.encode_descriptor(
            "admitted",
            "Requests admitted, by class and pool (floor, surplus)",
            None,
            counter,
        )?;
        for c in &s.classes {
            ConstCounter::new(c.admitted_floor).encode(m.encode_family(&class_pool(&c.name, "floor"))?)?;
            ConstCounter::new(c.admitted_surplus).encode(m.encode_family(&class_pool(&c.name, "surplus"))?)?;
        }
        let mut m = encoder.encode_descriptor("rejected", "Requests rejected, by class and reason", None, counter)?;
        let class_reason = |class: &str, reason: &'static str| {
            [("bulkhead", b.to_owned()), ("class", class.to_owned()), ("reason", reason.to_owned())]
        };
        for c in &s.classes {
            ConstCounter::new(c.rejected_ceiling).encode(m.encode_family(&class_reason(&c.name, "ceiling"))?)?;
            let family = class_reason(&c.name, "surplus-exhausted");
            ConstCounter::new(c.rejected_surplus_exhausted).encode(m.encode_family(&family)?)?;
        }
        // No class: the label is empty, which Prometheus reads as absent.
        ConstCounter::new(s.unclassified_rejected).encode(m.encode_family(&class_reason("", "unclassified"))?)?;

        let mut m =
            encoder.encode_descriptor("in_flight", "Requests holding a slot, by class and pool", None, gauge)?;
        for c in &s.classes {
            ConstGauge::new(i64::from(c.floor_in_use)).encode(m.encode_family(&class_pool(&c.name, "floor"))?)?;
            ConstGauge::new(i64::from(c.surplus_in_use)).encode(m.encode_family(&class_pool(&c.name, "surplus"))?)?;
        }
        // A drill's fault (pools.json's hold): requests admitted and waiting, slot taken, before
        // they are forwarded. The counter has a family name of its own: OpenMetrics forbids a
        // gauge and a counter of one name (`held` and `held_total` would be one family).
        let mut m = encoder.encode_descriptor(
            "held",
            "Requests held now by a drill's fault (admitted, not yet forwarded), by class",
            None,
            gauge,
        )?;
        for c in &s.classes {
            ConstGauge::new(i64::from(c.held)).encode(m.encode_family(&class(&c.name))?)?;
        }
        let mut m = encoder.encode_descriptor(
            "held_requests",
            "Requests a drill's fault has held since start, by class",
            None,
            counter,
        )?;
        for c in &s.classes {
            ConstCounter::new(c.held_total).encode(m.encode_family(&class(&c.name))?)?;
        }
        let mut m = encoder.encode_descriptor(
            "in_flight_high_water",
            "Most requests of a class in flight at once since the last scrape",
            None,
            gauge,
        )?;
        for c in &s.classes {
            ConstGauge::new(i64::from(c.high_water)).encode(m.encode_family(&class(&c.name))?)?;
        }
        let mut m = encoder.encode_descriptor(
            "borrowed_high_water",
            "Most surplus units a class held at once since the last scrape",
            None,
            gauge,
        )?;
        for c in &s.classes {
            ConstGauge::new(i64::from(c.borrowed_high_water)).encode(m.encode_family(&class(&c.name))?)?;
        }
        let active = || s.classes.iter().filter(|c| c.active);
        let mut m = encoder.encode_descriptor("class_reserved", "Floor of each class in force", None, gauge)?;
        for c in active() {
            ConstGauge::new(i64::from(c.reserved)).encode(m.encode_family(&class(&c.name))?)?;
        }
        let mut m = encoder.encode_descriptor("class_ceiling", "Ceiling of each class in force", None, gauge)?;
        for c in active() {
            ConstGauge::new(i64::from(c.ceiling)).encode(m.encode_family(&class(&c.name))?)?;
        }
        let mut m = encoder.encode_descriptor("capacity", "Units this replica may hand out in all", None, gauge)?;
        ConstGauge::new(i64::from(s.capacity)).encode(m.encode_family(&bulkhead)?)?;
        let mut m = encoder.encode_descriptor("shared_surplus", "Units any class may borrow", None, gauge)?;
        ConstGauge::new(i64::from(s.surplus)).encode(m.encode_family(&bulkhead)?)?;
        let mut m = encoder.encode_descriptor("shared_surplus_in_use", "Units borrowed now", None, gauge)?;
        ConstGauge::new(i64::from(s.surplus_in_use)).encode(m.encode_family(&bulkhead)?)?;
        let mut m = encoder.encode_descriptor(
            "divided_by",
            "Replicas a Fleet pool is split over (pools.json dividedBy; 1 for Instance)",
            None,
            gauge,
        )?;
        ConstGauge::new(i64::try_from(s.divided_by).unwrap_or(i64::MAX)).encode(m.encode_family(&bulkhead)?)?;
        let mut m = encoder.encode_descriptor(
            "config_generation",
            "Configs applied since start (1 = the one read at start)",
            None,
            gauge,
        )?;
        ConstGauge::new(i64::try_from(s.generation).unwrap_or(i64::MAX)).encode(m.encode_family(&bulkhead)?)?;
        // An info metric: the operator and a person can tell which planned
        // config this replica enforces (the ConfigMap's hash in status.enforcement).
        if let Some(hash) = &s.config_hash {
            let mut m = encoder.encode_descriptor(
                "config_info",
                "The pool-config document in force, by its content hash (always 1)",
                None,
                gauge,
            )?;
            let labels = [("bulkhead", s.bulkhead.as_str()), ("hash", &**hash)];
            ConstGauge::new(1i64).encode(m.encode_family(&labels)?)?;
        }

        let mut m = encoder.encode_descriptor(
            "request_duration",
            "Time from admission until the response body ended, by class",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for c in &s.classes {
            c.duration.encode(m.encode_family(&class(&c.name))?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::{tests::example, Unclassified};

    #[test]
    fn the_exposition_names_every_series() {
        let pool = Pool::new(example(), Unclassified::Reject).expect("valid");
        let m = ProxyMetrics::new(Arc::clone(&pool));
        let held: Vec<_> = (0..41).map(|_| pool.admit(Some(b"checkout")).expect("room")).collect();
        let _ = pool.admit(None);
        drop(held);
        m.reload("invalid");
        let text = m.encode();
        for line in [
            r#"bulkhead_proxy_admitted_total{bulkhead="example",class="checkout",pool="floor"} 40"#,
            r#"bulkhead_proxy_admitted_total{bulkhead="example",class="checkout",pool="surplus"} 1"#,
            r#"bulkhead_proxy_rejected_total{bulkhead="example",class="",reason="unclassified"} 1"#,
            r#"bulkhead_proxy_in_flight{bulkhead="example",class="checkout",pool="floor"} 0"#,
            r#"bulkhead_proxy_in_flight_high_water{bulkhead="example",class="checkout"} 41"#,
            r#"bulkhead_proxy_held{bulkhead="example",class="checkout"} 0"#,
            r#"bulkhead_proxy_held_requests_total{bulkhead="example",class="checkout"} 0"#,
            r#"bulkhead_proxy_borrowed_high_water{bulkhead="example",class="checkout"} 1"#,
            r#"bulkhead_proxy_class_ceiling{bulkhead="example",class="checkout"} 155"#,
            r#"bulkhead_proxy_class_reserved{bulkhead="example",class="control-plane"} 5"#,
            r#"bulkhead_proxy_capacity{bulkhead="example"} 200"#,
            r#"bulkhead_proxy_divided_by{bulkhead="example"} 1"#,
            r#"bulkhead_proxy_config_generation{bulkhead="example"} 1"#,
            r#"bulkhead_proxy_request_duration_seconds_count{bulkhead="example",class="checkout"} 41"#,
            r#"bulkhead_proxy_reloads_total{bulkhead="example",result="invalid"} 1"#,
            "# TYPE bulkhead_proxy_last_good_reload_timestamp_seconds gauge",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }

    #[test]
    fn the_config_in_force_is_named_by_its_hash_only_when_it_came_from_a_document() {
        let pool = Pool::new(example(), Unclassified::Reject).expect("valid");
        let m = ProxyMetrics::new(Arc::clone(&pool));
        assert!(!m.encode().contains("config_info"), "an in-process config has no document hash");
        pool.apply_hashed(example(), Some("00000000000000ab")).expect("valid");
        let line = r#"bulkhead_proxy_config_info{bulkhead="example",hash="00000000000000ab"} 1"#;
        assert!(m.encode().contains(line), "{line} missing from\n{}", m.encode());
        assert_eq!(pool.in_force(), (2, Some(Arc::from("00000000000000ab"))));
    }

    #[test]
    fn held_requests_are_counted_by_class_while_held_and_in_all() {
        let mut config = example();
        let until = crate::pool_config::now_unix_ms() + 60_000;
        config.classes[1].hold = Some(crate::pool_config::Hold { drill: "d".into(), ms: 1_000, until_unix_ms: until });
        let pool = Pool::new(config, Unclassified::Reject).expect("valid");
        let m = ProxyMetrics::new(Arc::clone(&pool));
        let permits: Vec<_> = (0..2).map(|_| pool.admit(Some(b"search")).expect("room")).collect();
        let mut held: Vec<_> = permits.iter().map(|p| p.drill_hold().expect("a hold").begin()).collect();
        drop(held.pop());
        let text = m.encode();
        for line in [
            r#"bulkhead_proxy_held{bulkhead="example",class="search"} 1"#,
            r#"bulkhead_proxy_held_requests_total{bulkhead="example",class="search"} 2"#,
            r#"bulkhead_proxy_held{bulkhead="example",class="checkout"} 0"#,
            "# TYPE bulkhead_proxy_held gauge",
            "# TYPE bulkhead_proxy_held_requests counter",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }

    #[test]
    fn the_high_water_mark_keeps_a_peak_between_scrapes_and_restarts_at_each() {
        let pool = Pool::new(example(), Unclassified::Reject).expect("valid");
        let m = ProxyMetrics::new(Arc::clone(&pool));
        let keep = pool.admit(Some(b"search")).expect("room");
        let burst: Vec<_> = (0..7).map(|_| pool.admit(Some(b"search")).expect("room")).collect();
        drop(burst);
        let hw = r#"bulkhead_proxy_in_flight_high_water{bulkhead="example",class="search"}"#;
        assert!(m.encode().contains(&format!("{hw} 8")), "the burst of 8 ended before the scrape, yet shows");
        assert!(m.encode().contains(&format!("{hw} 1")), "the next scrape starts from what is in flight");
        drop(keep);
        assert!(m.encode().contains(&format!("{hw} 1")), "the release after the last scrape still counted");
        assert!(m.encode().contains(&format!("{hw} 0")));
    }
}
