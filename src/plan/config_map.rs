//! The pool config: one ConfigMap per Bulkhead, in the workload's namespace,
//! holding exactly what a sidecar or an in-process pool needs to enforce the
//! partition on one replica: take from the class's floor first, then borrow
//! from the shared surplus, reject at the ceiling, never queue.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;

use super::{capacity::CapacityPlan, DrillFault};
use crate::{
    crd::Bulkhead,
    pool_config::{Hold, PoolClass, PoolConfig, POOL_CONFIG_KEY, POOL_CONFIG_VERSION},
};

/// The pool config of one replica; with a drill's `fault` on this Bulkhead,
/// its class carries the hold (a critical class never does: the drill is
/// refused before, and the sidecar would refuse the document).
pub(super) fn pool_config(bulkhead: &Bulkhead, capacity: &CapacityPlan, fault: Option<&DrillFault>) -> PoolConfig {
    let name = bulkhead.name_any();
    let fault = fault.filter(|f| f.bulkhead == name);
    PoolConfig {
        version: POOL_CONFIG_VERSION,
        bulkhead: name,
        resource: bulkhead.spec.pool.resource.clone(),
        scope: capacity.scope,
        divided_by: capacity.divisor,
        capacity: capacity.per_replica_capacity,
        shared_surplus: capacity.per_replica_shared,
        on_ceiling: crate::pool_config::OnCeiling::Reject,
        classes: capacity
            .classes
            .iter()
            .map(|c| PoolClass {
                name: c.name.clone(),
                reserved: c.reserved_per_replica,
                ceiling: c.ceiling_per_replica,
                critical: c.critical,
                max_duration_ms: bulkhead
                    .spec
                    .classes
                    .iter()
                    .find(|spec| spec.name == c.name)
                    .and_then(|spec| spec.max_duration_ms),
                hold: fault.filter(|f| f.class == c.name && !c.critical).map(|f| Hold {
                    drill: f.drill.clone(),
                    ms: f.hold_ms,
                    until_unix_ms: f.until_unix_ms,
                }),
            })
            .collect(),
    }
}

/// Name of the pool-config ConfigMap of a Bulkhead.
pub fn config_map_name(bulkhead: &str) -> String {
    format!("bulkhead-{bulkhead}")
}

pub(super) fn config_map(bulkhead: &Bulkhead, namespace: &str, config: &PoolConfig) -> ConfigMap {
    let json = serde_json::to_string_pretty(config).expect("a pool config serialises");
    ConfigMap {
        metadata: super::child_meta(bulkhead, config_map_name(&bulkhead.name_any()), Some(namespace), None),
        data: Some(BTreeMap::from([(POOL_CONFIG_KEY.to_string(), json)])),
        ..ConfigMap::default()
    }
}
