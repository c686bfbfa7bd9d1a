//! Lean forms of what the layer audit reads: nodes, pods, services, their
//! endpoints (EndpointSlices, or core/v1 Endpoints where slices are not
//! served) and runtime classes.

use std::sync::Arc;

use k8s_openapi::{
    api::{
        core::v1::{Endpoints, Node, ObjectReference, Pod, Service, Taint},
        discovery::v1::EndpointSlice,
        node::v1::RuntimeClass,
    },
    apimachinery::pkg::util::intstr::IntOrString,
};

use super::{
    InternedLabels, Interner, Labels, CONFIG_HASH_ANNOTATION, PROXY_ADMIN_PORT_NAME, PROXY_CONTAINER, PROXY_VOLUME,
};

#[derive(Clone, Debug, PartialEq)]
pub struct NodeInfo {
    pub name: String,
    pub labels: InternedLabels,
    /// spec.taints, whole: the operator writes the list back with only its own changed.
    pub taints: Vec<Taint>,
    /// Ready, not cordoned and not being deleted: fit to be claimed or kept.
    pub schedulable: bool,
    /// Precondition for writing the taint list (it is replaced as a whole).
    pub resource_version: Option<String>,
}

impl NodeInfo {
    pub fn from_node(node: &Node, interner: &mut Interner) -> Self {
        let spec = node.spec.as_ref();
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let cordoned = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: interner.labels(node.metadata.labels.iter().flatten()),
            taints: spec.and_then(|s| s.taints.clone()).unwrap_or_default(),
            schedulable: ready && !cordoned && node.metadata.deletion_timestamp.is_none(),
            resource_version: node.metadata.resource_version.clone(),
        }
    }
}

/// A pod as the audit sees it. Strings shared with other pods are interned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    pub labels: InternedLabels,
    /// spec.nodeName: None until the scheduler binds it.
    pub node: Option<Arc<str>>,
    pub runtime_class: Option<Arc<str>>,
    pub ip: Option<Box<str>>,
    /// Succeeded or Failed: holds no resources any more.
    pub finished: bool,
    /// Phase Running (a pod being deleted included, while its containers
    /// run): it may hold requests, and its sidecar (if any) can be asked.
    pub running: bool,
    /// metadata.deletionTimestamp is set.
    pub terminating: bool,
    /// The bulkhead-proxy container, when the pod runs one (boxed: most
    /// pods run none, and every pod's entry is kept twice in the journal).
    pub sidecar: Option<Box<PodSidecar>>,
}

/// What a pod's bulkhead-proxy container shows of itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSidecar {
    /// The ConfigMap its config volume mounts: names the Bulkhead whose pool it enforces.
    pub config_map: Option<Arc<str>>,
    /// Its admin port (/readyz), by the port's name.
    pub admin_port: Option<u16>,
    /// The pool-config hash last stamped on the pod (`CONFIG_HASH_ANNOTATION`).
    pub config_hash: Option<Box<str>>,
}

impl PodSidecar {
    fn of(pod: &Pod, interner: &mut Interner) -> Option<Box<Self>> {
        let spec = pod.spec.as_ref()?;
        let container = spec.containers.iter().find(|c| c.name == PROXY_CONTAINER)?;
        let admin_port = container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(PROXY_ADMIN_PORT_NAME))
            .and_then(|p| u16::try_from(p.container_port).ok());
        let config_map = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == PROXY_VOLUME)
            .and_then(|v| v.config_map.as_ref())
            .map(|c| interner.intern(&c.name));
        let config_hash = pod.metadata.annotations.as_ref().and_then(|a| a.get(CONFIG_HASH_ANNOTATION));
        Some(Box::new(Self { config_map, admin_port, config_hash: config_hash.map(|h| Box::from(h.as_str())) }))
    }
}

impl PodInfo {
    pub fn from_pod(pod: &Pod, interner: &mut Interner) -> Self {
        let spec = pod.spec.as_ref();
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        Self {
            labels: interner.labels(pod.metadata.labels.iter().flatten()),
            // The API treats an empty nodeName as unset: the pod is not scheduled.
            node: spec.and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty()).map(|n| interner.intern(n)),
            runtime_class: spec.and_then(|s| s.runtime_class_name.as_deref()).map(|r| interner.intern(r)),
            ip: pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()).map(Box::from),
            finished: matches!(phase, Some("Succeeded" | "Failed")),
            running: phase == Some("Running"),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            sidecar: PodSidecar::of(pod, interner),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ServiceInfo {
    /// spec.externalName of an ExternalName Service.
    pub external_name: Option<String>,
    pub selector: Option<Labels>,
    pub cluster_ip: Option<String>,
    /// Where each port sends traffic in the pods it selects.
    pub ports: Vec<ServicePort>,
}

/// One port of a Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePort {
    pub port: i32,
    /// spec.ports[].targetPort; absent, it is `port`.
    pub target: PortRef,
}

