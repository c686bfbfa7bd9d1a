//! A Bulkhead's last evaluation, kept while nothing it read has changed.
//!
//! The controller re-evaluates every Bulkhead on every snapshot change, and
//! in a busy cluster almost every change is a pod event in a namespace the
//! Bulkhead never reads. Its last evaluation is reused, unchanged, only when:
//! - what the plan reads of the Bulkhead object is the same: its name, uid,
//!   spec, and the shards its status records (the plan keeps them). Its own
//!   status writes change nothing else it reads, so the reconcile they
//!   trigger reuses the evaluation. The operator's configuration is the same;
//! - nothing but pods changed in the snapshot (`others`, the caller's count
//!   of every other change, Bulkheads' creation times included, is the same);
//! - every pod that changed (the snapshot's journal since then, which holds
//!   every pod change and starts a new epoch on a relist) is in a namespace
//!   none of its classes nor spec.workload reads pods from: the planner and
//!   the audit read pods only through those selections
//!   (`select::members`, the audit's classifier);
//! - it names no database: the Database layer looks pods up cluster-wide (by
//!   IP, by a Service's selector), so any pod change may matter to it.
//!
//! When pods it reads did change but nothing else did, and its plan read no
//! pod (only ranking nodes for a missing node claim does, `Plan::read_pods`),
//! the plan and its changes are kept and only the audit runs again, from its
//! kept counts: the cost of the pods that changed, not of planning again.

use std::{collections::BTreeSet, sync::Arc};

use super::{evaluate_cached, reaudit, Config, Evaluation};
use crate::{
    audit::AuditState,
    crd::{Bulkhead, BulkheadSpec},
    select::Selection,
    snapshot::{Cursor, Delta, Snapshot},
    status::{ApplyOutcome, Observed, Sizing},
};

/// What one Bulkhead keeps between reconciles.
#[derive(Default)]
pub struct Kept {
    /// The audit's counts (see `audit::audit_cached`).
    pub audit: Option<AuditState>,
    memo: Option<Memo>,
    /// Fresh evaluations so far: tells one evaluation from the next.
    evaluations: u64,
    in_place: Option<StatusInPlace>,
}

/// A status found already in place: built from evaluation number
/// `evaluation` with `outcome` and `sizing`, it equalled what the Bulkhead
/// object at `resource_version` holds. While all four stay the same, building
/// it again would give the same status (the time of day enters only a
/// condition that flips), so a reconcile need not build or compare it.
struct StatusInPlace {
    evaluation: u64,
    resource_version: String,
    outcome: ApplyOutcome,
    /// The very analysis result (each new one is a new allocation).
    sizing: Arc<Sizing>,
    /// The very answers of the sidecars, likewise.
    observed: Option<Arc<Observed>>,
}

impl Kept {
    /// True when the status of the current evaluation with `outcome`,
    /// `sizing` and `observed` is known to be the one `bulkhead` holds.
    pub fn reported_already(
        &self,
        bulkhead: &Bulkhead,
        outcome: &ApplyOutcome,
        sizing: &Arc<Sizing>,
        observed: &Option<Arc<Observed>>,
    ) -> bool {
        self.in_place.as_ref().is_some_and(|r| {
            r.evaluation == self.evaluations
                && bulkhead.metadata.resource_version.as_deref() == Some(r.resource_version.as_str())
                && &r.outcome == outcome
                && Arc::ptr_eq(&r.sizing, sizing)
                && match (&r.observed, observed) {
                    (None, None) => true,
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    _ => false,
                }
        })
    }

    /// Record that the status of the current evaluation with `outcome`,
    /// `sizing` and `observed` is the one `bulkhead` holds.
    pub fn note_reported(
        &mut self,
        bulkhead: &Bulkhead,
        outcome: &ApplyOutcome,
        sizing: &Arc<Sizing>,
        observed: &Option<Arc<Observed>>,
    ) {
        self.in_place = bulkhead.metadata.resource_version.clone().map(|resource_version| StatusInPlace {
            evaluation: self.evaluations,
            resource_version,
            outcome: outcome.clone(),
            sizing: sizing.clone(),
            observed: observed.clone(),
        });
    }
}

struct Memo {
    evaluation: Arc<Evaluation>,
    read: BulkheadRead,
    config: Config,
    others: u64,
    /// The journal position the evaluation is known to hold up to.
    cursor: Cursor,
    /// Namespaces whose pods the evaluation may read.
    pod_namespaces: BTreeSet<String>,
}

