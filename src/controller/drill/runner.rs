//! One drill, start to verdict: baseline → fault placed and confirmed on
//! every pod → measured → fault lifted and confirmed → verdict. Every wait
//! is bounded; every way out (a verdict, an abort, the task aborted because
//! the drill was deleted) lifts the fault (`FaultGuard`).

use std::{net::IpAddr, sync::Arc, time::Duration};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{
    api::{Api, Patch, PatchParams},
    ResourceExt,
};
use serde_json::json;
use tracing::{info, warn};

use super::{
    exchange::{exchange, held},
    load::Load,
    registry::FaultGuard,
};
use crate::controller::context::Context;
use crate::{
    crd::{drill_phase, drill_verdict, Bulkhead, BulkheadDrill, BulkheadDrillStatus},
    plan::{DrillFault, Enforcer, Plan},
    select::Selection,
    status::drill::{judge, not_ready, settings, DrillSettings, Outcome, Recording, Saturation, Thresholds},
};

/// How long a drill waits for its Bulkhead, pods and sidecars before it is refused.
const PREPARE: Duration = Duration::from_secs(180);
/// How long the pods may take to report the config with (or without) the fault.
const CONVERGE: Duration = Duration::from_secs(30);
/// How often the drill looks at the Bulkhead and the sidecars while it holds.
const CHECK: Duration = Duration::from_secs(1);
/// A pod may lag the fault's config this long before the drill aborts.
const LAG: Duration = Duration::from_secs(10);
/// The fault's own deadline lies this far past the drill's planned end, so
/// that it ends by itself even if no operator is left to lift it.
const DEADLINE_MARGIN: Duration = Duration::from_secs(60);

/// Why a drill stopped early.
struct Abort(String);

pub(super) async fn run(ctx: Arc<Context>, drill: Arc<BulkheadDrill>) {
    let name = drill.name_any();
    let _guard = FaultGuard { drills: ctx.drills.clone(), drill: name.clone() };
    let mut status = BulkheadDrillStatus { phase: Some(drill_phase::PENDING.into()), ..Default::default() };
    let outcome = drive(&ctx, &drill, &mut status).await;
    ctx.drills.lift(&name);
    let (verdict, message) = match outcome {
        Ok(Some(done)) => done,
        Ok(None) => return, // refused: already reported
        Err(Abort(why)) => {
            warn!(drill = %name, %why, "drill aborted; the fault is lifted");
            let lifted = if status.fault_time.is_some() || status.fault_config_hash.is_some() {
                confirm_lifted(&ctx, &drill.spec.bulkhead).await
            } else {
                String::new()
            };
            (drill_verdict::ABORTED.to_string(), format!("{why}{lifted}"))
        }
    };
    status.phase = Some(drill_phase::COMPLETE.into());
    status.verdict = Some(verdict.clone());
    status.message = Some(message.clone());
    status.completion_time = Some(now());
    status.conditions = vec![complete(&verdict, &message)];
    info!(drill = %name, %verdict, %message, "drill complete");
    if let Err(e) = write(&ctx.client, &name, &status).await {
        warn!(drill = %name, error = %e, "could not write the drill's verdict");
    }
    ctx.drills.notify();
}

