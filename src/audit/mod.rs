//! The shared-layer audit: for every pair of classes and every layer of the
//! stack, whether the API shows they share it (`Shared`, naming the objects),
//! shows they do not (`Separate`), or cannot tell (`Unverified`). Pure, like
//! the planner; the controller and `bulkhead check` both call it.

mod database;
mod domains;
mod membership;

pub use database::{host_of, resolve, Resolution};

use domains::{Domain, DomainLayer, PairVerdict};
use membership::{members, Members, Source};

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
    let members = members(bulkhead, snapshot);
    let mut unscheduled = 0;
    let mut layers = Vec::new();
    for layer in Layer::ALL {
        let pairs = match layer {
            Layer::Process => process(bulkhead, snapshot, &members),
            Layer::Node => {
                let l = DomainLayer::build(&members, |_, p| p.node.as_deref().map_or(Domain::Ignored, Domain::Known));
                unscheduled = l.ignored;
                l.pairs(&members, |node, a, b| format!("node {node} runs {a} and {b}"))
            }
            Layer::Kernel => kernel(&members, snapshot, config),
            Layer::Zone => by_node_label(&members, snapshot, ZONE_LABEL, "zone"),
            Layer::Host => match &config.host_label {
                Some(label) => by_node_label(&members, snapshot, label, "host"),
                None => {
                    let l: DomainLayer<'_, &str> = DomainLayer::build(&members, |_, _| {
                        Domain::Unknown("no host label is configured (--host-label): the machine under a node is not visible to the API".into())
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

fn process(bulkhead: &Bulkhead, snapshot: &Snapshot, members: &[Members<'_>]) -> Vec<PairVerdict> {
    let l = DomainLayer::build(members, |key, _| Domain::Known(key));
    let mut pairs = l.pairs(members, |pod, _, _| format!("pod {pod} serves both: one heap, one garbage collector"));
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

fn kernel(members: &[Members<'_>], snapshot: &Snapshot, config: &AuditConfig) -> Vec<PairVerdict> {
    let l = DomainLayer::build(members, |key, pod| {
        let Some(node) = pod.node.as_deref() else { return Domain::Ignored };
        match pod.runtime_class.as_deref() {
            None => Domain::Known(node),
            Some(rc) => match snapshot.runtime_classes.get(rc) {
                Some(info) if config.sandboxed(&info.handler) => Domain::Alone,
                Some(_) => Domain::Known(node),
                None => Domain::Unknown(format!("pod {key} names RuntimeClass {rc}, which does not exist")),
            },
        }
    });
    l.pairs(members, |node, a, b| format!("node {node} runs {a} and {b} on its kernel (neither is sandboxed)"))
}

fn by_node_label<'a>(members: &[Members<'a>], snapshot: &'a Snapshot, label: &str, what: &str) -> Vec<PairVerdict> {
    let l = DomainLayer::build(members, |key, pod| {
        let Some(node) = pod.node.as_deref() else { return Domain::Ignored };
        match snapshot.nodes.get(node) {
            None => Domain::Unknown(format!("node {node} (running {key}) is not known to the API")),
            Some(info) => match info.labels.label(label) {
                Some(value) => Domain::Known(value),
                None => Domain::Unknown(format!("node {node} (running {key}) has no {label} label")),
            },
        }
    });
    l.pairs(members, |value, a, b| format!("{what} {value} holds {a} and {b}"))
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
pub fn isolated_condition(layers: &[LayerStatus]) -> DesiredCondition {
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
    let message = if names.is_empty() {
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
