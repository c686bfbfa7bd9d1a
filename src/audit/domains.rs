//! What every layer's verdicts are made of: one verdict per pair of classes.

use crate::crd::LayerState;

/// Verdict for one pair of classes (a < b, positions in spec.classes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairVerdict {
    pub a: usize,
    pub b: usize,
    pub state: LayerState,
    pub evidence: Vec<String>,
}

/// Drop repeated evidence, keeping the first of each.
pub(super) fn dedup_keep_order(items: &mut Vec<String>) {
    // A few doubts at a time: comparing with those kept beats hashing clones.
    let mut kept = 0;
    for i in 0..items.len() {
        if !items[..kept].contains(&items[i]) {
            items.swap(kept, i);
            kept += 1;
        }
    }
    items.truncate(kept);
}
