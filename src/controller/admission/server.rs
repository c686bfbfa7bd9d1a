//! The webhook's HTTPS server. The API server is its only expected client,
//! but anyone in the cluster can connect: connections are capped, the TLS
//! handshake and each request head are bounded in time, a request body in
//! size, and a connection in lifetime.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{body::Bytes, extract::State as Extract, routing::post, Router};
use hyper::server::conn::http1;
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    service::TowerToHyperService,
};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use super::{review, State};

const CONNECTIONS: usize = 64;
const HANDSHAKE: Duration = Duration::from_secs(5);
const HEAD: Duration = Duration::from_secs(5);
const LIFETIME: Duration = Duration::from_secs(120);
/// An AdmissionReview of a large pod is tens of KiB; the API server's own limit is 3 MiB.
const MAX_BODY: usize = 3 * 1024 * 1024;

pub(super) async fn serve(
    addr: SocketAddr,
    config: Arc<rustls::ServerConfig>,
    state: Arc<State>,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let acceptor = TlsAcceptor::from(config);
    let app = Router::new()
        .route("/validate-pods", post(pods))
        .route("/validate-owned", post(owned))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .with_state(state);
    let open = Arc::new(Semaphore::new(CONNECTIONS));
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::debug!(error = %e, "webhook accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = open.clone().try_acquire_owned() else { continue };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let Ok(Ok(tls)) = tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await else { return };
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD)
                .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app));
            let _ = tokio::time::timeout(LIFETIME, conn).await;
            drop(slot);
        });
    }
}

async fn pods(Extract(state): Extract<Arc<State>>, body: Bytes) -> ([(&'static str, &'static str); 1], Vec<u8>) {
    let answer = review::review_pods(&body, &state).await;
    ([("content-type", "application/json")], review::to_bytes(&answer))
}

async fn owned(Extract(state): Extract<Arc<State>>, body: Bytes) -> ([(&'static str, &'static str); 1], Vec<u8>) {
    let answer = review::review_owned(&body, state.options.operator_user.as_deref());
    ([("content-type", "application/json")], review::to_bytes(&answer))
}
