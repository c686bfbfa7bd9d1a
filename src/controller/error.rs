//! Errors of the controller, each naming what failed, with a stable label
//! for metrics.

use crate::snapshot::ObjectKey;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A write the API server refused or that never arrived: `apply
    /// ConfigMap shop/bulkhead-x`, its cause in `source()`.
    #[error("{verb} {kind} {object}")]
    Write {
        verb: &'static str,
        kind: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },
    #[error("reading {kind} {object}")]
    Read {
        kind: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0} has no name")]
    Unnamed(&'static str),
    #[error("{kind} {key} exists and belongs to {}; not taking it over", owner.as_deref().map_or("someone else".to_string(), |b| format!("Bulkhead {b}")))]
    NotOurs { kind: &'static str, key: ObjectKey, owner: Option<String> },
    #[error("node {0} changed while its claim was being written; planning again")]
    NodeChanged(String),
    #[error("cannot serve metrics on {addr}")]
    Bind {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("leader election")]
    Lease(#[from] kube_lease_manager::LeaseManagerError),
    #[error("leader election: the lease manager stopped without saying why")]
    LeaseManagerStopped,
    #[error("serialising {what}")]
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
            Error::Write { source: kube::Error::Api(_), .. } | Error::Read { source: kube::Error::Api(_), .. } => "api",
            Error::Write { .. } | Error::Read { .. } => "client",
            Error::Unnamed(_) => "unnamed",
            Error::Serialize { .. } => "serialize",
            Error::Bind { .. } => "bind",
            Error::NotOurs { .. } => "not_ours",
            Error::NodeChanged(_) => "node_changed",
            Error::Lease(_) | Error::LeaseManagerStopped => "lease",
        }
    }

    /// Wraps a failed write: `.map_err(Error::write("apply", "ConfigMap", &key))`.
    pub fn write(verb: &'static str, kind: &'static str, object: impl ToString) -> impl FnOnce(kube::Error) -> Self {
        move |source| Error::Write { verb, kind, object: object.to_string(), source }
    }

    pub fn read(kind: &'static str, object: impl ToString) -> impl FnOnce(kube::Error) -> Self {
        move |source| Error::Read { kind, object: object.to_string(), source }
    }
}
