//! Verdicts from the counts, per pair of classes: Shared where a domain
//! holds both (evidence: the first three such domains by name, each with the
//! least pod of either class there), else Unverified with the doubts, else
//! Separate. Cached per layer until something they read changes, so an
//! event that only moves a count costs nothing here.

use std::sync::Arc;

use super::{
    classes::{classes_in, ClassSet},
    counted::CountedLayer,
    domains::{dedup_keep_order, PairVerdict},
    layer::{Dom, Why},
    layer_state, pair_status,
    state::{AuditState, Hints},
    ZONE_LABEL,
};
use crate::{
    crd::{LayerState, LayerStatus},
    select::{Selection, Source},
    snapshot::Snapshot,
};

/// How much evidence a pair carries: enough to act on, not a dump.
const MAX_EVIDENCE: usize = 3;

impl AuditState {
    /// The status of a counted layer (Node, Kernel, Zone or Host). Only
    /// pairs whose inputs changed since the last call are worked out again,
    /// and only they are replaced in the status kept from the last call.
    pub(super) fn layer_status(
        &mut self,
        layer: CountedLayer,
        selection: &Selection<'_>,
        snapshot: &Snapshot,
        hints: &Hints<'_>,
    ) -> Arc<LayerStatus> {
        let l = &self.counts.layers[layer];
        let n = l.classes();
        let stale: Vec<(usize, usize)> = (0..n)
            .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
            .filter(|&(a, b)| l.pair_cache[a * n + b].is_none())
            .collect();
        if !stale.is_empty() {
            self.work_out(layer, &stale, snapshot, hints);
        }
        let l = &mut self.counts.layers[layer];
        let Some((status, index)) = &mut l.status else {
            let index: Vec<usize> = (0..n)
                .flat_map(|a| (a + 1..n).map(move |b| a * n + b))
                .filter(|&p| l.pair_cache[p].as_ref().is_some_and(|v| v.state != LayerState::Separate))
                .collect();
            let pairs = index.iter().filter_map(|&p| l.pair_cache[p].as_ref());
            let status = Arc::new(LayerStatus {
                name: layer.layer(),
                required: selection.bulkhead.spec.layers.contains(&layer.layer()),
                state: layer_state(pairs.clone()),
                pairs: pairs.map(|v| pair_status(selection, v)).collect(),
                unlisted_pairs: 0,
                admission: None,
            });
            l.status = Some((status.clone(), index));
            l.version += 1;
            return status;
        };
        if stale.is_empty() {
            return status.clone();
        }
        // Patch the kept status with the pairs worked out again: the rest
        // of it did not change. It is copied first only if the last Audit
        // handed out still holds it.
        l.version += 1;
        let patched = Arc::make_mut(status);
        for &(a, b) in &stale {
            let p = a * n + b;
            let verdict = l.pair_cache[p].as_ref().filter(|v| v.state != LayerState::Separate);
            match (index.binary_search(&p), verdict) {
                (Ok(i), Some(v)) => patched.pairs[i] = pair_status(selection, v),
                (Ok(i), None) => {
                    patched.pairs.remove(i);
                    index.remove(i);
                }
                (Err(i), Some(v)) => {
                    patched.pairs.insert(i, pair_status(selection, v));
                    index.insert(i, p);
                }
                (Err(_), None) => {}
            }
        }
        patched.state = layer_state(index.iter().filter_map(|&p| l.pair_cache[p].as_ref()));
        status.clone()
    }

