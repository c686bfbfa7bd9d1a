//! Errors of the controller, each with a stable label for metrics.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("the cluster snapshot is still being listed")]
    SnapshotNotReady,
    #[error("{0} has no name")]
    Unnamed(&'static str),
    #[error("{kind} {key} exists and belongs to {}; not taking it over", owner.as_deref().map_or("someone else".to_string(), |b| format!("Bulkhead {b}")))]
    NotOurs { kind: String, key: crate::snapshot::ObjectKey, owner: Option<String> },
    #[error("node {0} changed while its claim was being written; planning again")]
    NodeChanged(String),
    #[error("cannot serve metrics on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("leader election: {0}")]
    Lease(#[from] kube_lease_manager::LeaseManagerError),
    #[error("serialising {what}: {source}")]
    Serialize {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// Stable, low-cardinality label for the errors metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(_)) => "api",
            Error::Kube(_) => "client",
            Error::SnapshotNotReady => "snapshot_not_ready",
            Error::Unnamed(_) => "unnamed",
            Error::Serialize { .. } => "serialize",
            Error::Bind { .. } => "bind",
            Error::NotOurs { .. } => "not_ours",
            Error::NodeChanged(_) => "node_changed",
            Error::Lease(_) => "lease",
        }
    }
}
