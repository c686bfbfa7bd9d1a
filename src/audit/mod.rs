//! The shared-layer audit: for every pair of classes and every layer of the
//! stack, whether the API shows they share it (`Shared`, naming the objects),
//! shows they do not (`Separate`), or cannot tell (`Unverified`). Pure, like
//! the planner; the controller and `bulkhead check` both call it.

mod classes;
mod counted;
mod database;
mod domains;
mod implied;
mod layer;
mod nodes;
mod state;
mod verdicts;

pub use database::host_of;
pub use implied::{imply_nested_layers, NESTED};
pub use state::AuditState;

use std::sync::Arc;

use counted::CountedLayer;
use domains::PairVerdict;
use state::Hints;

use crate::{
    crd::{Layer, LayerState, LayerStatus, PairStatus},
    select::{resolve_workload, Selection, Source},
    snapshot::Snapshot,
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
    /// The operator serves its admission webhook: node groups are kept at
    /// admission, and a pod found across one bypassed it.
    pub admission: bool,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            sandbox_handlers: vec!["kata*".into(), "gvisor".into(), "runsc".into()],
            host_label: None,
            admission: false,
        }
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
    /// Shared with the kept `AuditState`, so that handing out the result of
    /// an event costs nothing per pair; `owned_layers` copies them.
    pub layers: Vec<Arc<LayerStatus>>,
    /// Pods of the classes not yet bound to a node (ignored by placement layers).
    pub unscheduled: usize,
    /// `AuditConfig::admission` of the audit that made it.
    pub admission: bool,
}

impl Audit {
    /// The layers as plain values (what a status holds).
    pub fn owned_layers(&self) -> Vec<LayerStatus> {
        self.layers.iter().map(|l| LayerStatus::clone(l)).collect()
    }

    /// The layers as a status lists them (`LayerStatus::bounded`).
    pub fn listed_layers(&self) -> Vec<LayerStatus> {
        self.layers.iter().map(|l| l.bounded()).collect()
    }
}

/// The full audit: count every member pod once, then the verdicts.
pub fn audit(selection: &Selection<'_>, snapshot: &Snapshot, config: &AuditConfig) -> Audit {
    let (mut state, hints) = AuditState::build(selection, snapshot, config);
    verdicts(&mut state, selection, snapshot, &hints)
}

/// The same audit, keeping the counts in `cache` between calls: a pod or
/// node changed since the last call costs in proportion to the change. A
/// new spec or configuration, or a journal that no longer reaches back far
/// enough, counts everything again.
pub fn audit_cached(
    cache: &mut Option<AuditState>,
    selection: &Selection<'_>,
    snapshot: &Snapshot,
    config: &AuditConfig,
) -> Audit {
    if let Some(state) = cache.as_mut() {
        if state.fits(selection.bulkhead, config) && state.catch_up(snapshot) {
            let audit = verdicts(state, selection, snapshot, &Hints::default());
            return Audit { admission: config.admission, ..audit };
        }
    }
    let (mut state, hints) = AuditState::build(selection, snapshot, config);
    let audit = verdicts(&mut state, selection, snapshot, &hints);
    *cache = Some(state);
    Audit { admission: config.admission, ..audit }
}

fn verdicts(state: &mut AuditState, selection: &Selection<'_>, snapshot: &Snapshot, hints: &Hints<'_>) -> Audit {
    let mut layers = Vec::new();
    for layer in Layer::ALL {
        let status = match layer {
            Layer::Process => Arc::new(layer_status(selection, layer, process(state, selection, snapshot))),
            Layer::Node => state.layer_status(CountedLayer::Node, selection, snapshot, hints),
            Layer::Kernel => state.layer_status(CountedLayer::Kernel, selection, snapshot, hints),
            Layer::Zone => state.layer_status(CountedLayer::Zone, selection, snapshot, hints),
            Layer::Host => state.layer_status(CountedLayer::Host, selection, snapshot, hints),
            Layer::Database => database_layer(state, selection, snapshot),
        };
        layers.push(status);
    }
    nest(state, &mut layers, selection, snapshot, hints);
    Audit { layers, unscheduled: state.unscheduled(), admission: false }
}

