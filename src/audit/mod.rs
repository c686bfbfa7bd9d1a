//! The shared-layer audit: for every pair of classes and every layer of the
//! stack, whether the API shows they share it (`Shared`, naming the objects),
//! shows they do not (`Separate`), or cannot tell (`Unverified`). Pure, like
//! the planner; the controller and `bulkhead check` both call it.

mod database;
mod domains;
mod nodes;

pub use database::host_of;

use domains::{Domain, DomainLayer, Doubt, Located, PairVerdict, Placed};

use crate::{
    crd::{Layer, LayerState, LayerStatus, PairStatus},
    select::{members, resolve_workload, Selection, Source},
    snapshot::{LabelLookup, Snapshot},
};

pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Operator configuration for what the API cannot say by itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditConfig {
    /// RuntimeClass handlers that give a pod its own guest kernel; a trailing
    /// `*` matches a prefix.
    pub sandbox_handlers: Vec<String>,
    /// Node label naming the machine (hypervisor) under a node, if the
    /// platform sets one.
    pub host_label: Option<String>,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self { sandbox_handlers: vec!["kata*".into(), "gvisor".into(), "runsc".into()], host_label: None }
    }
}

impl AuditConfig {
    fn sandboxed(&self, handler: &str) -> bool {
        self.sandbox_handlers.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => handler.starts_with(prefix),
            None => handler == p,
        })
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Audit {
    pub layers: Vec<LayerStatus>,
    /// Pods of the classes not yet bound to a node (ignored by placement layers).
    pub unscheduled: usize,
}

pub fn audit(selection: &Selection<'_>, snapshot: &Snapshot, config: &AuditConfig) -> Audit {
    let (members, nodes) = nodes::locate(members(selection, snapshot), snapshot);
    let mut unscheduled = 0;
    let mut layers = Vec::new();
    for layer in Layer::ALL {
        let pairs = match layer {
            Layer::Process => process(selection, snapshot, &members),
            Layer::Node => {
                let l = DomainLayer::build(&members, |p| p.node.map_or(Domain::Ignored, Domain::Known));
                unscheduled = l.ignored;
                l.pairs(&members, |node, a, b| format!("node {} runs {a} and {b}", nodes.names[node as usize]))
            }
            Layer::Kernel => kernel(&members, &nodes, snapshot, config),
            Layer::Zone => by_node_label(&members, &nodes, ZONE_LABEL, "zone"),
            Layer::Host => match &config.host_label {
                Some(label) => by_node_label(&members, &nodes, label, "host"),
                None => {
                    let l: DomainLayer<'_, &str> = DomainLayer::build(&members, |_| {
                        Domain::Unknown(Doubt::Text(
                            "no host label is configured (--host-label): the machine under a node is not visible to the API",
                        ))
                    });
                    l.pairs(&members, |_, _, _| String::new())
                }
            },
            Layer::Database => database::pairs(selection.bulkhead, snapshot),
        };
        layers.push(layer_status(selection, layer, &members, pairs));
    }
    Audit { layers, unscheduled }
}

fn process(selection: &Selection<'_>, snapshot: &Snapshot, members: &[Located<'_>]) -> Vec<PairVerdict> {
    // A pod is its own domain, identified by where the snapshot holds it.
    // Only classes drawing pods from a namespace another class also draws
    // from can share one; the others' pods are placed alone, unhashed.
    fn namespaces_of<'m>(m: &Located<'m>) -> Vec<&'m str> {
        let mut seen: Vec<&str> = m.pods.iter().map(|(k, _)| k.namespace.as_str()).collect();
        seen.dedup();
        seen
    }
    let mut drawn: rustc_hash::FxHashMap<&str, usize> = rustc_hash::FxHashMap::default();
    let per_class: Vec<Vec<&str>> = members.iter().map(namespaces_of).collect();
    for ns in per_class.iter().flatten() {
        *drawn.entry(ns).or_default() += 1;
    }
    let overlaps: Vec<bool> = per_class.iter().map(|nss| nss.iter().any(|ns| drawn[ns] > 1)).collect();
    let l = DomainLayer::build(members, |p| {
        if overlaps[p.class] {
            Domain::Known(std::ptr::from_ref(p.pod) as usize)
        } else {
            Domain::Alone
        }
    });
    let mut pairs = l.pairs(members, |_, pod, _| format!("pod {pod} serves both: one heap, one garbage collector"));
    // Classes without pods selectors run in spec.workload's pods by
    // declaration: shared even before a pod exists.
    let workload = resolve_workload(selection, snapshot);
    for pair in &mut pairs {
        if members[pair.a].source == Source::Workload && members[pair.b].source == Source::Workload {
            let named = workload.as_ref().map(|w| {
                if w.workloads.is_empty() {
                    format!("namespace {}", w.namespace)
                } else {
                    w.workloads.join(", ")
                }
            });
            pair.state = LayerState::Shared;
            pair.evidence = vec![format!(
                "{} and {} both run in the pods of spec.workload ({}): one process, one heap, one garbage collector",
                members[pair.a].class,
                members[pair.b].class,
                named.unwrap_or_default()
            )];
        }
    }
    pairs
}

