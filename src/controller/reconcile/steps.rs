//! One reconcile of one Bulkhead: guard (deletion, finalizer) → evaluate
//! (pure: plan, diff, audit) → execute (write the difference) → report
//! (status, only when it changed).

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{
    api::{Api, Patch, PatchParams},
    core::DeserializeGuard,
    runtime::{controller::Action, events::EventType},
    Resource, ResourceExt,
};
use serde_json::json;
use tracing::{info, warn};

use super::apply::{apply_changes, Concern};
use super::events::{self, describe};
use super::finalizer::{clean_up, set_finalizer, Finalizer};
use super::untyped::dynamic_api;
use crate::controller::context::Context;
use crate::controller::error::Error;
use crate::{
    crd::{Bulkhead, BulkheadStatus, FIELD_MANAGER, FINALIZER},
    evaluate::{evaluate_kept, Evaluation, Reused},
    plan::Change,
    snapshot::ObjectKey,
    status::{
        drill::{apply_verified, verified_under_load},
        merge_conditions, reason, ApplyOutcome, ConditionStatus, DesiredCondition, READY, VERIFIED_UNDER_LOAD,
    },
};

/// How often an unchanged Bulkhead is re-planned anyway (it writes nothing if all is well).
const RESYNC: Duration = Duration::from_secs(300);

pub(in crate::controller) async fn reconcile(
    obj: Arc<DeserializeGuard<Bulkhead>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let started = Instant::now();
    let result = match &obj.0 {
        Ok(bulkhead) => reconcile_bulkhead(bulkhead, &ctx).await,
        Err(invalid) => report_undecodable(&invalid.metadata, &invalid.error, &ctx).await,
    };
    ctx.metrics.observe_duration(started.elapsed());
    ctx.metrics.record_reconcile(result.is_ok());
    if result.is_ok() {
        ctx.memory.backoff.reset(&obj.name_any());
    }
    result
}

