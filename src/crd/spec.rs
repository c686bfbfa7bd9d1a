//! `spec` of a Bulkhead. The shape is a contract other tools read: add fields,
//! never rename them. Every field carries a doc comment because it becomes the
//! description `kubectl explain` shows.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::{api::resource::Quantity, apis::meta::v1::LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    shard::ShuffleShardingSpec,
    status::BulkheadStatus,
    vocabulary::{Layer, Scope},
};

/// A DNS-1123 label: what Kubernetes accepts in a label value and an object name.
pub const DNS_LABEL_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// Classes of work that share one resource, each with a reserved floor and a
/// borrowable share of a common surplus; and the layers through which they
/// must stay isolated.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "bulkhead.dev",
    version = "v1alpha1",
    kind = "Bulkhead",
    plural = "bulkheads",
    doc = "A Bulkhead partitions one resource between classes of work and reports where they still share a layer.",
    shortname = "bh",
    // `kubectl get bulkhead-dev` lists every kind of this API group (one so far).
    category = "bulkhead-dev",
    status = "BulkheadStatus",
    printcolumn = r#"{"name":"Dimension","type":"string","jsonPath":".spec.dimension"}"#,
    printcolumn = r#"{"name":"Classes","type":"integer","jsonPath":".status.classCount"}"#,
    printcolumn = r#"{"name":"Funded","type":"string","jsonPath":".status.conditions[?(@.type==\"Funded\")].status"}"#,
    printcolumn = r#"{"name":"Isolated","type":"string","jsonPath":".status.conditions[?(@.type==\"Isolated\")].status"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Sized","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Sized\")].reason"}"#,
    printcolumn = r#"{"name":"Message","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct BulkheadSpec {
    /// What separates the classes: Dependency (one class per downstream),
    /// Tenant, Criticality or Operation.
    pub dimension: Dimension,
    /// The resource that saturates first and is partitioned between the classes.
    pub pool: PoolSpec,
    /// The pods that run these pools. Their replica count (and the maximum of a
    /// HorizontalPodAutoscaler that targets them) divides a Fleet-scoped pool, and
    /// the pool config is written to their namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadRef>,
    /// Layers through which isolation must hold. Isolated is True only when every
    /// one of them is Separate for every pair of classes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub layers: Vec<Layer>,
    /// The classes of work (at most 64). Names are unique.
    #[schemars(length(min = 1, max = 64), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub classes: Vec<ClassSpec>,
    /// Tenant dimension only: give every class that is not critical its own
    /// shard of the candidate nodes and pin its workloads there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shuffle_sharding: Option<ShuffleShardingSpec>,
}

/// What separates the classes.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema)]
pub enum Dimension {
    Dependency,
    Tenant,
    Criticality,
    Operation,
}

/// The partitioned resource.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolSpec {
    /// Name of the resource (connections, threads, requests-in-flight), as shown
    /// in pool configs and metrics.
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub resource: String,
    /// Units of the resource available. Per replica when scope is Instance;
    /// across all replicas of spec.workload when scope is Fleet.
    #[schemars(range(max = 4294967295u32))]
    pub capacity: u32,
    /// Instance: capacity and reservations are per replica (fleet totals
    /// multiply with the replica count). Fleet: they are totals, split over
    /// the replicas of spec.workload.
    #[serde(default)]
    pub scope: Scope,
    /// Units every class may borrow beyond its floor, first come first served.
    /// Defaults to capacity minus the sum of the reservations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 4294967295u32))]
    pub shared_surplus: Option<u32>,
}

/// The pods that run the pools.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadRef {
    /// Namespace of the workload; the pool config ConfigMap is written here.
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub namespace: String,
    /// Selects the Deployments and StatefulSets (by their pod template labels)
    /// whose replicas run the pools.
    pub selector: LabelSelector,
    /// Inject the enforcement sidecar (`bulkhead proxy`) into these workloads'
    /// pods: it counts every request against the pool config and rejects at a
    /// class's ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxySpec>,
}

/// The sidecar that enforces the pool config in every replica.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxySpec {
    /// Ingress: in front of the app, each request classified by header or path
    /// prefix. Egress: in front of the downstreams, one listener per class.
    #[serde(default)]
    pub mode: ProxyMode,
    /// Ingress: the port the proxy listens on (point the Service's targetPort here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<u16>,
    /// Ingress: the app's own port on localhost, where admitted requests go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub upstream_port: Option<u16>,
    /// Ingress: the request header that names the class (default x-bulkhead-class).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub classify_header: Option<String>,
    /// Ingress: classify by path prefix instead of a header; the longest match wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_prefixes: Vec<PathPrefix>,
    /// Ingress: a request that names no known class goes to this class, or is
    /// rejected with reason `unclassified` when this is `reject` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub unclassified: Option<String>,
    /// Egress: one local listener per class and downstream.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<ProxyRoute>,
    /// Ingress: the peers (CIDR ranges) whose class header is believed; from any other peer the
    /// header is ignored and the request is unclassified. Empty: loopback only (a front proxy in the
    /// same pod); name the ingress controller's range here, or 0.0.0.0/0 to believe every peer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub class_header_from: Vec<String>,
    /// HOST:PORT (an IP literal) where the sidecar serves /metrics, apart from the health port
    /// the kubelet probes. Default 127.0.0.1:9902: the per-class figures stay inside the pod;
    /// give 0.0.0.0:PORT to let Prometheus scrape them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub metrics_address: Option<String>,
    /// Port of the proxy's /healthz and /readyz on the pod IP, which the kubelet probes
    /// (never counted; default 9901).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub admin_port: Option<u16>,
    /// Image of the sidecar; defaults to the operator's own (the chart's image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Ingress only: write a NetworkPolicy that admits traffic to the selected pods only on the
    /// proxy's port, adminPort and a non-loopback metricsAddress port (plus extraPorts), so nothing
    /// reaches upstreamPort around the sidecar. `{}` turns it on. Needs a CNI that enforces
    /// NetworkPolicy; other NetworkPolicies selecting the same pods add to what it admits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policy: Option<ProxyNetworkPolicy>,
}

