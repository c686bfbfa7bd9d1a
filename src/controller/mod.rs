//! The controller: a thin shell around the pure planner. Watches keep a
//! snapshot current; every change re-plans every Bulkhead; only differences
//! are written.

mod apply;
mod backoff;
mod error;
mod http;
mod metrics;
mod observe;
mod reconcile;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use futures::StreamExt;
use kube::{
    api::Api,
    core::DeserializeGuard,
    runtime::{
        controller::{Action, Config as ControllerConfig, Controller},
        events::{Recorder, Reporter},
        watcher,
    },
    Client, ResourceExt,
};
use tracing::{info, warn};

pub use error::Error;
pub use metrics::Metrics;
pub use observe::SharedSnapshot;

use crate::crd::Bulkhead;

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub snapshot: Arc<SharedSnapshot>,
    pub backoff: backoff::Backoff,
}

#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Where /healthz, /readyz and /metrics are served.
    pub metrics_addr: SocketAddr,
    /// Name reported on Events (the pod name in a cluster).
    pub instance: Option<String>,
}

fn error_policy(obj: Arc<DeserializeGuard<Bulkhead>>, error: &Error, ctx: Arc<Context>) -> Action {
    let wait = ctx.backoff.next(&obj.name_any());
    ctx.metrics.errors.get_or_create(&metrics::ErrorLabels { error: error.metric_label().into() }).inc();
    warn!(bulkhead = %obj.name_any(), %error, retry_in = ?wait, "reconcile failed");
    Action::requeue(wait)
}

/// Run until SIGTERM or SIGINT.
pub async fn run(client: Client, options: RunOptions) -> Result<(), Error> {
    let snapshot = observe::start(&client);
    let reporter = Reporter { controller: "bulkhead".into(), instance: options.instance.clone() };
    let ctx = Arc::new(Context {
        client: client.clone(),
        recorder: Recorder::new(client.clone(), reporter),
        metrics: Arc::new(Metrics::default()),
        snapshot: snapshot.clone(),
        backoff: backoff::Backoff::default(),
    });

    let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(http::serve(options.metrics_addr, ctx.clone(), async move {
        let _ = http_stopped.await;
    }));
    info!(addr = %options.metrics_addr, "serving /healthz, /readyz and /metrics");

    // Every change of what the planner reads re-plans every Bulkhead; the
    // planner is cheap and the writes happen only on differences.
    let changes = snapshot.changes(Duration::from_millis(100));
    let bulkheads: Api<DeserializeGuard<Bulkhead>> = Api::all(client);
    Controller::new(bulkheads, watcher::Config::default())
        .with_config(ControllerConfig::default().concurrency(4))
        .reconcile_all_on(changes)
        .shutdown_on_signal()
        .run(reconcile::reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "controller event");
            }
        })
        .await;
    info!("shutting down");
    let _ = stop_http.send(());
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => warn!(error = %e, "metrics server failed"),
        Err(e) => warn!(error = %e, "metrics server task failed"),
    }
    Ok(())
}
