//! The proxy's own /healthz, /readyz and /metrics, on ports of their own so
//! that probes and scrapes never take a slot of any class. Health and metrics
//! can be split: the kubelet probes the pod IP, while the metrics (every class,
//! ceiling and in-flight count) need not be published there.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use axum::{extract::State, http::StatusCode, routing::get, Router};
use hyper::server::conn::http1;
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    service::TowerToHyperService,
};
use tokio::sync::Semaphore;

use bulkhead_admission::{admission::Pool, metrics::ProxyMetrics};

use crate::{server::accept_next, timeouts::ADMIN_CUT_AFTER, timeouts::ADMIN_LIFETIME};

pub(super) struct Admin {
    pub pool: Arc<Pool>,
    pub metrics: Arc<ProxyMetrics>,
    /// Set on SIGTERM: not ready, so load balancers stop sending.
    pub draining: AtomicBool,
}

/// What one admin listener serves.
#[derive(Clone, Copy, Debug)]
pub(super) struct Serves {
    pub health: bool,
    pub metrics: bool,
}

/// Bounds of one admin listener. Probes and scrapes need few connections and
/// little time; a client that opens many, or opens one and says nothing, must
/// not take the process's memory or descriptors (issue 21).
#[derive(Clone, Copy, Debug)]
pub(super) struct AdminLimits {
    /// Connections open at once; past it new ones are closed at once.
    pub connections: usize,
    /// Each request head (and an idle keep-alive connection's next one) within this.
    pub head: Duration,
}

pub(super) async fn serve(
    listener: tokio::net::TcpListener,
    admin: Arc<Admin>,
    serves: Serves,
    limits: AdminLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut app = Router::new();
    if serves.health {
        app = app.route("/healthz", get(|| async { "ok" })).route("/readyz", get(readyz));
    }
    if serves.metrics {
        app = app.route("/metrics", get(metrics));
    }
    let app = app.with_state(admin);
    let open = Arc::new(Semaphore::new(limits.connections));
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = accept_next(&listener) => accepted,
            () = &mut shutdown => return Ok(()),
        };
        let Ok(slot) = Arc::clone(&open).try_acquire_owned() else {
            tracing::debug!("admin connection limit reached: closed");
            continue;
        };
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.head)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            if tokio::time::timeout(ADMIN_LIFETIME, conn.as_mut()).await.is_err() {
                conn.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(ADMIN_CUT_AFTER, conn).await;
            }
            drop(slot);
        });
    }
}

/// Ready while serving; the body names the config generation in force and
/// the hash of its document (`config=`, `pool_config::content_hash`), so the
/// operator (or a person) can tell which planned config this replica enforces,
/// and the requests a drill's fault holds now, every class together (`held=`).
async fn readyz(State(admin): State<Arc<Admin>>) -> (StatusCode, String) {
    let (generation, hash) = admin.pool.in_force();
    let hash = hash.as_deref().unwrap_or("none");
    let held = admin.pool.held();
    if admin.draining.load(Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, format!("draining generation={generation} config={hash} held={held}\n"))
    } else {
        (StatusCode::OK, format!("ok generation={generation} config={hash} held={held}\n"))
    }
}

async fn metrics(State(admin): State<Arc<Admin>>) -> ([(&'static str, &'static str); 1], String) {
    ([("content-type", "application/openmetrics-text; version=1.0.0; charset=utf-8")], admin.metrics.encode())
}
