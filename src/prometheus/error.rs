//! Why telemetry could not be read.

/// What went wrong reading Prometheus. `NoSeries` and the transport errors
/// (`Unreachable`, `Timeout`) mean "no telemetry": the `Sized` condition is
/// then Unknown/NoTelemetry, never a guess (see `is_no_telemetry`).
#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    #[error("Prometheus URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("Prometheus at {url} is unreachable")]
    Unreachable {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("Prometheus at {url}: no answer within {seconds} s")]
    Timeout { url: String, seconds: u64 },
    #[error("Prometheus at {url}: HTTP exchange failed")]
    Http {
        url: String,
        #[source]
        source: hyper::Error,
    },
    #[error("Prometheus at {url}: TLS handshake failed")]
    Tls {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("--prometheus-ca-file {}: {reason}", path.display())]
    CaFile { path: std::path::PathBuf, reason: String },
    #[error("no system CA certificates found to check Prometheus's certificate: give --prometheus-ca-file")]
    NoSystemCas,
    #[error("TLS setup failed: {0}")]
    TlsSetup(String),
    #[error("--prometheus-bearer-token-file {}: {reason}", path.display())]
    TokenFile { path: std::path::PathBuf, reason: String },
    #[error("Prometheus at {url} answered HTTP {status} ({content_type}): {body}")]
    Status { url: String, status: u16, content_type: String, body: String },
    #[error("Prometheus's answer is larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error(
        "{url} answered HTTP {status} with {content_type}, not the Prometheus HTTP API's JSON (a login page, or \
         a proxy in front of Prometheus?): {body}"
    )]
    NotTheApi {
        url: String,
        status: u16,
        content_type: String,
        body: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("Prometheus refused the query ({error_type}): {error}\n  query: {query}")]
    Query { error_type: String, error: String, query: String },
    #[error(
        "Prometheus has no series with bulkhead={bulkhead:?} in the last {window_seconds} s (are the proxies scraped?)"
    )]
    NoSeries { bulkhead: String, window_seconds: u64 },
    #[error("--window: {0}")]
    Window(String),
    #[error("--step: {0}")]
    Step(String),
}

impl PrometheusError {
    /// The user's own input is at fault (the URL, the CA or token file, the
    /// window), not Prometheus or the way to it: `advise` exits 3.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            PrometheusError::InvalidUrl { .. }
                | PrometheusError::Window(_)
                | PrometheusError::Step(_)
                | PrometheusError::CaFile { .. }
                | PrometheusError::TokenFile { .. }
                | PrometheusError::NoSystemCas
        )
    }

    /// No telemetry to judge by (as opposed to a query or configuration error).
    pub fn is_no_telemetry(&self) -> bool {
        matches!(
            self,
            PrometheusError::NoSeries { .. } | PrometheusError::Unreachable { .. } | PrometheusError::Timeout { .. }
        )
    }
}
