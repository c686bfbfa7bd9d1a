//! The controller: a thin shell around the pure planner. Watches keep a
//! snapshot current; every change reconciles every Bulkhead, which plans and
//! audits again only when something it reads changed; only differences are
//! written.

mod admission;
mod context;
mod drill;
mod error;
mod memory;
mod reconcile;
mod runtime;
#[cfg(test)]
mod tests;
mod watch;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use futures::StreamExt;
use kube::{
    api::Api,
    core::DeserializeGuard,
    runtime::{
        controller::{Action, Config as ControllerConfig, Controller},
        events::Reporter,
        watcher,
    },
    Client, ResourceExt,
};
use tracing::{info, warn};

pub use admission::{AdmissionOptions, TlsSource};
pub use context::Context;
pub use error::Error;
pub use memory::{
    enforcement::EnforcementOptions,
    usage::{Analyst, UsageOptions, DEFAULT_PERIOD, DEFAULT_WINDOW},
};
pub use reconcile::recorder::EVENTS_NAMESPACE;
pub use runtime::{
    client::client,
    leader::LeaseRef,
    metrics::{ErrorLabels, Metrics},
};
pub use watch::observe::SharedSnapshot;

use memory::{enforcement, kept, usage};
use reconcile::{recorder, steps};
use runtime::{http, leader, metrics};
use watch::{catch_up, observe, watch_backoff};

use crate::crd::Bulkhead;

#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Where /healthz, /readyz and /metrics are served.
    pub metrics_addr: SocketAddr,
    /// Name reported on Events and held in the Lease (the pod name in a cluster).
    pub instance: Option<String>,
    /// Reconcile only while holding this Lease (namespace, name).
    pub leader_election: Option<leader::LeaseRef>,
    pub config: crate::evaluate::Config,
    /// After SIGTERM or SIGINT: how long in-flight reconciles, the Lease's
    /// release and the HTTP server may take before the process stops anyway.
    pub shutdown_grace: Duration,
    /// Whether and how each Bulkhead's use is analysed (`Sized`).
    pub usage: UsageOptions,
    /// How often the sidecars are asked which config they enforce (`Enforced`).
    pub enforcement: EnforcementOptions,
    /// `--operator-name`: act only on Bulkheads labelled with it, or, without
    /// one, only on those without the label (`crd::operator_selector`).
    pub operator_name: Option<String>,
    /// The admission webhook, in every replica (None: not served).
    pub admission: Option<AdmissionOptions>,
}

fn error_policy(obj: Arc<DeserializeGuard<Bulkhead>>, error: &Error, ctx: Arc<Context>) -> Action {
    let wait = ctx.memory.backoff.next(&obj.name_any());
    ctx.metrics.errors.get_or_create(&metrics::ErrorLabels { error: error.metric_label().into() }).inc();
    warn!(bulkhead = %obj.name_any(), error = %crate::error_chain::Chain(error), retry_in = ?wait, "reconcile failed");
    Action::requeue(wait)
}

