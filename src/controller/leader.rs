//! Leader election on a coordination.k8s.io Lease, so that two replicas are
//! safe: only the holder reconciles; a holder that loses the Lease stops (and
//! its pod restarts as a standby) rather than risk two writers.

use std::future::Future;

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseParams};
use tracing::info;

use super::Error;

#[derive(Clone, Debug)]
pub struct LeaseRef {
    pub namespace: String,
    pub name: String,
}

/// Wait until this replica holds the Lease; the returned future completes if it
/// is ever lost.
pub async fn acquire(client: &Client, lease: &LeaseRef, identity: String) -> Result<impl Future<Output = ()>, Error> {
    let manager = LeaseManagerBuilder::new(client.clone(), &lease.name)
        .with_namespace(&lease.namespace)
        .with_parameters(LeaseParams::new(identity.clone(), 15, 5).with_field_manager("bulkhead-leader"))
        .build()
        .await?;
    let (mut holding, task) = manager.watch().await;
    info!(lease = %lease.name, namespace = %lease.namespace, %identity, "waiting for the leader lease");
    while !*holding.borrow_and_update() {
        if holding.changed().await.is_err() {
            return Err(task_error(task).await);
        }
    }
    info!(%identity, "holding the leader lease");
    Ok(async move {
        loop {
            if holding.changed().await.is_err() || !*holding.borrow_and_update() {
                break;
            }
        }
        // Dropping the receiver ends the manager's task.
        drop(holding);
        let _ = task.await;
    })
}

async fn task_error(
    task: tokio::task::JoinHandle<Result<kube_lease_manager::LeaseManager, kube_lease_manager::LeaseManagerError>>,
) -> Error {
    match task.await {
        Ok(Err(e)) => Error::Lease(e),
        _ => Error::LeaseManagerStopped,
    }
}
