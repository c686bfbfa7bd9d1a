//! Why telemetry could not be read.

/// What went wrong reading Prometheus. `NoSeries` and the transport errors
/// (`Unreachable`, `Timeout`) mean "no telemetry": the `Sized` condition is
/// then Unknown/NoTelemetry, never a guess (see `is_no_telemetry`).
#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    #[error("--prometheus {url:?}: {reason}")]
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
    #[error("Prometheus answered {status}: {body}")]
    Status { status: u16, body: String },
    #[error("Prometheus's answer is larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("Prometheus's answer is not the HTTP API's JSON")]
    Decode(#[source] serde_json::Error),
    #[error("Prometheus refused the query ({error_type}): {error}\n  query: {query}")]
    Query { error_type: String, error: String, query: String },
    #[error(
        "Prometheus has no series with bulkhead={bulkhead:?} in the last {window_seconds} s (are the proxies scraped?)"
    )]
    NoSeries { bulkhead: String, window_seconds: u64 },
    #[error("--window: {0}")]
    Window(String),
}

impl PrometheusError {
    /// No telemetry to judge by (as opposed to a query or configuration error).
    pub fn is_no_telemetry(&self) -> bool {
        matches!(
            self,
            PrometheusError::NoSeries { .. } | PrometheusError::Unreachable { .. } | PrometheusError::Timeout { .. }
        )
    }
}
