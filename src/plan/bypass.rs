//! Traffic that walks around the sidecar: a Service that selects the
//! workload's pods but sends a port to the app's own port (by number, or by
//! the name of a container port) instead of the proxy's. The pool config is
//! planned and the sidecar injected, yet no request of that Service is
//! counted against a pool: the decorative bulkhead the pattern warns about.

use std::collections::BTreeSet;

use crate::{
    crd::{ProxyMode, ProxySpec},
    snapshot::{ObjectKey, PortRef, Snapshot, Workload},
};

/// Name of the sidecar's ingress port: a Service's targetPort may name it.
pub(super) const INGRESS_PORT_NAME: &str = "bulkhead-proxy";

/// Each Service port that reaches `workloads`' pods on the app's own port,
/// described for a person, in Service order.
pub(super) fn bypasses(proxy: &ProxySpec, workloads: &[&Workload], snapshot: &Snapshot) -> Vec<String> {
    let (ProxyMode::Ingress, Some(app), Some(listen)) = (proxy.mode, proxy.upstream_port, proxy.port) else {
        return Vec::new();
    };
    let (app, listen) = (i32::from(app), i32::from(listen));
    let mut found = BTreeSet::new();
    for workload in workloads {
        let start = ObjectKey::new(&workload.namespace, "");
        let services = snapshot.services.range(start..).take_while(|(k, _)| k.namespace == workload.namespace);
        for (key, service) in services {
            let Some(selector) = &service.selector else { continue };
            if !selector.iter().all(|(k, v)| workload.template_labels.get(k) == Some(v)) {
                continue;
            }
            for port in &service.ports {
                let (target, named) = match &port.target {
                    PortRef::Number(n) => (Some(*n), None),
                    // The sidecar's own port by its name, before or after injection.
                    PortRef::Name(name) if name == INGRESS_PORT_NAME => (Some(listen), Some(name)),
                    PortRef::Name(name) => (
                        workload.container_ports.iter().find(|c| c.name.as_deref() == Some(name)).map(|c| c.port),
                        Some(name),
                    ),
                };
                if target == Some(app) && app != listen {
                    let via = named.map(|n| format!("targetPort {n}, ")).unwrap_or_default();
                    found.insert(format!(
                        "Service {key} port {} sends to {via}{app}, the app's own port \
                         (spec.workload.proxy.upstreamPort), not to the proxy's {listen}",
                        port.port
                    ));
                }
            }
        }
    }
    found.into_iter().collect()
}
