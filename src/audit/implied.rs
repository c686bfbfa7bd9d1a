//! What sharing one layer says of the layers under it. One pod runs on one
//! node with one kernel; one node sits on one machine in one zone. The counts
//! see each layer alone, so a pair could be counted Separate or Unverified
//! under a layer it shares (a sandboxed pod's kernel is its own even when the
//! other class runs in that very pod). This pass makes such a pair Shared,
//! with the evidence of the layer above; and, the other way, classes on
//! disjoint nodes cannot share a kernel, whatever their RuntimeClasses say.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use crate::crd::{Layer, LayerState, LayerStatus, PairStatus};

/// Each layer's domains lie within the next one's: a pair sharing one shares
/// all that follow.
pub const NESTED: [Layer; 5] = [Layer::Process, Layer::Kernel, Layer::Node, Layer::Host, Layer::Zone];

/// What implied evidence adds to the evidence it was implied from.
const SO_ONE: &str = " (so one ";

/// Make every layer's verdicts agree with the layers nested in it.
/// `class_order` is spec.classes' names, the order pairs are listed in.
pub fn imply_nested_layers(layers: &mut [Arc<LayerStatus>], class_order: &[String]) {
    let position: HashMap<&str, usize> = class_order.iter().enumerate().map(|(i, c)| (c.as_str(), i)).collect();
    for step in NESTED.windows(2) {
        let (Some(upper), Some(lower)) = (find(layers, step[0]), find(layers, step[1])) else { continue };
        // Each pair's place in the lower layer, looked up once: a layer lists up to n·(n-1)/2 pairs.
        let listed: HashMap<(&str, &str), (usize, LayerState)> =
            layers[lower].pairs.iter().enumerate().filter_map(|(i, p)| Some((key(p)?, (i, p.state)))).collect();
        let missing: Vec<(Option<usize>, PairStatus)> = layers[upper]
            .pairs
            .iter()
            .filter(|p| p.state == LayerState::Shared)
            .filter_map(|p| match key(p).and_then(|k| listed.get(&k)) {
                Some((_, LayerState::Shared)) => None,
                Some((i, _)) => Some((Some(*i), p.clone())),
                None => Some((None, p.clone())),
            })
            .collect();
        drop(listed);
        if missing.is_empty() {
            continue;
        }
        let status = Arc::make_mut(&mut layers[lower]);
        for (at, pair) in missing {
            // Said of the layer the sharing was seen in, not of each step down.
            let seen = |e: &String| e.find(SO_ONE).map_or(e.clone(), |cut| e[..cut].to_string());
            let evidence = pair.evidence.iter().map(|e| format!("{}{SO_ONE}{})", seen(e), noun(step[1]))).collect();
            let implied = PairStatus { classes: pair.classes, state: LayerState::Shared, evidence };
            match at {
                Some(i) => status.pairs[i] = implied,
                None => status.pairs.push(implied),
            }
        }
        status.pairs.sort_by_key(|p| pair_position(&position, p));
        status.state = LayerState::Shared;
    }
    separate_nodes_separate_kernels(layers);
}

/// A kernel never spans nodes: a pair the Node layer shows Separate is
/// Separate in the Kernel layer too (its doubts, such as a RuntimeClass
/// that does not exist, cannot make it share one).
fn separate_nodes_separate_kernels(layers: &mut [Arc<LayerStatus>]) {
    let (Some(node), Some(kernel)) = (find(layers, Layer::Node), find(layers, Layer::Kernel)) else { return };
    let on_a_node: HashSet<(&str, &str)> = layers[node].pairs.iter().filter_map(key).collect();
    if layers[kernel].pairs.iter().all(|p| key(p).is_some_and(|k| on_a_node.contains(&k))) {
        return;
    }
    let on_a_node: HashSet<(String, String)> =
        on_a_node.into_iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    let status = Arc::make_mut(&mut layers[kernel]);
    status.pairs.retain(|p| key(p).is_some_and(|(a, b)| on_a_node.contains(&(a.to_string(), b.to_string()))));
    status.state = state_of(&status.pairs);
}

/// A pair by its two class names.
fn key(p: &PairStatus) -> Option<(&str, &str)> {
    Some((p.classes.first()?.as_str(), p.classes.get(1)?.as_str()))
}

/// Where `layer` is in `layers`.
pub(super) fn find(layers: &[Arc<LayerStatus>], layer: Layer) -> Option<usize> {
    layers.iter().position(|l| l.name == layer)
}

