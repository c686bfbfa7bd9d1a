//! The counts behind one layer of the audit (Node, Kernel, Zone or Host):
//! per domain (a node, a zone, a machine) how many pods of each class it
//! holds, and from them which pairs of classes share a domain. Pods come
//! and go one at a time (or a node's pods move zone together); nothing here
//! looks at the cluster, so a change costs in proportion to itself.

use std::{collections::BTreeSet, sync::Arc};

use rustc_hash::FxHashMap;

use super::{
    classes::{classes_in, ClassSet},
    domains::PairVerdict,
};
use crate::{crd::LayerStatus, snapshot::ObjectKey};

/// Where a pod sits in a layer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Dom {
    /// A domain, numbered by the audit (see `nodes.rs`).
    Known(u32),
    /// Placed, but in a domain of its own (a sandboxed pod's guest kernel).
    Alone,
    /// The API cannot tell where.
    Unknown(Why),
    /// Not counted in this layer at all (a pod not yet scheduled).
    Ignored,
}

/// Why a pod's domain is unknown, as a key its doubt is worded from.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Why {
    /// The node (by number) lacks the label naming the domain, or is not known to the API.
    Node(u32),
    /// The pod names a RuntimeClass that does not exist.
    Pod(ObjectKey),
    /// Nothing names the domain for any pod (no host label configured).
    Everywhere,
}

/// Pods of one class in a domain the API cannot name (see `Why`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Cell {
    pub count: u32,
    /// The least pod (by namespace/name), named in evidence; None when it
    /// is not known here and must be found again (see `verdicts.rs`).
    pub least: Option<ObjectKey>,
    /// A build's number for its first pod (the least; see `state::Hints`).
    pub first: u32,
}

/// Pods of one class in one known domain: what counting a pod touches. The
/// least pod, needed only for evidence, is kept apart (`LayerCounts::least`).
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    count: u32,
    /// A build's number for its first pod (see `Cell::first`).
    first: u32,
}

/// No build numbered this cell's first pod.
pub(super) const NO_HINT: u32 = u32::MAX;

/// What is known of the least pod of what is added.
#[derive(Clone, Copy)]
pub(super) enum Least<'k> {
    /// This one pod.
    Pod(&'k ObjectKey),
    /// Pods arrive in order (a build): the first is the least, numbered
    /// in the build's hints.
    First(u32),
    /// Several pods moved at once: unknown.
    Unknown,
}

/// Names domains for ordering evidence: by node name, or by label value.
pub(super) struct Naming<'n> {
    pub domains: &'n [Arc<str>],
    pub nodes: &'n [Arc<str>],
}

impl Naming<'_> {
    fn domain(&self, d: u32) -> Arc<str> {
        self.domains.get(d as usize).cloned().unwrap_or_else(|| Arc::from(""))
    }
    fn why(&self, why: &Why) -> Arc<str> {
        match why {
            Why::Node(n) => self.nodes.get(*n as usize).cloned().unwrap_or_else(|| Arc::from("")),
            Why::Pod(key) => Arc::from(key.to_string()),
            Why::Everywhere => Arc::from(""),
        }
    }
}

/// Domains are numbered densely by the audit (nodes, label values), so the
/// counts of known domains are a matrix, domain × class: counting a pod
/// touches one slot and its domain's class set, whatever the cluster's size.
#[derive(Clone, Debug)]
pub(super) struct LayerCounts {
    n: usize,
    /// Domain × class (at d·n + class): the pods of the class there.
    slots: Vec<Slot>,
    /// Per domain: the classes it holds.
    present: Vec<ClassSet>,
    /// (domain, class) → the least pod there, where known.
    least: FxHashMap<(u32, u16), ObjectKey>,
    /// Domains holding two classes or more, by name.
    pub shared: BTreeSet<(Arc<str>, u32)>,
    /// Per pair a < b (at a·n + b): how many domains hold both.
    pub pair_domains: Vec<u32>,
    /// Per class: pods placed (in a known domain or alone).
    pub placed: Vec<u64>,
    /// (class, why) → pods whose domain is unknown.
    pub unknown: FxHashMap<(u16, Why), Cell>,
    /// Per class, its unknowns in the order their doubts are worded.
    pub unknown_order: Vec<BTreeSet<(Arc<str>, Why)>>,
    /// Pods × classes not counted (unscheduled).
    pub ignored: u64,
    /// Per pair (a·n + b): its verdict, while nothing it reads has changed.
    pub pair_cache: Vec<Option<PairVerdict>>,
    /// Per class: its doubts, likewise.
    pub doubt_cache: Vec<Option<Vec<String>>>,
    /// The layer's status as last reported, with the pair (a·n + b) of
    /// each of its entries: patched pair by pair as verdicts change.
    /// Shared with the `Audit`s handed out: patched in place when none holds it any more.
    pub status: Option<(Arc<LayerStatus>, Vec<usize>)>,
    /// Grows whenever `status` is built or patched: what depends on it only
    /// (the nesting pass) is kept while it stands still.
    pub version: u64,
    /// Pods counted alone (a sandboxed pod's guest kernel).
    pub alone: u64,
}

