//! Leader election on a coordination.k8s.io Lease, so that two replicas are
//! safe: only the holder reconciles; a holder that loses the Lease stops (and
//! its pod restarts as a standby) rather than risk two writers.
//!
//! A leader that stops on SIGTERM releases the Lease once its last write is
//! done, and a standby takes it within about a second: kube-lease-manager's
//! standby sleeps until the Lease it last saw expires (up to its whole
//! duration), so the standby also reads the Lease every `POLL` and starts its
//! manager over when the holder let go.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError, LeaseParams};
use tokio::{sync::watch, task::JoinHandle};
use tracing::{info, warn};

use crate::controller::error::Error;

/// Seconds a Lease is valid after its last renewal, and how long before that the holder renews it.
const DURATION: u64 = 15;
const GRACE: u64 = 5;
/// How often a standby reads the Lease to see it released.
const POLL: Duration = Duration::from_millis(250);
/// How long a stopping leader waits for its release to be written.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone, Debug)]
pub struct LeaseRef {
    pub namespace: String,
    pub name: String,
}

type ManagerTask = JoinHandle<Result<LeaseManager, LeaseManagerError>>;

/// This replica holds the Lease until `lost` completes or `release` is called.
pub(in crate::controller) struct Leadership {
    holding: watch::Receiver<bool>,
    task: ManagerTask,
}

impl Leadership {
    /// Completes if the Lease is ever lost (not renewed in time, taken over).
    pub(in crate::controller) fn lost(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut holding = self.holding.clone();
        async move { while holding.changed().await.is_ok() && *holding.borrow_and_update() {} }
    }

    /// Give the Lease up (after the last write), so a standby need not wait for it to expire.
    pub(in crate::controller) async fn release(self) {
        // Dropping every receiver makes the manager's task release the Lease and end.
        drop(self.holding);
        match tokio::time::timeout(RELEASE_TIMEOUT, self.task).await {
            Ok(Ok(Ok(_))) => info!("released the leader lease"),
            Ok(Ok(Err(e))) => {
                warn!(error = %crate::error_chain::Chain(&e), "could not release the leader lease; it expires on its own")
            }
            Ok(Err(e)) => warn!(error = %e, "lease manager task failed"),
            Err(_) => warn!("releasing the leader lease timed out; it expires on its own"),
        }
    }
}

/// Wait until this replica holds the Lease.
pub(in crate::controller) async fn acquire(
    client: &Client,
    lease: &LeaseRef,
    identity: String,
) -> Result<Leadership, Error> {
    info!(lease = %lease.name, namespace = %lease.namespace, %identity, "waiting for the leader lease");
    loop {
        let manager = LeaseManagerBuilder::new(client.clone(), &lease.name)
            .with_namespace(&lease.namespace)
            .with_parameters(LeaseParams::new(identity.clone(), DURATION, GRACE).with_field_manager("bulkhead-leader"))
            .build()
            .await?;
        let (mut holding, task) = manager.watch().await;
        let released = released_by_other(client, lease, &identity);
        tokio::pin!(released);
        let held = loop {
            if *holding.borrow_and_update() {
                break true;
            }
            tokio::select! {
                changed = holding.changed() => if changed.is_err() {
                    return Err(task_error(task).await);
                },
                () = &mut released => break false,
            }
        };
        if held {
            info!(%identity, "holding the leader lease");
            return Ok(Leadership { holding, task });
        }
        // The holder let go while this manager sleeps until the old expiry:
        // end it (it holds nothing, so writes nothing) and start a fresh one,
        // which finds the Lease free and takes it.
        drop(holding);
        let _ = task.await;
        info!("the leader released the lease; trying to take it");
    }
}

/// Completes when the Lease, last seen held by another replica, has no holder.
async fn released_by_other(client: &Client, lease: &LeaseRef, identity: &str) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &lease.namespace);
    let mut held_by_other = false;
    loop {
        if let Ok(l) = leases.get(&lease.name).await {
            match l.spec.and_then(|s| s.holder_identity).filter(|h| !h.is_empty()) {
                Some(holder) => held_by_other = holder != identity,
                None if held_by_other => return,
                None => {}
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn task_error(task: ManagerTask) -> Error {
    match task.await {
        Ok(Err(e)) => Error::Lease(e),
        _ => Error::LeaseManagerStopped,
    }
}
