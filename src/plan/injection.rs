//! Sidecar injection: when spec.workload.proxy is set, every workload
//! spec.workload selects gets the `bulkhead proxy` container, with the pool
//! config mounted as a directory (never subPath, which never updates). Applied
//! like placement: server-side apply under a field manager of this concern,
//! without force, only when the workload lacks it, withdrawn exactly.

use serde_json::{json, Value};

use super::{
    bypass::{bypasses, INGRESS_PORT_NAME},
    placement::{fingerprint, with_annotation},
    propagation::{selected_pods, stamps, SelectedPod},
};
use super::{PlanConfig, RefusedImage};
use crate::{
    crd::{ProxyMode, ProxySpec},
    proxy::{
        admission::Unclassified,
        sidecar::{ClassifyBy, EgressRoute, Ingress, SidecarArgs, Traffic},
    },
    select::{unclassified, Selection, SpecError},
    snapshot::{ObjectKey, Snapshot, WorkloadKind, PROXY_ADMIN_PORT_NAME, PROXY_ANNOTATION_PREFIX},
};

pub use crate::snapshot::{PROXY_CONTAINER, PROXY_VOLUME};
/// Where the pool config is mounted in the sidecar.
pub const PROXY_CONFIG_DIR: &str = "/etc/bulkhead/pools";
pub(super) const DEFAULT_CLASSIFY_HEADER: &str = "x-bulkhead-class";
pub(super) const DEFAULT_ADMIN_PORT: u16 = 9901;
/// Metrics stay inside the pod unless spec.workload.proxy.metricsAddress says otherwise.
pub(super) const DEFAULT_METRICS_ADDRESS: &str = "127.0.0.1:9902";

/// The injected container's securityContext unless the operator is given
/// another (`--proxy-security-context`): the restricted Pod Security
/// Standard, as the image's own user (65532). OpenShift's restricted SCC
/// assigns the user itself and refuses a fixed one: leave runAsUser out there.
pub fn default_proxy_security_context() -> Value {
    json!({
        "runAsNonRoot": true,
        "runAsUser": 65532,
        "readOnlyRootFilesystem": true,
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    })
}

/// `--proxy-security-context`: a JSON securityContext, refused when it is not
/// one (a misspelt field would otherwise be dropped without a word, and the
/// sidecar run with less than was asked).
pub fn parse_security_context(s: &str) -> Result<Value, String> {
    use k8s_openapi::api::core::v1::SecurityContext;
    let given: Value = serde_json::from_str(s).map_err(|e| format!("not JSON: {e}"))?;
    if !given.is_object() {
        return Err("expected a JSON object, a container's securityContext".into());
    }
    let typed: SecurityContext = serde_json::from_value(given.clone()).map_err(|e| e.to_string())?;
    // What the API server would keep: compared with what was given, the
    // difference is a field that is not a securityContext's (or a null).
    let kept = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    if let Some(path) = first_difference(&given, &kept, "") {
        return Err(format!("{path}: not a field of a container's securityContext"));
    }
    Ok(kept)
}

/// The first path in `given` that `kept` lacks (nulls count as left out).
fn first_difference(given: &Value, kept: &Value, at: &str) -> Option<String> {
    match (given, kept) {
        (Value::Object(g), Value::Object(k)) => g.iter().filter(|(_, v)| !v.is_null()).find_map(|(key, v)| {
            let path = if at.is_empty() { key.clone() } else { format!("{at}.{key}") };
            match k.get(key) {
                Some(kv) => first_difference(v, kv, &path),
                None => Some(path),
            }
        }),
        _ => None,
    }
}

/// Field manager of a Bulkhead's sidecar injection.
pub fn proxy_manager(bulkhead: &str) -> String {
    format!("bulkhead-proxy-{bulkhead}")
}

/// What one workload's pod template should carry.
#[derive(Clone, Debug, PartialEq)]
pub struct ProxyInjection {
    pub kind: WorkloadKind,
    pub key: ObjectKey,
    pub generation: Option<i64>,
    pub fingerprint: String,
    /// The server-side apply body: the container, the volume and the annotation.
    pub body: Value,
    pub up_to_date: bool,
}

