//! Bulkhead specs read without a watch after an outage.
//!
//! A watch can come back late after an API server restart: the 9.8 s the
//! fault suite saw on 2026-12-05 (and issue 40's ~10 s) were kube-client's
//! retry layer sleeping out a `503 Retry-After: 10` (see `client`), but the
//! server itself makes a watch wait while that resource's watch cache fills
//! (the 1.20 cacher's `ready.wait()`). So for
//! [`WINDOW`] after any watch failure, the Bulkheads' metadata is also
//! listed every [`EVERY`] (from etcd: no resourceVersion, so no watch cache
//! to wait on): a newer generation wakes the reconciles, which then read that
//! Bulkhead afresh (`SharedSnapshot::newer_spec`). The lists are reads only,
//! each given up after [`TIMEOUT`] so that one slow answer does not hold the
//! next, and stop once the watches have run [`WINDOW`] without failing.

use std::{
    sync::{Arc, PoisonError},
    time::Duration,
};

use kube::api::{Api, ListParams};
use tracing::debug;

use super::observe::SharedSnapshot;
use crate::crd::Bulkhead;

/// How long after the last watch failure the lists go on.
const WINDOW: Duration = Duration::from_secs(30);
const EVERY: Duration = Duration::from_secs(1);
const TIMEOUT: Duration = Duration::from_secs(2);

/// `selector`: the Bulkheads this operator acts on (`crd::operator_selector`).
pub(in crate::controller) fn spawn(api: Api<Bulkhead>, shared: Arc<SharedSnapshot>, selector: String) {
    tokio::spawn(async move {
        loop {
            shared.watch_failed.notified().await;
            while since_last_failure(&shared).is_some_and(|since| since < WINDOW) {
                tokio::time::sleep(EVERY).await;
                match tokio::time::timeout(TIMEOUT, api.list_metadata(&ListParams::default().labels(&selector))).await {
                    Ok(Ok(list)) => {
                        // Every item is noted (no short-circuit): each generation is remembered.
                        let newer = list.items.iter().fold(false, |any, b| shared.note_generation(&b.metadata) | any);
                        if newer {
                            debug!("a Bulkhead spec changed while the watches caught up: reconciling");
                            shared.wake();
                        }
                    }
                    Ok(Err(e)) => debug!(error = %crate::error_chain::Chain(&e), "catch-up list failed"),
                    Err(_) => debug!(timeout = ?TIMEOUT, "catch-up list unanswered; listing again"),
                }
            }
        }
    });
}

fn since_last_failure(shared: &SharedSnapshot) -> Option<Duration> {
    shared.last_watch_failure.lock().unwrap_or_else(PoisonError::into_inner).map(|at| at.elapsed())
}

#[cfg(test)]
mod tests {
    use http::{Request, Response};
    use kube::{api::ObjectMeta, client::Body, Client};
    use serde_json::json;
    use tower_test::mock;

    use super::*;
    use crate::snapshot::Snapshot;

    #[tokio::test]
    async fn after_a_watch_failure_a_newer_generation_listed_wakes_the_reconciles() {
        let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let shared = SharedSnapshot::listed(Snapshot::default());
        let known =
            |generation| ObjectMeta { name: Some("shop".into()), generation: Some(generation), ..Default::default() };
        shared.note_generation(&known(1));
        spawn(Api::all(Client::new(service, "default")), Arc::clone(&shared), crate::crd::operator_selector(None));
        let mut changes = Box::pin(Arc::clone(&shared).changes(Duration::ZERO));

        // Watches that do not fail: nothing is listed.
        let quiet = tokio::time::timeout(Duration::from_millis(1500), handle.next_request()).await;
        assert!(quiet.is_err(), "listed with no watch failure");

        *shared.last_watch_failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(std::time::Instant::now());
        shared.watch_failed.notify_one();
        let (request, send) = tokio::time::timeout(Duration::from_secs(5), handle.next_request())
            .await
            .expect("a list after the failure")
            .expect("a request");
        assert_eq!((request.method().as_str(), request.uri().path()), ("GET", "/apis/bulkhead.dev/v1alpha1/bulkheads"));
        // Only this operator's Bulkheads (here: the unnamed one's, without the label).
        let query: Vec<(String, String)> =
            form_urlencoded::parse(request.uri().query().unwrap_or_default().as_bytes()).into_owned().collect();
        assert!(query.contains(&("labelSelector".into(), "!bulkhead.dev/operator".into())), "{query:?}");
        let list = json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList", "metadata": {},
            "items": [{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                       "metadata": {"name": "shop", "generation": 2}}],
        });
        send.send_response(Response::new(Body::from(serde_json::to_vec(&list).expect("JSON"))));
        tokio::time::timeout(Duration::from_secs(5), futures::StreamExt::next(&mut changes))
            .await
            .expect("the reconciles are woken");
        assert!(shared.newer_spec("shop", Some(1)), "the newer generation is remembered");
    }
}