/// As `evaluate_cached`, reusing the last evaluation when nothing it read
/// has changed, or its plan when only pods the audit reads changed (see the
/// module comment); says which. `others`
/// counts every change to the snapshot other than a pod's.
pub fn evaluate_kept(
    bulkhead: &Bulkhead,
    snapshot: &Snapshot,
    others: u64,
    config: &Config,
    kept: &mut Kept,
) -> (Arc<Evaluation>, Reused) {
    let holds = kept.memo.as_ref().map_or(Holds::Nothing, |m| m.holds(bulkhead, snapshot, others, config));
    if holds == Holds::All {
        if let Some(memo) = kept.memo.as_mut() {
            memo.cursor = snapshot.journal.cursor();
            return (memo.evaluation.clone(), Reused::Evaluation);
        }
    }
    // Let go of the last evaluation first: the audit patches its kept layers
    // in place only when no earlier result still holds them.
    let memo = kept.memo.take();
    kept.evaluations += 1;
    if let Some(memo) = memo.filter(|_| holds == Holds::Plan) {
        // What the memo knows of the Bulkhead and the namespaces it reads still holds.
        let Memo { evaluation: previous, read, config: kept_config, others, cursor: _, pod_namespaces } = memo;
        let previous = Arc::try_unwrap(previous).unwrap_or_else(|shared| Evaluation::clone(&shared));
        let evaluation = Arc::new(reaudit(previous, bulkhead, snapshot, config, &mut kept.audit));
        let cursor = snapshot.journal.cursor();
        kept.memo =
            Some(Memo { evaluation: evaluation.clone(), read, config: kept_config, others, cursor, pod_namespaces });
        return (evaluation, Reused::Plan);
    }
    let evaluation = Arc::new(evaluate_cached(bulkhead, snapshot, config, &mut kept.audit));
    kept.memo = memo_of(bulkhead, snapshot, others, config, &evaluation);
    (evaluation, Reused::Nothing)
}

/// What a reconcile could reuse of the last evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reused {
    /// All of it.
    Evaluation,
    /// Its plan and changes; the audit ran again (incrementally).
    Plan,
    Nothing,
}

/// How much of a kept evaluation still holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Holds {
    /// Everything: nothing it read changed.
    All,
    /// Its plan (and the changes it asks for): only pods the audit reads
    /// changed, and the plan read no pod.
    Plan,
    Nothing,
}

impl Memo {
    fn holds(&self, bulkhead: &Bulkhead, snapshot: &Snapshot, others: u64, config: &Config) -> Holds {
        if !self.read.same_as(bulkhead) || self.others != others || &self.config != config {
            return Holds::Nothing;
        }
        let Some(mut deltas) = snapshot.journal.since(self.cursor) else { return Holds::Nothing };
        let mut read = false;
        for d in &mut deltas {
            match d {
                Delta::Pod { key, .. } => read |= self.pod_namespaces.contains(&key.namespace),
                Delta::Node(_) => return Holds::Nothing,
            }
        }
        match (read, self.evaluation.plan.read_pods()) {
            (false, _) => Holds::All,
            (true, false) => Holds::Plan,
            (true, true) => Holds::Nothing,
        }
    }
}

fn memo_of(
    bulkhead: &Bulkhead,
    snapshot: &Snapshot,
    others: u64,
    config: &Config,
    evaluation: &Arc<Evaluation>,
) -> Option<Memo> {
    if bulkhead.spec.classes.iter().any(|c| !c.databases.is_empty()) {
        return None;
    }
    Some(Memo {
        evaluation: evaluation.clone(),
        read: BulkheadRead::of(bulkhead),
        config: config.clone(),
        others,
        cursor: snapshot.journal.cursor(),
        pod_namespaces: pod_namespaces(&Selection::parse(bulkhead), snapshot),
    })
}

/// What an evaluation reads of the Bulkhead object itself.
#[derive(PartialEq)]
struct BulkheadRead {
    name: Option<String>,
    uid: Option<String>,
    spec: BulkheadSpec,
    /// Each class's shard as the status records it (`plan::shard` keeps them).
    shards: Vec<(String, Vec<String>)>,
}

impl BulkheadRead {
    fn of(bulkhead: &Bulkhead) -> Self {
        Self {
            name: bulkhead.metadata.name.clone(),
            uid: bulkhead.metadata.uid.clone(),
            spec: bulkhead.spec.clone(),
            shards: shards(bulkhead).map(|(c, s)| (c.to_string(), s.to_vec())).collect(),
        }
    }

    /// Compared in place: no copy of the Bulkhead is made to tell.
    fn same_as(&self, bulkhead: &Bulkhead) -> bool {
        self.name == bulkhead.metadata.name
            && self.uid == bulkhead.metadata.uid
            && self.spec == bulkhead.spec
            && self.shards.iter().map(|(c, s)| (c.as_str(), s.as_slice())).eq(shards(bulkhead))
    }
}

fn shards(bulkhead: &Bulkhead) -> impl Iterator<Item = (&str, &[String])> {
    bulkhead.status.iter().flat_map(|s| &s.classes).map(|c| (c.name.as_str(), c.shard.as_slice()))
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
mod tests;
