//! The finalizer `bulkhead.dev/cleanup`: added before the first plan, and on
//! deletion released only after everything the Bulkhead made is gone. Cleanup
//! works from labels and metadata, so it never depends on the spec decoding.

use std::time::Duration;

use kube::runtime::controller::Action;
use serde_json::json;
use tracing::info;

use super::apply::apply_changes;
use super::untyped::dynamic_api;
use crate::controller::context::Context;
use crate::controller::error::Error;
use crate::{crd::FINALIZER, plan::teardown};
use kube::api::{Patch, PatchParams};

/// Delete every child labelled with this Bulkhead, then let it go.
pub(in crate::controller) async fn clean_up(meta: &kube::api::ObjectMeta, ctx: &Context) -> Result<Action, Error> {
    let name = meta.name.clone().ok_or(Error::Unnamed("Bulkhead"))?;
    if !meta.finalizers.iter().flatten().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    if !ctx.snapshot.children_listed() {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    let deletes = teardown(&name, &*ctx.snapshot.read().await);
    apply_changes(&ctx.client, &ctx.metrics, &name, &deletes).await?;
    ctx.memory.forget(&name);
    info!(bulkhead = %name, deleted = deletes.len(), "cleaned up; releasing the finalizer");
    set_finalizer(ctx, meta, Finalizer::Release).await?;
    Ok(Action::await_change())
}

/// What to do with our finalizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::controller) enum Finalizer {
    /// Before the first write: deleting the Bulkhead must wait for the cleanup.
    Add,
    /// After the cleanup: nothing of ours is left to remove.
    Release,
}

/// Add or release our finalizer, guarded by resourceVersion so that a
/// concurrent change of the list is never overwritten.
pub(in crate::controller) async fn set_finalizer(
    ctx: &Context,
    meta: &kube::api::ObjectMeta,
    action: Finalizer,
) -> Result<(), Error> {
    let present = action == Finalizer::Add;
    let name = meta.name.clone().ok_or(Error::Unnamed("Bulkhead"))?;
    let mut finalizers: Vec<String> = meta.finalizers.iter().flatten().filter(|f| *f != FINALIZER).cloned().collect();
    if present {
        finalizers.push(FINALIZER.to_string());
    }
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": meta.resource_version}});
    match dynamic_api(ctx).patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => {}
        // Already gone: nothing left to hold.
        Err(kube::Error::Api(s)) if s.code == 404 && !present => {}
        Err(e) => {
            return Err(Error::write(
                if present { "add the finalizer to" } else { "release the finalizer of" },
                "Bulkhead",
                &name,
            )(e))
        }
    }
    ctx.metrics.record_write("Bulkhead", "finalizer");
    Ok(())
}
