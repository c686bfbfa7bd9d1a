//! The shared-layer audit: for every pair of classes and every layer of the
//! stack, whether the API shows they share it (`Shared`, naming the objects),
//! shows they do not (`Separate`), or cannot tell (`Unverified`). Pure, like
//! the planner; the controller and `bulkhead check` both call it.

mod database;
mod domains;
mod membership;
mod nodes;

pub use database::{host_of, resolve, Resolution};
pub use membership::members;

use domains::{Domain, DomainLayer, Doubt, PairVerdict, Placed};
use membership::{Members, Source};

use crate::{
    crd::{Bulkhead, Layer, LayerState, LayerStatus, PairStatus},
    snapshot::{LabelLookup, Snapshot},
    status::{DesiredCondition, Status},
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

pub fn audit(bulkhead: &Bulkhead, snapshot: &Snapshot, config: &AuditConfig) -> Audit {
    let mut members = members(bulkhead, snapshot);
    let nodes = nodes::resolve(&mut members, snapshot);
    let mut unscheduled = 0;
    let mut layers = Vec::new();
    for layer in Layer::ALL {
        let pairs = match layer {
            Layer::Process => process(bulkhead, snapshot, &members),
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
            Layer::Database => database::pairs(bulkhead, snapshot),
        };
        layers.push(layer_status(bulkhead, layer, &members, pairs));
    }
    Audit { layers, unscheduled }
}

fn process<'a>(bulkhead: &Bulkhead, snapshot: &Snapshot, members: &[Members<'a>]) -> Vec<PairVerdict> {
    // A pod is its own domain, identified by where the snapshot holds it.
    // Only classes drawing pods from a namespace another class also draws
    // from can share one; the others' pods are placed alone, unhashed.
    fn namespaces_of<'m>(m: &Members<'m>) -> Vec<&'m str> {
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
    let workload = bulkhead.spec.workload.as_ref().map(|w| crate::plan::resolve_workload(w, snapshot));
    for pair in &mut pairs {
        if members[pair.a].source == Source::Workload && members[pair.b].source == Source::Workload {
            let named = workload.as_ref().map(|w| {
                if w.workloads.is_empty() { format!("namespace {}", w.namespace) } else { w.workloads.join(", ") }
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

fn kernel(members: &[Members<'_>], nodes: &nodes::NodeTable<'_>, snapshot: &Snapshot, config: &AuditConfig) -> Vec<PairVerdict> {
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

fn by_node_label<'a>(members: &[Members<'a>], nodes: &nodes::NodeTable<'a>, label: &str, what: &str) -> Vec<PairVerdict> {
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

fn layer_status(bulkhead: &Bulkhead, layer: Layer, members: &[Members<'_>], pairs: Vec<PairVerdict>) -> LayerStatus {
    let state = if pairs.iter().any(|p| p.state == LayerState::Shared) {
        LayerState::Shared
    } else if pairs.iter().any(|p| p.state == LayerState::Unverified) {
        LayerState::Unverified
    } else {
        LayerState::Separate
    };
    LayerStatus {
        name: layer,
        required: bulkhead.spec.layers.contains(&layer),
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

/// `Isolated`: True when every required layer is Separate; False when one is
/// Shared; Unknown when only Unverified ones remain.
pub fn isolated_condition(layers: &[LayerStatus], classes: usize) -> DesiredCondition {
    let required: Vec<&LayerStatus> = layers.iter().filter(|l| l.required).collect();
    let describe = |l: &LayerStatus| {
        l.pairs
            .iter()
            .filter(|p| p.state == l.state)
            .take(3)
            .map(|p| format!("{:?} {} by {}: {}", l.name, verb(l.state), p.classes.join(" and "), p.evidence.first().cloned().unwrap_or_default()))
            .collect::<Vec<_>>()
    };
    let shared: Vec<String> = required.iter().filter(|l| l.state == LayerState::Shared).flat_map(|l| describe(l)).collect();
    if !shared.is_empty() {
        return DesiredCondition::new(ISOLATED, Status::False, "SharedLayerDetected", shared.join("; "));
    }
    let unverified: Vec<String> =
        required.iter().filter(|l| l.state == LayerState::Unverified).flat_map(|l| describe(l)).collect();
    if !unverified.is_empty() {
        return DesiredCondition::new(ISOLATED, Status::Unknown, "SharedLayerUnverified", unverified.join("; "));
    }
    let names: Vec<String> = required.iter().map(|l| format!("{:?}", l.name)).collect();
    let message = if classes < 2 {
        "only one class: there is nothing to isolate it from".to_string()
    } else if names.is_empty() {
        "no layers are required (spec.layers is empty)".to_string()
    } else {
        format!("every required layer is Separate: {}", names.join(", "))
    };
    DesiredCondition::new(ISOLATED, Status::True, "AllLayersSeparate", message)
}

fn verb(state: LayerState) -> &'static str {
    match state {
        LayerState::Shared => "shared",
        LayerState::Unverified => "unverified",
        LayerState::Separate => "separate",
    }
}

pub const ISOLATED: &str = "Isolated";