/// The NetworkPolicy in front of the sidecar (spec.workload.proxy.networkPolicy).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxyNetworkPolicy {
    /// Other TCP ports of the pods to admit directly (at most 16), e.g. a gRPC or metrics port
    /// of the app that the proxy does not front. Never upstreamPort.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(range(min = 1, max = 65535)), extend("x-kubernetes-list-type" = "set"))]
    pub extra_ports: Vec<u16>,
}

/// Where the sidecar stands.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum ProxyMode {
    #[default]
    Ingress,
    Egress,
}

/// Requests whose path starts with `prefix` belong to `class`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PathPrefix {
    /// A path prefix starting with /.
    #[schemars(length(min = 1, max = 1024), regex(pattern = "^/"))]
    pub prefix: String,
    /// The class of the requests under it.
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub class: String,
}

/// Egress: the class's requests to `upstream` go through local port `port`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxyRoute {
    /// The class whose requests take this route.
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub class: String,
    /// The local port the application sends this class's requests to.
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
    /// http://host:port of the downstream.
    #[schemars(length(min = 1, max = 2048), regex(pattern = "^http://"))]
    pub upstream: String,
}

/// One class of work.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassSpec {
    /// Name of the class, unique within the Bulkhead (a DNS label).
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub name: String,
    /// Units guaranteed to this class whatever the others do (its floor).
    #[schemars(range(max = 4294967295u32))]
    pub reserved: u32,
    /// Most units this class may hold, floor plus borrowed surplus. Defaults to
    /// reserved + sharedSurplus and may not exceed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 4294967295u32))]
    pub ceiling: Option<u32>,
    /// Marks the control-plane lane (health checks, admin) that must keep room
    /// during an overload.
    #[serde(default)]
    pub critical: bool,
    /// The pods that do this class's work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<ClassPods>,
    /// A ResourceQuota for this class, written to every namespace that
    /// pods.namespaceSelector selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<ClassQuota>,
    /// Database endpoints this class uses (at most 16), as URLs
    /// (postgres://orders-db.shop.svc:5432/orders). The audit resolves each to
    /// the instance behind it to tell whether two classes share one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 2048), regex(pattern = DATABASE_URL_PATTERN)))]
    pub databases: Vec<String>,
    /// A dedicated node group: the operator claims `count` of the nodes that
    /// `selector` matches, labels them bulkhead.dev/<bulkhead>=<class> and
    /// taints them NoSchedule so that only this class's pods run there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<NodeGroupSpec>,
    /// Keep this class's pods out of every topology domain (node, zone) that
    /// runs pods of another class of this Bulkhead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anti_affinity: Option<AntiAffinitySpec>,
    /// RuntimeClass set on this class's pod templates, e.g. a sandbox (kata,
    /// gVisor) that gives the class a kernel of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub runtime_class_name: Option<String>,
    /// Value of the PriorityClass the operator writes for this class and sets
    /// on its pod templates. Defaults to 0; a critical class defaults to 1000
    /// above the highest other class and must be the highest. Only a critical
    /// class may preempt other pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1000000000, max = 1000000000))]
    pub priority: Option<i32>,
    /// The longest one request of this class may take through the sidecar, in
    /// milliseconds: its response head, its body and an upgraded tunnel. Past
    /// it the client gets 504 (or the body or tunnel is cut) and the slot is
    /// freed. Unset: only the proxy's --response-timeout and --idle-timeout apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400000))]
    pub max_duration_ms: Option<u64>,
}

/// `scheme://[user[:password]@]host[:port][/path]`, the port from 1 to 65535
/// (the planner checks the same, with a message per problem).
pub const DATABASE_URL_PATTERN: &str = r"^[a-zA-Z][a-zA-Z0-9+.-]*://([^@/?#\s]*@)?([^:/?#\[\]@\s]+|\[[0-9a-fA-F:.]+\])(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}))?([/?#]\S*)?$";

/// A label key: an optional DNS-subdomain prefix and /, then a name of at most 63 characters.
pub const LABEL_KEY_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";

/// A DNS-1123 subdomain: what Kubernetes accepts in most object names.
pub const DNS_SUBDOMAIN_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// Nodes claimed for one class.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeGroupSpec {
    /// Candidate nodes, by label. Nodes claimed by another class or Bulkhead,
    /// not Ready, cordoned, or tainted NoSchedule/NoExecute by someone else
    /// are never claimed.
    pub selector: LabelSelector,
    /// How many nodes to claim (1 to 1000).
    #[schemars(range(min = 1, max = 1000))]
    pub count: u32,
}

/// Pod anti-affinity against the other classes of the Bulkhead.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AntiAffinitySpec {
    /// The node label whose values are the domains to keep apart:
    /// kubernetes.io/hostname (one node) or topology.kubernetes.io/zone.
    #[schemars(length(min = 1, max = 316), regex(pattern = LABEL_KEY_PATTERN))]
    pub topology_key: String,
}

/// Which pods belong to a class.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassPods {
    /// Namespaces whose pods may belong to the class (and that receive its quota).
    /// Absent: every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Pods of the class within those namespaces. Absent: every pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
}

/// A per-class ResourceQuota.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassQuota {
    /// Hard limits, as in ResourceQuota spec.hard (cpu, memory, pods, …).
    pub hard: BTreeMap<String, Quantity>,
}
