//! Workload placement: for each Deployment and StatefulSet whose pod template
//! a class's selectors match, the pod-template fields that keep the class on
//! its own nodes and away from the others. The operator server-side applies
//! them under a field manager of its own, without force, and only when the
//! workload lacks them: a workload that already carries them is not touched,
//! so there is no rollout loop.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::{
    api::core::v1::{
        NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PodAffinityTerm, PodAntiAffinity,
        PreferredSchedulingTerm, Toleration,
    },
    apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement},
};
use serde_json::{json, Value};

use super::{
    nodes::{claim_key, CLAIM_EFFECT},
    priority::priority_class_name,
    shard::{ShardPlan, HOSTNAME_LABEL},
};
use crate::{
    crd::ClassSpec,
    select::{PodSelection, Selection},
    shard::fnv1a64,
    snapshot::{ObjectKey, Snapshot, TemplatePlacement, Workload, WorkloadKind, PLACEMENT_ANNOTATION_PREFIX},
};

/// Field manager of a Bulkhead's workload patches: one per Bulkhead, so two
/// Bulkheads never silently overwrite each other's fields.
pub fn placement_manager(bulkhead: &str) -> String {
    format!("bulkhead-placement-{bulkhead}")
}

/// The annotation marking a workload as placed by `bulkhead`.
pub fn placement_marker(bulkhead: &str) -> String {
    format!("{PLACEMENT_ANNOTATION_PREFIX}{bulkhead}")
}

/// What one workload's pod template should carry for its class.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadPlacement {
    pub kind: WorkloadKind,
    pub key: ObjectKey,
    pub class: String,
    pub generation: Option<i64>,
    /// Fingerprint of `body`, recorded on the workload in an annotation.
    pub fingerprint: String,
    /// The server-side apply body: only the fields placement owns.
    pub body: Value,
    /// The workload carries all of it already.
    pub up_to_date: bool,
    /// Newer Bulkheads that placed this workload too: fields only their
    /// placement managers own may be taken from them (see `Seniority`).
    pub take_from: Vec<String>,
}

impl WorkloadPlacement {
    pub fn describe(&self) -> String {
        format!("{} {}", self.kind.as_str(), self.key)
    }
}

/// A workload two classes' selectors both match: it is left alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AmbiguousWorkload {
    pub workload: String,
    pub classes: Vec<String>,
}

/// A workload an older Bulkhead placed: it is left to that one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct YieldedWorkload {
    pub workload: String,
    pub winner: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlacementPlan {
    pub workloads: Vec<WorkloadPlacement>,
    pub ambiguous: Vec<AmbiguousWorkload>,
    /// Workloads left to an older Bulkhead that placed them.
    pub yielded: Vec<YieldedWorkload>,
    /// Workloads this Bulkhead placed that no class selects any more, or that
    /// it yields to an older Bulkhead.
    pub withdrawals: Vec<(WorkloadKind, ObjectKey)>,
    /// (class, RuntimeClass) pairs naming a RuntimeClass the cluster does not
    /// have: the API server rejects such pods.
    pub missing_runtime_classes: Vec<(String, String)>,
    /// Workloads a class selects in namespaces that have not opted in, as
    /// (namespace, `Deployment ns/name`): neither placed nor withdrawn.
    pub not_opted_in: Vec<(String, String)>,
}

