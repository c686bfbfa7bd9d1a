//! One evaluation of one Bulkhead, shared by the controller and the offline
//! CLI: parse its selectors once, plan, diff against the snapshot, audit.
//! Pure; the caller applies `changes` (or prints them) and then builds the
//! status from the outcome. Above `status` (it builds one) and below the
//! controller and `offline`, which both run it; `memo` keeps the controller's
//! last evaluation of each Bulkhead while nothing it read has changed.

mod memo;

pub use memo::{evaluate_kept, Kept, Reused};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::{
    audit::{audit_cached, Audit, AuditConfig, AuditState},
    crd::{Bulkhead, BulkheadStatus},
    plan::{changes, plan, Change, Plan, PlanConfig, WithheldConfig},
    select::Selection,
    snapshot::Snapshot,
    status::{apply_enforcement, apply_sizing, build_status, ApplyOutcome, Observed, Sizing},
};

#[derive(Clone, Debug)]
pub struct Evaluation {
    pub plan: Plan,
    /// What must be written for the cluster to match the plan.
    pub changes: Vec<Change>,
    /// None when the spec is invalid: an invalid spec (say, thousands of
    /// classes) is not audited.
    pub audit: Option<Audit>,
}

/// The operator's configuration, as far as evaluation reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    pub plan: PlanConfig,
    pub audit: AuditConfig,
}

pub fn evaluate(bulkhead: &Bulkhead, snapshot: &Snapshot, config: &Config) -> Evaluation {
    evaluate_cached(bulkhead, snapshot, config, &mut None)
}

/// As `evaluate`, keeping the audit's counts in `kept` between calls (see
/// `audit::audit_cached`); the result is the same.
pub fn evaluate_cached(
    bulkhead: &Bulkhead,
    snapshot: &Snapshot,
    config: &Config,
    kept: &mut Option<AuditState>,
) -> Evaluation {
    let selection = Selection::parse(bulkhead);
    let plan = plan(&selection, snapshot, &config.plan);
    let changes = changes(selection.name(), &plan, snapshot, WithheldConfig::for_spec(&bulkhead.spec));
    let audit = plan.is_valid().then(|| audit_cached(kept, &selection, snapshot, &config.audit));
    Evaluation { plan, changes, audit }
}

/// As `evaluate_cached` after a change of pods only, given the evaluation
/// from before it, whose plan read no pod (`Plan::read_pods`): the plan and
/// its changes still hold, and only the audit (which reads pods) runs again.
pub fn reaudit(
    previous: Evaluation,
    bulkhead: &Bulkhead,
    snapshot: &Snapshot,
    config: &Config,
    kept: &mut Option<AuditState>,
) -> Evaluation {
    let Evaluation { plan, changes, audit } = previous;
    // Drop the old audit first: the kept layers it shares are then patched
    // in place rather than copied whole.
    drop(audit);
    let audit = plan.is_valid().then(|| audit_cached(kept, &Selection::parse(bulkhead), snapshot, &config.audit));
    Evaluation { plan, changes, audit }
}

impl Evaluation {
    /// The status to report once the changes were applied (or not), keeping
    /// transition times from the Bulkhead's current status.
    pub fn status(&self, bulkhead: &Bulkhead, outcome: &ApplyOutcome, now: &Time) -> BulkheadStatus {
        build_status(bulkhead, &self.plan, self.audit.as_ref(), outcome, bulkhead.status.as_ref(), now)
    }

    /// As `status`, with `Sized`, `IsolatedInUse` and the classes' usage
    /// from the operator's latest analysis of the telemetry.
    pub fn status_sized(
        &self,
        bulkhead: &Bulkhead,
        outcome: &ApplyOutcome,
        sizing: &Sizing,
        now: &Time,
    ) -> BulkheadStatus {
        let mut status = self.status(bulkhead, outcome, now);
        apply_sizing(&mut status, sizing, bulkhead.status.as_ref(), bulkhead.metadata.generation, now);
        status
    }

    /// As `status_sized`, with `Enforced` and `status.enforcement` from what
    /// the sidecars answered (None: not asked yet).
    pub fn status_observed(
        &self,
        bulkhead: &Bulkhead,
        outcome: &ApplyOutcome,
        sizing: &Sizing,
        observed: Option<&Observed>,
        now: &Time,
    ) -> BulkheadStatus {
        let mut status = self.status_sized(bulkhead, outcome, sizing, now);
        let (previous, generation) = (bulkhead.status.as_ref(), bulkhead.metadata.generation);
        apply_enforcement(&mut status, &self.plan, observed, previous, generation, now);
        status
    }
}
