//! The watch over BulkheadDrills, in the leader only: a new drill starts a
//! runner, a second drill of a Bulkhead already drilled is refused, a drill
//! found mid-way with no runner here is reported aborted (the operator
//! restarted), and a deleted drill's runner is stopped, which lifts its fault.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use futures::StreamExt;
use kube::{
    api::Api,
    runtime::{reflector, watcher, WatchStreamExt},
    ResourceExt,
};
use tokio::task::JoinHandle;
use tracing::warn;

use super::runner::{self, busy, interrupted};
use crate::controller::context::Context;
use crate::crd::{drill_phase, BulkheadDrill};

/// What to do with a drill the watch shows.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Decision {
    /// Finished, or running here already.
    Nothing,
    Start,
    /// Mid-way, but no runner here: an operator restarted during it.
    Interrupted,
    /// Another drill (named) of the same Bulkhead is running.
    Busy(String),
}

/// `running`: the drills this process runs, with their Bulkheads; `ran`:
/// every drill this process started (an event about one that ended here can
/// still arrive with its last phase but one: it was not interrupted).
pub(super) fn decide(drill: &BulkheadDrill, running: &HashMap<String, String>, ran: &HashSet<String>) -> Decision {
    let name = drill.name_any();
    let phase = drill.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or(drill_phase::PENDING);
    if matches!(phase, drill_phase::COMPLETE | drill_phase::REFUSED)
        || running.contains_key(&name)
        || ran.contains(&name)
    {
        return Decision::Nothing;
    }
    if phase != drill_phase::PENDING {
        return Decision::Interrupted;
    }
    match running.iter().find(|(_, bulkhead)| **bulkhead == drill.spec.bulkhead) {
        Some((other, _)) => Decision::Busy(other.clone()),
        None => Decision::Start,
    }
}

/// Watch the drills and run them, until the process stops.
pub(in crate::controller) fn spawn(ctx: Arc<Context>) -> JoinHandle<()> {
    tokio::spawn(manage(ctx))
}

async fn manage(ctx: Arc<Context>) {
    let Some(writer) = ctx.drills.take_writer() else { return };
    let api: Api<BulkheadDrill> = Api::all(ctx.client.clone());
    let events = reflector::reflector(writer, watcher(api, watcher::Config::default()).default_backoff());
    let mut events = std::pin::pin!(events);
    let mut runners: HashMap<String, (String, JoinHandle<()>)> = HashMap::new();
    let mut ran: HashSet<String> = HashSet::new();
    while let Some(event) = events.next().await {
        runners.retain(|_, (_, task)| !task.is_finished());
        match event {
            Ok(watcher::Event::Apply(drill) | watcher::Event::InitApply(drill)) => {
                let running: HashMap<String, String> =
                    runners.iter().map(|(n, (b, _))| (n.clone(), b.clone())).collect();
                let name = drill.name_any();
                match decide(&drill, &running, &ran) {
                    Decision::Nothing => {}
                    Decision::Start => {
                        let task = tokio::spawn(runner::run(ctx.clone(), Arc::new(drill.clone())));
                        ran.insert(name.clone());
                        runners.insert(name, (drill.spec.bulkhead.clone(), task));
                    }
                    Decision::Interrupted => report(&ctx.client, &name, interrupted(&drill)).await,
                    Decision::Busy(other) => report(&ctx.client, &name, busy(&drill, &other)).await,
                }
            }
            Ok(watcher::Event::Delete(drill)) => {
                let name = drill.name_any();
                if let Some((_, task)) = runners.remove(&name) {
                    task.abort();
                }
                ran.remove(&name);
                ctx.drills.lift(&name);
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
            Err(e) => warn!(error = %e, "watching BulkheadDrills failed; retrying"),
        }
        ctx.drills.notify();
    }
}

pub(super) async fn report(client: &kube::Client, name: &str, status: crate::crd::BulkheadDrillStatus) {
    if let Err(e) = runner::write(client, name, &status).await {
        warn!(drill = %name, error = %e, "could not report on the drill");
    }
}
