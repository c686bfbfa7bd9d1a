//! What shuffle sharding reports: the `ShuffleSharded` condition, with the
//! figures of the actual assignment, and the Node layer told the truth that
//! sharded tenants share nodes, identical shards first.

use std::collections::{BTreeSet, HashMap};

use super::{
    reasons::{reason, SHUFFLE_SHARDED},
    ConditionStatus, DesiredCondition,
};
use crate::{
    crd::{Layer, LayerState, LayerStatus, PairStatus},
    plan::ShardPlan,
    shard::binomial,
};

/// Evidence items per pair, as the audit keeps them.
const MAX_EVIDENCE: usize = 3;

/// `ShuffleSharded`, present only under spec.shuffleSharding.
pub(super) fn shard_condition(shards: &ShardPlan) -> DesiredCondition {
    let Some(r) = &shards.report else {
        let why = shards.shortfall.clone().unwrap_or_else(|| "no assignment".to_string());
        return DesiredCondition::new(
            SHUFFLE_SHARDED,
            ConditionStatus::False,
            reason::TOO_FEW_SHARD_NODES,
            format!("no tenant has a shard: {why}; the tenants' workloads are not pinned"),
        );
    };
    let (n, k) = (shards.candidates.len(), shards.shard_size);
    let combinations = binomial(n as u64, k as u64);
    let mut message = format!(
        "{} tenants on {n} nodes, {k} per shard (C({n}, {k}) = {combinations} possible): {} distinct shards",
        r.tenants, r.distinct_shards
    );
    if r.identical_pairs > 0 {
        let named = r.identical_examples.iter().map(|(a, b)| format!("{a} and {b}")).collect::<Vec<_>>().join(", ");
        let more = r.identical_pairs.saturating_sub(r.identical_examples.len() as u64);
        let more = if more > 0 { format!(" and {more} more") } else { String::new() };
        message.push_str(&format!("; {} pair(s) hold identical shards: {named}{more}", r.identical_pairs));
    } else {
        message.push_str("; no two tenants hold the same shard");
    }
    if let Some((a, b)) = &r.largest_overlap_pair {
        message.push_str(&format!("; largest overlap {} node(s) ({a} and {b})", r.largest_overlap));
    }
    message.push_str(&format!("; tenants per node {}-{} (mean {:.1})", r.load_min, r.load_max, r.load_mean));
    if let Some(w) = &r.worst {
        message.push_str(&format!(
            "; worst case, {}'s shard failing: {} other tenant(s) fully and {} partially affected",
            w.tenant, w.fully_affected, w.partially_affected
        ));
    }
    if r.identical_pairs == 0 {
        return DesiredCondition::new(SHUFFLE_SHARDED, ConditionStatus::True, reason::SHARDS_ASSIGNED, message);
    }
    let forced = combinations < r.tenants.into();
    message.push_str(if forced {
        ": forced, there are more tenants than shards; add candidate nodes or raise shardSize"
    } else {
        ": kept from earlier shards; a tenant's shard is redrawn only when it loses a node"
    });
    DesiredCondition::new(SHUFFLE_SHARDED, ConditionStatus::False, reason::IDENTICAL_SHARDS, message)
}

/// The Node layer with the shards as evidence: tenants whose shards overlap
/// may be put on one node at any moment, so they share the layer whatever the
/// pods do now. Pairs holding identical shards come first, then by overlap.
pub(super) fn annotate_node_layer(layers: &mut [LayerStatus], shards: &ShardPlan, class_order: &[String]) {
    let Some(layer) = layers.iter_mut().find(|l| l.name == Layer::Node) else { return };
    let k = shards.shard_size;
    let tenants: Vec<(&String, BTreeSet<&str>)> = class_order
        .iter()
        .filter_map(|c| Some((c, shards.shards.get(c)?.iter().map(String::as_str).collect())))
        .collect();
    // Each listed pair's position, looked up once instead of by a scan per pair.
    let mut at: HashMap<(String, String), usize> = layer
        .pairs
        .iter()
        .enumerate()
        .filter(|(_, p)| p.classes.len() == 2)
        .map(|(i, p)| ((p.classes[0].clone(), p.classes[1].clone()), i))
        .collect();
    // (identical, overlap) per annotated pair, to sort by.
    let mut weight: Vec<(bool, usize)> = vec![(false, 0); layer.pairs.len()];
    for (i, (a, shard_a)) in tenants.iter().enumerate() {
        for (b, shard_b) in &tenants[i + 1..] {
            let common: Vec<&str> = shard_a.intersection(shard_b).copied().collect();
            if common.is_empty() {
                continue;
            }
            let identical = shard_a == shard_b;
            let evidence = if identical {
                format!("identical shards ({}): one failure of these nodes takes down both tenants", common.join(", "))
            } else {
                format!("shards overlap on {} ({} of {k} nodes)", common.join(", "), common.len())
            };
            let index = *at.entry(((*a).clone(), (*b).clone())).or_insert_with(|| {
                layer.pairs.push(PairStatus {
                    classes: vec![(*a).clone(), (*b).clone()],
                    state: LayerState::Shared,
                    evidence: Vec::new(),
                });
                weight.push((false, 0));
                layer.pairs.len() - 1
            });
            let pair = &mut layer.pairs[index];
            pair.state = LayerState::Shared;
            pair.evidence.insert(0, evidence);
            pair.evidence.truncate(MAX_EVIDENCE);
            weight[index] = (identical, common.len());
        }
    }
    // Stable: pairs of equal weight keep the audit's (spec) order.
    let mut weighted: Vec<((bool, usize), PairStatus)> =
        weight.into_iter().zip(std::mem::take(&mut layer.pairs)).collect();
    weighted.sort_by_key(|(w, _)| std::cmp::Reverse(*w));
    layer.pairs = weighted.into_iter().map(|(_, p)| p).collect();
    if layer.pairs.iter().any(|p| p.state == LayerState::Shared) {
        layer.state = LayerState::Shared;
    }
}
