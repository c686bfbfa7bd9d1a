//! Events for what a person should see: applied changes, conditions that
//! flipped, layers whose state changed. An Event is a courtesy: failing to
//! record one never fails a reconcile. Where they are written: `recorder`.

use kube::{
    runtime::events::{Event, EventType},
    Resource,
};
use tracing::warn;

use crate::controller::context::Context;
use crate::{
    crd::{Bulkhead, BulkheadStatus, LayerState},
    plan::Change,
    status::ConditionStatus,
};

/// An Event for every condition whose status flipped (or appeared).
pub(in crate::controller) async fn announce_flips(
    ctx: &Context,
    bulkhead: &Bulkhead,
    old: Option<&BulkheadStatus>,
    new: &BulkheadStatus,
) {
    for c in &new.conditions {
        let before = old.and_then(|o| o.conditions.iter().find(|p| p.type_ == c.type_));
        if before.is_some_and(|b| b.status == c.status && b.reason == c.reason) {
            continue;
        }
        // Every condition is positive: False is what a person should look at.
        let type_ = match ConditionStatus::of(c) {
            Some(ConditionStatus::True) => EventType::Normal,
            _ => EventType::Warning,
        };
        publish(
            ctx,
            bulkhead,
            type_,
            &c.reason,
            &format!("{}Changed", c.type_),
            &format!("{} is {}: {}", c.type_, c.status, c.message),
        )
        .await;
    }
}

/// An Event for every layer whose state changed.
pub(in crate::controller) async fn announce_layers(
    ctx: &Context,
    bulkhead: &Bulkhead,
    old: Option<&BulkheadStatus>,
    new: &BulkheadStatus,
) {
    for layer in &new.layers {
        let before = old.and_then(|o| o.layers.iter().find(|l| l.name == layer.name)).map(|l| l.state);
        if before == Some(layer.state) {
            continue;
        }
        let type_ =
            if layer.state == LayerState::Shared && layer.required { EventType::Warning } else { EventType::Normal };
        let detail = layer
            .pairs
            .first()
            .map(|p| format!(": {} ({})", p.classes.join(" and "), p.evidence.first().cloned().unwrap_or_default()))
            .unwrap_or_default();
        let note = format!("{:?} layer is {:?}{detail}", layer.name, layer.state);
        publish(ctx, bulkhead, type_, &format!("Layer{:?}", layer.state), "Audit", &note).await;
    }
}

pub(in crate::controller) async fn publish(
    ctx: &Context,
    bulkhead: &Bulkhead,
    type_: EventType,
    reason: &str,
    action: &str,
    note: &str,
) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(truncate(note, 1000)),
        action: action.to_string(),
        secondary: None,
    };
    if let Err(e) = ctx.events.publish(&event, &bulkhead.object_ref(&())).await {
        // An Event is a courtesy; failing to record one must not fail the reconcile.
        warn!(error = %crate::error_chain::Chain(&e), "could not publish event");
    }
}

pub(in crate::controller) fn describe(changes: &[Change]) -> String {
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
