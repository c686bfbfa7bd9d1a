//! A drill's fault (pools.json's `classes[].hold`): an admitted request waits,
//! its slot taken, before it is forwarded, like a dependency that hangs, so
//! that a `BulkheadDrill` can saturate its class and watch the others.
//!
//! The wait ends at the first of: the hold's time (`hold.ms`, cut short by
//! `untilUnixMs`, read at admission); a reload that lifts the hold or ends
//! it sooner; the proxy stopping (a drain forwards what it held at once).
//! The class's maximum duration counts from admission, the hold included: a
//! request it ends during the hold gets the 504 of any request past it. A
//! client that goes away drops the wait, and with it the slot.

use std::{sync::Arc, time::Duration};

use http::{HeaderValue, Request};
use tokio::{sync::watch, time::Instant};

use bulkhead_admission::{
    admission::{DrillHold, Held},
    layer::Admitted,
    synthetic::is_grpc,
};

use super::{
    forward::{Forward, ForwardFuture},
    inbound::Inbound,
    refusal::Refusal,
};

/// `req`, held as `hold` says, then forwarded as `admitted` names it.
pub(super) fn forward_after(
    forward: Arc<Forward>,
    req: Request<Inbound>,
    peer: HeaderValue,
    admitted: Admitted,
    hold: DrillHold,
) -> ForwardFuture {
    let admitted_at = Instant::now();
    let grpc = is_grpc(&req);
    let until = admitted_at + hold.duration();
    // Counted as held from here (not from the first poll), until the wait ends or is dropped.
    let mut held = hold.begin();
    let mut stop = forward.stop();
    let max = admitted.max_duration;
    // A reload between the admission and here was not seen by `held`: look once.
    let lifted = held.remaining().is_none();
    ForwardFuture::held(Box::pin(async move {
        let past_max = !lifted && wait(&mut held, until, max.map(|m| admitted_at + m), &mut stop).await;
        drop(held);
        // What is left of the class's maximum duration bounds the forwarded request.
        let left = max.map(|m| m.saturating_sub(admitted_at.elapsed()));
        if past_max || left == Some(Duration::ZERO) {
            return ForwardFuture::refused(Refusal::UpstreamTimeout, grpc).await;
        }
        forward.call(req, &peer, &admitted.class, left).await
    }))
}

/// Hold until `until` (or a reload lifts the hold or ends it sooner), the
/// proxy stops, or `max_at` passes: true only in the last case.
async fn wait(held: &mut Held, mut until: Instant, max_at: Option<Instant>, stop: &mut watch::Receiver<bool>) -> bool {
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(until) => return false,
            () = deadline(max_at) => return true,
            () = stopped(stop) => return false,
            () = held.reloaded() => match held.remaining() {
                Some(left) => until = until.min(Instant::now() + left),
                None => return false,
            },
        }
    }
}

/// Never resolves without a deadline.
async fn deadline(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Resolves once the proxy stops (or the sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}
