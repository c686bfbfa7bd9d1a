//! The proxy's own /healthz, /readyz and /metrics, on ports of their own so
//! that probes and scrapes never take a slot of any class. Health and metrics
//! can be split: the kubelet probes the pod IP, while the metrics (every class,
//! ceiling and in-flight count) need not be published there.

use std::sync::{
    atomic::{AtomicBool, Ordering},
    Arc,
};

use axum::{extract::State, http::StatusCode, routing::get, Router};

use super::{admission::Pool, metrics::ProxyMetrics};

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

pub(super) async fn serve(
    listener: tokio::net::TcpListener,
    admin: Arc<Admin>,
    serves: Serves,
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
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}

/// Ready while serving; the body names the config generation in force, so a
/// test (or a person) can tell when a reload has been applied.
async fn readyz(State(admin): State<Arc<Admin>>) -> (StatusCode, String) {
    let generation = admin.pool.generation();
    if admin.draining.load(Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, format!("draining generation={generation}\n"))
    } else {
        (StatusCode::OK, format!("ok generation={generation}\n"))
    }
}

async fn metrics(State(admin): State<Arc<Admin>>) -> ([(&'static str, &'static str); 1], String) {
    ([("content-type", "application/openmetrics-text; version=1.0.0; charset=utf-8")], admin.metrics.encode())
}