/// The nesting pass, kept between calls while what it reads stands still:
/// an event that moves a count but no verdict then costs nothing here.
fn nest(
    state: &mut AuditState,
    layers: &mut [Arc<LayerStatus>],
    selection: &Selection<'_>,
    snapshot: &Snapshot,
    hints: &Hints<'_>,
) {
    let names: Vec<String> = selection.classes.iter().map(|c| c.spec.name.clone()).collect();
    let kernel = &state.counts.layers[CountedLayer::Kernel];
    // Sandboxed pods, or pods of unknown RuntimeClass: the Kernel verdicts
    // then read the counts, not only the layers (never kept).
    if kernel.alone > 0 || !kernel.unknown.is_empty() {
        state.implied = None;
        half_sandboxed_kernels(state, layers, &names, snapshot, hints);
        imply_nested_layers(layers, &names);
        return;
    }
    let versions = state.counts.layers.map(|_, l| l.version);
    let Some(process) = implied::find(layers, Layer::Process) else {
        imply_nested_layers(layers, &names);
        return;
    };
    // Built afresh by every call: compared by value.
    let process = Arc::clone(&layers[process]);
    if let Some(kept) = &state.implied {
        if kept.versions == versions && kept.process == process {
            for (layer, changed) in layers.iter_mut().zip(&kept.changed) {
                if let Some(c) = changed {
                    *layer = Arc::clone(c);
                }
            }
            return;
        }
    }
    let before: Vec<*const LayerStatus> = layers.iter().map(Arc::as_ptr).collect();
    imply_nested_layers(layers, &names);
    let changed =
        layers.iter().zip(before).map(|(l, b)| (!std::ptr::eq(Arc::as_ptr(l), b)).then(|| Arc::clone(l))).collect();
    state.implied = Some(state::Implied { versions, process, changed });
}

/// Pairs on a shared node that the Kernel layer counts apart only because
/// one side is sandboxed: they share the node's kernel after all.
fn half_sandboxed_kernels(
    state: &mut AuditState,
    layers: &mut [Arc<LayerStatus>],
    names: &[String],
    snapshot: &Snapshot,
    hints: &Hints<'_>,
) {
    let (Some(node), Some(kernel)) = (implied::find(layers, Layer::Node), implied::find(layers, Layer::Kernel)) else {
        return;
    };
    let positions: std::collections::HashMap<&str, usize> =
        names.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
    let index = |c: &str| positions.get(c).copied();
    let kernel_shared: std::collections::HashSet<&[String]> =
        layers[kernel].pairs.iter().filter(|q| q.state == LayerState::Shared).map(|q| q.classes.as_slice()).collect();
    let candidates: Vec<(usize, usize)> = layers[node]
        .pairs
        .iter()
        .filter(|p| p.state == LayerState::Shared && !kernel_shared.contains(p.classes.as_slice()))
        .filter_map(|p| Some((index(p.classes.first()?)?, index(p.classes.get(1)?)?)))
        .collect();
    drop(kernel_shared);
    if candidates.is_empty() {
        return;
    }
    let found = state.half_sandboxed(&candidates, snapshot, hints);
    if found.is_empty() {
        return;
    }
    let status = Arc::make_mut(&mut layers[kernel]);
    for (a, b, evidence) in found {
        let pair = PairStatus {
            classes: vec![names[a].clone(), names[b].clone()],
            state: LayerState::Shared,
            evidence: vec![evidence],
        };
        // Few: only pairs on a node where exactly one side is sandboxed.
        match status.pairs.iter_mut().find(|q| q.classes == pair.classes) {
            Some(q) => *q = pair,
            None => status.pairs.push(pair),
        }
    }
    status.pairs.sort_by_key(|p| implied::pair_position(&positions, p));
    status.state = LayerState::Shared;
}