    fn work_out(&mut self, layer: CountedLayer, stale: &[(usize, usize)], snapshot: &Snapshot, hints: &Hints<'_>) {
        let l = &self.counts.layers[layer];
        let n = l.classes();
        // The first shared domains of each stale pair, walking domains in
        // name order until every one that shares has its evidence.
        // Per class a, the classes b > a it still wants domains with; the
        // classes wanting any.
        let mut wanted = vec![0usize; n * n];
        let mut partners: Vec<ClassSet> = vec![0; n];
        let mut askers: ClassSet = 0;
        let mut need = 0;
        for &(a, b) in stale {
            wanted[a * n + b] = (l.pair_domains[a * n + b] as usize).min(MAX_EVIDENCE);
            if wanted[a * n + b] > 0 {
                need += 1;
                partners[a] |= 1 << b;
                askers |= 1 << a;
            }
        }
        let mut chosen: Vec<Vec<u32>> = vec![Vec::new(); n * n];
        for (_, d) in &l.shared {
            if need == 0 {
                break;
            }
            let here = l.present(*d);
            for a in classes_in(here & askers) {
                for b in classes_in(partners[a as usize] & here) {
                    let p = a as usize * n + b as usize;
                    chosen[p].push(*d);
                    if chosen[p].len() == wanted[p] {
                        need -= 1;
                        partners[a as usize] &= !(1 << b);
                        if partners[a as usize] == 0 {
                            askers &= !(1 << a);
                        }
                    }
                }
            }
        }
        for &(a, b) in stale {
            let domains = std::mem::take(&mut chosen[a * n + b]);
            let verdict = if domains.is_empty() {
                let mut both: Vec<String> = self.doubts(layer, a as u16, snapshot, hints);
                both.extend(self.doubts(layer, b as u16, snapshot, hints));
                dedup_keep_order(&mut both);
                if both.is_empty() {
                    PairVerdict { a, b, state: LayerState::Separate, evidence: Vec::new() }
                } else {
                    both.truncate(MAX_EVIDENCE);
                    PairVerdict { a, b, state: LayerState::Unverified, evidence: both }
                }
            } else {
                let evidence = domains
                    .into_iter()
                    .map(|d| {
                        let dom = Dom::Known(d);
                        let pa = self.least(layer, a as u16, &dom, snapshot, hints);
                        let pb = self.least(layer, b as u16, &dom, snapshot, hints);
                        self.describe(layer, d, &pa, &pb)
                    })
                    .collect();
                PairVerdict { a, b, state: LayerState::Shared, evidence }
            };
            self.counts.layers[layer].pair_cache[a * n + b] = Some(verdict);
        }
    }

    fn describe(&self, layer: CountedLayer, d: u32, a: &str, b: &str) -> String {
        let place = layer.domains(&self.counts.nodes).get(d as usize).map(ToString::to_string).unwrap_or_default();
        layer.describe(&place, a, b)
    }

    /// The doubts of one class in a layer: that none of its pods is placed,
    /// then the first few unknowns in order.
    fn doubts(&mut self, layer: CountedLayer, class: u16, snapshot: &Snapshot, hints: &Hints<'_>) -> Vec<String> {
        let c = class as usize;
        if let Some(d) = &self.counts.layers[layer].doubt_cache[c] {
            return d.clone();
        }
        let l = &self.counts.layers[layer];
        let mut out = Vec::new();
        if l.placed[c] == 0 && l.unknown_order[c].is_empty() {
            out.push(self.unplaced(c));
        }
        let whys: Vec<Why> = l.unknown_order[c].iter().take(MAX_EVIDENCE).map(|(_, w)| w.clone()).collect();
        for why in whys {
            let text = match &why {
                Why::Everywhere => {
                    "no host label is configured (--host-label): the machine under a node is not visible to the API"
                        .to_string()
                }
                Why::Pod(pod) => {
                    let rc = snapshot.pods.get(pod).and_then(|p| p.runtime_class.as_deref()).unwrap_or_default();
                    format!("pod {pod} names RuntimeClass {rc}, which does not exist")
                }
                Why::Node(node) => {
                    let pod = self.least(layer, class, &Dom::Unknown(why.clone()), snapshot, hints);
                    let slot = &self.counts.nodes.slots[*node as usize];
                    let label = if layer == CountedLayer::Zone {
                        ZONE_LABEL
                    } else {
                        self.config.host_label.as_deref().unwrap_or_default()
                    };
                    if slot.known {
                        format!("node {} (running {pod}) has no {label} label", slot.name)
                    } else {
                        format!("node {} (running {pod}) is not known to the API", slot.name)
                    }
                }
            };
            out.push(text);
        }
        self.counts.layers[layer].doubt_cache[c] = Some(out.clone());
        out
    }

    fn unplaced(&self, c: usize) -> String {
        let name = &self.classes.names[c];
        match self.classes.sources.get(c) {
            Some(Source::Unknown) | None => format!(
                "class {name} has no pods selectors and the Bulkhead names no workload: where it runs is unknown"
            ),
            _ => format!("no pods of class {name} are placed yet"),
        }
    }

