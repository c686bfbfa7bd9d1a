//! `plan`: a pure function from a Bulkhead and a Snapshot to the objects the
//! operator should write and the numbers it reports. The controller applies
//! its output; `bulkhead plan` prints it.

mod admission;
mod bypass;
mod capacity;
mod changes;
mod config_map;
mod injection;
mod network_policy;
mod nodes;
mod placement;
mod priority;
mod propagation;
mod quantity;
mod quotas;
mod scope;
mod shard;
mod validate;

use k8s_openapi::api::{
    core::v1::{ConfigMap, ResourceQuota},
    scheduling::v1::PriorityClass,
};
use kube::{api::ObjectMeta, Resource, ResourceExt};

pub use crate::select::{is_dns_label, Replicas};
pub use admission::{carries_operator_keys, review_pod, Denial};
pub use capacity::{plan_capacity, CapacityPlan, ClassCapacity, Funding};
pub use changes::{changes, teardown, Change, WithheldConfig};
pub use config_map::config_map_name;
pub use injection::{
    default_proxy_security_context, parse_security_context, proxy_manager, proxy_marker, sidecar_args, ProxyInjection,
    ProxyPlan, PROXY_CONFIG_DIR, PROXY_CONTAINER, PROXY_VOLUME,
};
pub use network_policy::{network_policy_name, NetworkPolicyPlan};
pub use nodes::{claim_key, merge_taints, ClassNodes, NodeChange, NodeGroupPlan, CLAIM_EFFECT, NODE_OPT_IN_KEY};
pub use placement::{
    placement_manager, placement_marker, withdrawal_body, AmbiguousWorkload, PlacementPlan, WorkloadPlacement,
    YieldedWorkload,
};
pub use priority::{places_workloads, priority_class_name};
pub use propagation::{Enforcer, SelectedPod};
pub use quantity::nano_units;
pub use quotas::{quota_name, QuotaCollision};
pub use scope::{
    namespace_opted_in, ImageAllowList, NotOptedIn, OptIn, RefusedImage, DEFAULT_NAMESPACE_OPT_IN, DEFAULT_NODE_OPT_IN,
};
pub use shard::ShardPlan;
pub use validate::validate;

use nodes::plan_node_groups;
use placement::plan_placement;
use priority::priority_classes;

use crate::{
    crd::{Bulkhead, BULKHEAD_LABEL, CLASS_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE},
    pool_config::PoolConfig,
    select::{resolve_workload, Selection, SpecError, WorkloadMatch},
    snapshot::{Labels, Snapshot},
};

/// Everything the operator intends for one Bulkhead.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Spec problems; when any, nothing is written (the last good objects stay).
    pub errors: Vec<SpecError>,
    pub capacity: CapacityPlan,
    /// The workload spec.workload resolved to, if it names one.
    pub workload: Option<WorkloadMatch>,
    /// The pool config, when there is a workload namespace to put it in and
    /// the design is funded.
    pub config_map: Option<ConfigMap>,
    pub pool_config: Option<PoolConfig>,
    /// Why no config is written although a workload is named.
    pub config_withheld: Option<String>,
    pub quotas: Vec<ResourceQuota>,
    pub quota_collisions: Vec<QuotaCollision>,
    /// Node claims of the classes with a node group.
    pub node_groups: NodeGroupPlan,
    /// Workload patches; None when no class asks for placement.
    pub placement: Option<PlacementPlan>,
    /// Each tenant's shard, under spec.shuffleSharding.
    pub shards: Option<ShardPlan>,
    pub priority_classes: Vec<PriorityClass>,
    /// Sidecar injection (spec.workload.proxy).
    pub proxy: ProxyPlan,
    /// Whether the plan read pods beyond node ranking: the Fleet split and
    /// the sidecars' pods do.
    pub pods_read: bool,
    /// The NetworkPolicy in front of the sidecars (spec.workload.proxy.networkPolicy).
    pub network_policy: NetworkPolicyPlan,
    /// Namespaces the plan would write in that lack the opt-in label, with
    /// what it held back in each: nothing is written or deleted there.
    pub not_opted_in: Vec<NotOptedIn>,
    /// The label a namespace must carry before anything is written there
    /// (`--namespace-opt-in`; None: any namespace). `changes` drops every
    /// write in a namespace without it, deletions included.
    pub namespace_opt_in: Option<OptIn>,
}

