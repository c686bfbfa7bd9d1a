//! Every Bulkhead read from files, evaluated as the controller would and
//! given the status it would report (nothing is applied offline).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::Input;
use crate::{
    audit::{unscheduled_pods, Audit},
    crd::Bulkhead,
    evaluate::{evaluate, Config, Evaluation},
    plan::{Change, Plan},
    select::Selection,
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
    input
        .bulkheads
        .iter()
        .map(|bulkhead| {
            let evaluation = evaluate(bulkhead, &input.snapshot, config);
            let status = evaluation.status(bulkhead, &ApplyOutcome::NotApplied, now);
            let mut bulkhead = bulkhead.clone();
            bulkhead.metadata.managed_fields = None;
            bulkhead.status = Some(status);
            let unscheduled = match &evaluation.audit {
                Some(a) if a.unscheduled > 0 => {
                    unscheduled_pods(&Selection::parse(&bulkhead), &input.snapshot, UNSCHEDULED_NAMED)
                }
                _ => (0, Vec::new()),
            };
            let Evaluation { plan, changes, audit } = evaluation;
            Evaluated { bulkhead, plan, audit, changes, unscheduled }
        })
        .collect()
}
