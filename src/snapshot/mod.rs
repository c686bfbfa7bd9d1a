//! `Snapshot`: plain data describing what the cluster looks like now. The
//! controller keeps one up to date from watches; the offline CLI builds one
//! from YAML files. Planning and auditing read nothing else.
//!
//! Only the fields the planner and the audit need are kept: an object is
//! reduced to its lean form as it arrives (`index.rs`): what the planner reads
//! in `workloads.rs`, what the audit reads in `topology.rs`.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::{
    core::v1::{ConfigMap, ResourceQuota},
    networking::v1::NetworkPolicy,
    scheduling::v1::PriorityClass,
};

mod index;
mod interned;
mod journal;
mod seniority;
mod topology;
mod workloads;

pub use index::{Indexed, Journaled};
pub use interned::{InternedLabels, Interner, LabelLookup};
pub use journal::{Cursor, Delta, Journal};
pub use seniority::Seniority;
pub use topology::{
    normalise_host, EndpointSliceInfo, EndpointsInfo, NodeInfo, PodInfo, PodSidecar, PortRef, RuntimeClassInfo,
    ServiceInfo, ServicePort, SERVICE_NAME_LABEL,
};
pub use workloads::{
    Autoscaler, ContainerPort, Labels, NamespaceInfo, TemplatePlacement, Workload, WorkloadKind,
    CONFIG_HASH_ANNOTATION, PLACEMENT_ANNOTATION_PREFIX, PROXY_ADMIN_PORT_NAME, PROXY_ANNOTATION_PREFIX,
    PROXY_CONTAINER, PROXY_VOLUME,
};

/// Namespace and name of a namespaced object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self { namespace: namespace.into(), name: name.into() }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A cluster-scoped object (empty namespace) is named alone.
        match self.namespace.as_str() {
            "" => f.write_str(&self.name),
            ns => write!(f, "{ns}/{}", self.name),
        }
    }
}

/// The cluster, as far as bulkhead needs to know it.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub namespaces: BTreeMap<String, NamespaceInfo>,
    /// Deployments and StatefulSets, keyed by kind then namespace/name.
    pub workloads: BTreeMap<(WorkloadKind, ObjectKey), Workload>,
    pub autoscalers: BTreeMap<ObjectKey, Autoscaler>,
    /// ConfigMaps the operator wrote (labelled managed-by bulkhead).
    pub config_maps: BTreeMap<ObjectKey, ConfigMap>,
    /// ResourceQuotas the operator wrote (labelled managed-by bulkhead).
    pub resource_quotas: BTreeMap<ObjectKey, ResourceQuota>,
    /// NetworkPolicies the operator wrote (labelled managed-by bulkhead).
    pub network_policies: BTreeMap<ObjectKey, NetworkPolicy>,
    /// PriorityClasses the operator wrote (labelled managed-by bulkhead).
    pub priority_classes: BTreeMap<String, PriorityClass>,
    /// What the layer audit reads.
    pub nodes: BTreeMap<String, NodeInfo>,
    /// Pods, ordered by namespace then name (a namespace is a contiguous range).
    pub pods: BTreeMap<ObjectKey, PodInfo>,
    pub services: BTreeMap<ObjectKey, ServiceInfo>,
    /// core/v1 Endpoints, keyed as their Service (the fallback source of backends).
    pub endpoints: BTreeMap<ObjectKey, EndpointsInfo>,
    /// EndpointSlices, keyed by their own namespace/name (a Service may have several).
    pub endpoint_slices: BTreeMap<ObjectKey, EndpointSliceInfo>,
    pub runtime_classes: BTreeMap<String, RuntimeClassInfo>,
    /// Shares the label strings of watched pods and nodes.
    pub interner: Interner,
    /// Recent changes of what the audit reads, for incremental re-audits.
    pub journal: Journal,
    /// When each Bulkhead was created: the older wins what two want.
    pub seniority: Seniority,
    /// The Bulkheads whose spec.workload.proxy selects each workload, where
    /// their specs are known (the offline commands read every Bulkhead's);
    /// the controller sees only the markers injected workloads carry.
    pub proxy_claims: BTreeMap<(WorkloadKind, ObjectKey), BTreeSet<String>>,
}

impl Snapshot {
    /// Deployments and StatefulSets in `namespace`.
    pub fn workloads_in<'a>(&'a self, namespace: &'a str) -> impl Iterator<Item = &'a Workload> + 'a {
        self.workloads.values().filter(move |w| w.namespace == namespace)
    }

    /// Autoscalers in `namespace` that target the workload `kind`/`name`.
    pub fn autoscalers_of<'a>(&'a self, workload: &'a Workload) -> impl Iterator<Item = &'a Autoscaler> + 'a {
        self.autoscalers.values().filter(move |a| {
            a.namespace == workload.namespace
                && a.target_kind == workload.kind.as_str()
                && a.target_name == workload.name
        })
    }
}

impl Snapshot {
    /// A Service's backends, from its Endpoints and its EndpointSlices (the
    /// controller watches one or the other; files may hold both, which agree).
    pub fn backends_of(&self, service: &ObjectKey) -> Vec<(String, Option<String>)> {
        let mut backends: Vec<(String, Option<String>)> =
            self.endpoints.get(service).map(|e| e.backends.clone()).unwrap_or_default();
        let start = ObjectKey::new(service.namespace.as_str(), "");
        for (_, slice) in self.endpoint_slices.range(start..).take_while(|(k, _)| k.namespace == service.namespace) {
            if slice.service.as_deref() == Some(service.name.as_str()) {
                backends.extend(slice.backends.iter().cloned());
            }
        }
        backends.sort();
        backends.dedup();
        backends
    }

    /// Pods of one namespace.
    pub fn pods_in<'a>(&'a self, namespace: &'a str) -> impl Iterator<Item = (&'a ObjectKey, &'a PodInfo)> + 'a {
        let start = ObjectKey::new(namespace, "");
        self.pods.range(start..).take_while(move |(k, _)| k.namespace == namespace)
    }
}
