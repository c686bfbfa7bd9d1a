//! `AuditState`: the counts behind a Bulkhead's layers, built once from the
//! snapshot and then kept current from the snapshot's journal, pod by pod and
//! node by node. A full audit is a build followed by the verdicts; the
//! controller keeps the state between reconciles, so a pod bound, moved or
//! deleted costs a few map updates, not a pass over the cluster.

use std::{
    collections::{btree_map, BTreeMap},
    sync::Arc,
};

use super::{
    classes::{classes_in, ClassSet, Classifier},
    counted::{CountedLayer, PerLayer},
    domains::PairVerdict,
    layer::{Dom, LayerCounts, Least, Naming, Why},
    nodes::{by_label, NodeId, NodeTable},
    AuditConfig, ZONE_LABEL,
};
use crate::{
    crd::{Bulkhead, BulkheadSpec, LayerStatus},
    select::Selection,
    snapshot::{Cursor, Delta, ObjectKey, PodInfo, Snapshot},
};

/// The member pods of a build, in the order counted: a cell made by the
/// build keeps the number of its first pod (the least: pods arrive in
/// order), borrowed from the snapshot until the first verdicts name it.
pub(super) type Hints<'a> = Vec<&'a ObjectKey>;

#[derive(Clone, Debug)]
pub struct AuditState {
    spec: BulkheadSpec,
    pub(super) config: AuditConfig,
    pub(super) classes: Classifier,
    pub(super) counts: Counts,
    cursor: Cursor,
    /// The Database layer, while no class names a database: then it follows
    /// from the spec alone (every pair Unverified), which this state is for.
    pub(super) database: Option<Arc<LayerStatus>>,
    /// The nesting pass's last result, while its inputs stand still.
    pub(super) implied: Option<Implied>,
}

/// What the nesting pass (`implied.rs`) changed, and what it read: the
/// counted layers by version, the Process layer as it was.
/// Only the layers it changed are held (its own copies), so the kept layer
/// statuses stay unshared and are still patched in place.
#[derive(Clone, Debug)]
pub(super) struct Implied {
    pub versions: PerLayer<u64>,
    pub process: Arc<LayerStatus>,
    pub changed: Vec<Option<Arc<LayerStatus>>>,
}

#[derive(Clone, Debug)]
pub(super) struct Counts {
    pub nodes: NodeTable,
    /// Node, Kernel, Zone and Host.
    pub layers: PerLayer<LayerCounts>,
    pub process: ProcessCounts,
}

/// The Process layer: a pod is its own domain, so only pods of two classes
/// or more are kept.
#[derive(Clone, Debug)]
pub(super) struct ProcessCounts {
    pub members: Vec<u64>,
    pub multi: BTreeMap<ObjectKey, ClassSet>,
    pub verdicts: Option<Vec<PairVerdict>>,
}

