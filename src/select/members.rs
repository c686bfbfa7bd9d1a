//! Which pods do each class's work. A class with `pods` selectors owns the pods
//! they match; a class without them runs in the pods of spec.workload (the
//! usual case for per-dependency pools: one process serves every class).

use super::{ClassSelection, Selection};
use crate::snapshot::{ObjectKey, PodInfo, Snapshot};

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
    /// Running pods (not Succeeded or Failed), in snapshot order.
    pub pods: Vec<(&'a ObjectKey, &'a PodInfo)>,
}

pub fn members<'a>(selection: &Selection<'a>, snapshot: &'a Snapshot) -> Vec<Members<'a>> {
    let workload = selection.bulkhead.spec.workload.as_ref().zip(selection.workload.as_ref()).map(|(w, matcher)| {
        running(snapshot.pods_in(&w.namespace)).filter(|(_, p)| matcher.matches(&p.labels)).collect::<Vec<_>>()
    });
    selection
        .classes
        .iter()
        .map(|class| {
            let name = class.spec.name.as_str();
            match (&class.pods, &workload) {
                (Some(_), _) => Members { class: name, source: Source::Selectors, pods: by_selectors(class, snapshot) },
                (None, Some(pods)) => Members { class: name, source: Source::Workload, pods: pods.clone() },
                (None, None) => Members { class: name, source: Source::Unknown, pods: Vec::new() },
            }
        })
        .collect()
}

fn running<'a>(
    pods: impl Iterator<Item = (&'a ObjectKey, &'a PodInfo)>,
) -> impl Iterator<Item = (&'a ObjectKey, &'a PodInfo)> {
    pods.filter(|(_, p)| !p.finished)
}

fn by_selectors<'a>(class: &ClassSelection<'_>, snapshot: &'a Snapshot) -> Vec<(&'a ObjectKey, &'a PodInfo)> {
    let Some(selection) = &class.pods else { return Vec::new() };
    let mut out = Vec::new();
    for ns in snapshot.namespaces.values().filter(|ns| selection.namespaces.matches(&ns.labels)) {
        out.extend(running(snapshot.pods_in(&ns.name)).filter(|(_, p)| selection.pods.matches(&p.labels)));
    }
    out
}
