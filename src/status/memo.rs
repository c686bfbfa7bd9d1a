//! A Bulkhead's last evaluation, kept while nothing it read has changed.
//!
//! The controller re-evaluates every Bulkhead on every snapshot change, and
//! in a busy cluster almost every change is a pod event in a namespace the
//! Bulkhead never reads. Its last evaluation is reused, unchanged, only when:
//! - the Bulkhead object is the same one (its resourceVersion: spec, status
//!   and metadata alike; the plan reads the previous shards from the status),
//!   and so is the operator's configuration;
//! - nothing but pods changed in the snapshot (`others`, the caller's count
//!   of every other change, Bulkheads' creation times included, is the same);
//! - every pod that changed (the snapshot's journal since then, which holds
//!   every pod change and starts a new epoch on a relist) is in a namespace
//!   none of its classes nor spec.workload reads pods from: the planner and
//!   the audit read pods only through those selections
//!   (`select::members`, the audit's classifier);
//! - it names no database: the Database layer looks pods up cluster-wide (by
//!   IP, by a Service's selector), so any pod change may matter to it.

use std::{collections::BTreeSet, sync::Arc};

use super::{evaluate_cached, Config, Evaluation};
use crate::{
    audit::AuditState,
    crd::Bulkhead,
    select::Selection,
    snapshot::{Cursor, Delta, Snapshot},
};

/// What one Bulkhead keeps between reconciles.
#[derive(Default)]
pub struct Kept {
    /// The audit's counts (see `audit::audit_cached`).
    pub audit: Option<AuditState>,
    memo: Option<Memo>,
}

struct Memo {
    evaluation: Arc<Evaluation>,
    resource_version: String,
    config: Config,
    others: u64,
    /// The journal position the evaluation is known to hold up to.
    cursor: Cursor,
    /// Namespaces whose pods the evaluation may read.
    pod_namespaces: BTreeSet<String>,
}

/// As `evaluate_cached`, reusing the last evaluation when nothing it read
/// has changed (see the module comment); true when it was reused. `others`
/// counts every change to the snapshot other than a pod's.
pub fn evaluate_kept(
    bulkhead: &Bulkhead,
    snapshot: &Snapshot,
    others: u64,
    config: &Config,
    kept: &mut Kept,
) -> (Arc<Evaluation>, bool) {
    if let Some(memo) = kept.memo.as_mut().filter(|m| m.holds(bulkhead, snapshot, others, config)) {
        memo.cursor = snapshot.journal.cursor();
        return (memo.evaluation.clone(), true);
    }
    // Let go of the last evaluation first: the audit patches its kept layers
    // in place only when no earlier result still holds them.
    kept.memo = None;
    let evaluation = Arc::new(evaluate_cached(bulkhead, snapshot, config, &mut kept.audit));
    kept.memo = memo_of(bulkhead, snapshot, others, config, &evaluation);
    (evaluation, false)
}

impl Memo {
    fn holds(&self, bulkhead: &Bulkhead, snapshot: &Snapshot, others: u64, config: &Config) -> bool {
        if bulkhead.metadata.resource_version.as_deref() != Some(self.resource_version.as_str())
            || self.others != others
            || &self.config != config
        {
            return false;
        }
        let Some(mut deltas) = snapshot.journal.since(self.cursor) else { return false };
        deltas.all(|d| match d {
            Delta::Pod { key, .. } => !self.pod_namespaces.contains(&key.namespace),
            Delta::Node(_) => false,
        })
    }
}

fn memo_of(
    bulkhead: &Bulkhead,
    snapshot: &Snapshot,
    others: u64,
    config: &Config,
    evaluation: &Arc<Evaluation>,
) -> Option<Memo> {
    let resource_version = bulkhead.metadata.resource_version.clone()?;
    if bulkhead.spec.classes.iter().any(|c| !c.databases.is_empty()) {
        return None;
    }
    Some(Memo {
        evaluation: evaluation.clone(),
        resource_version,
        config: config.clone(),
        others,
        cursor: snapshot.journal.cursor(),
        pod_namespaces: pod_namespaces(&Selection::parse(bulkhead), snapshot),
    })
}

/// Every namespace whose pods a class (by its selectors) or spec.workload
/// may take as members, as `select::members` and the audit find them.
fn pod_namespaces(selection: &Selection<'_>, snapshot: &Snapshot) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = selection.bulkhead.spec.workload.iter().map(|w| w.namespace.clone()).collect();
    for pods in selection.classes.iter().filter_map(|c| c.pods.as_ref()) {
        let selected = snapshot.namespaces.values().filter(|ns| pods.namespaces.matches(&ns.labels));
        out.extend(selected.map(|ns| ns.name.clone()));
    }
    out
}

#[cfg(test)]
#[path = "memo_tests.rs"]
mod tests;