impl AuditState {
    pub fn build<'a>(selection: &Selection<'_>, snapshot: &'a Snapshot, config: &AuditConfig) -> (Self, Hints<'a>) {
        let classes = Classifier::new(selection, snapshot);
        let n = selection.classes.len();
        let mut counts = Counts {
            nodes: NodeTable::default(),
            layers: PerLayer::from_fn(|_| LayerCounts::new(n)),
            process: ProcessCounts { members: vec![0; n], multi: BTreeMap::new(), verdicts: None },
        };
        let mut hints = Hints::default();
        // Namespaces in order, pods in order within each: every cell's first pod is its least.
        for ns in classes.all_namespaces() {
            let selectors = classes.selectors_of(ns);
            for (key, pod) in pods_in(snapshot, ns) {
                let set = classes.classes_in_namespace(selectors, ns, pod);
                if set != 0 {
                    counts.add(key, pod, set, snapshot, config, Some(&mut hints));
                }
            }
        }
        let state = Self {
            spec: selection.bulkhead.spec.clone(),
            config: config.clone(),
            classes,
            counts,
            cursor: snapshot.journal.cursor(),
            database: None,
            implied: None,
        };
        (state, hints)
    }

    /// Whether this state counts for this Bulkhead and configuration.
    pub fn fits(&self, bulkhead: &Bulkhead, config: &AuditConfig) -> bool {
        self.spec == bulkhead.spec && &self.config == config
    }

    /// Apply what changed since the last call; false when the journal no
    /// longer holds it all (then build again).
    pub fn catch_up(&mut self, snapshot: &Snapshot) -> bool {
        let Some(deltas) = snapshot.journal.since(self.cursor) else { return false };
        for delta in deltas {
            match delta {
                Delta::Pod { key, old, new } => self.pod_changed(key, old.as_ref(), new.as_ref(), snapshot),
                Delta::Node(name) => self.counts.node_changed(name, snapshot, &self.config),
            }
        }
        self.cursor = snapshot.journal.cursor();
        true
    }

    fn pod_changed(&mut self, key: &ObjectKey, old: Option<&PodInfo>, new: Option<&PodInfo>, snapshot: &Snapshot) {
        let set = |p: Option<&PodInfo>| p.map_or(0, |p| self.classes.classes_of(key, p));
        let (before, after) = (set(old), set(new));
        let same_place = |a: &PodInfo, b: &PodInfo| a.node == b.node && a.runtime_class == b.runtime_class;
        if before == after && (before == 0 || old.zip(new).is_some_and(|(a, b)| same_place(a, b))) {
            // A status update (phase, IP): nothing the layers count moved.
            return;
        }
        if let Some(old) = old.filter(|_| before != 0) {
            self.counts.remove(key, old, before, snapshot, &self.config);
        }
        if let Some(new) = new.filter(|_| after != 0) {
            self.counts.add(key, new, after, snapshot, &self.config, None);
        }
    }

    /// Find again the least pod of every cell of `class` that lost track of
    /// it, in one pass over the class's pods in order (the first seen in a
    /// domain is the least there). Rare: only when a pod that evidence names
    /// left, or a cell counted by a build without naming its pod becomes
    /// evidence; afterwards the class's cells know their pods again.
    pub fn find_least(&mut self, class: u16, snapshot: &Snapshot) {
        let Some(namespaces) = self.classes.namespaces.get(class as usize) else { return };
        for ns in namespaces {
            let selectors = self.classes.selectors_of(ns);
            for (key, pod) in pods_in(snapshot, ns) {
                if self.classes.classes_in_namespace(selectors, ns, pod) & (1 << class) == 0 {
                    continue;
                }
                let node = pod.node.as_ref().and_then(|n| self.counts.nodes.lookup(n));
                let doms = self.counts.doms(key, pod, node, snapshot, &self.config);
                for (layer, dom) in doms.iter() {
                    self.counts.layers[layer].name_least(class, dom, key);
                }
            }
        }
    }
}

impl Counts {
    fn labels(config: &AuditConfig) -> (&str, Option<&str>) {
        (ZONE_LABEL, config.host_label.as_deref())
    }

    /// Where a member pod sits in each counted layer.
    pub(super) fn doms(
        &self,
        key: &ObjectKey,
        pod: &PodInfo,
        node: Option<NodeId>,
        snapshot: &Snapshot,
        config: &AuditConfig,
    ) -> PerLayer<Dom> {
        let Some(node) = node else {
            return PerLayer::from_fn(|layer| match layer {
                CountedLayer::Node | CountedLayer::Kernel | CountedLayer::Zone => Dom::Ignored,
                CountedLayer::Host if config.host_label.is_some() => Dom::Ignored,
                CountedLayer::Host => Dom::Unknown(Why::Everywhere),
            });
        };
        let kernel = match pod.runtime_class.as_deref() {
            None => Dom::Known(node),
            Some(rc) => match snapshot.runtime_classes.get(rc) {
                Some(info) if config.sandboxed(&info.handler) => Dom::Alone,
                Some(_) => Dom::Known(node),
                None => Dom::Unknown(Why::Pod(key.clone())),
            },
        };
        let slot = &self.nodes.slots[node as usize];
        let mut kernel = Some(kernel);
        PerLayer::from_fn(|layer| match layer {
            CountedLayer::Node => Dom::Known(node),
            // Each layer is asked once: the kernel is moved, not cloned.
            CountedLayer::Kernel => kernel.take().unwrap_or(Dom::Ignored),
            CountedLayer::Zone => by_label(node, slot, slot.zone),
            CountedLayer::Host => match config.host_label {
                Some(_) => by_label(node, slot, slot.host),
                None => Dom::Unknown(Why::Everywhere),
            },
        })
    }

