//! One reconcile of one Bulkhead: read the snapshot, plan (pure), apply the
//! difference, report status only when it changed.

use std::{sync::Arc, time::{Duration, Instant}};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{
    api::{Api, DynamicObject, Patch, PatchParams},
    core::{DeserializeGuard, GroupVersionKind},
    discovery::ApiResource,
    runtime::{controller::Action, events::{Event, EventType}},
    Resource, ResourceExt,
};
use serde_json::json;
use tracing::{info, warn};

use super::{apply::apply_changes, Context, Error};
use crate::{
    audit::audit,
    crd::{Bulkhead, BulkheadStatus, LayerState, FIELD_MANAGER, FINALIZER},
    plan::{changes, plan, teardown, Change},
    status::{build_status, merge_conditions, ApplyOutcome, DesiredCondition, Status, READY},
};

/// How often an unchanged Bulkhead is re-planned anyway (it writes nothing if all is well).
const RESYNC: Duration = Duration::from_secs(300);

pub async fn reconcile(obj: Arc<DeserializeGuard<Bulkhead>>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.metrics.reconciles.inc();
    let started = Instant::now();
    let result = match &obj.0 {
        Ok(bulkhead) => reconcile_bulkhead(bulkhead, &ctx).await,
        Err(invalid) => report_undecodable(&invalid.metadata, &invalid.error, &ctx).await,
    };
    ctx.metrics.observe_duration(started.elapsed());
    if result.is_ok() {
        ctx.backoff.reset(&obj.name_any());
    }
    result
}

async fn reconcile_bulkhead(bulkhead: &Bulkhead, ctx: &Context) -> Result<Action, Error> {
    let name = bulkhead.metadata.name.clone().ok_or(Error::Unnamed("Bulkhead"))?;
    if bulkhead.metadata.deletion_timestamp.is_some() {
        ctx.metrics.forget(&name, bulkhead.spec.classes.iter().map(|c| c.name.clone()));
        return clean_up(&bulkhead.metadata, ctx).await;
    }
    if !ctx.snapshot.is_ready() {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    if !bulkhead.finalizers().iter().any(|f| f == FINALIZER) {
        set_finalizer(ctx, &bulkhead.metadata, true).await?;
        // The update comes back as a watch event; plan then.
        return Ok(Action::await_change());
    }
    let (plan, changes, audit) = {
        let snapshot = ctx.snapshot.read().await;
        let plan = plan(bulkhead, &snapshot);
        let changes = changes(&name, &plan, &snapshot, bulkhead.spec.workload.is_some());
        // An invalid spec (say, thousands of classes) is not audited.
        let audit = plan.is_valid().then(|| audit(bulkhead, &snapshot, &ctx.audit_config));
        (plan, changes, audit)
    };
    if let Some(audit) = &audit {
        ctx.metrics.record_layers(&name, &audit.layers);
    }
    ctx.metrics.record_plan(&name, &plan.capacity);

    let (mut changes, remembered) = ctx.refusals.skip_remembered(&name, changes);
    let mut apply_error = None;
    let outcome = if !plan.is_valid() {
        ApplyOutcome::NotApplied
    } else {
        match apply_changes(&ctx.client, &ctx.metrics, &name, &changes).await {
            Ok(new_refusals) => {
                // A refused placement was not applied: keep it out of the log and the Event.
                changes.retain(|c| {
                    !matches!(c, Change::PlaceWorkload(p) if new_refusals.iter().any(|x| x.kind == p.kind && x.key == p.key))
                });
                let refusals: Vec<_> = remembered.into_iter().chain(new_refusals).collect();
                ctx.refusals.replace(&name, &refusals);
                let (conflicts, rejected): (Vec<_>, Vec<_>) = refusals.iter().partition(|c| c.conflict);
                ApplyOutcome::Applied {
                    config_maps: usize::from(plan.config_map.is_some()),
                    quotas: plan.quotas.len(),
                    conflicts: conflicts.iter().map(|c| c.describe()).collect(),
                    rejected: rejected.iter().map(|c| c.describe()).collect(),
                }
            }
            // Someone wrote the node between observation and write: plan again
            // from the new taint list, without reporting a failure.
            Err(Error::NodeChanged(node)) => {
                info!(bulkhead = %name, %node, "node changed under a claim; planning again");
                return Ok(Action::requeue(Duration::from_millis(200)));
            }
            Err(e) => {
                let message = e.to_string();
                apply_error = Some(e);
                ApplyOutcome::Failed(message)
            }
        }
    };
    if !changes.is_empty() && apply_error.is_none() {
        info!(bulkhead = %name, changes = %changes.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "), "applied");
        publish(ctx, bulkhead, EventType::Normal, "Applied", "Apply", &describe(&changes)).await;
    }

    let status = build_status(bulkhead, &plan, audit.as_ref(), &outcome, bulkhead.status.as_ref(), &now());
    if bulkhead.status.as_ref() != Some(&status) {
        patch_status(ctx, &name, &status).await?;
        announce_flips(ctx, bulkhead, bulkhead.status.as_ref(), &status).await;
        announce_layers(ctx, bulkhead, bulkhead.status.as_ref(), &status).await;
    }
    match apply_error {
        Some(e) => Err(e),
        None => Ok(Action::requeue(RESYNC)),
    }
}

/// A Bulkhead the operator's types cannot read: say so on the object itself,
/// naming the field where possible, and leave everything it made in place.
async fn report_undecodable(
    meta: &kube::api::ObjectMeta,
    error: &str,
    ctx: &Context,
) -> Result<Action, Error> {
    let name = meta.name.clone().ok_or(Error::Unnamed("Bulkhead"))?;
    if meta.deletion_timestamp.is_some() {
        // Cleanup must not depend on the spec being readable.
        return clean_up(meta, ctx).await;
    }
    let api = dynamic_api(ctx);
    let raw = api.get(&name).await?;
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
    let desired = vec![DesiredCondition::new(READY, Status::False, "InvalidSpec", message.clone())];
    let conditions = merge_conditions(&previous, desired, meta.generation, &now());
    let unchanged = previous.iter().any(|p| conditions.iter().any(|c| c == p)) && previous.len() == 1;
    if !unchanged {
        warn!(bulkhead = %name, %message, "cannot read Bulkhead");
        // The planned numbers of an earlier, readable spec no longer describe it: drop them.
        let patch = json!({"status": {
            "observedGeneration": meta.generation,
            "conditions": conditions,
            "classCount": null, "pool": null, "classes": null, "layers": null,
        }});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        ctx.metrics.record_write("Bulkhead", "status");
    }
    Ok(Action::await_change())
}

/// Delete every child labelled with this Bulkhead, then let it go.
async fn clean_up(meta: &kube::api::ObjectMeta, ctx: &Context) -> Result<Action, Error> {
    let name = meta.name.clone().ok_or(Error::Unnamed("Bulkhead"))?;
    if !meta.finalizers.iter().flatten().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    if !ctx.snapshot.children_listed() {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    let deletes = teardown(&name, &*ctx.snapshot.read().await);
    apply_changes(&ctx.client, &ctx.metrics, &name, &deletes).await?;
    ctx.refusals.replace(&name, &[]);
    info!(bulkhead = %name, deleted = deletes.len(), "cleaned up; releasing the finalizer");
    set_finalizer(ctx, meta, false).await?;
    Ok(Action::await_change())
}

/// Add or remove our finalizer, guarded by resourceVersion so that a
/// concurrent change of the list is never overwritten.
async fn set_finalizer(ctx: &Context, meta: &kube::api::ObjectMeta, present: bool) -> Result<(), Error> {
    let name = meta.name.clone().ok_or(Error::Unnamed("Bulkhead"))?;
    let mut finalizers: Vec<String> =
        meta.finalizers.iter().flatten().filter(|f| *f != FINALIZER).cloned().collect();
    if present {
        finalizers.push(FINALIZER.to_string());
    }
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": meta.resource_version}});
    match dynamic_api(ctx).patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => {}
        // Already gone: nothing left to hold.
        Err(kube::Error::Api(s)) if s.code == 404 && !present => {}
        Err(e) => return Err(e.into()),
    }
    ctx.metrics.record_write("Bulkhead", "finalizer");
    Ok(())
}

fn dynamic_api(ctx: &Context) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(&Bulkhead::group(&()), &Bulkhead::version(&()), &Bulkhead::kind(&()));
    Api::all_with(ctx.client.clone(), &ApiResource::from_gvk_with_plural(&gvk, &Bulkhead::plural(&())))
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
    api.patch_status(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&body)).await?;
    ctx.metrics.record_write("Bulkhead", "status");
    Ok(())
}

