//! Typed builders for what tests write and read: a Bulkhead with its classes,
//! a pool config, and the pool config the operator wrote for a Bulkhead,
//! found by the names the operator itself gives it (`plan::config_map_name`,
//! `POOL_CONFIG_KEY`). Each starts from what the spec requires and adds
//! only what a test says.

use std::collections::BTreeMap;

use bulkhead::{
    crd::{Bulkhead, BulkheadSpec, ClassPods, ClassSpec, Dimension, Layer, PoolSpec, ProxySpec, WorkloadRef},
    plan::config_map_name,
    pool_config::{OnCeiling, PoolClass, PoolConfig, Scope, POOL_CONFIG_KEY},
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{Api, Client};

/// The pool config the operator wrote for Bulkhead `bulkhead` into
/// `namespace`; None until its ConfigMap is there and parses.
pub async fn pool_config(client: &Client, namespace: &str, bulkhead: &str) -> Option<PoolConfig> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), namespace).get(&config_map_name(bulkhead)).await.ok()?;
    serde_json::from_str(cm.data?.get(POOL_CONFIG_KEY)?).ok()
}

/// A label selector matching exactly these labels.
pub fn match_labels(labels: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
        ..LabelSelector::default()
    }
}

/// A Bulkhead: `bulkhead(name, dimension, resource, capacity)`, then its
/// classes and whatever else the test needs.
#[derive(Clone, Debug)]
pub struct BulkheadBuilder(Bulkhead);

/// A Bulkhead of scope Instance, with no workload, layers or classes yet.
pub fn bulkhead(name: &str, dimension: Dimension, resource: &str, capacity: u32) -> BulkheadBuilder {
    BulkheadBuilder(Bulkhead::new(
        name,
        BulkheadSpec {
            dimension,
            pool: PoolSpec { resource: resource.to_string(), capacity, scope: Scope::Instance, shared_surplus: None },
            workload: None,
            layers: Vec::new(),
            classes: Vec::new(),
            shuffle_sharding: None,
        },
    ))
}

impl BulkheadBuilder {
    pub fn scope(mut self, scope: Scope) -> Self {
        self.0.spec.pool.scope = scope;
        self
    }

    pub fn shared_surplus(mut self, units: u32) -> Self {
        self.0.spec.pool.shared_surplus = Some(units);
        self
    }

    /// spec.workload: the Deployments and StatefulSets in `namespace` whose
    /// pod templates carry these labels.
    pub fn workload(mut self, namespace: &str, labels: &[(&str, &str)]) -> Self {
        self.0.spec.workload =
            Some(WorkloadRef { namespace: namespace.to_string(), selector: match_labels(labels), proxy: None });
        self
    }

    /// spec.workload.proxy (set the workload first).
    pub fn proxy(mut self, proxy: ProxySpec) -> Self {
        let workload = self.0.spec.workload.as_mut().expect("a proxy needs spec.workload: call workload() first");
        workload.proxy = Some(proxy);
        self
    }

    pub fn layers(mut self, layers: &[Layer]) -> Self {
        self.0.spec.layers = layers.to_vec();
        self
    }

    pub fn class(mut self, class: ClassBuilder) -> Self {
        self.0.spec.classes.push(class.0);
        self
    }

    pub fn build(self) -> Bulkhead {
        self.0
    }

    /// As `kubectl apply -f -` takes it.
    pub fn yaml(&self) -> String {
        bulkhead::crd::to_yaml(&self.0).expect("a Bulkhead serialises")
    }
}

/// One class of a Bulkhead: `class(name, reserved)`, then what differs.
#[derive(Clone, Debug)]
pub struct ClassBuilder(ClassSpec);

pub fn class(name: &str, reserved: u32) -> ClassBuilder {
    ClassBuilder(ClassSpec {
        name: name.to_string(),
        reserved,
        ceiling: None,
        critical: false,
        pods: None,
        quota: None,
        databases: Vec::new(),
        nodes: None,
        anti_affinity: None,
        runtime_class_name: None,
        priority: None,
        max_duration_ms: None,
    })
}

impl ClassBuilder {
    pub fn ceiling(mut self, ceiling: u32) -> Self {
        self.0.ceiling = Some(ceiling);
        self
    }

    pub fn critical(mut self) -> Self {
        self.0.critical = true;
        self
    }

