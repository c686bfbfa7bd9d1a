//! Lean forms of watched objects: what the planner reads, nothing more.

use std::collections::BTreeMap;

use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    autoscaling::v1::HorizontalPodAutoscaler,
    core::v1::{Namespace, NodeAffinity, PodAntiAffinity, PodTemplateSpec, Toleration},
};
use kube::api::ObjectMeta;

/// Annotation prefix marking a workload placed by a Bulkhead:
/// `placement.bulkhead.dev/<bulkhead>: <fingerprint of what it applied>`.
pub const PLACEMENT_ANNOTATION_PREFIX: &str = "placement.bulkhead.dev/";
/// Annotation prefix marking a workload given a Bulkhead's sidecar:
/// `proxy.bulkhead.dev/<bulkhead>: <fingerprint of what it applied>`.
pub const PROXY_ANNOTATION_PREFIX: &str = "proxy.bulkhead.dev/";
/// Name of the injected container and of its config volume; the snapshot
/// reads them on pods, the planner writes them into templates.
pub const PROXY_CONTAINER: &str = "bulkhead-proxy";
pub const PROXY_VOLUME: &str = "bulkhead-pools";
/// Name of the sidecar's admin port (/healthz, /readyz): the operator asks
/// each pod's sidecar there which pool config it enforces.
pub const PROXY_ADMIN_PORT_NAME: &str = "bulkhead-admin";
/// Annotation the operator stamps on a running pod with the hash of the pool
/// config it just wrote: any update of a pod makes its kubelet sync the
/// pod's volumes at once, instead of on its next periodic sync (about a minute).
pub const CONFIG_HASH_ANNOTATION: &str = "bulkhead.dev/config-hash";

pub type Labels = BTreeMap<String, String>;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NamespaceInfo {
    pub name: String,
    pub labels: Labels,
    /// A terminating namespace accepts no new objects.
    pub terminating: bool,
}

impl From<&Namespace> for NamespaceInfo {
    fn from(ns: &Namespace) -> Self {
        Self {
            name: ns.metadata.name.clone().unwrap_or_default(),
            labels: ns.metadata.labels.clone().unwrap_or_default(),
            terminating: ns.metadata.deletion_timestamp.is_some()
                || ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
}

impl WorkloadKind {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
        }
    }
}

/// A Deployment or StatefulSet.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
    /// Labels of the pod template: what selectors in a Bulkhead match.
    pub template_labels: Labels,
    /// Desired replicas (spec.replicas, default 1).
    pub replicas: u32,
    pub generation: Option<i64>,
    /// The pod-template fields placement sets, as they are now.
    pub placement: TemplatePlacement,
    /// Bulkheads that placed this workload, with the fingerprint of what each applied.
    pub placed_by: BTreeMap<String, String>,
    /// Bulkheads that injected their sidecar, with the fingerprint of what each applied.
    pub proxied_by: BTreeMap<String, String>,
    /// Names of the pod template's containers and volumes.
    pub containers: Vec<String>,
    pub volumes: Vec<String>,
    /// The ports the pod template's containers declare.
    pub container_ports: Vec<ContainerPort>,
}

/// A port a container of a pod template declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerPort {
    pub container: String,
    pub name: Option<String>,
    pub port: i32,
}

fn container_ports(template: Option<&PodTemplateSpec>) -> Vec<ContainerPort> {
    let Some(spec) = template.and_then(|t| t.spec.as_ref()) else { return Vec::new() };
    spec.containers
        .iter()
        .flat_map(|c| {
            c.ports.iter().flatten().map(|p| ContainerPort {
                container: c.name.clone(),
                name: p.name.clone(),
                port: p.container_port,
            })
        })
        .collect()
}

/// The pod-template fields that placement writes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TemplatePlacement {
    pub node_affinity: Option<NodeAffinity>,
    pub pod_anti_affinity: Option<PodAntiAffinity>,
    pub tolerations: Vec<Toleration>,
    pub runtime_class_name: Option<String>,
    pub priority_class_name: Option<String>,
}

impl TemplatePlacement {
    fn of(template: Option<&PodTemplateSpec>) -> Self {
        let Some(spec) = template.and_then(|t| t.spec.as_ref()) else { return Self::default() };
        let affinity = spec.affinity.as_ref();
        Self {
            node_affinity: affinity.and_then(|a| a.node_affinity.clone()),
            pod_anti_affinity: affinity.and_then(|a| a.pod_anti_affinity.clone()),
            tolerations: spec.tolerations.clone().unwrap_or_default(),
            runtime_class_name: spec.runtime_class_name.clone(),
            priority_class_name: spec.priority_class_name.clone(),
        }
    }
}

