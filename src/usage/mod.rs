//! Usage advice: what the proxies' telemetry says about a Bulkhead's sizing.
//! Pure: the figures come in as series (read from Prometheus by the thin
//! I/O layer in `prometheus`), and the advice goes out as data that
//! `bulkhead advise` prints and the controller writes into the `Sized`
//! condition and `status.classes[].usage`.

mod advice;

pub use advice::{Advice, ClassUsage, Finding, FindingKind};