/// What the planner needs from the operator's own configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanConfig {
    /// Image of the injected sidecar when a Bulkhead names none. None: the
    /// operator was given none (`--proxy-image`), and a Bulkhead that names
    /// none gets no sidecar: no image is published to fall back on.
    pub proxy_image: Option<String>,
    /// Images a Bulkhead may name in spec.workload.proxy.image besides
    /// `proxy_image` (`--proxy-image-allow`); any other is refused
    /// (`ProxyInjected=False ImageNotAllowed`) and nothing is injected.
    pub proxy_image_allow: ImageAllowList,
    /// The label a namespace must carry before the operator injects, places,
    /// writes quotas, pool configs or NetworkPolicies there
    /// (`--namespace-opt-in`). None: any namespace, the library's default;
    /// the binary's is `bulkhead.dev/enabled=true`.
    pub namespace_opt_in: Option<OptIn>,
    /// The label a node must carry before a node group claims it
    /// (`--node-opt-in`). None: any node, the library's default; the
    /// binary's is `bulkhead.dev/claimable=true`.
    pub node_opt_in: Option<OptIn>,
    /// securityContext of the injected container (`--proxy-security-context`).
    pub proxy_security_context: serde_json::Value,
    /// A running drill's fault on this Bulkhead (set per reconcile, never operator-wide).
    pub fault: Option<DrillFault>,
}

/// The fault a running `BulkheadDrill` places in its Bulkhead's pool config:
/// the sidecars hold each admitted request of `class` for `hold_ms`, until
/// the wall-clock deadline `until_unix_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrillFault {
    pub bulkhead: String,
    pub drill: String,
    pub class: String,
    pub hold_ms: u64,
    pub until_unix_ms: u64,
}

impl Default for PlanConfig {
    fn default() -> Self {
        Self {
            proxy_image: None,
            proxy_image_allow: ImageAllowList::default(),
            namespace_opt_in: None,
            node_opt_in: None,
            proxy_security_context: default_proxy_security_context(),
            fault: None,
        }
    }
}

impl Plan {
    /// Whether the plan read any pod (see `NodeGroupPlan::read_pods`).
    pub fn read_pods(&self) -> bool {
        self.node_groups.read_pods || self.pods_read
    }

    pub fn is_valid(&self) -> bool {
        self.errors.is_empty()
    }
}

