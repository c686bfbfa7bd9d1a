//! Isolation at admission: whether a pod may be created, given the node
//! groups of the Bulkheads. A pod that tolerates a class's taint, selects
//! its claim label (nodeSelector, or a node affinity term, required or
//! preferred), or names one of its claimed nodes in spec.nodeName is
//! admitted only when it is one of that class's pods (by the class's own
//! selectors, or spec.workload's for a class without them) or of the
//! Bulkhead's critical class, which tolerates every group by design. The
//! keys are the planner's own (`claim_key`, the class name as the value), so
//! what placement writes into a class's workloads is what admission admits.

use k8s_openapi::api::core::v1::{NodeSelectorTerm, Pod, Toleration};

use super::nodes::{claim_key, CLAIM_EFFECT, CLAIM_PREFIX};
use crate::{
    select::{ClassSelection, Selection},
    snapshot::{LabelLookup, Labels, Snapshot},
};

/// Why a pod is refused: the Bulkhead, the class, the field and what would admit it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    pub bulkhead: String,
    pub class: String,
    /// The pod field that reaches the class's nodes (`spec.tolerations[0]`).
    pub field: String,
    pub message: String,
}

/// Whether the pod carries any key under `bulkhead.dev/` (or a toleration of
/// every taint): pods without one are admitted without looking further.
pub fn carries_operator_keys(pod: &Pod) -> bool {
    let Some(spec) = &pod.spec else { return false };
    let ours = |k: &str| k.starts_with(CLAIM_PREFIX);
    spec.tolerations.iter().flatten().any(|t| t.key.as_deref().is_none_or(|k| k.is_empty() || ours(k)))
        || spec.node_selector.iter().flatten().any(|(k, _)| ours(k))
        || node_terms(pod).any(|(_, term)| term.match_expressions.iter().flatten().any(|e| ours(&e.key)))
        || spec.node_name.is_some()
}

/// Review a pod about to be created (or updated) against `bulkheads`, with
/// namespaces and nodes from `snapshot`. `exempt`: namespaces whose pods
/// are not reviewed (node agents that tolerate every taint).
pub fn review_pod(
    pod: &Pod,
    bulkheads: &[Selection<'_>],
    snapshot: &Snapshot,
    exempt: &[String],
) -> Result<(), Denial> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    if exempt.iter().any(|e| e == namespace) || !carries_operator_keys(pod) {
        return Ok(());
    }
    let empty = Labels::new();
    let ns_labels = snapshot.namespaces.get(namespace).map_or(&empty, |ns| &ns.labels);
    let pod_labels = pod.metadata.labels.clone().unwrap_or_default();
    for selection in bulkheads {
        let Some(bulkhead) = selection.bulkhead.metadata.name.as_deref() else { continue };
        let key = claim_key(bulkhead);
        for class in selection.classes.iter().filter(|c| c.spec.nodes.is_some()) {
            let Some(field) = reaches(pod, &key, &class.spec.name, snapshot) else { continue };
            let member = |c: &ClassSelection<'_>| belongs(selection, c, namespace, ns_labels, &pod_labels);
            if member(class) || selection.classes.iter().filter(|c| c.spec.critical).any(member) {
                continue;
            }
            let name = &class.spec.name;
            return Err(Denial {
                bulkhead: bulkhead.to_string(),
                class: name.clone(),
                message: format!(
                    "Bulkhead {bulkhead}: {field} reaches the nodes dedicated to class {name} ({key}={name}:{CLAIM_EFFECT}), \
                     but this pod is not one of class {name}'s pods; it is admitted {}, or without {field}",
                    what_admits(selection, class)
                ),
                field,
            });
        }
    }
    Ok(())
}

