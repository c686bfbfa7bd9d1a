//! The offline CLI: the same planner and audit as the controller, fed from
//! YAML files (what `kubectl get -o yaml` prints) instead of watches.

mod advise_cmd;
mod check_cmd;
mod evaluate;
mod load;
mod plan_cmd;

pub use advise_cmd::{
    advise_exit, advise_text, kubectl_patch, AdviseFormat, EXIT_FINDINGS, EXIT_NO_FINDINGS, EXIT_NO_TELEMETRY,
};
pub use check_cmd::{
    advice, check_report, CheckReport, EXIT_INVALID_INPUT, EXIT_OK, EXIT_SHARED_OR_UNFUNDED, EXIT_UNVERIFIED_STRICT,
};
pub use evaluate::{evaluate_all, Evaluated};
pub use load::{load_files, load_text, Input, LoadError, Place, MAX_DEPTH, MAX_INPUT_BYTES, STDIN};
pub use plan_cmd::{plan_report, OutputFormat, PlanReport};
