//! Two operator replicas with leader election: one reconciles, the other
//! waits; when the leader stops (SIGTERM, as on a rollout) the standby takes
//! over. Also proves a graceful shutdown ends the process, and that two
//! operators named apart never act on the same Bulkhead.

use std::time::Duration;

use bulkhead::crd::Bulkhead;
use bulkhead_testkit::{
    operator::{Operator, NAMESPACE},
    unique_suffix, wait_for, ControlPlane,
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;

/// One test at a time: they share one control plane, and every operator
/// without a name acts on every unlabelled Bulkhead, so one test's operators
/// would reconcile the other's Bulkheads (and write first, leaving the other
/// nothing to log).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
    let _alone = ONE_AT_A_TIME.lock().await;
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

/// Two operators named apart (`--operator-name`, a chart release's
/// `operatorName`) never act on the same Bulkhead: the unnamed one takes
/// the unlabelled Bulkheads, the named one those labelled with its name, and
/// relabelling a Bulkhead moves it from one to the other.
#[tokio::test]
async fn two_operators_named_apart_never_act_on_the_same_bulkhead() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let cp = ControlPlane::get();
    let client = cp.client().await;
    let unnamed = Operator::start("unnamed", &[]);
    let named = Operator::start("team-b", &["--operator-name", "team-b"]);
    let bulkheads: Api<Bulkhead> = Api::all(client.clone());
    let mine = format!("apart-unlabelled-{}", unique_suffix());
    let theirs = format!("apart-team-b-{}", unique_suffix());
    cp.apply_yaml(&bulkhead_yaml(&mine));
    cp.apply_yaml(&bulkhead_yaml(&theirs).replace(
        &format!("metadata: {{name: {theirs}}}"),
        &format!("metadata: {{name: {theirs}, labels: {{bulkhead.dev/operator: team-b}}}}"),
    ));
    wait_for("both are reconciled", Duration::from_secs(30), || async {
        reconciled(&bulkheads, &mine).await?;
        reconciled(&bulkheads, &theirs).await
    })
    .await;
    // Each operator's own account: its condition gauges and its log.
    let serves = |op: &Operator, name: &str| {
        op.http_get("/metrics").is_some_and(|(_, body)| body.contains(&format!("bulkhead=\"{name}\"")))
    };
    let acted = |op: &Operator, name: &str| op.log_text().contains(name);
    // The status is written before the Events that name the Bulkhead in the
    // log (the first one's refusal by a 1.20 server): wait for those lines.
    wait_for("each operator's log and gauges name its own Bulkhead", Duration::from_secs(30), || async {
        (serves(&unnamed, &mine) && acted(&unnamed, &mine) && serves(&named, &theirs) && acted(&named, &theirs))
            .then_some(())
    })
    .await;
    assert!(!serves(&unnamed, &theirs) && !acted(&unnamed, &theirs), "{}", unnamed.log_text());
    assert!(!serves(&named, &mine) && !acted(&named, &mine), "{}", named.log_text());

    // Relabelled, the unlabelled one moves to team-b: a change made then
    // (an unfunded floor) is reported by team-b, whose Events name it as
    // their reporting instance, and by the unnamed operator not at all.
    cp.kubectl(&["label", "bulkhead", &mine, "bulkhead.dev/operator=team-b"]);
    let unfunded = r#"[{"op": "replace", "path": "/spec/classes/0/reserved", "value": 11}]"#;
    cp.kubectl(&["patch", "bulkhead", &mine, "--type=json", "-p", unfunded]);
    let funded_false = |name: String| {
        let bulkheads = bulkheads.clone();
        async move {
            let status = bulkheads.get(&name).await.ok()?.status?;
            status.conditions.iter().any(|c| c.type_ == "Funded" && c.status == "False").then_some(())
        }
    };
    wait_for("the change is reported", Duration::from_secs(30), || funded_false(mine.clone())).await;
    let reporters = || {
        let selector = format!("involvedObject.name={mine},type=Warning");
        let events = cp.kubectl(&["get", "events", "-n", "default", "--field-selector", &selector, "-o", "json"]);
        let events: serde_json::Value = serde_json::from_str(&events).expect("events JSON");
        let mut who: Vec<String> = events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["action"] == "FundedChanged")
            .filter_map(|e| e["reportingInstance"].as_str().map(String::from))
            .collect();
        who.sort();
        who.dedup();
        who
    };
    wait_for("the Warning Event of the change", Duration::from_secs(30), || async {
        (!reporters().is_empty()).then_some(())
    })
    .await;
    // Time for a second reporter, were there one.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(reporters(), ["team-b"], "only the operator it now belongs to reports it");
    cp.kubectl(&["delete", "bulkhead", &mine, &theirs, "--timeout=30s"]);
    assert!(unnamed.stop() && named.stop());
}
