//! The Helm chart rendered with Helm 3 and 4 (values, RBAC, monitoring) and
//! the Grafana dashboard, each expression checked against the real metric
//! expositions. No cluster.

mod chart;
mod dashboard;

// The shared support, from the test kit (testkit/).
use bulkhead_testkit::chart as chart_support;