pub fn plan(selection: &Selection<'_>, snapshot: &Snapshot, config: &PlanConfig) -> Plan {
    let bulkhead = selection.bulkhead;
    let mut errors = validate(selection);
    let workload = resolve_workload(selection, snapshot);
    let (capacity, ceiling_errors) = plan_capacity(&bulkhead.spec, workload.as_ref().map(|w| w.replicas));
    errors.extend(ceiling_errors);

    // Namespaces without the opt-in label get nothing: what would go there is
    // left out of the plan and named in `not_opted_in`.
    let opt_in = config.namespace_opt_in.as_ref();
    let admits = |namespace: &str| namespace_opted_in(opt_in, snapshot, namespace);
    let mut held = scope::HeldBack::default();

    let places = places_workloads(&bulkhead.spec);
    let (mut quotas, quota_collisions) = quotas::plan_quotas(selection, snapshot, places);
    if !errors.is_empty() {
        quotas.clear();
    }
    quotas.retain(|q| {
        let namespace = q.metadata.namespace.as_deref().unwrap_or_default();
        let admitted = admits(namespace);
        if !admitted {
            held.add(namespace, format!("ResourceQuota {}", q.metadata.name.as_deref().unwrap_or_default()));
        }
        admitted
    });
    let node_groups = plan_node_groups(selection, snapshot, config.node_opt_in.as_ref());
    let shards = shard::plan_shards(selection, snapshot);
    let placement = places.then(|| plan_placement(selection, snapshot, shards.as_ref(), &admits));
    let priority_classes = if places { priority_classes(bulkhead) } else { Vec::new() };
    let mut config_map = None;
    let mut pool_config = None;
    let mut config_withheld = None;
    if let Some(w) = &workload {
        let namespace_ok = snapshot.namespaces.get(&w.namespace).is_some_and(|ns| !ns.terminating);
        if !errors.is_empty() {
            config_withheld = Some("the spec is invalid".to_string());
        } else if !capacity.funding.is_funded() {
            config_withheld = Some("the design is not funded".to_string());
        } else if !namespace_ok {
            config_withheld = Some(format!("namespace {} does not exist or is terminating", w.namespace));
        } else if !admits(&w.namespace) {
            let label = opt_in.map(ToString::to_string).unwrap_or_default();
            config_withheld = Some(format!("namespace {} has not opted in (label {label})", w.namespace));
            held.add(&w.namespace, "the pool config");
            if let Some(proxy) = bulkhead.spec.workload.as_ref().and_then(|w| w.proxy.as_ref()) {
                held.add(&w.namespace, "the sidecars");
                if proxy.network_policy.is_some() {
                    held.add(&w.namespace, "the NetworkPolicy");
                }
            }
        } else {
            let config = config_map::pool_config(bulkhead, &capacity, config.fault.as_ref());
            config_map = Some(config_map::config_map(bulkhead, &w.namespace, &config));
            pool_config = Some(config);
        }
    }
    for (namespace, workload) in placement.iter().flat_map(|p| &p.not_opted_in) {
        held.add(namespace, format!("placement of {workload}"));
    }
    let mounted = config_map.as_ref().and_then(|cm| {
        let name = cm.metadata.name.as_deref()?;
        let document = cm.data.as_ref()?.get(crate::pool_config::POOL_CONFIG_KEY)?;
        Some(injection::MountedConfig { name, hash: crate::pool_config::content_hash(document.as_bytes()) })
    });
    let proxy = injection::plan_proxy(selection, snapshot, mounted, config);
    // The Fleet split counts pods, and so do the stamps and the enforcement check.
    let pods_read = workload.is_some() && (capacity.scope == crate::crd::Scope::Fleet || proxy.requested);
    let network_policy = network_policy::plan_network_policy(bulkhead, &proxy);
    Plan {
        errors,
        capacity,
        workload,
        config_map,
        pool_config,
        config_withheld,
        quotas,
        quota_collisions,
        node_groups,
        placement,
        shards,
        priority_classes,
        proxy,
        pods_read,
        network_policy,
        not_opted_in: held.into_vec(),
        namespace_opt_in: config.namespace_opt_in.clone(),
    }
}

/// Metadata of every child object: its name, the labels cleanup finds it by,
/// and the Bulkhead as its controlling owner.
fn child_meta(bulkhead: &Bulkhead, name: String, namespace: Option<&str>, class: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: namespace.map(str::to_string),
        labels: Some(child_labels(bulkhead, class)),
        owner_references: bulkhead.controller_owner_ref(&()).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

/// Labels on every child object: who manages it, which Bulkhead (and class) owns it.
fn child_labels(bulkhead: &Bulkhead, class: Option<&str>) -> Labels {
    let mut labels = Labels::from([
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string()),
        (BULKHEAD_LABEL.to_string(), bulkhead.name_any()),
    ]);
    if let Some(class) = class {
        labels.insert(CLASS_LABEL.to_string(), class.to_string());
    }
    labels
}
