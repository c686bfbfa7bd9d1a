//! One AdmissionReview in, one out. Pods: `plan::review_pod` against the
//! Bulkheads this operator acts on. Owned objects: only the operator (and
//! the garbage collector and namespace controller, which delete what it
//! owns with its owner or namespace) may change them.

use k8s_openapi::api::core::v1::Pod;
use kube::core::{
    admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation},
    DynamicObject,
};
use serde_json::Value;

use super::State;
use crate::{crd::BULKHEAD_LABEL, plan::review_pod, select::Selection};

/// The controllers that delete an owned object with its owner or namespace.
pub(super) const GARBAGE_COLLECTOR: &str = "system:serviceaccount:kube-system:generic-garbage-collector";
pub(super) const NAMESPACE_CONTROLLER: &str = "system:serviceaccount:kube-system:namespace-controller";

/// A pod review: the answer, as a review to send back.
pub(super) async fn review_pods(body: &[u8], state: &State) -> AdmissionReview<DynamicObject> {
    let request: AdmissionRequest<Pod> = match parse(body) {
        Ok(r) => r,
        Err(response) => return (*response).into_review(),
    };
    let response = AdmissionResponse::from(&request);
    let Some(pod) = request.object.as_ref() else { return response.into_review() };
    let mut pod = pod.clone();
    if pod.metadata.namespace.is_none() {
        pod.metadata.namespace = request.namespace.clone();
    }
    if !crate::plan::carries_operator_keys(&pod) {
        return response.into_review();
    }
    let bulkheads = state.bulkheads.state();
    let decoded: Vec<&crate::crd::Bulkhead> = bulkheads.iter().filter_map(|b| b.0.as_ref().ok()).collect();
    let selections: Vec<Selection<'_>> = decoded.iter().map(|b| Selection::parse(b)).collect();
    let verdict = {
        // The decision is pure and quick; the snapshot's lock is held for it only.
        let snapshot = state.snapshot.read().await;
        review_pod(&pod, &selections, &snapshot, &state.options.exempt_namespaces)
    };
    // An update is refused only for what it adds: a pod that crossed before
    // (created while the webhook did not answer) is the audit's to report,
    // and refusing its every later update (a label, a stamp) would help no one.
    let before = match (&verdict, request.operation, request.old_object.as_ref()) {
        (Err(_), Operation::Update, Some(old)) => {
            let mut old = old.clone();
            old.metadata.namespace = pod.metadata.namespace.clone();
            let snapshot = state.snapshot.read().await;
            review_pod(&old, &selections, &snapshot, &state.options.exempt_namespaces).is_err()
        }
        _ => false,
    };
    match verdict {
        Err(denial) if !before => response.deny(denial.message).into_review(),
        _ => response.into_review(),
    }
}

/// An update or delete of a ConfigMap or ResourceQuota the operator owns
/// (the webhook's objectSelector sends only those).
pub(super) fn review_owned(body: &[u8], operator: Option<&str>) -> AdmissionReview<DynamicObject> {
    let request: AdmissionRequest<DynamicObject> = match parse(body) {
        Ok(r) => r,
        Err(response) => return (*response).into_review(),
    };
    let response = AdmissionResponse::from(&request);
    let user = request.user_info.username.as_deref().unwrap_or_default();
    let writer = Some(user) == operator || user == GARBAGE_COLLECTOR || user == NAMESPACE_CONTROLLER;
    if writer || !matches!(request.operation, Operation::Update | Operation::Delete) {
        return response.into_review();
    }
    let object = request.old_object.as_ref().or(request.object.as_ref());
    let bulkhead = object
        .and_then(|o| o.metadata.labels.as_ref())
        .and_then(|l| l.get(BULKHEAD_LABEL))
        .cloned()
        .unwrap_or_else(|| "?".into());
    let kind = &request.kind.kind;
    let at = request.namespace.as_deref().map(|ns| format!("{ns}/")).unwrap_or_default();
    response
        .deny(format!(
            "{kind} {at}{} is written by the bulkhead operator from Bulkhead {bulkhead}: change the Bulkhead instead \
             (kubectl edit bulkhead {bulkhead}); an edit here would be written back at its next reconcile",
            request.name
        ))
        .into_review()
}

fn parse<T: kube::Resource + serde::de::DeserializeOwned>(
    body: &[u8],
) -> Result<AdmissionRequest<T>, Box<AdmissionResponse>> {
    let invalid = |why: String| Box::new(AdmissionResponse::invalid(why));
    let review: AdmissionReview<T> =
        serde_json::from_slice(body).map_err(|e| invalid(format!("not an AdmissionReview: {e}")))?;
    review.try_into().map_err(|_| invalid("an AdmissionReview without a request".into()))
}

/// The review as the bytes to send.
pub(super) fn to_bytes(review: &AdmissionReview<DynamicObject>) -> Vec<u8> {
    serde_json::to_vec(review).unwrap_or_else(|_| serde_json::to_vec(&Value::Null).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn review(operation: &str, user: &str) -> Vec<u8> {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "bulkhead-shop", "namespace": "shop", "labels": {"bulkhead.dev/bulkhead": "shop"}}});
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "name": "bulkhead-shop", "namespace": "shop", "operation": operation,
                "userInfo": {"username": user}, "object": object.clone(), "oldObject": object},
        }))
        .expect("json")
    }

    fn allowed(r: &AdmissionReview<DynamicObject>) -> (bool, String) {
        let response = r.response.as_ref().expect("a response");
        (response.allowed, response.result.message.clone())
    }

    #[test]
    fn only_the_operator_and_the_deleting_controllers_change_what_it_owns() {
        let operator = Some("system:serviceaccount:bulkhead:bulkhead");
        let (ok, message) = allowed(&review_owned(&review("UPDATE", "alice"), operator));
        assert!(!ok);
        assert!(
            message.starts_with("ConfigMap shop/bulkhead-shop is written by the bulkhead operator from Bulkhead shop"),
            "{message}"
        );
        assert!(message.contains("kubectl edit bulkhead shop"), "{message}");
        assert!(!allowed(&review_owned(&review("DELETE", "alice"), operator)).0);
        assert!(allowed(&review_owned(&review("UPDATE", "system:serviceaccount:bulkhead:bulkhead"), operator)).0);
        assert!(allowed(&review_owned(&review("DELETE", GARBAGE_COLLECTOR), operator)).0);
        assert!(allowed(&review_owned(&review("DELETE", NAMESPACE_CONTROLLER), operator)).0);
        assert!(allowed(&review_owned(&review("CREATE", "alice"), operator)).0, "creation is not this webhook's");
        let answer = review_owned(&review("UPDATE", "alice"), operator);
        assert_eq!(answer.response.as_ref().map(|r| r.uid.as_str()), Some("u-1"), "the answer names the request");
    }

    #[test]
    fn a_body_that_is_not_a_review_is_answered_invalid_not_allowed() {
        let (ok, message) = allowed(&review_owned(b"{not json", None));
        assert!(!ok && message.contains("not an AdmissionReview"), "{message}");
    }
}