/// The Database layer, kept in `state` while no class names a database (it
/// then reads nothing but the spec), else found again.
fn database_layer(state: &mut AuditState, selection: &Selection<'_>, snapshot: &Snapshot) -> Arc<LayerStatus> {
    let found = || Arc::new(layer_status(selection, Layer::Database, database::pairs(selection.bulkhead, snapshot)));
    if selection.bulkhead.spec.classes.iter().any(|c| !c.databases.is_empty()) {
        return found();
    }
    state.database.get_or_insert_with(found).clone()
}

fn process(state: &mut AuditState, selection: &Selection<'_>, snapshot: &Snapshot) -> Vec<PairVerdict> {
    let mut pairs = state.process_pairs();
    // Classes without pods selectors run in spec.workload's pods by
    // declaration: shared even before a pod exists.
    let sources: Vec<Source> = selection
        .classes
        .iter()
        .map(|c| match (&c.pods, &selection.workload) {
            (Some(_), _) => Source::Selectors,
            (None, Some(_)) if selection.bulkhead.spec.workload.is_some() => Source::Workload,
            (None, _) => Source::Unknown,
        })
        .collect();
    if sources.iter().filter(|s| **s == Source::Workload).count() < 2 {
        return pairs;
    }
    let workload = resolve_workload(selection, snapshot);
    let names = &selection.classes;
    for pair in &mut pairs {
        if sources[pair.a] == Source::Workload && sources[pair.b] == Source::Workload {
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
                names[pair.a].spec.name,
                names[pair.b].spec.name,
                named.unwrap_or_default()
            )];
        }
    }
    pairs
}

/// The classes' pods not yet bound to a node: how many, and the first
/// `limit` by namespace and name, for a person to look at. A pass over the
/// classes' namespaces: for the offline commands, not for every reconcile.
pub fn unscheduled_pods(selection: &Selection<'_>, snapshot: &Snapshot, limit: usize) -> (usize, Vec<String>) {
    let classes = classes::Classifier::new(selection, snapshot);
    let (mut count, mut named) = (0, Vec::new());
    for ns in classes.all_namespaces() {
        let selectors = classes.selectors_of(ns);
        for (key, pod) in state::pods_in(snapshot, ns) {
            if pod.node.is_none() && classes.classes_in_namespace(selectors, ns, pod) != 0 {
                count += 1;
                if named.len() < limit {
                    named.push(key.to_string());
                }
            }
        }
    }
    (count, named)
}

fn layer_status(selection: &Selection<'_>, layer: Layer, pairs: Vec<PairVerdict>) -> LayerStatus {
    LayerStatus {
        name: layer,
        required: selection.bulkhead.spec.layers.contains(&layer),
        state: layer_state(pairs.iter()),
        pairs: pairs
            .into_iter()
            .filter(|p| p.state != LayerState::Separate)
            .map(|p| PairStatus { classes: class_names(selection, &p), state: p.state, evidence: p.evidence })
            .collect(),
        unlisted_pairs: 0,
        admission: None,
    }
}

/// A layer is Shared if any pair shares it, else Unverified if any pair
/// cannot tell, else Separate.
fn layer_state<'a>(mut pairs: impl Iterator<Item = &'a PairVerdict> + Clone) -> LayerState {
    if pairs.clone().any(|p| p.state == LayerState::Shared) {
        LayerState::Shared
    } else if pairs.any(|p| p.state == LayerState::Unverified) {
        LayerState::Unverified
    } else {
        LayerState::Separate
    }
}

fn pair_status(selection: &Selection<'_>, p: &PairVerdict) -> PairStatus {
    PairStatus { classes: class_names(selection, p), state: p.state, evidence: p.evidence.clone() }
}

fn class_names(selection: &Selection<'_>, p: &PairVerdict) -> Vec<String> {
    vec![selection.classes[p.a].spec.name.clone(), selection.classes[p.b].spec.name.clone()]
}