impl LayerCounts {
    pub(super) fn new(n: usize) -> Self {
        Self {
            n,
            slots: Vec::new(),
            present: Vec::new(),
            least: FxHashMap::default(),
            shared: BTreeSet::new(),
            pair_domains: vec![0; n * n],
            placed: vec![0; n],
            unknown: FxHashMap::default(),
            unknown_order: vec![BTreeSet::new(); n],
            ignored: 0,
            pair_cache: vec![None; n * n],
            doubt_cache: vec![None; n],
            status: None,
            version: 0,
            alone: 0,
        }
    }

    /// A cell of `class` in domain `d` came, went or names another pod: the
    /// pairs of `class` with the other classes there change.
    fn dirty_domain(&mut self, class: u16, d: u32) {
        for o in classes_in(self.present(d) & !(1 << class)) {
            let p = self.pair(class, o);
            self.pair_cache[p] = None;
        }
    }

    /// What is said of `class` alone changed (placed or not, its doubts):
    /// every pair with it may change.
    pub(super) fn dirty_class(&mut self, class: u16) {
        self.doubt_cache[class as usize] = None;
        for o in 0..self.n as u16 {
            if o != class {
                let p = self.pair(class, o);
                self.pair_cache[p] = None;
            }
        }
    }

    pub(super) fn classes(&self) -> usize {
        self.n
    }

    fn pair(&self, a: u16, b: u16) -> usize {
        let (a, b) = if a < b { (a, b) } else { (b, a) };
        a as usize * self.n + b as usize
    }

    /// The classes domain `d` holds.
    pub(super) fn present(&self, d: u32) -> ClassSet {
        self.present.get(d as usize).copied().unwrap_or(0)
    }

