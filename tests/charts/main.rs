//! The Helm chart rendered with Helm 3 and 4 (values, RBAC, monitoring) and
//! the Grafana dashboard, each expression checked against the real metric
//! expositions. No cluster.

mod chart;
#[path = "../support/chart.rs"]
mod chart_support;
mod dashboard;