    /// The least pod of a class in a domain, as text: kept in its cell, else
    /// from the build's hints, else found again (with every other cell of
    /// the class that lost track of its own) and kept.
    fn least(&mut self, layer: CountedLayer, class: u16, dom: &Dom, snapshot: &Snapshot, hints: &Hints<'_>) -> String {
        let l = &self.counts.layers[layer];
        if let Some(k) = l.least(class, dom) {
            return k.to_string();
        }
        if let Some(&k) = l.first(class, dom).and_then(|f| hints.get(f as usize)) {
            self.counts.layers[layer].name_least(class, dom, k);
            return k.to_string();
        }
        self.find_least(class, snapshot);
        self.counts.layers[layer].least(class, dom).map(ToString::to_string).unwrap_or_default()
    }

    /// Pairs (a < b) that share a node where only one side runs sandboxed:
    /// the sandbox has a guest kernel of its own, but it runs on the node's,
    /// which the other side's pods use directly. The Kernel layer counts a
    /// sandboxed pod alone, so it cannot see this by itself. Each with its
    /// evidence; at most one node named.
    pub(super) fn half_sandboxed(
        &mut self,
        pairs: &[(usize, usize)],
        snapshot: &Snapshot,
        hints: &Hints<'_>,
    ) -> Vec<(usize, usize, String)> {
        let (node, kernel) = (&self.counts.layers[CountedLayer::Node], &self.counts.layers[CountedLayer::Kernel]);
        let found: Vec<(usize, usize, u32)> = pairs
            .iter()
            .filter_map(|&(a, b)| {
                let both: ClassSet = (1 << a) | (1 << b);
                let d = node
                    .shared
                    .iter()
                    .map(|(_, d)| *d)
                    .find(|&d| node.present(d) & both == both && kernel.present(d) & both != 0)?;
                Some((a, b, d))
            })
            .collect();
        found
            .into_iter()
            .map(|(a, b, d)| {
                let dom = Dom::Known(d);
                let pa = self.least(CountedLayer::Node, a as u16, &dom, snapshot, hints);
                let pb = self.least(CountedLayer::Node, b as u16, &dom, snapshot, hints);
                let name = self.counts.nodes.names.get(d as usize).map(ToString::to_string).unwrap_or_default();
                let host_side =
                    if self.counts.layers[CountedLayer::Kernel].present(d) & (1 << a) != 0 { &pa } else { &pb };
                let evidence = format!(
                    "node {name} runs {pa} and {pb}: {host_side} runs on the node's own kernel, which the \
                     other shares even sandboxed (a sandbox's guest kernel runs on it)"
                );
                (a, b, evidence)
            })
            .collect()
    }

    /// Pairs of the Process layer: a pod of two classes is one process they share.
    pub fn process_pairs(&mut self) -> Vec<PairVerdict> {
        if let Some(v) = &self.counts.process.verdicts {
            return v.clone();
        }
        let n = self.counts.process.members.len();
        let mut shared: Vec<Vec<String>> = vec![Vec::new(); n * n];
        for (pod, set) in &self.counts.process.multi {
            let classes: Vec<usize> = classes_in(*set).map(usize::from).collect();
            for (x, &a) in classes.iter().enumerate() {
                for &b in &classes[x + 1..] {
                    let slot = &mut shared[a * n + b];
                    if slot.len() < MAX_EVIDENCE {
                        slot.push(format!("pod {pod} serves both: one heap, one garbage collector"));
                    }
                }
            }
        }
        let mut out = Vec::new();
        for a in 0..n {
            for b in a + 1..n {
                let evidence = std::mem::take(&mut shared[a * n + b]);
                if !evidence.is_empty() {
                    out.push(PairVerdict { a, b, state: LayerState::Shared, evidence });
                    continue;
                }
                let doubts: Vec<String> = [a, b]
                    .into_iter()
                    .filter(|&c| self.counts.process.members[c] == 0)
                    .map(|c| self.unplaced(c))
                    .collect();
                let state = if doubts.is_empty() { LayerState::Separate } else { LayerState::Unverified };
                out.push(PairVerdict { a, b, state, evidence: doubts });
            }
        }
        self.counts.process.verdicts = Some(out.clone());
        out
    }

    /// Pods × classes not yet bound to a node.
    pub fn unscheduled(&self) -> usize {
        usize::try_from(self.counts.layers[CountedLayer::Node].ignored).unwrap_or(usize::MAX)
    }
}
