//! The API client the operator runs with: kube's own, without its retry layer.
//!
//! kube-client (5.0) retries a 429, 503 or 504 inside the request and, for a
//! 503 with `Retry-After`, sleeps as long as the server asks. A 1.20 API
//! server answers every custom-resource request `503 server is starting`
//! with `Retry-After: 10` until its CRD informer has synced, the first
//! ~0.1 s it serves: exactly when the requests that the watch loops and the
//! catch-up lists had sent while it was down arrive. Each of them then slept
//! 10 s where nothing could see it, and a change made at `/readyz` waited for
//! them (issue 40). Without the layer the 503 reaches the code that owns the
//! retry: the watch loops try again after 0.1 s (`watch_backoff`), the
//! catch-up list a second later, a reconcile on its error policy.

use kube::{Client, Config};

/// A client from the environment (kubeconfig or in-cluster), without kube's retry layer.
pub async fn client() -> Result<Client, kube::Error> {
    from_config(Config::infer().await.map_err(kube::Error::InferConfig)?)
}

/// A client from `config`, without kube's retry layer.
fn from_config(mut config: Config) -> Result<Client, kube::Error> {
    config.default_retry = false;
    Client::try_from(config)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// What a starting 1.20 API server says about a custom resource (seen with curl, issue 40).
    const STARTING: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"server is starting","reason":"ServiceUnavailable","details":{"retryAfterSeconds":10},"code":503}"#;

    fn starting() -> String {
        format!(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 10\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{STARTING}",
            STARTING.len()
        )
    }

    #[tokio::test]
    async fn a_503_with_retry_after_comes_back_at_once_not_after_the_wait() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = served.clone();
        let server = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = conn.write_all(starting().as_bytes()).await;
            }
        });
        let config = Config::new(format!("http://{addr}").parse().expect("URL"));
        let client = from_config(config).expect("client");
        let started = Instant::now();
        let result = Api::<ConfigMap>::namespaced(client, "shop").list(&Default::default()).await;
        let took = started.elapsed();
        match result {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 503),
            other => panic!("the 503 is returned, got {other:?}"),
        }
        assert!(took < Duration::from_secs(2), "returned after {took:?}: the Retry-After was waited out");
        server.abort();
        assert_eq!(
            served.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "one request, no retry behind the caller's back"
        );
    }
}