/// A port of a pod: by number, or by the name of a container port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortRef {
    Number(i32),
    Name(String),
}

impl From<&Service> for ServiceInfo {
    fn from(svc: &Service) -> Self {
        let spec = svc.spec.as_ref();
        let external = spec.filter(|s| s.type_.as_deref() == Some("ExternalName"));
        Self {
            external_name: external.and_then(|s| s.external_name.clone()).map(|h| normalise_host(&h)),
            selector: spec.and_then(|s| s.selector.clone()).filter(|s| !s.is_empty()),
            cluster_ip: spec.and_then(|s| s.cluster_ip.clone()).filter(|ip| ip != "None" && !ip.is_empty()),
            ports: spec
                .and_then(|s| s.ports.as_ref())
                .into_iter()
                .flatten()
                .map(|p| ServicePort {
                    port: p.port,
                    target: match &p.target_port {
                        Some(IntOrString::Int(n)) => PortRef::Number(*n),
                        Some(IntOrString::String(name)) => match name.parse::<i32>() {
                            Ok(n) => PortRef::Number(n),
                            Err(_) => PortRef::Name(name.clone()),
                        },
                        None => PortRef::Number(p.port),
                    },
                })
                .collect(),
        }
    }
}

/// Backends of a Service, from core/v1 Endpoints: the fallback where
/// `discovery.k8s.io/v1` EndpointSlices are not served (the 1.20 test server).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct EndpointsInfo {
    /// (ip, "namespace/pod" when the address names its pod)
    pub backends: Vec<(String, Option<String>)>,
}

impl From<&Endpoints> for EndpointsInfo {
    fn from(ep: &Endpoints) -> Self {
        let mut backends = Vec::new();
        for subset in ep.subsets.iter().flatten() {
            for address in subset.addresses.iter().flatten().chain(subset.not_ready_addresses.iter().flatten()) {
                backends.push((address.ip.clone(), pod_of(address.target_ref.as_ref())));
            }
        }
        backends.sort();
        backends.dedup();
        Self { backends }
    }
}

/// One EndpointSlice: part of a Service's backends (a Service may have several).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct EndpointSliceInfo {
    /// The `kubernetes.io/service-name` label: None for a slice of no Service.
    pub service: Option<String>,
    /// As in [`EndpointsInfo::backends`].
    pub backends: Vec<(String, Option<String>)>,
}

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

impl From<&EndpointSlice> for EndpointSliceInfo {
    fn from(slice: &EndpointSlice) -> Self {
        let mut backends = Vec::new();
        for endpoint in &slice.endpoints {
            let conditions = endpoint.conditions.as_ref();
            // Endpoints lists ready and not-ready addresses but drops a
            // terminating pod (unless the Service publishes not-ready
            // addresses, where the slice calls it ready): the same here, so
            // both sources give the audit the same backends.
            let terminating = conditions.and_then(|c| c.terminating).unwrap_or(false);
            // Unset means true (the API's convention for both conditions).
            let ready = conditions.and_then(|c| c.ready).unwrap_or(true);
            if terminating && !ready {
                continue;
            }
            for address in &endpoint.addresses {
                backends.push((address.clone(), pod_of(endpoint.target_ref.as_ref())));
            }
        }
        backends.sort();
        backends.dedup();
        let service = slice.metadata.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL)).cloned();
        Self { service, backends }
    }
}

/// "namespace/name" of the pod an address names.
fn pod_of(target: Option<&ObjectReference>) -> Option<String> {
    target
        .filter(|r| r.kind.as_deref() == Some("Pod"))
        .map(|r| format!("{}/{}", r.namespace.clone().unwrap_or_default(), r.name.clone().unwrap_or_default()))
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeClassInfo {
    pub handler: String,
}

impl From<&RuntimeClass> for RuntimeClassInfo {
    fn from(rc: &RuntimeClass) -> Self {
        Self { handler: rc.handler.clone() }
    }
}

/// Hostnames compare case-insensitively and without a trailing dot.
pub fn normalise_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}