/// The first pod field by which the pod may land on `class`'s nodes.
fn reaches(pod: &Pod, key: &str, class: &str, snapshot: &Snapshot) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    for (i, t) in spec.tolerations.iter().flatten().enumerate() {
        if tolerates(t, key, class) {
            return Some(format!("spec.tolerations[{i}]"));
        }
    }
    if spec.node_selector.as_ref().and_then(|s| s.get(key)).is_some_and(|v| v == class) {
        return Some(format!("spec.nodeSelector[{key}]"));
    }
    for (field, term) in node_terms(pod) {
        let selects = term.match_expressions.iter().flatten().any(|e| {
            e.key == key
                && match e.operator.as_str() {
                    "In" => e.values.iter().flatten().any(|v| v == class),
                    "Exists" => true,
                    _ => false,
                }
        });
        if selects {
            return Some(field);
        }
    }
    let node = spec.node_name.as_deref()?;
    let claimed = snapshot.nodes.get(node).is_some_and(|n| n.labels.label(key) == Some(class));
    claimed.then(|| "spec.nodeName".to_string())
}

/// A toleration of the class's taint: its key and value, its key with
/// Exists, or every taint (no key, Exists). A NoExecute-only toleration does
/// not tolerate a NoSchedule taint.
fn tolerates(t: &Toleration, key: &str, class: &str) -> bool {
    let effect = t.effect.as_deref().unwrap_or_default();
    if !(effect.is_empty() || effect == CLAIM_EFFECT) {
        return false;
    }
    let exists = t.operator.as_deref() == Some("Exists");
    match t.key.as_deref().unwrap_or_default() {
        "" => exists,
        k if k == key => exists || t.value.as_deref().unwrap_or_default() == class,
        _ => false,
    }
}

/// Every node affinity term, required and preferred, with its field path.
fn node_terms(pod: &Pod) -> impl Iterator<Item = (String, &NodeSelectorTerm)> {
    let affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref()).and_then(|a| a.node_affinity.as_ref());
    let base = "spec.affinity.nodeAffinity";
    let required = affinity
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|r| r.node_selector_terms.iter().enumerate())
        .into_iter()
        .flatten()
        .map(move |(i, t)| {
            (format!("{base}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"), t)
        });
    let preferred = affinity
        .and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
        .map(move |(i, p)| {
            (format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"), &p.preference)
        });
    required.chain(preferred)
}

/// Whether a pod with these labels, in this namespace, is one of `class`'s pods.
fn belongs(
    selection: &Selection<'_>,
    class: &ClassSelection<'_>,
    namespace: &str,
    ns_labels: &Labels,
    pod: &Labels,
) -> bool {
    match &class.pods {
        Some(s) => s.namespaces.matches(ns_labels) && s.pods.matches(pod),
        None => {
            let workload = selection.bulkhead.spec.workload.as_ref();
            workload.is_some_and(|w| w.namespace == namespace)
                && selection.workload.as_ref().is_some_and(|m| m.matches(pod))
        }
    }
}

/// What would make a pod one of `class`'s, in the spec's words.
fn what_admits(selection: &Selection<'_>, class: &ClassSelection<'_>) -> String {
    let spec = class.spec;
    match &spec.pods {
        Some(pods) => format!(
            "in a namespace that matches spec.classes[{}].pods.namespaceSelector ({}) with labels that match its podSelector ({})",
            class.index,
            describe(pods.namespace_selector.as_ref()),
            describe(pods.pod_selector.as_ref())
        ),
        None => match &selection.bulkhead.spec.workload {
            Some(w) => format!(
                "in namespace {} with labels that match spec.workload.selector ({})",
                w.namespace,
                describe(Some(&w.selector))
            ),
            None => format!("as a pod spec.classes[{}] selects (it selects none)", class.index),
        },
    }
}

fn describe(selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>) -> String {
    let Some(s) = selector else { return "everything".into() };
    let mut parts: Vec<String> = s.match_labels.iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
    for e in s.match_expressions.iter().flatten() {
        let values = e.values.as_ref().map(|v| format!(" ({})", v.join(","))).unwrap_or_default();
        parts.push(format!("{} {}{values}", e.key, e.operator));
    }
    if parts.is_empty() {
        "everything".into()
    } else {
        parts.join(", ")
    }
}
