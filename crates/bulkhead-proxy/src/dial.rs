//! Opening a TCP connection to an upstream, shared by the HTTP/1.1 and h2c
//! clients: bounded by the connect timeout, Nagle off.

use std::time::Duration;

use http::uri::Authority;
use tokio::net::TcpStream;

use super::refusal::Refusal;

/// Why an upstream gave no response, as the client is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum UpstreamFailure {
    /// No connection: dial, handshake, or an h2c server's SETTINGS.
    Connect,
    /// The request failed on a connection (reset, closed mid-request).
    Exchange,
}

impl UpstreamFailure {
    pub(super) fn refusal(self) -> Refusal {
        match self {
            UpstreamFailure::Connect => Refusal::UpstreamConnect,
            UpstreamFailure::Exchange => Refusal::Upstream,
        }
    }
}

/// Why no connection could be opened.
#[derive(Debug, thiserror::Error)]
pub(super) enum DialError {
    #[error("cannot connect to the upstream")]
    Refused(#[source] std::io::Error),
    #[error("connecting to the upstream timed out")]
    TimedOut,
}

pub(super) async fn dial(authority: &Authority, timeout: Duration) -> Result<TcpStream, DialError> {
    let tcp = tokio::time::timeout(timeout, TcpStream::connect(authority.as_str()))
        .await
        .map_err(|_| DialError::TimedOut)?
        .map_err(DialError::Refused)?;
    // Request heads are small and written whole: waiting to coalesce them only adds latency.
    let _ = tcp.set_nodelay(true);
    Ok(tcp)
}
