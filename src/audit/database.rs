//! The Database layer: resolve each class's database URLs to the instance
//! behind them. Two classes share an instance when they reach the same
//! Service, the same external host (an ExternalName counts as its host), or
//! the same backend IP, whatever the database names in the URLs. Hostnames the
//! cluster cannot resolve are Unverified, never Separate.

use std::collections::BTreeMap;

use super::domains::PairVerdict;
use crate::{
    crd::{Bulkhead, LayerState},
    select::Matcher,
    snapshot::{normalise_host, ObjectKey, Snapshot},
};

/// What one URL resolves to: identities that mean "this instance", and doubts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Resolution {
    /// identity ("service:ns/name", "host:db.example.com", "ip:10.0.0.5") → what it is, for evidence
    pub identities: BTreeMap<String, String>,
    pub doubts: Vec<String>,
}

pub(super) fn resolve(url: &str, default_namespace: Option<&str>, snapshot: &Snapshot) -> Resolution {
    let mut r = Resolution::default();
    let Some(host) = host_of(url) else {
        r.doubts.push(format!("{url} names no host"));
        return r;
    };
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        // Canonical text, so fd00::1 and fd00:0::1 are one address.
        let ip = ip.to_string();
        if let Some((key, _)) = snapshot.services.iter().find(|(_, s)| s.cluster_ip.as_deref() == Some(ip.as_str())) {
            add_service(&mut r, key, snapshot);
            return r;
        }
        r.identities.insert(format!("ip:{ip}"), format!("IP {ip}"));
        // Only a pod's address is known to be one instance; any other address
        // may be one of several in front of the same database.
        match snapshot.pods.iter().find(|(_, p)| p.ip.as_deref() == Some(ip.as_str())) {
            Some((pod, _)) => {
                r.identities.insert(format!("ip:{ip}"), format!("IP {ip} (pod {pod})"));
            }
            None => r.doubts.push(format!(
                "{ip} is not a pod the cluster knows: it may front the same instance as another address"
            )),
        }
        return r;
    }
    match service_key(&host, default_namespace, snapshot) {
        Some(key) => add_service(&mut r, &key, snapshot),
        None => {
            r.identities.insert(format!("host:{host}"), format!("host {host}"));
            r.doubts.push(format!("{host} is outside the cluster: two different hostnames may still be one instance"));
        }
    }
    r
}

fn add_service(r: &mut Resolution, key: &ObjectKey, snapshot: &Snapshot) {
    let Some(svc) = snapshot.services.get(key) else { return };
    if let Some(external) = &svc.external_name {
        r.identities.insert(format!("host:{external}"), format!("host {external} (ExternalName Service {key})"));
        r.doubts.push(format!("{external} (behind Service {key}) is outside the cluster"));
        return;
    }
    r.identities.insert(format!("service:{key}"), format!("Service {key}"));
    let mut backends = snapshot.backends_of(key);
    if backends.is_empty() {
        if let Some(selector) = &svc.selector {
            let matcher = Matcher::from_labels(selector);
            for (pod_key, pod) in snapshot.pods_in(&key.namespace) {
                if let (true, Some(ip)) = (matcher.matches(&pod.labels), &pod.ip) {
                    backends.push((ip.to_string(), Some(pod_key.to_string())));
                }
            }
        }
    }
    if backends.is_empty() {
        r.doubts.push(format!("Service {key} has no known backends"));
    }
    for (ip, pod) in backends {
        let ip = ip.parse::<std::net::IpAddr>().map_or(ip, |a| a.to_string());
        let what = match &pod {
            Some(p) => format!("backend {ip} (pod {p})"),
            None => format!("backend {ip}"),
        };
        // Hand-written Endpoints (or slices) may point outside the cluster.
        let known_pod = pod.is_some() || snapshot.pods.values().any(|p| p.ip.as_deref() == Some(ip.as_str()));
        if !known_pod {
            r.doubts.push(format!("Service {key} sends to {ip}, which is not a pod the cluster knows"));
        }
        r.identities.insert(format!("ip:{ip}"), what);
    }
}

/// `svc.ns.svc[.cluster.local]`, `svc.ns` or `svc` (in the workload's namespace),
/// when such a Service exists.
fn service_key(host: &str, default_namespace: Option<&str>, snapshot: &Snapshot) -> Option<ObjectKey> {
    let parts: Vec<&str> = host.split('.').collect();
    let candidate = match parts.as_slice() {
        [svc] => ObjectKey::new(default_namespace?, *svc),
        [svc, ns] => ObjectKey::new(*ns, *svc),
        [svc, ns, "svc", ..] => ObjectKey::new(*ns, *svc),
        _ => return None,
    };
    snapshot.services.contains_key(&candidate).then_some(candidate)
}

/// The host of `scheme://[user[:pass]@]host[:port][/path]` (or a bare host[:port]).
pub fn host_of(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next()?;
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host =
        if let Some(v6) = hostport.strip_prefix('[') { v6.split(']').next()? } else { hostport.split(':').next()? };
    (!host.is_empty()).then(|| normalise_host(host))
}

pub(super) fn pairs(bulkhead: &Bulkhead, snapshot: &Snapshot) -> Vec<PairVerdict> {
    let default_ns = bulkhead.spec.workload.as_ref().map(|w| w.namespace.as_str());
    let resolved: Vec<Vec<(String, Resolution)>> = bulkhead
        .spec
        .classes
        .iter()
        .map(|c| c.databases.iter().map(|u| (u.clone(), resolve(u, default_ns, snapshot))).collect())
        .collect();
    let classes = &bulkhead.spec.classes;
    let own_doubts: Vec<Vec<String>> = (0..classes.len())
        .map(|c| {
            let mut doubts = Vec::new();
            if resolved[c].is_empty() {
                doubts.push(format!("class {} declares no databases", classes[c].name));
            }
            doubts.extend(resolved[c].iter().flat_map(|(_, r)| r.doubts.iter().cloned()));
            super::domains::dedup_keep_order(&mut doubts);
            doubts
        })
        .collect();
    let mut out = Vec::new();
    for a in 0..classes.len() {
        for b in a + 1..classes.len() {
            let mut evidence = Vec::new();
            for (ua, ra) in &resolved[a] {
                for (ub, rb) in &resolved[b] {
                    if let Some((_, what)) = ra.identities.iter().find(|(id, _)| rb.identities.contains_key(*id)) {
                        evidence.push(format!(
                            "{} ({ua}) and {} ({ub}) reach the same instance: {what}",
                            classes[a].name, classes[b].name
                        ));
                    }
                }
            }
            if !evidence.is_empty() {
                evidence.truncate(3);
                out.push(PairVerdict { a, b, state: LayerState::Shared, evidence });
                continue;
            }
            // The first three distinct doubts of either class, cloned only
            // when kept: this runs for every pair at every re-audit.
            let mut doubts: Vec<String> = Vec::new();
            for d in own_doubts[a].iter().chain(&own_doubts[b]) {
                if doubts.len() == 3 {
                    break;
                }
                if !doubts.contains(d) {
                    doubts.push(d.clone());
                }
            }
            let state = if doubts.is_empty() { LayerState::Separate } else { LayerState::Unverified };
            out.push(PairVerdict { a, b, state, evidence: doubts });
        }
    }
    out
}
