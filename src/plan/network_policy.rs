//! The optional NetworkPolicy in front of the sidecar
//! (spec.workload.proxy.networkPolicy): one per Bulkhead, in the workload's
//! namespace, selecting the pods spec.workload.selector selects and admitting
//! other pods only to the proxy's port, the probes' port (adminPort), a
//! metrics port outside loopback and the ports the spec lists. The app's own
//! port (upstreamPort) is then reached only through the sidecar, over the
//! pod's loopback, which no NetworkPolicy filters.
//!
//! Ingress mode only: in Egress mode the app's own ports serve its clients and
//! the sidecar fronts only its calls out, which no NetworkPolicy can tell from
//! the app's own (one pod, one network identity).

use std::collections::BTreeSet;

use k8s_openapi::{
    api::networking::v1::{NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPort, NetworkPolicySpec},
    apimachinery::pkg::{apis::meta::v1::LabelSelector, util::intstr::IntOrString},
};
use kube::ResourceExt;

use super::injection::{ProxyPlan, DEFAULT_ADMIN_PORT, DEFAULT_METRICS_ADDRESS};
use crate::{
    crd::{Bulkhead, ProxyMode, ProxySpec},
    select::SpecError,
};

const FIELD: &str = "spec.workload.proxy.networkPolicy";
/// Most extraPorts (the schema says the same).
const MAX_EXTRA_PORTS: usize = 16;

/// What the planner wants of this Bulkhead's NetworkPolicy.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NetworkPolicyPlan {
    /// The policy to hold; None: none (those written before are withdrawn,
    /// unless `keep`).
    pub policy: Option<NetworkPolicy>,
    /// Asked for, but the sidecars are left as they are (pool config withheld,
    /// no image): the policy written before stays with them, and none is
    /// written while no sidecar was ever injected.
    pub keep: bool,
    /// Asked for but not written, and why (for `bulkhead plan` and the log).
    pub withheld: Option<String>,
}

/// Name of a Bulkhead's NetworkPolicy: that of its pool config, in the same namespace.
pub fn network_policy_name(bulkhead: &str) -> String {
    format!("bulkhead-{bulkhead}")
}

pub(super) fn plan_network_policy(bulkhead: &Bulkhead, proxy_plan: &ProxyPlan) -> NetworkPolicyPlan {
    let workload = bulkhead.spec.workload.as_ref();
    let Some((workload, proxy)) = workload.and_then(|w| Some((w, w.proxy.as_ref()?))) else {
        return NetworkPolicyPlan::default();
    };
    if proxy.network_policy.is_none() || proxy.mode != ProxyMode::Ingress {
        return NetworkPolicyPlan::default();
    }
    if proxy_plan.withheld || proxy_plan.no_image || proxy_plan.image_refused.is_some() {
        // Never a policy in front of pods that were never given a sidecar.
        let why = "the sidecars are left as they are (pool config withheld, no proxy image or an image not allowed)";
        return NetworkPolicyPlan { policy: None, keep: true, withheld: Some(why.into()) };
    }
    if let Some((held, by)) = proxy_plan.yielded.first() {
        // The policy would select that workload's pods too, and shut the
        // other Bulkhead's sidecar out of its own ports: withdrawing a policy
        // only opens traffic, writing this one could stop it.
        let why = format!("{held} runs the sidecar of Bulkhead {by}, whose ports this policy would close");
        return NetworkPolicyPlan { policy: None, keep: false, withheld: Some(why) };
    }
    let policy = NetworkPolicy {
        metadata: super::child_meta(
            bulkhead,
            network_policy_name(&bulkhead.name_any()),
            Some(&workload.namespace),
            None,
        ),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(normalised(&workload.selector)),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                // No `from`: any source, but only to these ports.
                from: None,
                ports: Some(admitted_ports(proxy).into_iter().map(tcp).collect()),
            }]),
            egress: None,
        }),
    };
    NetworkPolicyPlan { policy: Some(policy), keep: false, withheld: None }
}

/// The ports other pods may reach: the proxy's, the probes', metrics when
/// served outside the pod, then extraPorts; each once, in that order.
fn admitted_ports(proxy: &ProxySpec) -> Vec<u16> {
    let metrics = proxy
        .metrics_address
        .as_deref()
        .unwrap_or(DEFAULT_METRICS_ADDRESS)
        .parse::<std::net::SocketAddr>()
        .ok()
        .filter(|a| !a.ip().is_loopback())
        .map(|a| a.port());
    let listed = [proxy.port, Some(proxy.admin_port.unwrap_or(DEFAULT_ADMIN_PORT)), metrics];
    let extra = proxy.network_policy.iter().flat_map(|n| n.extra_ports.iter().copied());
    let mut seen = BTreeSet::new();
    listed.into_iter().flatten().chain(extra).filter(|p| seen.insert(*p)).collect()
}

fn tcp(port: u16) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(IntOrString::Int(i32::from(port))),
        // Set, not defaulted: the object read back then equals the one planned.
        protocol: Some("TCP".into()),
        end_port: None,
    }
}

/// The selector as the API server hands it back: empty lists and maps left out.
fn normalised(selector: &LabelSelector) -> LabelSelector {
    LabelSelector {
        match_labels: selector.match_labels.clone().filter(|m| !m.is_empty()),
        match_expressions: selector.match_expressions.clone().filter(|e| !e.is_empty()).map(|e| {
            e.into_iter()
                .map(|mut r| {
                    r.values = r.values.filter(|v| !v.is_empty());
                    r
                })
                .collect()
        }),
    }
}

/// Rules of spec.workload.proxy.networkPolicy the schema cannot state.
pub(super) fn validate_network_policy(proxy: &ProxySpec) -> Vec<SpecError> {
    let Some(policy) = &proxy.network_policy else { return Vec::new() };
    let mut errors = Vec::new();
    if proxy.mode != ProxyMode::Ingress {
        errors.push(SpecError::new(
            FIELD,
            "only mode Ingress: in Egress the app's own ports serve its clients, and the sidecar's calls out \
             cannot be told from the app's by a NetworkPolicy (one pod, one network identity)",
        ));
    }
    if policy.extra_ports.len() > MAX_EXTRA_PORTS {
        errors.push(SpecError::new(format!("{FIELD}.extraPorts"), format!("at most {MAX_EXTRA_PORTS} ports")));
    }
    for (i, port) in policy.extra_ports.iter().enumerate() {
        let field = format!("{FIELD}.extraPorts[{i}]");
        if *port == 0 {
            errors.push(SpecError::new(field, "must lie between 1 and 65535"));
        } else if Some(*port) == proxy.upstream_port {
            errors.push(SpecError::new(
                field,
                format!("{port} is upstreamPort: admitting it lets traffic around the proxy"),
            ));
        } else if policy.extra_ports[..i].contains(port) {
            errors.push(SpecError::new(field, format!("{port} is listed twice")));
        }
    }
    errors
}