pub(super) fn plan_placement(
    selection: &Selection<'_>,
    snapshot: &Snapshot,
    shards: Option<&ShardPlan>,
    admits: &dyn Fn(&str) -> bool,
) -> PlacementPlan {
    let name = selection.name().to_string();
    let key = claim_key(&name);
    let classes = &selection.bulkhead.spec.classes;
    let matchers: Vec<Option<&PodSelection>> = selection
        .classes
        .iter()
        .map(|c| {
            // A class without a podSelector would place every workload of its namespaces: validate refuses it.
            c.spec.pods.as_ref()?.pod_selector.as_ref()?;
            c.pods.as_ref()
        })
        .collect();

    // Which class each workload belongs to.
    let mut assigned: Vec<(&Workload, usize)> = Vec::new();
    let mut ambiguous = Vec::new();
    let mut not_opted_in = Vec::new();
    for workload in snapshot.workloads.values() {
        let Some(ns) = snapshot.namespaces.get(&workload.namespace) else { continue };
        let labels = without_ours(&workload.template_labels, &key);
        let mut matching = matchers
            .iter()
            .enumerate()
            .filter(|(_, m)| m.is_some_and(|m| m.namespaces.matches(&ns.labels) && m.pods.matches(&labels)));
        let Some((first, _)) = matching.next() else { continue };
        if !admits(&workload.namespace) {
            let described = format!("{} {}/{}", workload.kind.as_str(), workload.namespace, workload.name);
            not_opted_in.push((workload.namespace.clone(), described));
            continue;
        }
        let others: Vec<usize> = matching.map(|(i, _)| i).collect();
        if others.is_empty() {
            assigned.push((workload, first));
        } else {
            ambiguous.push(AmbiguousWorkload {
                workload: format!("{} {}/{}", workload.kind.as_str(), workload.namespace, workload.name),
                classes: std::iter::once(first).chain(others).map(|i| classes[i].name.clone()).collect(),
            });
        }
    }
    // Anti-affinity terms look for the other classes' pods in every namespace the Bulkhead places pods in.
    let namespaces: Vec<String> =
        assigned.iter().map(|(w, _)| w.namespace.clone()).collect::<BTreeSet<_>>().into_iter().collect();
    let groups_exist = classes.iter().any(|c| c.nodes.is_some());

    let mut workloads = Vec::new();
    let mut yielded = Vec::new();
    for (workload, i) in &assigned {
        let class = &classes[*i];
        // Another Bulkhead's placement counts only while that Bulkhead exists;
        // a leftover is an ordinary field manager the apply may conflict with.
        let (older, newer): (Vec<&String>, Vec<&String>) = workload
            .placed_by
            .keys()
            .filter(|b| **b != name && snapshot.seniority.knows(b))
            .partition(|b| snapshot.seniority.outranks(b, &name));
        if let Some(winner) = older.first() {
            yielded.push(YieldedWorkload {
                workload: format!("{} {}/{}", workload.kind.as_str(), workload.namespace, workload.name),
                winner: winner.to_string(),
            });
            continue;
        }
        let pinned = shards.and_then(|s| s.pinned_hostnames(&class.name));
        let desired = desired_template(&name, &key, class, groups_exist, pinned, &namespaces);
        let body = apply_body(workload, &key, &class.name, &desired);
        let fingerprint = fingerprint(&body);
        let body = with_annotation(body, &placement_marker(&name), &fingerprint);
        let up_to_date = workload.template_labels.get(&key) == Some(&class.name)
            && workload.placed_by.get(&name) == Some(&fingerprint)
            && carries(&workload.placement, &desired);
        workloads.push(WorkloadPlacement {
            kind: workload.kind,
            key: ObjectKey::new(&workload.namespace, &workload.name),
            class: class.name.clone(),
            generation: workload.generation,
            fingerprint,
            body,
            up_to_date,
            take_from: newer.into_iter().cloned().collect(),
        });
    }
    // Placed before but no longer one class's (matched by none, or by two);
    // in a namespace that has not opted in, left as it is.
    let placed: BTreeSet<(WorkloadKind, &ObjectKey)> = workloads.iter().map(|p| (p.kind, &p.key)).collect();
    let withdrawals = snapshot
        .workloads
        .iter()
        .filter(|((kind, key), w)| {
            w.placed_by.contains_key(&name) && !placed.contains(&(*kind, key)) && admits(&key.namespace)
        })
        .map(|(k, _)| k.clone())
        .collect();
    let missing_runtime_classes = classes
        .iter()
        .filter_map(|c| c.runtime_class_name.as_ref().map(|rc| (c.name.clone(), rc.clone())))
        .filter(|(_, rc)| !snapshot.runtime_classes.contains_key(rc))
        .collect();
    PlacementPlan { workloads, ambiguous, yielded, withdrawals, missing_runtime_classes, not_opted_in }
}

/// Template labels without the class label placement added, so that a class
/// selector cannot match (or stop matching) because of it.
fn without_ours(labels: &BTreeMap<String, String>, key: &str) -> BTreeMap<String, String> {
    let mut labels = labels.clone();
    labels.remove(key);
    labels
}

