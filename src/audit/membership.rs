//! Which pods do each class's work. A class with `pods` selectors owns the pods
//! they match; a class without them runs in the pods of spec.workload (the
//! usual case for per-dependency pools: one process serves every class).

use super::domains::NodeId;
use crate::{
    crd::{Bulkhead, ClassSpec},
    plan::Matcher,
    snapshot::{ObjectKey, PodInfo, Snapshot},
};

/// Where a class's pods come from, for evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The class's own pods selectors.
    Selectors,
    /// spec.workload's pods (no selectors on the class).
    Workload,
    /// Neither: nothing is known about where the class runs.
    Unknown,
}

pub struct Members<'a> {
    pub class: &'a str,
    pub source: Source,
    pub pods: Vec<(&'a ObjectKey, &'a PodInfo)>,
    /// Per pod (same order): its node in the audit's node table; None if unscheduled.
    pub nodes: Vec<Option<NodeId>>,
}

pub fn members<'a>(bulkhead: &'a Bulkhead, snapshot: &'a Snapshot) -> Vec<Members<'a>> {
    let workload = bulkhead.spec.workload.as_ref().map(|w| {
        let matcher = Matcher::parse(Some(&w.selector), "spec.workload.selector").unwrap_or_else(|_| Matcher::nothing());
        running(snapshot.pods_in(&w.namespace)).filter(move |(_, p)| matcher.matches(&p.labels)).collect::<Vec<_>>()
    });
    bulkhead
        .spec
        .classes
        .iter()
        .enumerate()
        .map(|(i, class)| match (&class.pods, &workload) {
            (Some(_), _) => {
                Members { class: &class.name, source: Source::Selectors, pods: by_selectors(i, class, snapshot), nodes: Vec::new() }
            }
            (None, Some(pods)) => Members { class: &class.name, source: Source::Workload, pods: pods.clone(), nodes: Vec::new() },
            (None, None) => Members { class: &class.name, source: Source::Unknown, pods: Vec::new(), nodes: Vec::new() },
        })
        .collect()
}

fn running<'a>(
    pods: impl Iterator<Item = (&'a ObjectKey, &'a PodInfo)>,
) -> impl Iterator<Item = (&'a ObjectKey, &'a PodInfo)> {
    pods.filter(|(_, p)| !p.finished)
}

fn by_selectors<'a>(i: usize, class: &ClassSpec, snapshot: &'a Snapshot) -> Vec<(&'a ObjectKey, &'a PodInfo)> {
    let pods = class.pods.clone().unwrap_or_default();
    let field = |f: &str| format!("spec.classes[{i}].pods.{f}");
    // An invalid selector is reported by validation; here it selects nothing.
    let (Ok(ns_matcher), Ok(pod_matcher)) = (
        Matcher::parse(pods.namespace_selector.as_ref(), &field("namespaceSelector")),
        Matcher::parse(pods.pod_selector.as_ref(), &field("podSelector")),
    ) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for ns in snapshot.namespaces.values().filter(|ns| ns_matcher.matches(&ns.labels)) {
        out.extend(running(snapshot.pods_in(&ns.name)).filter(|(_, p)| pod_matcher.matches(&p.labels)));
    }
    out
}
