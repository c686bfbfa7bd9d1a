//! Usage advice: what the proxies' telemetry says about a Bulkhead's sizing.
//! Pure: the figures come in as series (read from Prometheus by the thin
//! I/O layer in `prometheus`), and the advice goes out as data that
//! `bulkhead advise` prints and the controller writes into the `Sized`
//! condition and `status.classes[].usage`.

mod advice;
mod analyse;
mod findings;
mod leak;
mod recommend;
mod span;
mod telemetry;
mod thresholds;

pub use advice::{Advice, ClassUsage, Finding, FindingKind};
pub use analyse::{analyse, apply_advice, capacity_plan};
pub use findings::percent;
pub use recommend::{minimum, recommend, Demand, Sizing};
pub use span::human_seconds;
pub use telemetry::{ClassSeries, Telemetry};
pub use thresholds::Thresholds;
