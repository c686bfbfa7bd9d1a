//! Plan and audit every Bulkhead read from files: what the controller would
//! compute, without a cluster.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::Input;
use crate::{
    audit::{audit, Audit, AuditConfig},
    crd::Bulkhead,
    plan::{changes, plan, Change, Plan},
    status::{build_status, ApplyOutcome},
};

pub struct Evaluation {
    /// The Bulkhead with the status the operator would report.
    pub bulkhead: Bulkhead,
    pub plan: Plan,
    /// None when the spec is invalid.
    pub audit: Option<Audit>,
    pub changes: Vec<Change>,
}

pub fn evaluate(input: &Input, config: &AuditConfig, now: &Time) -> Vec<Evaluation> {
    input
        .bulkheads
        .iter()
        .map(|bulkhead| {
            let plan = plan(bulkhead, &input.snapshot);
            let changes = changes(&bulkhead.name_any(), &plan, &input.snapshot, bulkhead.spec.workload.is_some());
            // An invalid spec is not audited (the controller does the same).
            let audit = plan.is_valid().then(|| audit(bulkhead, &input.snapshot, config));
            let status = build_status(bulkhead, &plan, audit.as_ref(), &ApplyOutcome::NotApplied, bulkhead.status.as_ref(), now);
            let mut bulkhead = bulkhead.clone();
            bulkhead.metadata.managed_fields = None;
            bulkhead.status = Some(status);
            Evaluation { bulkhead, plan, audit, changes }
        })
        .collect()
}