/// A pair's place in the spec's order of classes (unknown names last).
pub(super) fn pair_position(position: &HashMap<&str, usize>, p: &PairStatus) -> (usize, usize) {
    let at = |i: usize| p.classes.get(i).and_then(|c| position.get(c.as_str())).copied().unwrap_or(usize::MAX);
    (at(0), at(1))
}

/// Shared if any pair shares, else Unverified if any pair cannot tell, else Separate.
fn state_of(pairs: &[PairStatus]) -> LayerState {
    if pairs.iter().any(|p| p.state == LayerState::Shared) {
        LayerState::Shared
    } else if pairs.iter().any(|p| p.state == LayerState::Unverified) {
        LayerState::Unverified
    } else {
        LayerState::Separate
    }
}

fn noun(layer: Layer) -> &'static str {
    match layer {
        Layer::Process => "process",
        Layer::Node => "node",
        Layer::Kernel => "kernel",
        Layer::Zone => "zone",
        Layer::Host => "machine",
        Layer::Database => "database instance",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(a: &str, b: &str, state: LayerState, evidence: &str) -> PairStatus {
        PairStatus { classes: vec![a.into(), b.into()], state, evidence: vec![evidence.into()] }
    }

    fn layer(name: Layer, pairs: Vec<PairStatus>) -> Arc<LayerStatus> {
        Arc::new(LayerStatus {
            name,
            required: true,
            state: state_of(&pairs),
            pairs,
            unlisted_pairs: 0,
            admission: None,
        })
    }

    #[test]
    fn a_shared_pod_shares_every_layer_it_runs_in() {
        let order = vec!["a".to_string(), "b".to_string()];
        let mut layers = vec![
            layer(Layer::Process, vec![pair("a", "b", LayerState::Shared, "pod shop/x serves both")]),
            layer(Layer::Node, vec![pair("a", "b", LayerState::Unverified, "no pods of class a are placed yet")]),
            layer(Layer::Kernel, vec![]),
            layer(Layer::Zone, vec![]),
            layer(Layer::Host, vec![pair("a", "b", LayerState::Unverified, "no host label")]),
        ];
        imply_nested_layers(&mut layers, &order);
        for l in &layers {
            assert_eq!(l.state, LayerState::Shared, "{:?}", l.name);
            assert_eq!(l.pairs.len(), 1, "{:?}", l.name);
        }
        assert_eq!(layers[2].pairs[0].evidence, vec!["pod shop/x serves both (so one kernel)".to_string()]);
        assert_eq!(layers[3].pairs[0].evidence, vec!["pod shop/x serves both (so one zone)".to_string()]);
    }

    #[test]
    fn a_shared_node_shares_its_machine_and_zone_but_not_always_its_kernel() {
        let order = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let mut layers = vec![
            layer(Layer::Process, vec![]),
            layer(Layer::Node, vec![pair("b", "c", LayerState::Shared, "node n runs b-1 and c-1")]),
            layer(Layer::Kernel, vec![]),
            layer(Layer::Zone, vec![pair("a", "b", LayerState::Shared, "zone z holds a-1 and b-1")]),
            layer(Layer::Host, vec![]),
        ];
        imply_nested_layers(&mut layers, &order);
        assert_eq!(layers[2].state, LayerState::Separate, "both sides sandboxed is the audit's to tell");
        assert_eq!(
            layers[4].pairs,
            vec![pair("b", "c", LayerState::Shared, "node n runs b-1 and c-1 (so one machine)")]
        );
        // Listed in spec order: (a, b) before (b, c).
        let zone: Vec<&Vec<String>> = layers[3].pairs.iter().map(|p| &p.classes).collect();
        assert_eq!(zone, vec![&vec!["a".to_string(), "b".to_string()], &vec!["b".to_string(), "c".to_string()]]);
    }

    #[test]
    fn classes_on_disjoint_nodes_do_not_share_a_kernel() {
        let order = vec!["a".to_string(), "b".to_string()];
        let doubt = "pod shop/a-1 names RuntimeClass gone, which does not exist";
        let mut layers =
            vec![layer(Layer::Node, vec![]), layer(Layer::Kernel, vec![pair("a", "b", LayerState::Unverified, doubt)])];
        imply_nested_layers(&mut layers, &order);
        assert_eq!(layers[1].state, LayerState::Separate);
        assert!(layers[1].pairs.is_empty());
        // On a shared node the doubt stands.
        let mut layers = vec![
            layer(Layer::Node, vec![pair("a", "b", LayerState::Shared, "node n runs a-1 and b-1")]),
            layer(Layer::Kernel, vec![pair("a", "b", LayerState::Unverified, doubt)]),
        ];
        imply_nested_layers(&mut layers, &order);
        assert_eq!(layers[1].state, LayerState::Unverified);
    }
}
