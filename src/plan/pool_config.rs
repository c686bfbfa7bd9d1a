//! The pool config: one ConfigMap per Bulkhead, in the workload's namespace,
//! holding exactly what a sidecar or an in-process pool needs to enforce the
//! partition on one replica: take from the class's floor first, then borrow
//! from the shared surplus, reject at the ceiling, never queue.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{api::ObjectMeta, Resource, ResourceExt};
use serde::{Deserialize, Serialize};

use super::capacity::CapacityPlan;
use crate::crd::{Bulkhead, Scope};

/// Key of the JSON document in the ConfigMap.
pub const POOL_CONFIG_KEY: &str = "pools.json";

/// Schema version of the JSON document; bump on incompatible change.
pub const POOL_CONFIG_VERSION: u32 = 1;

/// The JSON document (documented in the README).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolConfig {
    pub version: u32,
    pub bulkhead: String,
    pub resource: String,
    pub scope: Scope,
    /// Replicas the fleet-wide numbers were divided by (1 for Instance).
    pub divided_by: u32,
    /// Units this replica may hand out in all.
    pub capacity: u32,
    /// Units any class may borrow beyond its floor, on this replica.
    pub shared_surplus: u32,
    /// What to do at a class's ceiling: always "reject" (never queue across classes).
    pub on_ceiling: String,
    pub classes: Vec<PoolClass>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolClass {
    pub name: String,
    /// Floor on this replica: held for this class alone.
    pub reserved: u32,
    /// Most this class may hold on this replica (floor + borrowed).
    pub ceiling: u32,
    pub critical: bool,
}

pub fn pool_config(bulkhead: &Bulkhead, capacity: &CapacityPlan) -> PoolConfig {
    PoolConfig {
        version: POOL_CONFIG_VERSION,
        bulkhead: bulkhead.name_any(),
        resource: bulkhead.spec.pool.resource.clone(),
        scope: capacity.scope,
        divided_by: capacity.divisor,
        capacity: capacity.per_replica_capacity,
        shared_surplus: capacity.per_replica_shared,
        on_ceiling: "reject".into(),
        classes: capacity
            .classes
            .iter()
            .map(|c| PoolClass {
                name: c.name.clone(),
                reserved: c.reserved_per_replica,
                ceiling: c.ceiling_per_replica,
                critical: c.critical,
            })
            .collect(),
    }
}

/// Name of the pool-config ConfigMap of a Bulkhead.
pub fn config_map_name(bulkhead: &str) -> String {
    format!("bulkhead-{bulkhead}")
}

pub fn config_map(bulkhead: &Bulkhead, namespace: &str, config: &PoolConfig) -> ConfigMap {
    let json = serde_json::to_string_pretty(config).expect("a pool config serialises");
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(config_map_name(&bulkhead.name_any())),
            namespace: Some(namespace.to_string()),
            labels: Some(super::child_labels(bulkhead, None)),
            owner_references: bulkhead.controller_owner_ref(&()).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(POOL_CONFIG_KEY.to_string(), json)])),
        ..ConfigMap::default()
    }
}