/// Run until SIGTERM or SIGINT.
pub async fn run(client: Client, options: RunOptions) -> Result<(), Error> {
    let snapshot = observe::start(&client);
    let selector = crate::crd::operator_selector(options.operator_name.as_deref());
    catch_up::spawn(Api::all(client.clone()), Arc::clone(&snapshot), selector.clone());
    if let Some(admission) = options.admission.clone() {
        admission::spawn(client.clone(), Arc::clone(&snapshot), selector.clone(), admission);
    }
    let mut metrics = Metrics::default();
    metrics.register_watch_failures(snapshot.watch_failures.clone());
    let metrics = Arc::new(metrics);
    let reporter = Reporter { controller: "bulkhead".into(), instance: options.instance.clone() };
    let ctx = Arc::new(Context {
        client: client.clone(),
        events: recorder::EventRecorder::new(client.clone(), reporter),
        metrics: metrics.clone(),
        snapshot: snapshot.clone(),
        config: options.config.clone(),
        memory: kept::Memory::new(
            Arc::new(usage::Usage::new(options.usage.clone(), metrics.clone())),
            Arc::new(enforcement::Enforcement::new(options.enforcement, metrics.clone())),
        ),
        operator_name: options.operator_name.clone(),
        drills: Arc::default(),
    });

    let listener = tokio::net::TcpListener::bind(options.metrics_addr)
        .await
        .map_err(|source| Error::Bind { addr: options.metrics_addr, source })?;
    let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(http::serve(listener, ctx.clone(), async move {
        let _ = http_stopped.await;
    }));
    info!(addr = %options.metrics_addr, "serving /healthz, /readyz and /metrics");

    // Standby replicas keep their watches warm but reconcile nothing.
    let leadership = match &options.leader_election {
        Some(lease) => {
            let identity = options.instance.clone().unwrap_or_else(|| format!("bulkhead-{}", std::process::id()));
            Some(leader::acquire(&client, lease, identity).await?)
        }
        None => None,
    };
    ctx.metrics.leader.set(1);
    let metrics = ctx.metrics.clone();
    let lost_leadership = leadership.as_ref().map(leader::Leadership::lost);
    // Set when the first signal arrives: from then on everything is bounded by
    // the grace period, and a second signal ends the process at once.
    let (signalled, signal_seen) = tokio::sync::watch::channel::<Option<tokio::time::Instant>>(None);
    let shutdown = async move {
        let on_signal = async move {
            shutdown_signal().await;
            let _ = signalled.send(Some(tokio::time::Instant::now()));
            tokio::spawn(async {
                shutdown_signal().await;
                warn!("second signal: exiting now");
                std::process::exit(130);
            });
        };
        match lost_leadership {
            Some(lost) => tokio::select! {
                () = on_signal => {}
                () = lost => warn!("lost the leader lease; stopping"),
            },
            None => on_signal.await,
        }
    };

    // Every change of the snapshot reconciles every Bulkhead; one whose
    // inputs did not change reuses its last evaluation (`evaluate::evaluate_kept`),
    // and the writes happen only on differences.
    // A finished analysis with a new result wakes them too (the others reuse everything).
    // So does a sidecar's new answer about the config it enforces.
    let changes = futures::stream::select(
        futures::stream::select(
            snapshot.changes(Duration::from_millis(100)),
            ctx.memory.usage.finished(Duration::from_millis(100)),
        ),
        futures::stream::select(
            ctx.memory.enforcement.changed(Duration::from_millis(100)),
            ctx.drills.changed(Duration::from_millis(100)),
        ),
    );
    // Drills run in the leader only, beside the reconciles that write their faults.
    let drills = drill::spawn(ctx.clone());
    let _stop_drills = AbortOnDrop(drills);
    // A reconcile that flips a condition waits on the API server for its
    // status write and Events; with four slots, ten Bulkheads probed under
    // churn kept all four busy (the scale run's summed reconcile time was
    // 4.0× the wall time) and the rest queued for seconds. Reconciles of
    // different Bulkheads are independent; the CPU part is short and serial.
    let concurrency = 16;
    let bulkheads: Api<DeserializeGuard<Bulkhead>> = Api::all(client);
    // Only this operator's Bulkheads: another operator, named apart, has the rest.
    info!(selector = %selector, "acting on the Bulkheads this selects");
    let controller = Controller::new(bulkheads, watcher::Config::default().labels(&selector))
        .with_config(ControllerConfig::default().concurrency(concurrency))
        .trigger_backoff(watch_backoff::WatchBackoff::with_cap(Duration::from_secs(1)))
        .reconcile_all_on(changes)
        .graceful_shutdown_on(shutdown)
        .run(steps::reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "controller event");
            }
        });
    let grace = options.shutdown_grace;
    let mut signal_time = signal_seen.clone();
    let expired = async move {
        match signal_time.wait_for(Option::is_some).await.ok().and_then(|at| *at) {
            Some(at) => tokio::time::sleep_until(at + grace).await,
            // The Lease was lost (no signal): the controller stops by itself.
            None => futures::future::pending().await,
        }
    };
    tokio::select! {
        () = controller => {}
        () = expired => {
            // In-flight reconciles did not finish in time (an API server that
            // does not answer, say): stop without releasing the Lease, so no
            // standby writes beside a reconcile this process might still run.
            warn!(grace = ?grace, "in-flight work did not finish in the grace period; stopping without releasing the Lease");
            metrics.leader.set(0);
            return Ok(());
        }
    }
    let deadline = signal_seen.borrow().map_or_else(|| tokio::time::Instant::now() + grace, |at| at + grace);
    info!("shutting down");
    metrics.leader.set(0);
    // Only now, with no reconcile left in flight, may a standby start writing.
    if let Some(leadership) = leadership {
        if tokio::time::timeout_at(deadline, leadership.release()).await.is_err() {
            warn!("the Lease was not released in the grace period; a standby takes it when it expires");
        }
    }
    let _ = stop_http.send(());
    match tokio::time::timeout_at(deadline, server).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => warn!(error = %crate::error_chain::Chain(&e), "metrics server failed"),
        Ok(Err(e)) => warn!(error = %e, "metrics server task failed"),
        Err(_) => warn!("the metrics server did not stop in the grace period"),
    }
    Ok(())
}

/// SIGTERM (what Kubernetes sends) or SIGINT.
/// Stops a task when the run ends, however it ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            futures::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => futures::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = futures::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    info!("signal received; finishing in-flight reconciles");
}