impl ProxyInjection {
    pub fn describe(&self) -> String {
        format!("{} {}", self.kind.as_str(), self.key)
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProxyPlan {
    /// spec.workload.proxy is set.
    pub requested: bool,
    /// Requested, but the pool config is withheld: sidecars are left as they are.
    pub withheld: bool,
    /// Requested, but neither the Bulkhead nor the operator names an image:
    /// sidecars are left as they are.
    pub no_image: bool,
    /// Requested, but the Bulkhead names an image the operator does not
    /// allow (`--proxy-image-allow`): nothing is injected, sidecars are left
    /// as they are.
    pub image_refused: Option<RefusedImage>,
    pub injections: Vec<ProxyInjection>,
    /// Workloads carrying this Bulkhead's sidecar that should not any more.
    pub withdrawals: Vec<(WorkloadKind, ObjectKey)>,
    /// Workloads an older Bulkhead's sidecar claims: left to it (one sidecar
    /// per pod), each as `Deployment ns/name` with the winner.
    pub yielded: Vec<(String, String)>,
    /// Service ports that reach this Bulkhead's workloads around the proxy
    /// (see `bypass.rs`), each described.
    pub bypassed: Vec<String>,
    /// `pool_config::content_hash` of the planned pool config: what every
    /// sidecar should report on /readyz.
    pub config_hash: Option<String>,
    /// Running pods spec.workload selects, and what enforces the pool in each.
    pub pods: Vec<SelectedPod>,
    /// Pods to stamp with `config_hash` (see `propagation.rs`).
    pub stamps: Vec<ObjectKey>,
}

/// The pool config the sidecars mount: its ConfigMap's name and content hash.
pub(super) struct MountedConfig<'a> {
    pub name: &'a str,
    pub hash: String,
}

/// `config`: the operator's sidecar image and security context.
pub(super) fn plan_proxy(
    selection: &Selection<'_>,
    snapshot: &Snapshot,
    mounted: Option<MountedConfig<'_>>,
    config: &PlanConfig,
) -> ProxyPlan {
    let config_map = mounted.as_ref().map(|m| m.name);
    let name = selection.name();
    let workload = selection.bulkhead.spec.workload.as_ref();
    let proxy = workload.and_then(|w| w.proxy.as_ref());
    // An image the operator does not allow is never injected, whatever else
    // holds: checked first, so the status names it even while the config is
    // withheld.
    if let Some(refused) = proxy.and_then(|p| p.image.as_deref()).and_then(|image| config.refused_image(image)) {
        return ProxyPlan { requested: true, image_refused: Some(refused), ..ProxyPlan::default() };
    }
    if proxy.is_some() && config_map.is_none() {
        // The pool config is withheld (unfunded, say): leave every sidecar as
        // it is rather than pull them out over a transient problem.
        return ProxyPlan { requested: true, withheld: true, ..ProxyPlan::default() };
    }
    let image = proxy.and_then(|p| p.image.as_deref()).or(config.proxy_image.as_deref());
    if proxy.is_some() && image.is_none() {
        // Nothing to run: leave every sidecar as it is, as for a withheld config.
        return ProxyPlan { requested: true, no_image: true, ..ProxyPlan::default() };
    }
    let mut injections = Vec::new();
    let mut yielded = Vec::new();
    let mut carrying = Vec::new();
    if let (Some(w), Some(proxy), Some(matcher), Some(config_map), Some(image)) =
        (workload, proxy, selection.workload.as_ref(), config_map, image)
    {
        let container = container(proxy, image, &config.proxy_security_context);
        let volume = json!({"name": PROXY_VOLUME, "configMap": {"name": config_map}});
        for found in snapshot.workloads_in(&w.namespace).filter(|x| matcher.matches(&x.template_labels)) {
            // Another Bulkhead's sidecar here (injected, or selected by its spec where that is known)
            // counts while that Bulkhead exists; the older one keeps the workload.
            let key = (found.kind, ObjectKey::new(&found.namespace, &found.name));
            let claimed = snapshot.proxy_claims.get(&key).into_iter().flatten();
            let older = found
                .proxied_by
                .keys()
                .chain(claimed)
                .filter(|b| b.as_str() != name && snapshot.seniority.knows(b))
                .find(|b| snapshot.seniority.outranks(b, name));
            if let Some(winner) = older {
                yielded.push((format!("{} {}", found.kind.as_str(), key.1), winner.clone()));
                continue;
            }
            carrying.push(found);
            let body = json!({
                "apiVersion": "apps/v1",
                "kind": found.kind.as_str(),
                "metadata": {"name": found.name, "namespace": found.namespace},
                "spec": {"template": {"spec": {"containers": [container], "volumes": [volume]}}},
            });
            let fingerprint = fingerprint(&body);
            let body = with_annotation(body, &proxy_marker(name), &fingerprint);
            let up_to_date = found.proxied_by.get(name) == Some(&fingerprint)
                && found.containers.iter().any(|c| c == PROXY_CONTAINER)
                && found.volumes.iter().any(|v| v == PROXY_VOLUME);
            injections.push(ProxyInjection {
                kind: found.kind,
                key: ObjectKey::new(&found.namespace, &found.name),
                generation: found.generation,
                fingerprint,
                body,
                up_to_date,
            });
        }
    }
    let withdrawals = snapshot
        .workloads
        .iter()
        .filter(|((kind, key), w)| {
            w.proxied_by.contains_key(name) && !injections.iter().any(|i| i.kind == *kind && &i.key == key)
        })
        .map(|(k, _)| k.clone())
        .collect();
    let bypassed = proxy.map(|p| bypasses(p, &carrying, snapshot)).unwrap_or_default();
    let (pods, stamps) = match (workload.filter(|_| proxy.is_some()), &mounted) {
        (Some(w), Some(m)) => {
            (selected_pods(selection, snapshot, &w.namespace, m.name), stamps(snapshot, &w.namespace, m.name, &m.hash))
        }
        _ => (Vec::new(), Vec::new()),
    };
    ProxyPlan {
        requested: proxy.is_some(),
        withheld: false,
        no_image: false,
        image_refused: None,
        injections,
        withdrawals,
        yielded,
        bypassed,
        config_hash: mounted.filter(|_| proxy.is_some()).map(|m| m.hash),
        pods,
        stamps,
    }
}

/// The annotation marking a workload as injected by `bulkhead`.
pub fn proxy_marker(bulkhead: &str) -> String {
    format!("{PROXY_ANNOTATION_PREFIX}{bulkhead}")
}

/// The sidecar's command line for `proxy`: the typed contract with `bulkhead
/// proxy` (rendered by [`SidecarArgs::argv`]); unset ports are left 0 here,
/// as `validate_proxy` refuses them before anything is injected.
pub fn sidecar_args(proxy: &ProxySpec) -> SidecarArgs {
    let traffic = match proxy.mode {
        ProxyMode::Ingress => Traffic::Ingress(Ingress {
            port: proxy.port.unwrap_or_default(),
            upstream_port: proxy.upstream_port.unwrap_or_default(),
            classify: if proxy.path_prefixes.is_empty() {
                ClassifyBy::Header(proxy.classify_header.as_deref().unwrap_or(DEFAULT_CLASSIFY_HEADER).to_owned())
            } else {
                ClassifyBy::PathPrefixes(
                    proxy.path_prefixes.iter().map(|p| (p.prefix.clone(), p.class.clone())).collect(),
                )
            },
            unclassified: unclassified(proxy),
            class_header_from: proxy.class_header_from.clone(),
        }),
        ProxyMode::Egress => Traffic::Egress(
            proxy
                .routes
                .iter()
                .map(|r| EgressRoute { class: r.class.clone(), port: r.port, upstream: r.upstream.clone() })
                .collect(),
        ),
    };
    SidecarArgs {
        config_dir: PROXY_CONFIG_DIR.to_owned(),
        traffic,
        admin_port: proxy.admin_port.unwrap_or(DEFAULT_ADMIN_PORT),
        metrics: proxy.metrics_address.as_deref().unwrap_or(DEFAULT_METRICS_ADDRESS).to_owned(),
    }
}

/// The container a person would write by hand: probes on the admin port,
/// resources, the operator's security context (restricted by default), the
/// config as a directory.
fn container(proxy: &ProxySpec, image: &str, security_context: &Value) -> Value {
    let sidecar = sidecar_args(proxy);
    let admin = sidecar.admin_port;
    let mut ports = Vec::new();
    if let Traffic::Ingress(ingress) = &sidecar.traffic {
        ports.push(json!({"name": INGRESS_PORT_NAME, "containerPort": ingress.port, "protocol": "TCP"}));
    }
    // Health on the pod IP for the kubelet's probes; metrics where the spec says.
    ports.push(json!({"name": PROXY_ADMIN_PORT_NAME, "containerPort": admin, "protocol": "TCP"}));
    if let Ok(addr) = sidecar.metrics.parse::<std::net::SocketAddr>() {
        if !addr.ip().is_loopback() {
            ports.push(json!({"name": "proxy-metrics", "containerPort": addr.port(), "protocol": "TCP"}));
        }
    }
    let args = sidecar.argv();
    let probe = |path: &str, period: u32| json!({"httpGet": {"path": path, "port": admin}, "periodSeconds": period, "timeoutSeconds": 1, "failureThreshold": 3});
    json!({
        "name": PROXY_CONTAINER,
        "image": image,
        "args": args,
        "ports": ports,
        "readinessProbe": probe("/readyz", 5),
        "livenessProbe": probe("/healthz", 10),
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": security_context,
        "volumeMounts": [{"name": PROXY_VOLUME, "mountPath": PROXY_CONFIG_DIR, "readOnly": true}],
    })
}

/// Rules of spec.workload.proxy the schema cannot state.
pub(super) fn validate_proxy(proxy: &ProxySpec, unclassified: &Unclassified, classes: &[&str]) -> Vec<SpecError> {
    const FIELD: &str = "spec.workload.proxy";
    let mut errors = Vec::new();
    let admin = proxy.admin_port.unwrap_or(DEFAULT_ADMIN_PORT);
    let known = |c: &str| classes.contains(&c);
    let metrics = proxy.metrics_address.as_deref().unwrap_or(DEFAULT_METRICS_ADDRESS);
    match metrics.parse::<std::net::SocketAddr>() {
        Ok(addr) if addr.port() == admin || [proxy.port, proxy.upstream_port].contains(&Some(addr.port())) => {
            errors.push(SpecError::new(
                format!("{FIELD}.metricsAddress"),
                format!("port {} is taken by adminPort, port or upstreamPort", addr.port()),
            ));
        }
        Ok(_) => {}
        Err(_) => errors.push(SpecError::new(format!("{FIELD}.metricsAddress"), format!("{metrics:?} is not IP:PORT"))),
    }
    match proxy.mode {
        ProxyMode::Ingress => {
            match (proxy.port, proxy.upstream_port) {
                (Some(port), Some(upstream)) => {
                    if port == upstream {
                        errors.push(SpecError::new(format!("{FIELD}.port"), "must differ from upstreamPort"));
                    }
                    if port == admin || upstream == admin {
                        errors.push(SpecError::new(
                            format!("{FIELD}.adminPort"),
                            format!("{admin} is taken by port or upstreamPort"),
                        ));
                    }
                }
                _ => errors.push(SpecError::new(FIELD, "mode Ingress needs port and upstreamPort")),
            }
            if !proxy.routes.is_empty() {
                errors.push(SpecError::new(format!("{FIELD}.routes"), "only mode Egress has routes"));
            }
            if proxy.classify_header.is_some() && !proxy.path_prefixes.is_empty() {
                errors.push(SpecError::new(FIELD, "classifyHeader and pathPrefixes exclude each other"));
            }
            if let Some(h) = &proxy.classify_header {
                if !h.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)) {
                    errors
                        .push(SpecError::new(format!("{FIELD}.classifyHeader"), format!("{h:?} is not a header name")));
                }
            }
            for (i, p) in proxy.path_prefixes.iter().enumerate() {
                if !known(&p.class) {
                    errors.push(SpecError::new(
                        format!("{FIELD}.pathPrefixes[{i}].class"),
                        format!("no class {:?}", p.class),
                    ));
                }
                if !p.prefix.starts_with('/') || p.prefix.contains([',', '=']) {
                    errors.push(SpecError::new(
                        format!("{FIELD}.pathPrefixes[{i}].prefix"),
                        format!("{:?} must start with / and hold no ',' or '='", p.prefix),
                    ));
                }
            }
            for (i, cidr) in proxy.class_header_from.iter().enumerate() {
                if let Err(e) = cidr.parse::<crate::pool_config::Cidr>() {
                    errors.push(SpecError::new(format!("{FIELD}.classHeaderFrom[{i}]"), e));
                }
            }
            if let Unclassified::Class(u) = unclassified {
                if !known(u) {
                    errors.push(SpecError::new(
                        format!("{FIELD}.unclassified"),
                        format!("{u:?} is neither reject nor a class"),
                    ));
                }
            }
        }
        ProxyMode::Egress => {
            if proxy.routes.is_empty() {
                errors.push(SpecError::new(format!("{FIELD}.routes"), "mode Egress needs at least one route"));
            }
            for (i, r) in proxy.routes.iter().enumerate() {
                let field = |f: &str| format!("{FIELD}.routes[{i}].{f}");
                if !known(&r.class) {
                    errors.push(SpecError::new(field("class"), format!("no class {:?}", r.class)));
                }
                if r.port == admin || proxy.routes[..i].iter().any(|o| o.port == r.port) {
                    errors.push(SpecError::new(field("port"), format!("{} is used twice", r.port)));
                }
                if !r.upstream.starts_with("http://") || r.upstream.contains('=') {
                    errors
                        .push(SpecError::new(field("upstream"), format!("{:?} must be http://host:port", r.upstream)));
                }
            }
        }
    }
    errors
}
