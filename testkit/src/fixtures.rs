//! The one way the pure tests build a cluster: API objects made here and fed
//! through `Snapshot::apply`, exactly as the controller's watches feed them,
//! so a test cannot build a snapshot the operator would never see.

use k8s_openapi::api::{
    apps::v1::Deployment,
    autoscaling::v1::HorizontalPodAutoscaler,
    core::v1::{Endpoints, Namespace, Node, Pod, Service},
    node::v1::RuntimeClass,
};
use serde_json::{json, Map, Value};

fn labels(pairs: &[(&str, &str)]) -> Value {
    Value::Object(pairs.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<Map<_, _>>())
}

fn typed<T: serde::de::DeserializeOwned>(what: &str, v: Value) -> T {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("fixture {what}: {e}"))
}

pub fn mk_namespace(name: &str, label_pairs: &[(&str, &str)]) -> Namespace {
    typed("namespace", json!({"metadata": {"name": name, "labels": labels(label_pairs)}}))
}

/// A Ready node with these labels (and no taints).
pub fn mk_node(name: &str, label_pairs: &[(&str, &str)]) -> Node {
    mk_node_with(name, labels(label_pairs), json!([]), true)
}

/// A node with labels and taints given as JSON, Ready or not.
pub fn mk_node_with(name: &str, labels: Value, taints: Value, ready: bool) -> Node {
    typed(
        "node",
        json!({
            "metadata": {"name": name, "labels": labels, "resourceVersion": "1"},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        }),
    )
}

/// A pod with these labels, bound to `node` (None: not scheduled).
pub fn mk_pod(ns: &str, name: &str, label_pairs: &[(&str, &str)], node: Option<&str>) -> Pod {
    let mut spec = json!({"containers": []});
    if let Some(node) = node {
        spec["nodeName"] = json!(node);
    }
    typed("pod", json!({"metadata": {"name": name, "namespace": ns, "labels": labels(label_pairs)}, "spec": spec}))
}

/// A pod as `mk_pod` makes it, with a RuntimeClass and a pod IP.
pub fn mk_pod_with(
    ns: &str,
    name: &str,
    label_pairs: &[(&str, &str)],
    node: Option<&str>,
    runtime_class: Option<&str>,
    ip: Option<&str>,
) -> Pod {
    let mut pod = mk_pod(ns, name, label_pairs, node);
    if let Some(spec) = pod.spec.as_mut() {
        spec.runtime_class_name = runtime_class.map(str::to_owned);
    }
    if let Some(ip) = ip {
        pod.status = Some(typed("pod status", json!({"podIP": ip})));
    }
    pod
}

/// A Service with this spec (`{}`: a ClusterIP Service without a selector).
pub fn mk_service(ns: &str, name: &str, spec: Value) -> Service {
    typed("service", json!({"metadata": {"name": name, "namespace": ns}, "spec": spec}))
}

/// Endpoints of Service `name`: each address with the pod it names, if any.
pub fn mk_endpoints(ns: &str, name: &str, addresses: &[(&str, Option<&str>)]) -> Endpoints {
    let addresses: Vec<Value> = addresses
        .iter()
        .map(|(ip, pod)| match pod {
            Some(pod) => json!({"ip": ip, "targetRef": {"kind": "Pod", "namespace": ns, "name": pod}}),
            None => json!({"ip": ip}),
        })
        .collect();
    typed("endpoints", json!({"metadata": {"name": name, "namespace": ns}, "subsets": [{"addresses": addresses}]}))
}

pub fn mk_runtime_class(name: &str, handler: &str) -> RuntimeClass {
    typed("runtime class", json!({"metadata": {"name": name}, "handler": handler}))
}

/// A Deployment of `replicas` pods labelled `app`, one container named `app`.
pub fn mk_deployment(ns: &str, name: &str, app: &str, replicas: i32) -> Deployment {
    typed(
        "deployment",
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns, "generation": 1},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": app}},
                "template": {"metadata": {"labels": {"app": app}}, "spec": {"containers": [{"name": "app", "image": "i"}]}},
            },
        }),
    )
}

/// An autoscaler of Deployment `target` up to `max` replicas.
pub fn mk_autoscaler(ns: &str, target: &str, max: i32) -> HorizontalPodAutoscaler {
    typed(
        "autoscaler",
        json!({
            "metadata": {"name": target, "namespace": ns},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target}, "maxReplicas": max},
        }),
    )
}