    /// pods: the pods with `pods` labels in namespaces with `namespaces` labels.
    pub fn pods(mut self, namespaces: &[(&str, &str)], pods: &[(&str, &str)]) -> Self {
        self.0.pods = Some(ClassPods {
            namespace_selector: (!namespaces.is_empty()).then(|| match_labels(namespaces)),
            pod_selector: (!pods.is_empty()).then(|| match_labels(pods)),
        });
        self
    }

    pub fn databases(mut self, urls: &[&str]) -> Self {
        self.0.databases = urls.iter().map(ToString::to_string).collect();
        self
    }

    pub fn build(self) -> ClassSpec {
        self.0
    }
}

/// A pool config as a proxy reads it: `pools(bulkhead, resource, capacity)`,
/// then its classes.
#[derive(Clone, Debug)]
pub struct PoolConfigBuilder(PoolConfig);

/// Version 1, scope Instance over one replica, no surplus, no classes yet.
pub fn pools(bulkhead: &str, resource: &str, capacity: u32) -> PoolConfigBuilder {
    PoolConfigBuilder(PoolConfig {
        version: 1,
        bulkhead: bulkhead.to_string(),
        resource: resource.to_string(),
        scope: Scope::Instance,
        divided_by: 1,
        capacity,
        shared_surplus: 0,
        on_ceiling: OnCeiling::Reject,
        classes: Vec::new(),
    })
}

impl PoolConfigBuilder {
    pub fn shared_surplus(mut self, units: u32) -> Self {
        self.0.shared_surplus = units;
        self
    }

    /// A class that is not critical.
    pub fn class(self, name: &str, reserved: u32, ceiling: u32) -> Self {
        self.with_class(name, reserved, ceiling, false)
    }

    /// A critical class (the control-plane lane).
    pub fn critical(self, name: &str, reserved: u32, ceiling: u32) -> Self {
        self.with_class(name, reserved, ceiling, true)
    }

    fn with_class(mut self, name: &str, reserved: u32, ceiling: u32, critical: bool) -> Self {
        let class =
            PoolClass { name: name.to_string(), reserved, ceiling, critical, max_duration_ms: None, hold: None };
        self.0.classes.push(class);
        self
    }

    pub fn build(self) -> PoolConfig {
        self.0
    }

    /// The document as a ConfigMap holds it under `POOL_CONFIG_KEY`.
    pub fn json(&self) -> String {
        serde_json::to_string(&self.0).expect("a pool config serialises")
    }

    /// The ConfigMap the operator would write for it in `namespace`.
    pub fn config_map(&self, namespace: &str) -> ConfigMap {
        ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(config_map_name(&self.0.bulkhead)),
                namespace: Some(namespace.to_string()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(POOL_CONFIG_KEY.to_string(), self.json())])),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The builder writes examples/four-pools.yaml as the file says it.
    #[test]
    fn a_built_bulkhead_is_the_example_it_describes() {
        let file = std::fs::read_to_string(crate::repo_root().join("examples/four-pools.yaml")).expect("example");
        let example: Bulkhead = serde_saphyr::from_str(&file).expect("example parses");
        let built = bulkhead("four-pools", Dimension::Dependency, "connections", 200)
            .shared_surplus(0)
            .workload("shop", &[("app", "api")])
            .layers(&[Layer::Process])
            .class(class("payments-db", 50))
            .class(class("search", 50))
            .class(class("inventory", 50))
            .class(class("reports", 50));
        let same = |b: &Bulkhead| (b.metadata.name.clone(), b.spec.clone());
        assert_eq!(same(&built.clone().build()), same(&example));
        let again: Bulkhead = serde_saphyr::from_str(&built.yaml()).expect("its YAML parses");
        assert_eq!(same(&again), same(&example));
    }

    /// The builder writes the proxy tests' pool config.
    #[test]
    fn a_built_pool_config_is_the_proxy_tests_one() {
        let written: PoolConfig = serde_json::from_str(&crate::proxy::pools_with(10, 5)).expect("parses");
        let built = pools("shop", "requests", 10)
            .shared_surplus(4)
            .class("checkout", 2, 5)
            .class("search", 2, 4)
            .critical("control-plane", 2, 2);
        assert_eq!(built.clone().build(), written);
        assert_eq!(serde_json::from_str::<PoolConfig>(&built.json()).expect("parses"), written);
        let cm = built.config_map("shop");
        assert_eq!(cm.metadata.name.as_deref(), Some("bulkhead-shop"));
        assert!(cm.data.expect("data").contains_key("pools.json"));
    }
}
