//! A stand-in for the kubelets the fake nodes lack, for one namespace: it
//! marks pods bound to an existing node Running and Ready (so Deployments
//! roll out) and confirms graceful deletions (so old pods go). Everything
//! else (scheduling, ReplicaSets, garbage collection of pods on deleted
//! nodes) is the real control plane's.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    api::{Api, DeleteParams, ListParams, Patch, PatchParams},
    Client,
};
use serde_json::json;

pub struct FakeKubelet(tokio::task::JoinHandle<()>);

impl FakeKubelet {
    pub fn start(client: Client, namespace: &str) -> Self {
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let nodes: Api<Node> = Api::all(client);
        FakeKubelet(tokio::spawn(async move {
            loop {
                if let (Ok(pods_now), Ok(nodes_now)) =
                    (pods.list(&ListParams::default()).await, nodes.list(&ListParams::default()).await)
                {
                    let node_names: Vec<String> =
                        nodes_now.items.iter().filter_map(|n| n.metadata.name.clone()).collect();
                    for pod in pods_now.items {
                        let Some(name) = pod.metadata.name.clone() else { continue };
                        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
                        // A pod on a deleted node is the pod garbage collector's to remove.
                        if !node.as_ref().is_some_and(|n| node_names.contains(n)) {
                            continue;
                        }
                        if pod.metadata.deletion_timestamp.is_some() {
                            let _ = pods.delete(&name, &DeleteParams::default().grace_period(0)).await;
                            continue;
                        }
                        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                        if !running {
                            let status = json!({"status": {"phase": "Running", "conditions": [
                                {"type": "Ready", "status": "True"},
                                {"type": "ContainersReady", "status": "True"},
                                {"type": "Initialized", "status": "True"},
                            ]}});
                            let _ = pods.patch_status(&name, &PatchParams::default(), &Patch::Strategic(status)).await;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }))
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.0.abort();
    }
}
