//! Lean forms of watched objects: what the planner reads, nothing more.

use std::collections::BTreeMap;

use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    autoscaling::v1::HorizontalPodAutoscaler,
    core::v1::Namespace,
};

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
}

fn replicas(r: Option<i32>) -> u32 {
    // The API server rejects negative replicas; treat a missing value as the default 1.
    r.map_or(1, |r| u32::try_from(r).unwrap_or(0))
}

impl From<&Deployment> for Workload {
    fn from(d: &Deployment) -> Self {
        let spec = d.spec.as_ref();
        Self {
            kind: WorkloadKind::Deployment,
            namespace: d.metadata.namespace.clone().unwrap_or_default(),
            name: d.metadata.name.clone().unwrap_or_default(),
            template_labels: spec
                .and_then(|s| s.template.metadata.as_ref())
                .and_then(|m| m.labels.clone())
                .unwrap_or_default(),
            replicas: replicas(spec.and_then(|s| s.replicas)),
        }
    }
}

impl From<&StatefulSet> for Workload {
    fn from(s: &StatefulSet) -> Self {
        let spec = s.spec.as_ref();
        Self {
            kind: WorkloadKind::StatefulSet,
            namespace: s.metadata.namespace.clone().unwrap_or_default(),
            name: s.metadata.name.clone().unwrap_or_default(),
            template_labels: spec
                .and_then(|s| s.template.metadata.as_ref())
                .and_then(|m| m.labels.clone())
                .unwrap_or_default(),
            replicas: replicas(spec.and_then(|s| s.replicas)),
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
