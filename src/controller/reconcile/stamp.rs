//! Stamping pods with the hash of the pool config just written: any update
//! of a pod makes its kubelet sync the pod's volumes at once, so the mounted
//! `pools.json` changes within about a second instead of on the kubelet's
//! next periodic sync (about a minute, while the fleet may over-commit the
//! pool). A merge patch of one annotation: no other field of the pod moves,
//! and nothing restarts.

use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::{
    api::{Api, Patch, PatchParams},
    Client,
};
use serde_json::{json, Value};

use crate::controller::error::Error;
use crate::controller::runtime::metrics::Metrics;
use crate::{
    crd::FIELD_MANAGER,
    snapshot::{ObjectKey, CONFIG_HASH_ANNOTATION},
};

/// Pod patches in flight at once, per reconcile: a 1,000-pod workload is
/// stamped in waves of this many rather than in one burst at the API server
/// (its default max-mutating-requests-inflight is 200, shared by everyone).
pub(in crate::controller) const STAMPS_IN_FLIGHT: usize = 8;

/// Stamp every pod in `pods` with `hash`. A pod deleted meanwhile needs no
/// stamp; any other refusal stops the reconcile (and is retried with backoff):
/// without the stamp the sidecars wait for the kubelet's periodic sync.
pub(in crate::controller) async fn stamp_pods(
    client: &Client,
    metrics: &Metrics,
    hash: &str,
    pods: &[ObjectKey],
) -> Result<(), Error> {
    let patch = json!({"metadata": {"annotations": {CONFIG_HASH_ANNOTATION: hash}}});
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.to_string()), ..PatchParams::default() };
    // Futures made up front (not in a stream's closure): the reconcile future stays Send.
    let stamps: Vec<_> = pods.iter().map(|key| stamp_one(client, &params, &patch, key)).collect();
    let results: Vec<Result<bool, Error>> = stream::iter(stamps).buffer_unordered(STAMPS_IN_FLIGHT).collect().await;
    for result in results {
        if result? {
            metrics.record_write("Pod", "stamp");
        }
    }
    Ok(())
}

/// One pod's stamp; false when the pod is gone.
async fn stamp_one(client: &Client, params: &PatchParams, patch: &Value, key: &ObjectKey) -> Result<bool, Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &key.namespace);
    match api.patch(&key.name, params, &Patch::Merge(patch)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(Error::write("stamp", "Pod", key)(e)),
    }
}
