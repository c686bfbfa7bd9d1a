//! Carry out planned changes: server-side apply with the operator's field
//! manager for the objects it owns outright (so it forces), deletes that
//! tolerate an object already gone, node claims under a resourceVersion
//! precondition, and workload placement applied without force (a conflict
//! with another manager is reported, never overridden).

use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    core::v1::{ConfigMap, Node, ResourceQuota},
    networking::v1::NetworkPolicy,
    scheduling::v1::PriorityClass,
};
use kube::{
    api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams},
    Client, Resource,
};
use serde::{de::DeserializeOwned, Serialize};
use serde_json::{json, Value};

use crate::controller::error::Error;
use crate::controller::runtime::metrics::Metrics;
use crate::{
    crd::{BULKHEAD_LABEL, FIELD_MANAGER},
    plan::{placement_manager, placement_marker, proxy_manager, proxy_marker, withdrawal_body, Change, NodeChange},
    snapshot::{ObjectKey, WorkloadKind},
};

/// What a workload patch is for: each has its own field manager, so the
/// two never take each other's fields, and their refusals are kept apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Concern {
    Placement,
    Proxy,
}

/// A workload whose patch the API server refused: another field
/// manager's fields block it, or the server (or an admission webhook)
/// rejects the patched workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacementRefusal {
    pub concern: Concern,
    pub kind: WorkloadKind,
    pub key: ObjectKey,
    pub generation: Option<i64>,
    pub fingerprint: String,
    /// True for a field-manager conflict (409); false for another refusal.
    pub conflict: bool,
    /// The API server's account: the fields and the manager that owns them.
    pub message: String,
}

impl PlacementRefusal {
    /// The refusal as a condition message names it.
    pub fn refused(&self) -> crate::status::Refused {
        crate::status::Refused {
            workload: format!("{} {}", self.kind.as_str(), self.key),
            account: self.message.clone(),
        }
    }
}

/// Apply `changes` in order for Bulkhead `bulkhead`; placement refusals are
/// returned, not raised, so that one contested workload stalls nothing else.
pub(in crate::controller) async fn apply_changes(
    client: &Client,
    metrics: &Metrics,
    bulkhead: &str,
    changes: &[Change],
) -> Result<Vec<PlacementRefusal>, Error> {
    let mut refusals = Vec::new();
    for change in changes {
        match change {
            Change::ApplyPriorityClass(pc) => {
                let name = pc.metadata.name.as_deref().ok_or(Error::Unnamed("a planned PriorityClass"))?;
                apply(Api::<PriorityClass>::all(client.clone()), name, pc).await?;
                metrics.record_write("PriorityClass", "apply");
            }
            Change::DeletePriorityClass(name) => {
                delete(Api::<PriorityClass>::all(client.clone()), &ObjectKey::new("", name)).await?;
                metrics.record_write("PriorityClass", "delete");
            }
            Change::Node(node) => {
                patch_node(client, node).await?;
                metrics.record_write("Node", "patch");
            }
            Change::PlaceWorkload(p) => {
                let patch = WorkloadPatch {
                    kind: p.kind,
                    key: &p.key,
                    generation: p.generation,
                    fingerprint: &p.fingerprint,
                    body: &p.body,
                    take_from: &p.take_from,
                };
                match patch_workload(client, &placement_manager(bulkhead), Concern::Placement, &patch).await? {
                    Some(refusal) => refusals.push(refusal),
                    None => metrics.record_write(p.kind.as_str(), "apply"),
                }
            }
            Change::WithdrawWorkload(kind, key) => {
                withdraw(client, &placement_manager(bulkhead), &placement_marker(bulkhead), *kind, key).await?;
                metrics.record_write(kind.as_str(), "withdraw");
            }
            Change::InjectProxy(p) => {
                let patch = WorkloadPatch {
                    kind: p.kind,
                    key: &p.key,
                    generation: p.generation,
                    fingerprint: &p.fingerprint,
                    body: &p.body,
                    take_from: &[],
                };
                match patch_workload(client, &proxy_manager(bulkhead), Concern::Proxy, &patch).await? {
                    Some(refusal) => refusals.push(refusal),
                    None => metrics.record_write(p.kind.as_str(), "inject"),
                }
            }
            Change::WithdrawProxy(kind, key) => {
                withdraw(client, &proxy_manager(bulkhead), &proxy_marker(bulkhead), *kind, key).await?;
                metrics.record_write(kind.as_str(), "withdraw");
            }
            Change::StampPods { hash, pods } => super::stamp::stamp_pods(client, metrics, hash, pods).await?,
            Change::ApplyNetworkPolicy(np) => {
                let (ns, name) = names(&np.metadata)?;
                apply(Api::<NetworkPolicy>::namespaced(client.clone(), ns), name, np).await?;
                metrics.record_write("NetworkPolicy", "apply");
            }
            Change::DeleteNetworkPolicy(key) => {
                delete(Api::<NetworkPolicy>::namespaced(client.clone(), &key.namespace), key).await?;
                metrics.record_write("NetworkPolicy", "delete");
            }
            Change::ApplyConfigMap(cm) => {
                let (ns, name) = names(&cm.metadata)?;
                apply(Api::<ConfigMap>::namespaced(client.clone(), ns), name, cm).await?;
                metrics.record_write("ConfigMap", "apply");
            }
            Change::ApplyQuota(rq) => {
                let (ns, name) = names(&rq.metadata)?;
                apply(Api::<ResourceQuota>::namespaced(client.clone(), ns), name, rq).await?;
                metrics.record_write("ResourceQuota", "apply");
            }
            Change::DeleteConfigMap(key) => {
                delete(Api::<ConfigMap>::namespaced(client.clone(), &key.namespace), key).await?;
                metrics.record_write("ConfigMap", "delete");
            }
            Change::DeleteQuota(key) => {
                delete(Api::<ResourceQuota>::namespaced(client.clone(), &key.namespace), key).await?;
                metrics.record_write("ResourceQuota", "delete");
            }
        }
    }
    Ok(refusals)
}