/// An Event for every condition whose status flipped (or appeared).
async fn announce_flips(ctx: &Context, bulkhead: &Bulkhead, old: Option<&BulkheadStatus>, new: &BulkheadStatus) {
    for c in &new.conditions {
        let before = old.and_then(|o| o.conditions.iter().find(|p| p.type_ == c.type_));
        if before.is_some_and(|b| b.status == c.status && b.reason == c.reason) {
            continue;
        }
        // Every condition is positive: False is what a person should look at.
        let type_ = if c.status == "True" { EventType::Normal } else { EventType::Warning };
        publish(ctx, bulkhead, type_, &c.reason, &format!("{}Changed", c.type_), &format!("{} is {}: {}", c.type_, c.status, c.message)).await;
    }
}

/// An Event for every layer whose state changed.
async fn announce_layers(ctx: &Context, bulkhead: &Bulkhead, old: Option<&BulkheadStatus>, new: &BulkheadStatus) {
    for layer in &new.layers {
        let before = old.and_then(|o| o.layers.iter().find(|l| l.name == layer.name)).map(|l| l.state);
        if before == Some(layer.state) {
            continue;
        }
        let type_ = if layer.state == LayerState::Shared && layer.required { EventType::Warning } else { EventType::Normal };
        let detail = layer
            .pairs
            .first()
            .map(|p| format!(": {} ({})", p.classes.join(" and "), p.evidence.first().cloned().unwrap_or_default()))
            .unwrap_or_default();
        let note = format!("{:?} layer is {:?}{detail}", layer.name, layer.state);
        publish(ctx, bulkhead, type_, &format!("Layer{:?}", layer.state), "Audit", &note).await;
    }
}

async fn publish(ctx: &Context, bulkhead: &Bulkhead, type_: EventType, reason: &str, action: &str, note: &str) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(truncate(note, 1000)),
        action: action.to_string(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &bulkhead.object_ref(&())).await {
        // An Event is a courtesy; failing to record one must not fail the reconcile.
        warn!(error = %e, "could not publish event");
    }
}

fn describe(changes: &[Change]) -> String {
    changes.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Now, to the second: the API server stores condition times in seconds.
fn now() -> Time {
    let ts = jiff::Timestamp::now();
    Time(jiff::Timestamp::from_second(ts.as_second()).unwrap_or(ts))
}