async fn reconcile_bulkhead(bulkhead: &Bulkhead, ctx: &Context) -> Result<Action, Error> {
    let name = bulkhead.metadata.name.clone().ok_or(Error::Unnamed("Bulkhead"))?;
    // The controller's copy can lag the metadata watch (see `newer_spec`):
    // plan the spec the API server holds, not the one this copy still has.
    let fresh;
    let bulkhead = if ctx.snapshot.newer_spec(&name, bulkhead.metadata.generation) {
        let api = kube::Api::<Bulkhead>::all(ctx.client.clone());
        fresh =
            api.get(&name).await.map_err(|source| Error::Read { kind: "Bulkhead", object: name.clone(), source })?;
        // Relabelled to another operator meanwhile: that one acts on it now.
        if !crate::crd::belongs_to(fresh.metadata.labels.as_ref(), ctx.operator_name.as_deref()) {
            return Ok(Action::await_change());
        }
        &fresh
    } else {
        bulkhead
    };
    // Guard: deletion, an unlisted cluster, and the finalizer come first.
    if bulkhead.metadata.deletion_timestamp.is_some() {
        ctx.metrics.forget(&name, bulkhead.spec.classes.iter().map(|c| c.name.clone()));
        ctx.memory.forget(&name);
        return clean_up(&bulkhead.metadata, ctx).await;
    }
    if !ctx.snapshot.is_ready() {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    if !bulkhead.finalizers().iter().any(|f| f == FINALIZER) {
        set_finalizer(ctx, &bulkhead.metadata, Finalizer::Add).await?;
        // The update comes back as a watch event; plan then.
        return Ok(Action::await_change());
    }

    // The audit's counts and the last evaluation are kept between
    // reconciles: a pod event costs in proportion to itself, and nothing for
    // a Bulkhead that does not read the pod's namespace.
    let mut kept = ctx.memory.audits.take(&name);
    // A running drill's fault goes into this Bulkhead's pool config only.
    let faulted = ctx.drills.fault(&name).map(|fault| {
        let mut config = ctx.config.clone();
        config.plan.fault = Some(fault);
        config
    });
    let (evaluation, reused) = {
        let (snapshot, others) = ctx.snapshot.read_counted().await;
        evaluate_kept(bulkhead, &snapshot, others, faulted.as_ref().unwrap_or(&ctx.config), &mut kept)
    };
    ctx.memory.audits.put(&name, kept);
    if reused == Reused::Evaluation {
        ctx.metrics.evaluations_reused.inc();
    } else {
        if let Some(audit) = &evaluation.audit {
            ctx.metrics.record_layers(&name, audit.layers.iter().map(|l| &**l));
        }
        match reused {
            Reused::Plan => {
                ctx.metrics.plans_reused.inc();
            }
            _ => ctx.metrics.record_plan(&name, &evaluation.plan.capacity),
        }
    }

    // The analysis runs on its own; this reconcile reports the latest result
    // and comes back when the next is due.
    let sizing = ctx.memory.usage.sizing(&name);
    let next_analysis = ctx.memory.usage.schedule(&name, bulkhead);
    let (outcome, apply_error) = match execute(ctx, bulkhead, &name, &evaluation).await {
        Executed::Done(outcome) => (outcome, None),
        Executed::Failed(e) => (ApplyOutcome::Failed(crate::error_chain::Chain(&e).to_string()), Some(e)),
        // Someone wrote a node between observation and write: plan again from
        // its new taint list, without reporting a failure.
        Executed::Replan => return Ok(Action::requeue(Duration::from_millis(200))),
    };
    // The sidecars are asked from now on about the config just planned; the
    // latest answers (about it) go into this status.
    let wrote = evaluation.changes.iter().any(|c| matches!(c, Change::ApplyConfigMap(_)))
        && matches!(outcome, ApplyOutcome::Applied { .. });
    let observed = ctx.memory.enforcement.observe(&name, &evaluation.plan, wrote);
    // Most reconciles under churn change nothing of this Bulkhead: skip
    // building a status already known to be in place.
    let verified = verified_under_load(bulkhead, ctx.drills.all().iter().map(|d| &**d));
    let in_place = reused == Reused::Evaluation
        && ctx.memory.audits.with(&name, |k| k.reported_already(bulkhead, &outcome, &sizing, &observed)) == Some(true)
        && verified_in_place(bulkhead, verified.as_ref());
    if !in_place {
        let now = now();
        let mut status = evaluation.status_observed(bulkhead, &outcome, &sizing, observed.as_deref(), &now);
        apply_verified(&mut status, verified, bulkhead.status.as_ref(), bulkhead.metadata.generation, &now);
        ctx.metrics.record_conditions(&name, &status.conditions);
        if report(ctx, bulkhead, &status).await? == Reported::AlreadyInPlace {
            ctx.memory.audits.with(&name, |k| k.note_reported(bulkhead, &outcome, &sizing, &observed));
        }
    }
    match apply_error {
        Some(e) => Err(e),
        None => Ok(Action::requeue(next_analysis.map_or(RESYNC, |next| next.min(RESYNC)))),
    }
}

/// Whether the Bulkhead already reports `desired` as its VerifiedUnderLoad (or
/// carries none when none is desired).
fn verified_in_place(bulkhead: &Bulkhead, desired: Option<&DesiredCondition>) -> bool {
    let current = bulkhead.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == VERIFIED_UNDER_LOAD));
    match (current, desired) {
        (None, None) => true,
        (Some(c), Some(d)) => c.status == d.status.as_str() && c.reason == d.reason && c.message == d.message,
        _ => false,
    }
}

enum Executed {
    Done(ApplyOutcome),
    Failed(Error),
    Replan,
}

/// Write the evaluation's changes, minus placements a remembered refusal
/// would refuse again; announce what was written.
async fn execute(ctx: &Context, bulkhead: &Bulkhead, name: &str, evaluation: &Evaluation) -> Executed {
    let plan = &evaluation.plan;
    if !plan.is_valid() {
        return Executed::Done(ApplyOutcome::NotApplied);
    }
    let (mut changes, remembered) = ctx.memory.refusals.skip_remembered(name, evaluation.changes.clone());
    let new_refusals = match apply_changes(&ctx.client, &ctx.metrics, name, &changes).await {
        Ok(refusals) => refusals,
        Err(Error::NodeChanged(node)) => {
            info!(bulkhead = %name, %node, "node changed under a claim; planning again");
            return Executed::Replan;
        }
        Err(e) => return Executed::Failed(e),
    };
    // A refused placement was not applied: keep it out of the log and the Event.
    changes.retain(|c| {
        let refused = |concern, kind, key: &ObjectKey| {
            new_refusals.iter().any(|x| x.concern == concern && x.kind == kind && &x.key == key)
        };
        match c {
            Change::PlaceWorkload(p) => !refused(Concern::Placement, p.kind, &p.key),
            Change::InjectProxy(p) => !refused(Concern::Proxy, p.kind, &p.key),
            _ => true,
        }
    });
    if !changes.is_empty() {
        info!(bulkhead = %name, changes = %describe(&changes), "applied");
        events::publish(ctx, bulkhead, EventType::Normal, "Applied", "Apply", &describe(&changes)).await;
    }
    let refusals: Vec<_> = remembered.into_iter().chain(new_refusals).collect();
    ctx.memory.refusals.replace(name, &refusals);
    let (placement, proxy): (Vec<_>, Vec<_>) = refusals.iter().partition(|c| c.concern == Concern::Placement);
    let (conflicts, rejected): (Vec<_>, Vec<_>) = placement.into_iter().partition(|c| c.conflict);
    Executed::Done(ApplyOutcome::Applied {
        config_maps: usize::from(plan.config_map.is_some()),
        quotas: plan.quotas.len(),
        conflicts: conflicts.iter().map(|c| c.refused()).collect(),
        rejected: rejected.iter().map(|c| c.refused()).collect(),
        proxy_refused: proxy.iter().map(|c| c.refused()).collect(),
    })
}