/// Set or remove the claim label and write the taint list back whole. Taints
/// are one atomic list, so the write carries the resourceVersion it was
/// planned from: if a kubelet or an admin changed the node meanwhile, the API
/// server refuses it and the next reconcile plans again from the new list.
async fn patch_node(client: &Client, change: &NodeChange) -> Result<(), Error> {
    let taints = if change.taints.is_empty() { Value::Null } else { json!(change.taints) };
    let patch = json!({
        "metadata": {
            "resourceVersion": change.resource_version,
            "labels": {change.label_key.as_str(): change.class},
        },
        "spec": {"taints": taints},
    });
    let api = Api::<Node>::all(client.clone());
    match api.patch(&change.node, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Err(Error::NodeChanged(change.node.clone())),
        // A node deleted since it was observed needs no release.
        Err(kube::Error::Api(s)) if s.code == 404 && change.class.is_none() => Ok(()),
        Err(e) => Err(Error::write("patch", "Node", &change.node)(e)),
    }
}

/// The API of a Deployment's or StatefulSet's namespace. Placement writes
/// partial objects, so one untyped API serves both kinds.
fn workload_api(client: &Client, kind: WorkloadKind, namespace: &str) -> Api<DynamicObject> {
    let resource = match kind {
        WorkloadKind::Deployment => ApiResource::erase::<Deployment>(&()),
        WorkloadKind::StatefulSet => ApiResource::erase::<StatefulSet>(&()),
    };
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// A server-side apply body for one workload, and what it is checked against.
struct WorkloadPatch<'a> {
    kind: WorkloadKind,
    key: &'a ObjectKey,
    generation: Option<i64>,
    fingerprint: &'a str,
    body: &'a Value,
    /// Newer Bulkheads whose placement fields this one may take.
    take_from: &'a [String],
}

/// Apply a workload patch without force. A conflict means another manager
/// owns one of the fields: report it and leave the workload alone, unless
/// every manager in the conflict is the placement of a newer Bulkhead, whose
/// fields the older one takes (the newer then withdraws; see `Seniority`).
async fn patch_workload(
    client: &Client,
    manager: &str,
    concern: Concern,
    p: &WorkloadPatch<'_>,
) -> Result<Option<PlacementRefusal>, Error> {
    let api = workload_api(client, p.kind, &p.key.namespace);
    let mut result = api.patch(&p.key.name, &PatchParams::apply(manager), &Patch::Apply(p.body)).await;
    if let Err(kube::Error::Api(s)) = &result {
        let newer: Vec<String> = p.take_from.iter().map(|b| placement_manager(b)).collect();
        if s.code == 409 && only_these_conflict(&s.message, &newer) {
            let forced = PatchParams::apply(manager).force();
            result = api.patch(&p.key.name, &forced, &Patch::Apply(p.body)).await;
        }
    }
    match result {
        Ok(_) => Ok(None),
        // A refusal of this one workload (conflict, invalid, forbidden by a
        // webhook, gone) must not stop the writes planned after it.
        // Not: 401 (credentials), 408 and 429 (transient), which are retried with backoff.
        Err(kube::Error::Api(s)) if (400..500).contains(&s.code) && !matches!(s.code, 401 | 408 | 429) => {
            Ok(Some(PlacementRefusal {
                concern,
                kind: p.kind,
                key: p.key.clone(),
                generation: p.generation,
                fingerprint: p.fingerprint.to_string(),
                conflict: s.code == 409,
                message: s.message,
            }))
        }
        Err(e) => Err(Error::write("apply", p.kind.as_str(), &p.key)(e)),
    }
}

