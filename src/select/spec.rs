//! A Bulkhead's selectors, parsed once. Everything downstream (planner,
//! audit) takes a `Selection`, so a selector is parsed in one place and its
//! error is reported once, with the field named.

use bulkhead_admission::Unclassified;

use super::{Matcher, SpecError};
use crate::crd::{Bulkhead, ClassSpec, ProxySpec};

/// The Bulkhead with every selector parsed. A selector that does not parse
/// selects nothing; its error is in `errors`.
#[derive(Clone, Debug)]
pub struct Selection<'a> {
    pub bulkhead: &'a Bulkhead,
    /// spec.workload.selector, when spec.workload is set.
    pub workload: Option<Matcher>,
    pub classes: Vec<ClassSelection<'a>>,
    /// spec.shuffleSharding.nodes.selector, when shuffle sharding is asked for.
    pub shard_nodes: Option<Matcher>,
    /// spec.workload.proxy.unclassified, when spec.workload.proxy is set
    /// (`Reject` when the field is left out).
    pub unclassified: Option<Unclassified>,
    /// Selectors that did not parse.
    pub errors: Vec<SpecError>,
}

#[derive(Clone, Debug)]
pub struct ClassSelection<'a> {
    /// Position in spec.classes (for field paths).
    pub index: usize,
    pub spec: &'a ClassSpec,
    /// pods.namespaceSelector and pods.podSelector; None when the class has no `pods`.
    pub pods: Option<PodSelection>,
    /// nodes.selector, when the class asks for a node group.
    pub nodes: Option<Matcher>,
}

/// A class's own pods: those `pods` matches in the namespaces `namespaces` matches.
#[derive(Clone, Debug)]
pub struct PodSelection {
    pub namespaces: Matcher,
    pub pods: Matcher,
}

impl<'a> Selection<'a> {
    pub fn parse(bulkhead: &'a Bulkhead) -> Self {
        let mut errors = Vec::new();
        let mut parse = |selector, field: String| {
            Matcher::parse(selector, &field).unwrap_or_else(|e| {
                errors.push(e);
                Matcher::nothing()
            })
        };
        let workload =
            bulkhead.spec.workload.as_ref().map(|w| parse(Some(&w.selector), "spec.workload.selector".to_string()));
        let classes = bulkhead
            .spec
            .classes
            .iter()
            .enumerate()
            .map(|(index, spec)| {
                let field = |f: &str| format!("spec.classes[{index}].{f}");
                let pods = spec.pods.as_ref().map(|p| PodSelection {
                    namespaces: parse(p.namespace_selector.as_ref(), field("pods.namespaceSelector")),
                    pods: parse(p.pod_selector.as_ref(), field("pods.podSelector")),
                });
                let nodes = spec.nodes.as_ref().map(|g| parse(Some(&g.selector), field("nodes.selector")));
                ClassSelection { index, spec, pods, nodes }
            })
            .collect();
        let shard_nodes = bulkhead
            .spec
            .shuffle_sharding
            .as_ref()
            .map(|s| parse(Some(&s.nodes.selector), "spec.shuffleSharding.nodes.selector".to_string()));
        let unclassified = bulkhead.spec.workload.as_ref().and_then(|w| w.proxy.as_ref()).map(unclassified);
        Selection { bulkhead, workload, classes, shard_nodes, unclassified, errors }
    }

    /// The Bulkhead's name ("" when it has none: validation reports that).
    pub fn name(&self) -> &'a str {
        self.bulkhead.metadata.name.as_deref().unwrap_or_default()
    }
}

/// What the proxy does with a request that names no known class, from
/// spec.workload.proxy.unclassified: `reject` (also when left out) or a
/// class, whether the class exists or not (validation says). The one reading
/// of the field: `Selection::unclassified` holds it for a Bulkhead, and the
/// sidecar's arguments (`plan::sidecar_args`) take it from here.
pub fn unclassified(proxy: &ProxySpec) -> Unclassified {
    match proxy.unclassified.as_deref() {
        None | Some("reject") => Unclassified::Reject,
        Some(class) => Unclassified::Class(class.to_owned()),
    }
}
