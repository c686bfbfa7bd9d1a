//! The operator process: the API client, leader election, its HTTP server and metrics.

pub(in crate::controller) mod client;
pub(in crate::controller) mod http;
pub(in crate::controller) mod leader;
pub(in crate::controller) mod metrics;
pub(in crate::controller) mod process_metrics;
