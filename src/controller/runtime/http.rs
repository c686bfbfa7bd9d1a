//! /healthz, /readyz and /metrics.

use std::sync::Arc;

use axum::{extract::State, http::StatusCode, routing::get, Router};

use crate::controller::context::Context;

pub(in crate::controller) async fn serve(
    listener: tokio::net::TcpListener,
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(ctx);
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}

/// Ready once every watch has listed its objects.
async fn readyz(State(ctx): State<Arc<Context>>) -> (StatusCode, &'static str) {
    if ctx.snapshot.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "listing the cluster")
    }
}

async fn metrics(State(ctx): State<Arc<Context>>) -> ([(&'static str, &'static str); 1], String) {
    ([("content-type", "application/openmetrics-text; version=1.0.0; charset=utf-8")], ctx.metrics.encode())
}