    fn add<'a>(
        &mut self,
        key: &'a ObjectKey,
        pod: &PodInfo,
        set: ClassSet,
        snapshot: &Snapshot,
        config: &AuditConfig,
        hints: Option<&mut Hints<'a>>,
    ) {
        let node = pod.node.as_ref().map(|n| self.nodes.id(n, snapshot, Self::labels(config)));
        let doms = self.doms(key, pod, node, snapshot, config);
        let least = match hints {
            Some(h) => {
                h.push(key);
                Least::First(u32::try_from(h.len() - 1).unwrap_or(u32::MAX))
            }
            None => Least::Pod(key),
        };
        for class in classes_in(set) {
            for (layer, dom) in doms.iter() {
                self.layers[layer].add(class, dom, 1, least, &naming(&self.nodes, layer));
            }
            self.process.add(class, 1);
        }
        if set.count_ones() > 1 {
            self.process.multi.insert(key.clone(), set);
            self.process.verdicts = None;
        }
    }

    fn remove(&mut self, key: &ObjectKey, pod: &PodInfo, set: ClassSet, snapshot: &Snapshot, config: &AuditConfig) {
        let node = pod.node.as_ref().map(|n| self.nodes.id(n, snapshot, Self::labels(config)));
        let doms = self.doms(key, pod, node, snapshot, config);
        for class in classes_in(set) {
            for (layer, dom) in doms.iter() {
                let naming = naming(&self.nodes, layer);
                self.layers[layer].remove(class, dom, 1, Some(key), &naming);
            }
            self.process.add(class, -1);
        }
        if self.process.multi.remove(key).is_some() {
            self.process.verdicts = None;
        }
    }

    /// A node appeared, went or was relabelled: its pods move zone or host
    /// together, by their counts in the Node layer.
    fn node_changed(&mut self, name: &str, snapshot: &Snapshot, config: &AuditConfig) {
        let Some(id) = self.nodes.find(name) else { return };
        let old = self.nodes.slots[id as usize].clone();
        let new = self.nodes.slot(old.name.clone(), snapshot, Self::labels(config));
        if new == old {
            return;
        }
        let moved: Vec<(u16, u32)> = self.layers[CountedLayer::Node].classes_at(id).collect();
        let mut layers = vec![(CountedLayer::Zone, by_label(id, &old, old.zone), by_label(id, &new, new.zone))];
        if config.host_label.is_some() {
            layers.push((CountedLayer::Host, by_label(id, &old, old.host), by_label(id, &new, new.host)));
        }
        for (layer, from, to) in layers {
            if from == to {
                if old.known != new.known {
                    // Still unknown, for another reason: the doubts read differently.
                    for &(class, _) in &moved {
                        self.layers[layer].dirty_class(class);
                    }
                }
                continue;
            }
            for &(class, count) in &moved {
                let naming = Naming { domains: &self.nodes.values, nodes: &self.nodes.names };
                self.layers[layer].remove(class, &from, count, None, &naming);
                self.layers[layer].add(class, &to, count, Least::Unknown, &naming);
            }
        }
        self.nodes.slots[id as usize] = new;
    }
}

/// The pods of one namespace, bounded by keys on both ends, so walking them
/// reads no key (each key's strings are an allocation of their own).
pub(super) fn pods_in<'a>(snapshot: &'a Snapshot, namespace: &str) -> btree_map::Range<'a, ObjectKey, PodInfo> {
    // No namespace name holds a NUL: every key of `namespace` sorts before this one.
    let end = ObjectKey::new(format!("{namespace}\0"), "");
    snapshot.pods.range(ObjectKey::new(namespace, "")..end)
}

/// Node and Kernel domains are nodes; Zone and Host domains are label values.
fn naming(nodes: &NodeTable, layer: CountedLayer) -> Naming<'_> {
    Naming { domains: layer.domains(nodes), nodes: &nodes.names }
}

impl ProcessCounts {
    fn add(&mut self, class: u16, delta: i64) {
        let c = class as usize;
        let before = self.members[c];
        self.members[c] = before.saturating_add_signed(delta);
        if (before == 0) != (self.members[c] == 0) {
            self.verdicts = None;
        }
    }
}