/// Ok(Some((verdict, message))), Ok(None) when refused, Err when aborted.
async fn drive(
    ctx: &Arc<Context>,
    drill: &BulkheadDrill,
    status: &mut BulkheadDrillStatus,
) -> Result<Option<(String, String)>, Abort> {
    let name = drill.name_any();
    let bulkheads: Api<Bulkhead> = Api::all(ctx.client.clone());
    // Wait (bounded) for what may still be coming: the Bulkhead, its pods,
    // their sidecars on its config. A spec that cannot be drilled is refused at once.
    let give_up = tokio::time::Instant::now() + PREPARE;
    let (bulkhead, pods, settings) = loop {
        let waiting = match bulkheads.get_opt(&drill.spec.bulkhead).await {
            Ok(None) => format!("spec.bulkhead: no Bulkhead named {}", drill.spec.bulkhead),
            Err(e) => format!("could not read Bulkhead {}: {e}", drill.spec.bulkhead),
            Ok(Some(bulkhead)) => {
                let plan = plan_of(ctx, &bulkhead, None).await;
                let pods = sidecars(&plan);
                match settings(&drill.spec, &bulkhead, &plan, pods.len()) {
                    Err(message) => {
                        refuse(ctx, &name, status, message).await;
                        return Ok(None);
                    }
                    Ok(settings) => {
                        let hash = plan.proxy.config_hash.clone().unwrap_or_default();
                        match not_ready(&plan, pods.len()).map_or_else(|| converged(&bulkhead, &hash), Err) {
                            Ok(()) => break (bulkhead, pods, settings),
                            Err(why) => why,
                        }
                    }
                }
            }
        };
        if tokio::time::Instant::now() >= give_up {
            refuse(ctx, &name, status, format!("gave up after {}s waiting: {waiting}", PREPARE.as_secs())).await;
            return Ok(None);
        }
        if status.message.as_deref() != Some(waiting.as_str()) {
            status.message = Some(format!("waiting: {waiting}"));
            write(&ctx.client, &name, status).await.map_err(Abort)?;
            status.message = Some(waiting);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    let generation = bulkhead.metadata.generation;
    status.bulkhead_generation = generation;
    status.start_time = Some(now());
    status.ceiling = Some(settings.ceiling);
    status.phase = Some(drill_phase::BASELINE.into());
    status.message = Some(format!(
        "measuring {} class(es) for {}s before the fault",
        settings.load.measured.len() + 1,
        settings.baseline.as_secs()
    ));
    write(&ctx.client, &name, status).await.map_err(Abort)?;
    info!(drill = %name, bulkhead = %settings.bulkhead, class = %settings.class, pods = pods.len(), "drill started");

    let ips: Vec<IpAddr> = pods.iter().map(|(ip, _)| *ip).collect();
    let load = Load::start(&settings, &ips);
    let critical: Vec<usize> =
        load.classes.iter().enumerate().filter(|(_, c)| settings.critical.contains(c)).map(|(i, _)| i).collect();
    let baseline_start = load.now();
    sleep_checking(ctx, &settings, generation, &load, &critical, baseline_start, settings.baseline).await?;
    let baseline = (baseline_start, load.now());

    // The fault: placed in this process only, written by the Bulkhead's reconcile.
    let until = unix_ms() + (settings.duration + CONVERGE + DEADLINE_MARGIN).as_millis() as u64;
    let fault = DrillFault {
        bulkhead: settings.bulkhead.clone(),
        drill: name.clone(),
        class: settings.class.clone(),
        hold_ms: u64::try_from(settings.hold.as_millis()).unwrap_or(u64::MAX),
        until_unix_ms: until,
    };
    let faulted = plan_of(ctx, &bulkhead, Some(fault.clone())).await;
    let hash = faulted.proxy.config_hash.clone().ok_or_else(|| Abort("the fault's pool config was withheld".into()))?;
    ctx.drills.place(fault);
    status.phase = Some(drill_phase::HOLDING.into());
    status.fault_config_hash = Some(hash.clone());
    status.message = Some(format!("placing the fault (pool config {hash}) on {} pod(s)", pods.len()));
    write(&ctx.client, &name, status).await.map_err(Abort)?;
    wait_converged(ctx, &settings.bulkhead, &hash, CONVERGE)
        .await
        .map_err(|why| Abort(format!("the pods did not enforce the fault within {}s: {why}", CONVERGE.as_secs())))?;
    load.saturate();
    let during_start = load.now();
    status.fault_time = Some(now());
    status.message =
        Some(format!("holding {} for {}s; measuring the others", settings.class, settings.duration.as_secs()));
    write(&ctx.client, &name, status).await.map_err(Abort)?;

    // Measure, watching for harm and for the ground moving.
    let mut held_peak = 0u32;
    let mut lagging_since: Option<tokio::time::Instant> = None;
    let end = tokio::time::Instant::now() + settings.duration;
    while tokio::time::Instant::now() < end {
        tokio::time::sleep(CHECK.min(end - tokio::time::Instant::now())).await;
        check_harm(&load, &critical, during_start)?;
        let now_bulkhead = bulkheads.get_opt(&settings.bulkhead).await.ok().flatten();
        let Some(b) = now_bulkhead else { return Err(Abort(format!("Bulkhead {} was deleted", settings.bulkhead))) };
        if b.metadata.generation != generation {
            return Err(Abort(format!(
                "Bulkhead {} changed (generation {:?} → {:?})",
                settings.bulkhead, generation, b.metadata.generation
            )));
        }
        match converged(&b, &hash) {
            Ok(()) => lagging_since = None,
            Err(why) => {
                let since = *lagging_since.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() > LAG {
                    return Err(Abort(format!("the pods stopped enforcing the fault: {why}")));
                }
            }
        }
        held_peak = held_peak.max(held_now(&pods).await);
    }
    let during = (during_start, load.now());

    // Lift, confirm, judge.
    ctx.drills.lift(&name);
    status.phase = Some(drill_phase::LIFTING.into());
    status.held_peak = Some(held_peak);
    status.message = Some("lifting the fault".into());
    write(&ctx.client, &name, status).await.map_err(Abort)?;
    let lifted = confirm_lifted(ctx, &settings.bulkhead).await;
    let classes = load.classes.clone();
    let samples = load.finish();
    let recording = Recording { classes, drilled: 0, samples, baseline, during };
    let judgement =
        judge(&recording, Saturation { held_peak, ceiling: settings.ceiling }, settings.mode, &Thresholds::default());
    status.classes = judgement.figures;
    Ok(Some((judgement.verdict.to_string(), format!("{}{lifted}", judgement.message))))
}

/// Sleep `length`, aborting on harm to the critical lane or a Bulkhead change.
async fn sleep_checking(
    ctx: &Context,
    settings: &DrillSettings,
    generation: Option<i64>,
    load: &Load,
    critical: &[usize],
    since: Duration,
    length: Duration,
) -> Result<(), Abort> {
    let end = tokio::time::Instant::now() + length;
    let bulkheads: Api<Bulkhead> = Api::all(ctx.client.clone());
    while tokio::time::Instant::now() < end {
        tokio::time::sleep(CHECK.min(end - tokio::time::Instant::now())).await;
        check_harm(load, critical, since)?;
        if let Ok(Some(b)) = bulkheads.get_opt(&settings.bulkhead).await {
            if b.metadata.generation != generation {
                return Err(Abort(format!("Bulkhead {} changed during the baseline", settings.bulkhead)));
            }
        }
    }
    Ok(())
}

fn check_harm(load: &Load, critical: &[usize], since: Duration) -> Result<(), Abort> {
    match load.trouble(critical, since) {
        Some((class, outcome)) => Err(Abort(format!(
            "the critical class {} saw {}",
            load.classes[class],
            if outcome == Outcome::Rejected { "a rejection" } else { "an error" }
        ))),
        None => Ok(()),
    }
}

/// The Bulkhead's plan, with `fault` if given (what its reconcile plans).
/// The planner alone: a drill reads no diff and no audit.
async fn plan_of(ctx: &Context, bulkhead: &Bulkhead, fault: Option<DrillFault>) -> Plan {
    let mut config = ctx.config.plan.clone();
    config.fault = fault;
    let snapshot = ctx.snapshot.read().await;
    crate::plan::plan(&Selection::parse(bulkhead), &snapshot, &config)
}

/// The running pods' IPs and sidecar admin addresses.
fn sidecars(plan: &Plan) -> Vec<(IpAddr, std::net::SocketAddr)> {
    plan.proxy
        .pods
        .iter()
        .filter_map(|p| match p.enforcer {
            Enforcer::Sidecar { admin: Some(admin) } => Some((admin.ip(), admin)),
            _ => None,
        })
        .collect()
}

/// Most requests held on one pod now, by the sidecars' /readyz.
async fn held_now(pods: &[(IpAddr, std::net::SocketAddr)]) -> u32 {
    let asks = pods.iter().map(|(_, admin)| async move {
        let request = b"GET /readyz HTTP/1.0\r\nHost: bulkhead-proxy\r\n\r\n";
        match exchange(*admin, request, Duration::from_secs(1)).await {
            Ok((_, answer)) => held(&answer).unwrap_or(0),
            Err(_) => 0,
        }
    });
    futures::future::join_all(asks).await.into_iter().max().unwrap_or(0)
}

/// Whether the Bulkhead's status says every running pod enforces `hash`.
fn converged(bulkhead: &Bulkhead, hash: &str) -> Result<(), String> {
    let e = bulkhead
        .status
        .as_ref()
        .and_then(|s| s.enforcement.as_ref())
        .ok_or_else(|| "the Bulkhead reports no enforcement yet".to_string())?;
    if e.config_hash != hash {
        return Err(format!("the Bulkhead plans pool config {}, not {hash}", e.config_hash));
    }
    if e.pods == 0 || e.converged < e.pods {
        return Err(format!("{} of {} pod(s) enforce it (lagging: {})", e.converged, e.pods, e.lagging.join(", ")));
    }
    Ok(())
}

async fn wait_converged(ctx: &Context, bulkhead: &str, hash: &str, within: Duration) -> Result<(), String> {
    let api: Api<Bulkhead> = Api::all(ctx.client.clone());
    let end = tokio::time::Instant::now() + within;
    let mut last = "not asked yet".to_string();
    while tokio::time::Instant::now() < end {
        match api.get_opt(bulkhead).await {
            Ok(Some(b)) => match converged(&b, hash) {
                Ok(()) => return Ok(()),
                Err(why) => last = why,
            },
            Ok(None) => return Err(format!("Bulkhead {bulkhead} was deleted")),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(last)
}

/// Wait for the pods to report the config without the fault; what to add to the message.
async fn confirm_lifted(ctx: &Context, bulkhead: &str) -> String {
    let api: Api<Bulkhead> = Api::all(ctx.client.clone());
    let Ok(Some(b)) = api.get_opt(bulkhead).await else {
        return String::new();
    };
    let plain = plan_of(ctx, &b, None).await;
    let Some(hash) = plain.proxy.config_hash else { return String::new() };
    match wait_converged(ctx, bulkhead, &hash, CONVERGE).await {
        Ok(()) => format!("; the fault is lifted: every pod enforces pool config {hash} again"),
        Err(why) => format!(
            "; the fault is lifted from the pool config, but not every pod confirmed it within {}s ({why}); it ends by itself at its deadline",
            CONVERGE.as_secs()
        ),
    }
}

async fn refuse(ctx: &Context, name: &str, status: &mut BulkheadDrillStatus, message: String) {
    warn!(drill = %name, %message, "drill refused");
    status.phase = Some(drill_phase::REFUSED.into());
    status.message = Some(message.clone());
    status.completion_time = Some(now());
    status.conditions = vec![condition("False", "Refused", &message)];
    if let Err(e) = write(&ctx.client, name, status).await {
        warn!(drill = %name, error = %e, "could not report the refusal");
    }
}

/// The status of a drill this operator finds mid-way with no task running
/// it: an operator restarted (or another replica took over) during it. Its
/// fault went with the process that placed it; nothing is resumed.
pub(super) fn interrupted(drill: &BulkheadDrill) -> BulkheadDrillStatus {
    let mut status = drill.status.clone().unwrap_or_default();
    let phase = status.phase.clone().unwrap_or_default();
    let message = format!(
        "the operator restarted during the drill (phase {phase}); the measurements went with it, and the fault \
         with them: the new operator never placed it, and its deadline ends it in any sidecar still holding"
    );
    status.phase = Some(drill_phase::COMPLETE.into());
    status.verdict = Some(drill_verdict::ABORTED.into());
    status.completion_time = Some(now());
    status.conditions = vec![complete(drill_verdict::ABORTED, &message)];
    status.message = Some(message);
    status
}

/// Refused because another drill of the same Bulkhead runs.
pub(super) fn busy(drill: &BulkheadDrill, running: &str) -> BulkheadDrillStatus {
    let message = format!(
        "spec.bulkhead: drill {running} is running against Bulkhead {}; one drill per Bulkhead at a time",
        drill.spec.bulkhead
    );
    BulkheadDrillStatus {
        phase: Some(drill_phase::REFUSED.into()),
        completion_time: Some(now()),
        conditions: vec![condition("False", "Refused", &message)],
        message: Some(message),
        ..Default::default()
    }
}

fn complete(verdict: &str, message: &str) -> Condition {
    condition("True", verdict, message)
}

fn condition(status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        type_: "Complete".into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: now(),
        observed_generation: None,
    }
}

pub(super) async fn write(client: &kube::Client, name: &str, status: &BulkheadDrillStatus) -> Result<(), String> {
    let api: Api<BulkheadDrill> = Api::all(client.clone());
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&json!({ "status": status })))
        .await
        .map(|_| ())
        .map_err(|e| format!("could not write the status of BulkheadDrill {name}: {e}"))
}

fn unix_ms() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(now.as_millis()).unwrap_or(u64::MAX)
}

/// Now, to the second, as the API server stores times.
fn now() -> Time {
    let ts = jiff::Timestamp::now();
    Time(jiff::Timestamp::from_second(ts.as_second()).unwrap_or(ts))
}
