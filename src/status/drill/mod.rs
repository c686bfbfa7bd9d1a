//! `BulkheadDrill`, the pure part: what a drill spec means against its
//! Bulkhead's plan (`settings`), the verdict from what the drill's client
//! recorded (`verdict`), and the Bulkhead's `VerifiedUnderLoad` condition
//! from the drills that finished (`verified`). The controller runs the drill.

mod settings;
mod verdict;
mod verified;

pub use settings::{not_ready, settings, DrillSettings, LoadSettings, MAX_DRILL, MAX_SATURATE};
pub use verdict::{judge, Judgement, Outcome, Recording, Sample, Saturation, Thresholds};
pub use verified::{apply_verified, verified_under_load};