/// The template fields a class's pods get.
fn desired_template(
    bulkhead: &str,
    key: &str,
    class: &ClassSpec,
    groups_exist: bool,
    pinned: Option<Vec<String>>,
    namespaces: &[String],
) -> TemplatePlacement {
    let requirement = |operator: &str, values: Option<Vec<String>>| NodeSelectorRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values,
    };
    let (node_affinity, tolerations) = if class.nodes.is_some() {
        let required = NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(vec![requirement("In", Some(vec![class.name.clone()]))]),
                match_fields: None,
            }],
        };
        let toleration = Toleration {
            key: Some(key.to_string()),
            operator: Some("Equal".to_string()),
            value: Some(class.name.clone()),
            effect: Some(CLAIM_EFFECT.to_string()),
            toleration_seconds: None,
        };
        (
            Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(required),
                ..Default::default()
            }),
            vec![toleration],
        )
    } else if let Some(hostnames) = pinned {
        // Shuffle sharding: the class's own shard, and nothing to tolerate
        // (shard nodes are shared with other tenants, not tainted).
        let required = NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: HOSTNAME_LABEL.to_string(),
                    operator: "In".to_string(),
                    values: Some(hostnames),
                }]),
                match_fields: None,
            }],
        };
        (
            Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(required),
                ..Default::default()
            }),
            Vec::new(),
        )
    } else if class.critical && groups_exist {
        // The control-plane lane may use every group's nodes when it must,
        // but prefers nodes no class holds.
        let preferred = PreferredSchedulingTerm {
            weight: 100,
            preference: NodeSelectorTerm {
                match_expressions: Some(vec![requirement("DoesNotExist", None)]),
                match_fields: None,
            },
        };
        let toleration = Toleration {
            key: Some(key.to_string()),
            operator: Some("Exists".to_string()),
            value: None,
            effect: Some(CLAIM_EFFECT.to_string()),
            toleration_seconds: None,
        };
        (
            Some(NodeAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(vec![preferred]),
                ..Default::default()
            }),
            vec![toleration],
        )
    } else {
        (None, Vec::new())
    };
    let pod_anti_affinity = class.anti_affinity.as_ref().map(|a| PodAntiAffinity {
        required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
            label_selector: Some(LabelSelector {
                match_expressions: Some(vec![
                    LabelSelectorRequirement { key: key.to_string(), operator: "Exists".to_string(), values: None },
                    LabelSelectorRequirement {
                        key: key.to_string(),
                        operator: "NotIn".to_string(),
                        values: Some(vec![class.name.clone()]),
                    },
                ]),
                match_labels: None,
            }),
            namespaces: Some(namespaces.to_vec()),
            topology_key: a.topology_key.clone(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    TemplatePlacement {
        node_affinity,
        pod_anti_affinity,
        tolerations,
        runtime_class_name: class.runtime_class_name.clone(),
        priority_class_name: Some(priority_class_name(bulkhead, &class.name)),
    }
}

/// Whether the template already carries every field placement sets. Only
/// those fields compare: a workload's own preferred anti-affinity beside
/// placement's required one is no difference. (The fingerprint annotation
/// covers fields placement stopped setting.)
fn carries(current: &TemplatePlacement, desired: &TemplatePlacement) -> bool {
    fn same<T: PartialEq>(want: Option<&T>, have: Option<&T>) -> bool {
        want.is_none() || want == have
    }
    let node = |p: &TemplatePlacement| p.node_affinity.clone().unwrap_or_default();
    let (want_node, have_node) = (node(desired), node(current));
    let anti = |p: &TemplatePlacement| p.pod_anti_affinity.clone().unwrap_or_default();
    let (want_anti, have_anti) = (anti(desired), anti(current));
    same(
        want_node.required_during_scheduling_ignored_during_execution.as_ref(),
        have_node.required_during_scheduling_ignored_during_execution.as_ref(),
    ) && same(
        want_node.preferred_during_scheduling_ignored_during_execution.as_ref(),
        have_node.preferred_during_scheduling_ignored_during_execution.as_ref(),
    ) && same(
        want_anti.required_during_scheduling_ignored_during_execution.as_ref(),
        have_anti.required_during_scheduling_ignored_during_execution.as_ref(),
    ) && (desired.tolerations.is_empty() || current.tolerations == desired.tolerations)
        && same(desired.runtime_class_name.as_ref(), current.runtime_class_name.as_ref())
        && current.priority_class_name == desired.priority_class_name
}

/// A server-side apply body with only placement's fields: whatever it omits
/// that the manager applied before is withdrawn by the API server.
fn apply_body(workload: &Workload, key: &str, class: &str, desired: &TemplatePlacement) -> Value {
    let mut spec = serde_json::Map::new();
    let mut affinity = serde_json::Map::new();
    if let Some(n) = &desired.node_affinity {
        affinity.insert("nodeAffinity".into(), json!(n));
    }
    if let Some(p) = &desired.pod_anti_affinity {
        affinity.insert("podAntiAffinity".into(), json!(p));
    }
    if !affinity.is_empty() {
        spec.insert("affinity".into(), Value::Object(affinity));
    }
    if !desired.tolerations.is_empty() {
        spec.insert("tolerations".into(), json!(desired.tolerations));
    }
    if let Some(rc) = &desired.runtime_class_name {
        spec.insert("runtimeClassName".into(), json!(rc));
    }
    if let Some(pc) = &desired.priority_class_name {
        spec.insert("priorityClassName".into(), json!(pc));
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": workload.kind.as_str(),
        "metadata": {"name": workload.name, "namespace": workload.namespace},
        "spec": {"template": {"metadata": {"labels": {key: class}}, "spec": spec}},
    })
}

/// The empty apply that withdraws everything a manager applied to a workload.
pub fn withdrawal_body(kind: WorkloadKind, key: &ObjectKey) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": kind.as_str(),
        "metadata": {"name": key.name, "namespace": key.namespace},
    })
}

pub(super) fn with_annotation(mut body: Value, annotation: &str, fingerprint: &str) -> Value {
    body["metadata"]["annotations"] = json!({annotation: fingerprint});
    body
}

/// FNV-1a of the body's JSON: stable across builds and platforms, unlike std's hasher.
pub(super) fn fingerprint(body: &Value) -> String {
    format!("{:016x}", fnv1a64(body.to_string().as_bytes()))
}
