//! `ProxyInjected`, present only when spec.workload.proxy asks for the
//! sidecar: every selected workload carries it, or why not.

use super::{
    reasons::{reason, ENFORCED, PROXY_INJECTED},
    ApplyOutcome, ConditionStatus, DesiredCondition,
};
use crate::plan::Plan;

pub(super) fn proxy_condition(plan: &Plan, outcome: &ApplyOutcome) -> Option<DesiredCondition> {
    let proxy = &plan.proxy;
    if !proxy.requested {
        return None;
    }
    let condition = |status, reason, message: String| DesiredCondition::new(PROXY_INJECTED, status, reason, message);
    Some(match outcome {
        ApplyOutcome::Failed(_) => condition(
            ConditionStatus::Unknown,
            reason::APPLY_FAILED,
            "the apply stopped early (see Ready); injection is not known to be complete".into(),
        ),
        ApplyOutcome::Applied { proxy_refused, .. } if !proxy_refused.is_empty() => condition(
            ConditionStatus::False,
            reason::INJECTION_REFUSED,
            format!("left alone, the API server refused the sidecar: {}", super::list(proxy_refused)),
        ),
        _ if proxy.image_refused.is_some() => {
            let refused = proxy.image_refused.as_ref().expect("checked");
            let allowed = if refused.allowed.is_empty() { "none".to_string() } else { refused.allowed.join(", ") };
            condition(
                ConditionStatus::False,
                reason::IMAGE_NOT_ALLOWED,
                format!(
                    "spec.workload.proxy.image {} is not an image the operator may inject (allowed: {allowed}); \
                     leave the field out to use the operator's own image, or have the operator's admin add it to \
                     --proxy-image-allow (the chart's proxy.allowedImages); nothing is injected, sidecars already \
                     injected are left as they are",
                    refused.image
                ),
            )
        }
        _ if proxy.no_image => condition(
            ConditionStatus::False,
            reason::NO_PROXY_IMAGE,
            "the operator has no sidecar image: start it with --proxy-image (the chart passes its own image) or \
             set spec.workload.proxy.image; sidecars already injected are left as they are"
                .into(),
        ),
        _ if !proxy.yielded.is_empty() => {
            let named: Vec<String> =
                proxy.yielded.iter().map(|(w, winner)| format!("{w} to Bulkhead {winner}")).collect();
            condition(
                ConditionStatus::False,
                reason::PROXY_OF_OLDER_BULKHEAD,
                format!(
                    "a pod runs one bulkhead-proxy, and an older Bulkhead's selects these workloads: left {}; \
                     {} other workload(s) carry this Bulkhead's",
                    named.join(", "),
                    proxy.injections.len()
                ),
            )
        }
        _ if proxy.withheld && workload_not_opted_in(plan) => condition(
            ConditionStatus::False,
            reason::NAMESPACE_NOT_OPTED_IN,
            format!("no sidecar is injected: {}", super::not_opted_in_message(plan)),
        ),
        _ if proxy.withheld => condition(
            ConditionStatus::False,
            reason::CONFIG_WITHHELD,
            "no pool config to mount (see Ready); sidecars already injected are left as they are".into(),
        ),
        _ if proxy.injections.is_empty() => condition(
            ConditionStatus::False,
            reason::WORKLOAD_NOT_FOUND,
            "no Deployment or StatefulSet matches spec.workload.selector".into(),
        ),
        _ => {
            let verb = if matches!(outcome, ApplyOutcome::Applied { .. }) { "carry" } else { "to carry" };
            let names: Vec<String> = proxy.injections.iter().map(|i| i.describe()).collect();
            condition(
                ConditionStatus::True,
                reason::SIDECAR_INJECTED,
                format!("{} workload(s) {verb} the bulkhead-proxy sidecar: {}", names.len(), names.join(", ")),
            )
        }
    })
}

/// Whether spec.workload's namespace lacks the opt-in label.
fn workload_not_opted_in(plan: &Plan) -> bool {
    plan.workload.as_ref().is_some_and(|w| plan.not_opted_in.iter().any(|n| n.namespace == w.namespace))
}

/// `Enforced` from the plan alone, present only when spec.workload.proxy asks
/// for the sidecar: False while traffic can walk around it, otherwise not
/// known. In a cluster the controller replaces it with what the sidecars
/// answered (`enforcement.rs`); offline nobody asks them, so it never says
/// True: a verdict without evidence is the one thing the status must not give.
pub(super) fn enforced_condition(plan: &Plan) -> Option<DesiredCondition> {
    let proxy = &plan.proxy;
    if !proxy.requested {
        return None;
    }
    if !proxy.bypassed.is_empty() {
        return Some(DesiredCondition::new(
            ENFORCED,
            ConditionStatus::False,
            reason::BYPASSED,
            format!(
                "{}: those requests never pass the sidecar, so no pool counts them; point the targetPort at the \
                 proxy's port (or its name, bulkhead-proxy)",
                proxy.bypassed.join("; ")
            ),
        ));
    }
    Some(DesiredCondition::new(
        ENFORCED,
        ConditionStatus::Unknown,
        reason::NOT_OBSERVED,
        "not known whether every replica enforces the planned pool config: only the operator, in a cluster, asks \
         the sidecars; no Service that selects the workload sends traffic around the proxy",
    ))
}
