//! Every Bulkhead read from files, evaluated as the controller would and
//! given the status it would report (nothing is applied offline).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::Input;
use crate::{
    audit::Audit,
    crd::Bulkhead,
    evaluate::{evaluate, Config, Evaluation},
    plan::{Change, Plan},
    status::ApplyOutcome,
};

pub struct Evaluated {
    /// The Bulkhead with the status the operator would report.
    pub bulkhead: Bulkhead,
    pub plan: Plan,
    /// None when the spec is invalid.
    pub audit: Option<Audit>,
    pub changes: Vec<Change>,
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
            let Evaluation { plan, changes, audit } = evaluation;
            Evaluated { bulkhead, plan, audit, changes }
        })
        .collect()
}
