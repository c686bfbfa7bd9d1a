//! The layers the audit counts pod by pod (Node, Kernel, Zone, Host), as a
//! type, and `PerLayer`, an array indexed by it. Process and Database are
//! worked out otherwise (`state::ProcessCounts`, `database.rs`), so they are
//! not variants here. Adding a layer is a compile-error checklist: every
//! `match` on `CountedLayer` below, `Counts::doms` and `audit::verdicts`
//! name each variant.

use std::{
    ops::{Index, IndexMut},
    sync::Arc,
};

use super::nodes::NodeTable;
use crate::crd::Layer;

/// A layer of the stack the audit counts per domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum CountedLayer {
    /// Domains are nodes.
    Node,
    /// Domains are nodes; a sandboxed pod is alone in its own.
    Kernel,
    /// Domains are values of topology.kubernetes.io/zone.
    Zone,
    /// Domains are values of the configured host label.
    Host,
}

impl CountedLayer {
    /// Every counted layer, in the order of their counts.
    pub(super) const ALL: [Self; 4] = [Self::Node, Self::Kernel, Self::Zone, Self::Host];

    /// Its place in `ALL` and in a `PerLayer`.
    const fn index(self) -> usize {
        match self {
            Self::Node => 0,
            Self::Kernel => 1,
            Self::Zone => 2,
            Self::Host => 3,
        }
    }

    /// The layer as the spec and the status name it.
    pub(super) const fn layer(self) -> Layer {
        match self {
            Self::Node => Layer::Node,
            Self::Kernel => Layer::Kernel,
            Self::Zone => Layer::Zone,
            Self::Host => Layer::Host,
        }
    }

    /// What one of its domains is called in evidence.
    pub(super) const fn label(self) -> &'static str {
        match self {
            Self::Node | Self::Kernel => "node",
            Self::Zone => "zone",
            Self::Host => "host",
        }
    }

    /// Whether its domains are numbered as nodes (`NodeTable::names`) or as
    /// label values (`NodeTable::values`).
    const fn domains_are_nodes(self) -> bool {
        match self {
            Self::Node | Self::Kernel => true,
            Self::Zone | Self::Host => false,
        }
    }

    /// The names of its domains, by number.
    pub(super) fn domains(self, nodes: &NodeTable) -> &[Arc<str>] {
        if self.domains_are_nodes() {
            &nodes.names
        } else {
            &nodes.values
        }
    }

    /// The evidence that `place`, one of its domains, holds pods `a` and `b`
    /// of two classes (one pod serving both when `a == b`).
    pub(super) fn describe(self, place: &str, a: &str, b: &str) -> String {
        if a == b {
            // One pod of both classes: the Process layer shares it too.
            return format!("{} {place} runs {a}, which serves both", self.label());
        }
        match self {
            Self::Node => format!("node {place} runs {a} and {b}"),
            Self::Kernel => format!("node {place} runs {a} and {b} on its kernel (neither is sandboxed)"),
            Self::Zone => format!("zone {place} holds {a} and {b}"),
            Self::Host => format!("host {place} holds {a} and {b}"),
        }
    }
}

// `ALL` lists each layer at its own index, so `index` and `ALL` cannot
// disagree (a layer missing from `ALL` fails `index`'s match or this check).
const _: () = {
    let mut i = 0;
    while i < CountedLayer::ALL.len() {
        assert!(CountedLayer::ALL[i].index() == i);
        i += 1;
    }
};

/// One value per counted layer, indexed by `CountedLayer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct PerLayer<T>([T; CountedLayer::ALL.len()]);

impl<T> PerLayer<T> {
    pub(super) fn from_fn(mut f: impl FnMut(CountedLayer) -> T) -> Self {
        Self(CountedLayer::ALL.map(&mut f))
    }

    pub(super) fn map<U>(&self, mut f: impl FnMut(CountedLayer, &T) -> U) -> PerLayer<U> {
        PerLayer::from_fn(|layer| f(layer, &self[layer]))
    }

    /// Each layer with its value, in the order of `CountedLayer::ALL`.
    pub(super) fn iter(&self) -> impl Iterator<Item = (CountedLayer, &T)> {
        CountedLayer::ALL.into_iter().zip(&self.0)
    }
}

impl<T> Index<CountedLayer> for PerLayer<T> {
    type Output = T;

    fn index(&self, layer: CountedLayer) -> &T {
        &self.0[layer.index()]
    }
}

impl<T> IndexMut<CountedLayer> for PerLayer<T> {
    fn index_mut(&mut self, layer: CountedLayer) -> &mut T {
        &mut self.0[layer.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant is in `ALL` (the match fails to compile when one is
    /// added), once, and names a layer of its own.
    #[test]
    fn all_holds_every_layer_once() {
        let listed = |l: CountedLayer| match l {
            CountedLayer::Node | CountedLayer::Kernel | CountedLayer::Zone | CountedLayer::Host => {
                CountedLayer::ALL.iter().filter(|&&x| x == l).count()
            }
        };
        for l in CountedLayer::ALL {
            assert_eq!(listed(l), 1, "{l:?}");
        }
        let layers: Vec<Layer> = CountedLayer::ALL.map(CountedLayer::layer).to_vec();
        let mut unique = layers.clone();
        unique.dedup();
        assert_eq!(layers, unique);
        // In the order the status lists them.
        let in_status: Vec<Layer> = Layer::ALL.into_iter().filter(|l| layers.contains(l)).collect();
        assert_eq!(layers, in_status);
    }

    #[test]
    fn per_layer_indexes_by_layer() {
        let mut v = PerLayer::from_fn(|l| l.label());
        assert_eq!(v[CountedLayer::Zone], "zone");
        v[CountedLayer::Host] = "machine";
        let seen: Vec<(CountedLayer, &str)> = v.iter().map(|(l, s)| (l, *s)).collect();
        assert_eq!(
            seen,
            [
                (CountedLayer::Node, "node"),
                (CountedLayer::Kernel, "node"),
                (CountedLayer::Zone, "zone"),
                (CountedLayer::Host, "machine")
            ]
        );
    }
}