#[derive(PartialEq)]
enum Reported {
    AlreadyInPlace,
    Written,
}

/// Patch the status only when it changed, and announce what flipped.
async fn report(ctx: &Context, bulkhead: &Bulkhead, status: &BulkheadStatus) -> Result<Reported, Error> {
    let previous = bulkhead.status.as_ref();
    if previous == Some(status) {
        return Ok(Reported::AlreadyInPlace);
    }
    patch_status(ctx, &bulkhead.name_any(), status).await?;
    events::announce_flips(ctx, bulkhead, previous, status).await;
    events::announce_layers(ctx, bulkhead, previous, status).await;
    Ok(Reported::Written)
}

/// A Bulkhead the operator's types cannot read: say so on the object itself,
/// naming the field where possible, and leave everything it made in place.
async fn report_undecodable(meta: &kube::api::ObjectMeta, error: &str, ctx: &Context) -> Result<Action, Error> {
    let name = meta.name.clone().ok_or(Error::Unnamed("Bulkhead"))?;
    if meta.deletion_timestamp.is_some() {
        // Cleanup must not depend on the spec being readable.
        return clean_up(meta, ctx).await;
    }
    let api = dynamic_api(ctx);
    let raw = api.get(&name).await.map_err(Error::read("Bulkhead", &name))?;
    let message = raw
        .data
        .get("spec")
        .and_then(|spec| crate::crd::locate_spec_error(spec.clone()))
        .unwrap_or_else(|| error.to_string());
    let previous: Vec<Condition> = raw
        .data
        .get("status")
        .and_then(|s| s.get("conditions"))
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default();
    let desired = vec![DesiredCondition::new(READY, ConditionStatus::False, reason::INVALID_SPEC, message.clone())];
    let conditions = merge_conditions(&previous, desired, meta.generation, &now());
    ctx.metrics.record_conditions(&name, &conditions);
    let unchanged = previous.iter().any(|p| conditions.iter().any(|c| c == p)) && previous.len() == 1;
    if !unchanged {
        warn!(bulkhead = %name, %message, "cannot read Bulkhead");
        // The planned numbers of an earlier, readable spec no longer describe it: drop them.
        let patch = json!({"status": {
            "observedGeneration": meta.generation,
            "conditions": conditions,
            "classCount": null, "pool": null, "classes": null, "layers": null,
        }});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(Error::write(
            "patch the status of",
            "Bulkhead",
            &name,
        ))?;
        ctx.metrics.record_write("Bulkhead", "status");
    }
    Ok(Action::await_change())
}

/// Server-side apply of the whole status: fields the operator set before and
/// no longer sets are removed, which a merge patch would leave behind.
async fn patch_status(ctx: &Context, name: &str, status: &BulkheadStatus) -> Result<(), Error> {
    let body = json!({
        "apiVersion": Bulkhead::api_version(&()),
        "kind": Bulkhead::kind(&()),
        "status": status,
    });
    let api: Api<Bulkhead> = Api::all(ctx.client.clone());
    api.patch_status(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&body))
        .await
        .map_err(Error::write("apply the status of", "Bulkhead", name))?;
    ctx.metrics.record_write("Bulkhead", "status");
    Ok(())
}

/// Now, to the second: the API server stores condition times in seconds.
fn now() -> Time {
    let ts = jiff::Timestamp::now();
    Time(jiff::Timestamp::from_second(ts.as_second()).unwrap_or(ts))
}
