//! Two operator replicas with leader election: one reconciles, the other
//! waits; when the leader stops (SIGTERM, as on a rollout) the standby takes
//! over. Also proves a graceful shutdown ends the process.

mod support;

use std::time::Duration;

use bulkhead::crd::Bulkhead;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use support::{
    operator::{Operator, NAMESPACE},
    unique_suffix, wait_for, ControlPlane,
};

fn bulkhead_yaml(name: &str) -> String {
    format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: {name}}}\nspec:\n  dimension: Tenant\n  pool: {{resource: connections, capacity: 10}}\n  classes: [{{name: a, reserved: 1, critical: true}}]\n"
    )
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases.get("bulkhead-operator").await.ok()?.spec?.holder_identity
}

/// The value of `bulkhead_leader` an operator serves.
fn leader_gauge(op: &Operator) -> Option<f64> {
    let (_, body) = op.http_get("/metrics")?;
    body.lines().find_map(|l| l.strip_prefix("bulkhead_leader ")).and_then(|v| v.trim().parse().ok())
}

async fn reconciled(api: &Api<Bulkhead>, name: &str) -> Option<()> {
    let bh = api.get(name).await.ok()?;
    bh.status?.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True").then_some(())
}

#[tokio::test]
async fn only_the_lease_holder_reconciles_and_a_standby_takes_over() {
    let cp = ControlPlane::get();
    let client = cp.client().await;
    let first = Operator::start("replica-a", &["--leader-elect"]);
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    wait_for("replica-a holds the lease", Duration::from_secs(30), || async {
        (holder(&leases).await? == "replica-a").then_some(())
    })
    .await;
    let second = Operator::start("replica-b", &["--leader-elect"]);

    let bulkheads: Api<Bulkhead> = Api::all(client.clone());
    let one = format!("leader-one-{}", unique_suffix());
    cp.apply_yaml(&bulkhead_yaml(&one));
    wait_for("the leader reconciles", Duration::from_secs(30), || reconciled(&bulkheads, &one)).await;
    assert!(second.log_text().contains("waiting for the leader lease"), "{}", second.log_text());
    assert!(!second.log_text().contains("applied"), "the standby wrote nothing:\n{}", second.log_text());
    assert_eq!(leader_gauge(&first), Some(1.0), "the holder says it leads");
    assert_eq!(leader_gauge(&second), Some(0.0), "the standby says it does not");

    assert!(first.stop(), "the leader exits on SIGTERM:\n{}", first.log_text());
    wait_for("replica-b takes the lease", Duration::from_secs(60), || async {
        (holder(&leases).await? == "replica-b").then_some(())
    })
    .await;
    let two = format!("leader-two-{}", unique_suffix());
    cp.apply_yaml(&bulkhead_yaml(&two));
    wait_for("the new leader reconciles", Duration::from_secs(30), || reconciled(&bulkheads, &two)).await;
    assert_eq!(leader_gauge(&second), Some(1.0), "the new holder says it leads");
    // Deleting goes through the operator's finalizer: do it while one runs.
    cp.kubectl(&["delete", "bulkhead", &one, &two, "--timeout=30s"]);
    assert!(second.stop(), "the second replica exits on SIGTERM");
}
