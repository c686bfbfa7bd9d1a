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

use crate::{crd::Bulkhead, snapshot::Snapshot};

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
        let value: Value =
            serde_json::to_value(value).map_err(|e| invalid(format!("not representable as JSON: {e}")))?;
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
        "Namespace" => snapshot.apply(&decode::<Namespace>(value)?),
        "Deployment" => snapshot.apply(&decode::<Deployment>(value)?),
        "StatefulSet" => snapshot.apply(&decode::<StatefulSet>(value)?),
        // autoscaling/v1 and v2 agree on scaleTargetRef and maxReplicas.
        "HorizontalPodAutoscaler" => snapshot.apply(&decode::<HorizontalPodAutoscaler>(value)?),
        "Node" => snapshot.apply(&decode::<Node>(value)?),
        "Pod" => snapshot.apply(&decode::<Pod>(value)?),
        "Service" => snapshot.apply(&decode::<Service>(value)?),
        "Endpoints" => snapshot.apply(&decode::<Endpoints>(value)?),
        "RuntimeClass" => snapshot.apply(&decode::<RuntimeClass>(value)?),
        "ConfigMap" => snapshot.apply(&decode::<ConfigMap>(value)?),
        "ResourceQuota" => snapshot.apply(&decode::<ResourceQuota>(value)?),
        "PriorityClass" => snapshot.apply(&decode::<PriorityClass>(value)?),
        // Kinds the planner does not read.
        _ => {}
    }
    Ok(())
}

/// Decode with the path of the failing field in the message.
fn decode<K: DeserializeOwned>(value: Value) -> Result<K, String> {
    serde_path_to_error::deserialize::<_, K>(value).map_err(|e| format!("{}: {}", e.path(), e.inner()))
}

fn decode_bulkhead(value: Value) -> Result<Bulkhead, String> {
    let name = value.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("<unnamed>").to_string();
    decode::<Bulkhead>(value).map_err(|e| format!("Bulkhead {name}: {e}"))
}