/// Whether a server-side apply conflict names at least one field manager and
/// only managers in `allowed`. The API server lists them as `conflict with
/// "<manager>"` (one) or `conflicts with "<manager>"` (several).
fn only_these_conflict(message: &str, allowed: &[String]) -> bool {
    let managers: Vec<&str> = message.split(" with \"").skip(1).filter_map(|rest| rest.split('"').next()).collect();
    !managers.is_empty() && managers.iter().all(|m| allowed.iter().any(|a| a == m))
}

/// Withdraw what a manager applied, in three steps, so that a crash part-way
/// leaves the manager's marker annotation on the workload and the next run
/// (which finds workloads by that marker) withdraws again: apply the marker
/// alone (the API server removes every other field the manager applied and
/// nobody else owns), remove the affinity parents that left empty, then an
/// empty apply (the marker goes).
async fn withdraw(
    client: &Client,
    manager: &str,
    marker: &str,
    kind: WorkloadKind,
    key: &ObjectKey,
) -> Result<(), Error> {
    let api = workload_api(client, kind, &key.namespace);
    let mut marked = withdrawal_body(kind, key);
    marked["metadata"]["annotations"] = json!({marker: "withdrawing"});
    let Some(current) = apply_withdrawal(&api, manager, kind, key, &marked).await? else { return Ok(()) };
    remove_empty_parents(&api, kind, key, current).await?;
    apply_withdrawal(&api, manager, kind, key, &withdrawal_body(kind, key)).await?;
    Ok(())
}

/// One withdrawal apply; None when the workload is gone.
async fn apply_withdrawal(
    api: &Api<DynamicObject>,
    manager: &str,
    kind: WorkloadKind,
    key: &ObjectKey,
    body: &Value,
) -> Result<Option<DynamicObject>, Error> {
    let read = |e| Error::read(kind.as_str(), key)(e);
    match api.patch(&key.name, &PatchParams::apply(manager), &Patch::Apply(body)).await {
        Ok(after) => Ok(Some(after)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        // An apply to a workload deleted meanwhile is a create, which is
        // forbidden or invalid: the workload is gone, nothing to withdraw.
        Err(kube::Error::Api(s))
            if matches!(s.code, 403 | 422) && api.get_opt(&key.name).await.map_err(read)?.is_none() =>
        {
            Ok(None)
        }
        Err(e) => Err(Error::write("withdraw (apply) from", kind.as_str(), key)(e)),
    }
}

/// The API server can leave the emptied parents behind (`affinity:
/// {nodeAffinity: {}}`), which would keep the template from being exactly
/// what it was. Remove them, only while still empty: the patch carries the
/// resourceVersion it was computed from, and is recomputed when the
/// workload moved on (its controller updates status all the time).
async fn remove_empty_parents(
    api: &Api<DynamicObject>,
    kind: WorkloadKind,
    key: &ObjectKey,
    mut current: DynamicObject,
) -> Result<(), Error> {
    let written = |e| Error::write("remove emptied affinity from", kind.as_str(), key)(e);
    let read = |e| Error::read(kind.as_str(), key)(e);
    for _ in 0..CLEANUP_ATTEMPTS {
        let value = serde_json::to_value(&current).map_err(|source| Error::Serialize { what: "a workload", source })?;
        let Some(cleanup) = empty_affinity_cleanup(&value) else { return Ok(()) };
        match api.patch(&key.name, &PatchParams::default(), &Patch::Merge(&cleanup)).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => match api.get_opt(&key.name).await.map_err(read)? {
                Some(fresh) => current = fresh,
                None => return Ok(()),
            },
            Err(e) => return Err(written(e)),
        }
    }
    // Still contended: an empty parent is harmless; leave it.
    Ok(())
}

/// How often the removal of emptied affinity parents is retried on a conflict.
const CLEANUP_ATTEMPTS: usize = 5;

