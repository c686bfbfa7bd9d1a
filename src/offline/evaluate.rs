//! Every Bulkhead read from files, evaluated as the controller would and
//! given the status it would report (nothing is applied offline).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::Input;
use crate::{
    audit::{unscheduled_pods, Audit},
    crd::Bulkhead,
    evaluate::{evaluate, Config, Evaluation},
    plan::{plan, Change, Plan},
    select::Selection,
    snapshot::{ObjectKey, Snapshot, WorkloadKind},
    status::ApplyOutcome,
};

/// Unscheduled pods named in a summary; the rest are counted.
const UNSCHEDULED_NAMED: usize = 3;

pub struct Evaluated {
    /// The Bulkhead with the status the operator would report.
    pub bulkhead: Bulkhead,
    pub plan: Plan,
    /// None when the spec is invalid.
    pub audit: Option<Audit>,
    pub changes: Vec<Change>,
    /// The classes' pods not yet bound to a node: how many, and the first few.
    pub unscheduled: (usize, Vec<String>),
}

pub fn evaluate_all(input: &Input, config: &Config, now: &Time) -> Vec<Evaluated> {
    // Files hold every Bulkhead's spec, so two that would inject a sidecar
    // into one workload are seen before either writes: the older keeps it.
    let claimed = with_proxy_claims(input, config);
    let snapshot = claimed.as_ref().unwrap_or(&input.snapshot);
    input
        .bulkheads
        .iter()
        .map(|bulkhead| {
            let evaluation = evaluate(bulkhead, snapshot, config);
            let status = evaluation.status(bulkhead, &ApplyOutcome::NotApplied, now);
            let mut bulkhead = bulkhead.clone();
            bulkhead.metadata.managed_fields = None;
            bulkhead.status = Some(status);
            let unscheduled = match &evaluation.audit {
                Some(a) if a.unscheduled > 0 => {
                    unscheduled_pods(&Selection::parse(&bulkhead), snapshot, UNSCHEDULED_NAMED)
                }
                _ => (0, Vec::new()),
            };
            let Evaluation { plan, changes, audit } = evaluation;
            Evaluated { bulkhead, plan, audit, changes, unscheduled }
        })
        .collect()
}

/// The snapshot with `proxy_claims` filled in, when some workload is selected
/// by the sidecar of two Bulkheads or more; None when none is.
fn with_proxy_claims(input: &Input, config: &Config) -> Option<Snapshot> {
    let mut claims: BTreeMap<(WorkloadKind, ObjectKey), BTreeSet<String>> = BTreeMap::new();
    for bulkhead in &input.bulkheads {
        let selection = Selection::parse(bulkhead);
        for injection in plan(&selection, &input.snapshot, &config.plan).proxy.injections {
            claims.entry((injection.kind, injection.key)).or_default().insert(selection.name().to_string());
        }
    }
    claims.retain(|_, by| by.len() > 1);
    if claims.is_empty() {
        return None;
    }
    let mut snapshot = input.snapshot.clone();
    snapshot.proxy_claims = claims;
    Some(snapshot)
}