fn kernel(
    members: &[Located<'_>],
    nodes: &nodes::NodeTable<'_>,
    snapshot: &Snapshot,
    config: &AuditConfig,
) -> Vec<PairVerdict> {
    let l = DomainLayer::build(members, |Placed { key, pod, node, .. }| {
        let Some(node) = node else { return Domain::Ignored };
        match pod.runtime_class.as_deref() {
            None => Domain::Known(node),
            Some(rc) => match snapshot.runtime_classes.get(rc) {
                Some(info) if config.sandboxed(&info.handler) => Domain::Alone,
                Some(_) => Domain::Known(node),
                None => Domain::Unknown(Doubt::MissingRuntimeClass { pod: key, runtime_class: rc }),
            },
        }
    });
    l.pairs(members, |node, a, b| {
        format!("node {} runs {a} and {b} on its kernel (neither is sandboxed)", nodes.names[node as usize])
    })
}

fn by_node_label<'a>(
    members: &[Located<'a>],
    nodes: &nodes::NodeTable<'a>,
    label: &str,
    what: &str,
) -> Vec<PairVerdict> {
    // Each node's label, looked up once and numbered, so pods hash an integer.
    let mut values: Vec<&str> = Vec::new();
    let mut ids: rustc_hash::FxHashMap<&str, u32> = rustc_hash::FxHashMap::default();
    let per_node: Vec<Option<u32>> = nodes
        .info
        .iter()
        .map(|info| {
            let value = info.and_then(|n| n.labels.label(label))?;
            Some(*ids.entry(value).or_insert_with(|| {
                values.push(value);
                u32::try_from(values.len() - 1).unwrap_or(u32::MAX)
            }))
        })
        .collect();
    let l = DomainLayer::build(members, |Placed { key, node, .. }| {
        let Some(node) = node else { return Domain::Ignored };
        let name = nodes.names[node as usize];
        match (per_node[node as usize], nodes.info[node as usize]) {
            (Some(value), _) => Domain::Known(value),
            (None, Some(_)) => Domain::Unknown(Doubt::NoLabel { node: name, pod: key, label }),
            (None, None) => Domain::Unknown(Doubt::UnknownNode { node: name, pod: key }),
        }
    });
    l.pairs(members, |value, a, b| format!("{what} {} holds {a} and {b}", values[value as usize]))
}

fn layer_status(
    selection: &Selection<'_>,
    layer: Layer,
    members: &[Located<'_>],
    pairs: Vec<PairVerdict>,
) -> LayerStatus {
    let state = if pairs.iter().any(|p| p.state == LayerState::Shared) {
        LayerState::Shared
    } else if pairs.iter().any(|p| p.state == LayerState::Unverified) {
        LayerState::Unverified
    } else {
        LayerState::Separate
    };
    LayerStatus {
        name: layer,
        required: selection.bulkhead.spec.layers.contains(&layer),
        state,
        pairs: pairs
            .into_iter()
            .filter(|p| p.state != LayerState::Separate)
            .map(|p| PairStatus {
                classes: vec![members[p.a].class.to_string(), members[p.b].class.to_string()],
                state: p.state,
                evidence: p.evidence,
            })
            .collect(),
    }
}