    /// The classes domain `d` holds, with their counts.
    pub(super) fn classes_at(&self, d: u32) -> impl Iterator<Item = (u16, u32)> + '_ {
        classes_in(self.present(d)).map(move |c| (c, self.slots[d as usize * self.n + c as usize].count))
    }

    /// The slot of `class` in domain `d`, making room for the domain.
    fn slot(&mut self, d: u32, class: u16) -> usize {
        let d = d as usize;
        if d >= self.present.len() {
            self.present.resize(d + 1, 0);
            self.slots.resize((d + 1) * self.n, Slot::default());
        }
        d * self.n + class as usize
    }

    /// Count `count` pods of `class` in `dom`.
    pub(super) fn add(&mut self, class: u16, dom: &Dom, count: u32, least: Least<'_>, naming: &Naming<'_>) {
        let c = class as usize;
        match dom {
            Dom::Ignored => self.ignored += u64::from(count),
            Dom::Alone => {
                self.alone += u64::from(count);
                self.place(c, i64::from(count));
            }
            Dom::Known(d) => {
                let d = *d;
                self.place(c, i64::from(count));
                let i = self.slot(d, class);
                let others = self.present[d as usize];
                if others & (1 << class) != 0 {
                    self.slots[i].count += count;
                    if self.lower(d, class, least) {
                        self.dirty_domain(class, d);
                    }
                    return;
                }
                self.present[d as usize] |= 1 << class;
                self.slots[i] = Slot { count, first: first(least) };
                if let Least::Pod(k) = least {
                    self.least.insert((d, class), k.clone());
                }
                if others.count_ones() == 1 {
                    self.shared.insert((naming.domain(d), d));
                }
                for o in classes_in(others) {
                    let p = self.pair(class, o);
                    self.pair_domains[p] += 1;
                    self.pair_cache[p] = None;
                }
            }
            Dom::Unknown(why) => {
                let key = (class, why.clone());
                if let Some(cell) = self.unknown.get_mut(&key) {
                    cell.count += count;
                    if lower(cell, least) {
                        self.dirty_class(class);
                    }
                    return;
                }
                self.unknown_order[c].insert((naming.why(why), why.clone()));
                self.unknown.insert(key, Cell { count, least: owned(least), first: first(least) });
                self.dirty_class(class);
            }
        }
    }

    /// Uncount `count` pods of `class` from `dom`; `pod` is the one pod
    /// removed, None when several moved at once.
    pub(super) fn remove(&mut self, class: u16, dom: &Dom, count: u32, pod: Option<&ObjectKey>, naming: &Naming<'_>) {
        let c = class as usize;
        match dom {
            Dom::Ignored => self.ignored = self.ignored.saturating_sub(u64::from(count)),
            Dom::Alone => {
                self.alone = self.alone.saturating_sub(u64::from(count));
                self.place(c, -i64::from(count));
            }
            Dom::Known(d) => {
                let d = *d;
                self.place(c, -i64::from(count));
                if self.present(d) & (1 << class) == 0 {
                    return;
                }
                let i = d as usize * self.n + c;
                if self.slots[i].count > count {
                    self.slots[i].count -= count;
                    if self.forget(d, class, pod) {
                        self.dirty_domain(class, d);
                    }
                    return;
                }
                self.slots[i] = Slot::default();
                self.least.remove(&(d, class));
                self.present[d as usize] &= !(1 << class);
                let others = self.present[d as usize];
                if others.count_ones() == 1 {
                    self.shared.remove(&(naming.domain(d), d));
                }
                for o in classes_in(others) {
                    let p = self.pair(class, o);
                    self.pair_domains[p] = self.pair_domains[p].saturating_sub(1);
                    self.pair_cache[p] = None;
                }
            }
            Dom::Unknown(why) => {
                let key = (class, why.clone());
                let Some(cell) = self.unknown.get_mut(&key) else { return };
                if cell.count > count {
                    cell.count -= count;
                    if forget(cell, pod) {
                        self.dirty_class(class);
                    }
                    return;
                }
                self.unknown.remove(&key);
                self.unknown_order[c].remove(&(naming.why(why), why.clone()));
                self.dirty_class(class);
            }
        }
    }

    /// Placed counts only matter as zero or not.
    fn place(&mut self, c: usize, delta: i64) {
        let before = self.placed[c];
        self.placed[c] = before.saturating_add_signed(delta);
        if (before == 0) != (self.placed[c] == 0) {
            self.dirty_class(c as u16);
        }
    }

    /// Keep the lesser pod of a known domain's cell; true when the named pod changed.
    fn lower(&mut self, d: u32, class: u16, least: Least<'_>) -> bool {
        match least {
            Least::Pod(k) => match self.least.get_mut(&(d, class)) {
                Some(old) if k < old => {
                    *old = k.clone();
                    true
                }
                _ => false,
            },
            Least::Unknown => self.least.remove(&(d, class)).is_some(),
            Least::First(_) => false,
        }
    }

    /// The least pod of a known domain's cell left (or moved): it must be
    /// found again. True when it did.
    fn forget(&mut self, d: u32, class: u16, pod: Option<&ObjectKey>) -> bool {
        match pod {
            Some(k) if self.least.get(&(d, class)) != Some(k) => false,
            _ => self.least.remove(&(d, class)).is_some(),
        }
    }

    /// Whether `class` has pods counted in `dom`.
    pub(super) fn has(&self, class: u16, dom: &Dom) -> bool {
        match dom {
            Dom::Known(d) => self.present(*d) & (1 << class) != 0,
            Dom::Unknown(why) => self.unknown.contains_key(&(class, why.clone())),
            _ => false,
        }
    }

    /// The least pod of `class` in `dom`, where known.
    pub(super) fn least(&self, class: u16, dom: &Dom) -> Option<&ObjectKey> {
        match dom {
            Dom::Known(d) => self.least.get(&(*d, class)),
            Dom::Unknown(why) => self.unknown.get(&(class, why.clone()))?.least.as_ref(),
            _ => None,
        }
    }

    /// The build's number for the first pod of `class` in `dom`, if any.
    pub(super) fn first(&self, class: u16, dom: &Dom) -> Option<u32> {
        let first = match dom {
            Dom::Known(d) if self.has(class, dom) => self.slots[*d as usize * self.n + class as usize].first,
            Dom::Unknown(why) => self.unknown.get(&(class, why.clone()))?.first,
            _ => return None,
        };
        (first != NO_HINT).then_some(first)
    }

    /// Name `pod` the least of `class` in `dom`, if it has pods there and
    /// names none yet.
    pub(super) fn name_least(&mut self, class: u16, dom: &Dom, pod: &ObjectKey) {
        match dom {
            Dom::Known(d) if self.has(class, dom) => {
                self.least.entry((*d, class)).or_insert_with(|| pod.clone());
            }
            Dom::Unknown(why) => {
                if let Some(cell) = self.unknown.get_mut(&(class, why.clone())) {
                    if cell.least.is_none() {
                        cell.least = Some(pod.clone());
                    }
                }
            }
            _ => {}
        }
    }
}

fn owned(least: Least<'_>) -> Option<ObjectKey> {
    match least {
        Least::Pod(k) => Some(k.clone()),
        Least::First(_) | Least::Unknown => None,
    }
}

fn first(least: Least<'_>) -> u32 {
    match least {
        Least::First(n) => n,
        Least::Pod(_) | Least::Unknown => NO_HINT,
    }
}

/// Keep the lesser pod; true when the named pod changed.
fn lower(cell: &mut Cell, least: Least<'_>) -> bool {
    match (least, &cell.least) {
        (Least::Pod(k), Some(old)) if k < old => {
            cell.least = Some(k.clone());
            true
        }
        (Least::Unknown, Some(_)) => {
            cell.least = None;
            true
        }
        _ => false,
    }
}

/// The least pod left (or moved): it must be found again. True when it did.
fn forget(cell: &mut Cell, pod: Option<&ObjectKey>) -> bool {
    match (pod, &cell.least) {
        (Some(k), Some(old)) if k == old => {
            cell.least = None;
            true
        }
        (None, Some(_)) => {
            cell.least = None;
            true
        }
        _ => false,
    }
}
