//! Read Bulkheads and cluster objects from files: multi-document YAML or JSON,
//! `kind: List` expanded. Errors name the file, the document and the field.

use std::path::{Path, PathBuf};

use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    autoscaling::v1::HorizontalPodAutoscaler,
    core::v1::{ConfigMap, Endpoints, Namespace, Node, Pod, ResourceQuota, Service},
    node::v1::RuntimeClass,
    scheduling::v1::PriorityClass,
};
use serde::{de::DeserializeOwned, Deserialize};
use serde_json::Value;

use crate::{
    crd::{Bulkhead, MANAGED_BY_LABEL, MANAGED_BY_VALUE},
    snapshot::{
        Autoscaler, EndpointsInfo, NamespaceInfo, NodeInfo, ObjectKey, PodInfo, RuntimeClassInfo, ServiceInfo,
        Snapshot, Workload,
    },
};

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{file}: {source}")]
    Read {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: document {document}: {message}")]
    Invalid { file: PathBuf, document: usize, message: String },
}

/// Everything read from the files.
#[derive(Debug, Default)]
pub struct Input {
    pub bulkheads: Vec<Bulkhead>,
    pub snapshot: Snapshot,
    /// Objects of kinds the planner does not read.
    pub ignored: usize,
}

pub fn load_files(paths: &[PathBuf]) -> Result<Input, LoadError> {
    let mut input = Input::default();
    for path in paths {
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read { file: path.clone(), source })?;
        load_text(&mut input, path, &text)?;
    }
    Ok(input)
}

fn load_text(input: &mut Input, path: &Path, text: &str) -> Result<(), LoadError> {
    for (i, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let document_no = i + 1;
        let invalid = |message: String| LoadError::Invalid { file: path.to_path_buf(), document: document_no, message };
        let value = serde_yaml::Value::deserialize(document).map_err(|e| invalid(format!("not YAML: {e}")))?;
        let value: Value = serde_json::to_value(value).map_err(|e| invalid(format!("not representable as JSON: {e}")))?;
        if value.is_null() {
            continue; // empty document (a trailing `---`)
        }
        add_object(input, value).map_err(invalid)?;
    }
    Ok(())
}

fn add_object(input: &mut Input, value: Value) -> Result<(), String> {
    let kind = value.get("kind").and_then(Value::as_str).ok_or("kind: missing")?.to_string();
    if kind == "List" || kind.ends_with("List") && value.get("items").is_some() {
        let items = value.get("items").and_then(Value::as_array).cloned().unwrap_or_default();
        for (j, item) in items.into_iter().enumerate() {
            add_object(input, item).map_err(|e| format!("items[{j}]: {e}"))?;
        }
        return Ok(());
    }
    let snapshot = &mut input.snapshot;
    match kind.as_str() {
        "Bulkhead" => input.bulkheads.push(decode_bulkhead(value)?),
        "Namespace" => {
            let ns: Namespace = decode(value)?;
            let info = NamespaceInfo::from(&ns);
            snapshot.namespaces.insert(info.name.clone(), info);
        }
        "Deployment" => add_workload(snapshot, Workload::from(&decode::<Deployment>(value)?)),
        "StatefulSet" => add_workload(snapshot, Workload::from(&decode::<StatefulSet>(value)?)),
        "HorizontalPodAutoscaler" => {
            // autoscaling/v1 and v2 agree on scaleTargetRef and maxReplicas.
            let a = Autoscaler::from(&decode::<HorizontalPodAutoscaler>(value)?);
            snapshot.autoscalers.insert(ObjectKey::new(&a.namespace, &a.name), a);
        }
        "Node" => {
            let node: Node = decode(value)?;
            let info = NodeInfo::from_node(&node, &mut snapshot.interner);
            snapshot.nodes.insert(info.name.clone(), info);
        }
        "Pod" => {
            let pod: Pod = decode(value)?;
            let info = PodInfo::from_pod(&pod, &mut snapshot.interner);
            snapshot.pods.insert(key(&pod.metadata), info);
        }
        "Service" => {
            let svc: Service = decode(value)?;
            snapshot.services.insert(key(&svc.metadata), ServiceInfo::from(&svc));
        }
        "Endpoints" => {
            let ep: Endpoints = decode(value)?;
            snapshot.endpoints.insert(key(&ep.metadata), EndpointsInfo::from(&ep));
        }
        "RuntimeClass" => {
            let rc: RuntimeClass = decode(value)?;
            snapshot.runtime_classes.insert(rc.metadata.name.clone().unwrap_or_default(), RuntimeClassInfo::from(&rc));
        }
        "ConfigMap" => {
            let cm: ConfigMap = decode(value)?;
            if managed(&cm.metadata) {
                snapshot.config_maps.insert(key(&cm.metadata), cm);
            }
        }
        "ResourceQuota" => {
            let rq: ResourceQuota = decode(value)?;
            if managed(&rq.metadata) {
                snapshot.resource_quotas.insert(key(&rq.metadata), rq);
            }
        }
        "PriorityClass" => {
            let pc: PriorityClass = decode(value)?;
            if managed(&pc.metadata) {
                snapshot.priority_classes.insert(pc.metadata.name.clone().unwrap_or_default(), pc);
            }
        }
        _ => input.ignored += 1,
    }
    Ok(())
}

fn add_workload(snapshot: &mut Snapshot, w: Workload) {
    snapshot.workloads.insert((w.kind, ObjectKey::new(&w.namespace, &w.name)), w);
}

fn managed(meta: &kube::api::ObjectMeta) -> bool {
    meta.labels.as_ref().and_then(|l| l.get(MANAGED_BY_LABEL)).is_some_and(|v| v == MANAGED_BY_VALUE)
}

fn key(meta: &kube::api::ObjectMeta) -> ObjectKey {
    ObjectKey::new(meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
}

/// Decode with the path of the failing field in the message.
fn decode<K: DeserializeOwned>(value: Value) -> Result<K, String> {
    serde_path_to_error::deserialize::<_, K>(value).map_err(|e| format!("{}: {}", e.path(), e.inner()))
}

fn decode_bulkhead(value: Value) -> Result<Bulkhead, String> {
    let name = value.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("<unnamed>").to_string();
    decode::<Bulkhead>(value).map_err(|e| format!("Bulkhead {name}: {e}"))
}
