//! The offline CLI: the same planner as the controller, fed from YAML files
//! (what `kubectl get -o yaml` prints) instead of watches.

mod load;
mod plan_cmd;

pub use load::{load_files, Input, LoadError};
pub use plan_cmd::{plan_files, OutputFormat, PlanReport};