/// A merge patch removing the empty affinity parents placement may leave behind.
fn empty_affinity_cleanup(workload: &Value) -> Option<Value> {
    const PLACEMENT_PARTS: [&str; 2] = ["nodeAffinity", "podAntiAffinity"];
    let affinity = workload.pointer("/spec/template/spec/affinity")?.as_object()?;
    let empty = |v: &Value| v.as_object().is_some_and(serde_json::Map::is_empty);
    let removable: Vec<&str> = PLACEMENT_PARTS.into_iter().filter(|p| affinity.get(*p).is_some_and(empty)).collect();
    let all_gone = affinity.keys().all(|k| removable.contains(&k.as_str()));
    let replacement = if all_gone {
        Value::Null
    } else if removable.is_empty() {
        return None;
    } else {
        Value::Object(removable.iter().map(|p| (p.to_string(), Value::Null)).collect())
    };
    Some(json!({
        "metadata": {"resourceVersion": workload.pointer("/metadata/resourceVersion")},
        "spec": {"template": {"spec": {"affinity": replacement}}},
    }))
}

fn names(meta: &kube::api::ObjectMeta) -> Result<(&str, &str), Error> {
    // Namespaced objects only; cluster-scoped ones are named directly.
    match (meta.namespace.as_deref(), meta.name.as_deref()) {
        (Some(ns), Some(name)) => Ok((ns, name)),
        _ => Err(Error::Unnamed("a planned child object")),
    }
}

/// Force-apply our object, but never take over one somebody else made under
/// the same name: deleting the Bulkhead would then delete their object too.
async fn apply<K>(api: Api<K>, name: &str, obj: &K) -> Result<(), Error>
where
    K: Clone + DeserializeOwned + Serialize + std::fmt::Debug + Resource<DynamicType = ()> + k8s_openapi::Resource,
{
    let key = ObjectKey::new(obj.meta().namespace.clone().unwrap_or_default(), name);
    if let Some(existing) = api.get_opt(name).await.map_err(Error::read(K::KIND, &key))? {
        let owner = |o: &K| o.meta().labels.as_ref().and_then(|l| l.get(BULKHEAD_LABEL)).cloned();
        if owner(&existing).is_none() || owner(&existing) != owner(obj) {
            return Err(Error::NotOurs { kind: K::KIND, key, owner: owner(&existing) });
        }
    }
    api.patch(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(obj)).await.map_err(Error::write(
        "apply",
        K::KIND,
        &key,
    ))?;
    Ok(())
}

async fn delete<K>(api: Api<K>, key: &ObjectKey) -> Result<(), Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug + k8s_openapi::Resource,
{
    match api.delete(&key.name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(Error::write("delete", K::KIND, key)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::{empty_affinity_cleanup, only_these_conflict};
    use serde_json::json;

    #[test]
    fn only_a_conflict_with_newer_bulkheads_placement_is_taken_over() {
        let newer = vec!["bulkhead-placement-b".to_string()];
        let one = r#"Apply failed with 1 conflict: conflict with "bulkhead-placement-b" using apps/v1: .spec.template.spec.tolerations"#;
        assert!(only_these_conflict(one, &newer));
        let two = "Apply failed with 2 conflicts: conflicts with \"bulkhead-placement-b\" using apps/v1:\n- .spec.template.spec.tolerations\n- .spec.template.spec.affinity";
        assert!(only_these_conflict(two, &newer));
        // A person's (or any other) manager among them: never forced.
        let mixed = "Apply failed with 2 conflicts: conflicts with \"kubectl\" using apps/v1:\n- .spec.template.spec.affinity\nconflict with \"bulkhead-placement-b\" using apps/v1:\n- .spec.template.spec.tolerations";
        assert!(!only_these_conflict(mixed, &newer));
        assert!(!only_these_conflict(one, &[]), "no newer Bulkhead, nothing taken");
        assert!(!only_these_conflict("Operation cannot be fulfilled: the object has been modified", &newer));
    }

    fn workload(affinity: serde_json::Value) -> serde_json::Value {
        json!({"metadata": {"resourceVersion": "7"}, "spec": {"template": {"spec": {"affinity": affinity}}}})
    }

    #[test]
    fn emptied_affinity_parents_are_removed_under_a_precondition() {
        let all =
            empty_affinity_cleanup(&workload(json!({"nodeAffinity": {}, "podAntiAffinity": {}}))).expect("cleanup");
        assert_eq!(
            all,
            json!({"metadata": {"resourceVersion": "7"}, "spec": {"template": {"spec": {"affinity": null}}}})
        );
        // Someone else's podAffinity stays; only our emptied part goes.
        let part =
            empty_affinity_cleanup(&workload(json!({"nodeAffinity": {}, "podAffinity": {"x": 1}}))).expect("cleanup");
        assert_eq!(part["spec"]["template"]["spec"]["affinity"], json!({"nodeAffinity": null}));
        // Nothing empty, nothing to do.
        assert_eq!(empty_affinity_cleanup(&workload(json!({"nodeAffinity": {"a": 1}}))), None);
        assert_eq!(empty_affinity_cleanup(&json!({"spec": {"template": {"spec": {}}}})), None);
    }
}