/// Bulkhead → fingerprint, from the annotations under `prefix`.
fn annotated(meta: &ObjectMeta, prefix: &str) -> BTreeMap<String, String> {
    meta.annotations
        .iter()
        .flatten()
        .filter_map(|(k, v)| k.strip_prefix(prefix).map(|b| (b.to_string(), v.clone())))
        .collect()
}

fn container_names(template: Option<&PodTemplateSpec>) -> (Vec<String>, Vec<String>) {
    let Some(spec) = template.and_then(|t| t.spec.as_ref()) else { return Default::default() };
    (
        spec.containers.iter().map(|c| c.name.clone()).collect(),
        spec.volumes.iter().flatten().map(|v| v.name.clone()).collect(),
    )
}

fn replicas(r: Option<i32>) -> u32 {
    // The API server rejects negative replicas; treat a missing value as the default 1.
    r.map_or(1, |r| u32::try_from(r).unwrap_or(0))
}

impl From<&Deployment> for Workload {
    fn from(d: &Deployment) -> Self {
        let spec = d.spec.as_ref();
        let (containers, volumes) = container_names(spec.map(|s| &s.template));
        Self {
            kind: WorkloadKind::Deployment,
            namespace: d.metadata.namespace.clone().unwrap_or_default(),
            name: d.metadata.name.clone().unwrap_or_default(),
            template_labels: spec
                .and_then(|s| s.template.metadata.as_ref())
                .and_then(|m| m.labels.clone())
                .unwrap_or_default(),
            replicas: replicas(spec.and_then(|s| s.replicas)),
            generation: d.metadata.generation,
            placement: TemplatePlacement::of(spec.map(|s| &s.template)),
            placed_by: annotated(&d.metadata, PLACEMENT_ANNOTATION_PREFIX),
            proxied_by: annotated(&d.metadata, PROXY_ANNOTATION_PREFIX),
            containers,
            volumes,
            container_ports: container_ports(spec.map(|s| &s.template)),
        }
    }
}

impl From<&StatefulSet> for Workload {
    fn from(s: &StatefulSet) -> Self {
        let spec = s.spec.as_ref();
        let (containers, volumes) = container_names(spec.map(|s| &s.template));
        Self {
            kind: WorkloadKind::StatefulSet,
            namespace: s.metadata.namespace.clone().unwrap_or_default(),
            name: s.metadata.name.clone().unwrap_or_default(),
            template_labels: spec
                .and_then(|s| s.template.metadata.as_ref())
                .and_then(|m| m.labels.clone())
                .unwrap_or_default(),
            replicas: replicas(spec.and_then(|s| s.replicas)),
            generation: s.metadata.generation,
            placement: TemplatePlacement::of(spec.map(|s| &s.template)),
            placed_by: annotated(&s.metadata, PLACEMENT_ANNOTATION_PREFIX),
            proxied_by: annotated(&s.metadata, PROXY_ANNOTATION_PREFIX),
            containers,
            volumes,
            container_ports: container_ports(spec.map(|s| &s.template)),
        }
    }
}

/// A HorizontalPodAutoscaler (autoscaling/v1: served by every supported version).
#[derive(Clone, Debug, PartialEq)]
pub struct Autoscaler {
    pub namespace: String,
    pub name: String,
    pub target_kind: String,
    pub target_name: String,
    pub max_replicas: u32,
}

impl From<&HorizontalPodAutoscaler> for Autoscaler {
    fn from(h: &HorizontalPodAutoscaler) -> Self {
        let spec = h.spec.as_ref();
        Self {
            namespace: h.metadata.namespace.clone().unwrap_or_default(),
            name: h.metadata.name.clone().unwrap_or_default(),
            target_kind: spec.map(|s| s.scale_target_ref.kind.clone()).unwrap_or_default(),
            target_name: spec.map(|s| s.scale_target_ref.name.clone()).unwrap_or_default(),
            max_replicas: spec.map_or(0, |s| u32::try_from(s.max_replicas).unwrap_or(0)),
        }
    }
}

impl super::LabelLookup for Labels {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}
