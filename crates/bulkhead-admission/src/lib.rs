//! The admission core of bulkhead, without Kubernetes.
//!
//! A pool config ([`PoolConfig`], the `pools.json` the operator writes)
//! partitions one resource between classes of work: each class has a floor
//! held for it alone and may borrow from a shared surplus up to its ceiling.
//! A [`Pool`] admits each request from its class's floor, then from the
//! surplus, and otherwise rejects it at once — it never queues. A slot is
//! held until the [`Permit`] is dropped: in the [`AdmissionLayer`] (a tower
//! Layer), when the response body ends.
//!
//! ```
//! use bulkhead_admission::{AdmissionLayer, Pool, PoolConfig, Unclassified};
//! # let json = r#"{"version":1,"bulkhead":"b","resource":"r","scope":"Instance","dividedBy":1,
//! #   "capacity":2,"sharedSurplus":1,"onCeiling":"reject",
//! #   "classes":[{"name":"checkout","reserved":1,"ceiling":2,"critical":false}]}"#;
//! let config: PoolConfig = serde_json::from_str(json)?;
//! let pool = Pool::new(config, Unclassified::Reject)?;
//! let permit = pool.admit(Some(b"checkout")).expect("the floor has room");
//! drop(permit); // the slot goes back
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The same core runs in `bulkhead proxy`, the operator's sidecar, which
//! adds the HTTP server, forwarding and config reload around it.

pub mod admission;
pub mod classify;
pub mod layer;
pub mod metrics;
pub mod normalize;
pub mod pool_config;
pub mod reject;
pub mod synthetic;

pub use admission::{DrillHold, Held, Permit, Pool, Reason, Rejection, Source, Unclassified};
pub use classify::{Classifier, Rule};
pub use layer::{Admission, AdmissionLayer, Admitted, Classify, Gate, HoldPermit, PermitBody};
pub use metrics::{PoolCollector, ProxyMetrics};
pub use pool_config::{
    Cidr, Hold, OnCeiling, PoolClass, PoolConfig, PoolConfigError, Scope, POOL_CONFIG_KEY, POOL_CONFIG_VERSION,
};
pub use reject::Rejector;
pub use synthetic::{GrpcStatus, SyntheticResponse};
