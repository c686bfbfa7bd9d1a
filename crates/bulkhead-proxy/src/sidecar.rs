//! The injected sidecar's command line as a type: the operator's planner
//! builds a [`SidecarArgs`] from spec.workload.proxy, [`SidecarArgs::argv`]
//! is the one place it becomes flags, and `bulkhead proxy` reads them with
//! [`ProxyArgs`](crate::ProxyArgs)' parser (a pure test ties the two).
//!
//! Free-text values stay as the spec wrote them (an upstream's trailing
//! `/`, a CIDR's spelling, path prefixes in the spec's order): a rendering
//! that changed one byte of the container would roll every injected
//! workload. The proxy parses and checks them; the planner validates them
//! with the same parsers first.

use bulkhead_admission::admission::Unclassified;

/// The subcommand of the one `bulkhead` binary that runs the proxy.
pub const SUBCOMMAND: &str = "proxy";
/// Where an ingress listener and the admin port listen: the pod IP, for the Service and the kubelet.
const ALL_INTERFACES: &str = "0.0.0.0";
/// Where the app (ingress) and egress listeners are: inside the pod only.
const LOOPBACK: &str = "127.0.0.1";

/// Everything the operator tells one injected sidecar.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidecarArgs {
    /// Where the pool config is mounted (`--config-dir`).
    pub config_dir: String,
    /// In front of the app, or in front of its downstreams.
    pub traffic: Traffic,
    /// `--admin` on every interface, for the kubelet's probes.
    pub admin_port: u16,
    /// `--metrics`, HOST:PORT as the spec gives it.
    pub metrics: String,
}

/// Where the sidecar stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Traffic {
    /// One listener in front of the app, each request classified.
    Ingress(Ingress),
    /// One local listener per class, each to its downstream (`--route`).
    Egress(Vec<EgressRoute>),
}

/// An ingress sidecar's listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ingress {
    /// `--listen` on every interface.
    pub port: u16,
    /// `--upstream` on loopback: the app's own port.
    pub upstream_port: u16,
    /// `--classify`.
    pub classify: ClassifyBy,
    /// `--unclassified`.
    pub unclassified: Unclassified,
    /// `--class-header-from`, CIDRs as the spec wrote them; empty: the flag is left out (loopback only).
    pub class_header_from: Vec<String>,
}

/// How an ingress sidecar names a request's class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClassifyBy {
    /// `header:NAME`.
    Header(String),
    /// `path:/prefix=class,...`, as (prefix, class) in the spec's order.
    PathPrefixes(Vec<(String, String)>),
}

/// One egress listener: `--route CLASS=127.0.0.1:PORT=UPSTREAM`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EgressRoute {
    /// The class every request on it counts against.
    pub class: String,
    /// The local port the app sends to.
    pub port: u16,
    /// `http://HOST:PORT` of the downstream.
    pub upstream: String,
}

impl SidecarArgs {
    /// The container's args: the subcommand, then the flags in a fixed order
    /// (which the injected containers' fingerprints depend on).
    pub fn argv(&self) -> Vec<String> {
        let mut args: Vec<String> = vec![SUBCOMMAND.into(), "--config-dir".into(), self.config_dir.clone()];
        let mut flag = |name: &str, value: String| args.extend([name.to_owned(), value]);
        match &self.traffic {
            Traffic::Ingress(ingress) => {
                flag("--listen", format!("{ALL_INTERFACES}:{}", ingress.port));
                flag("--upstream", format!("http://{LOOPBACK}:{}", ingress.upstream_port));
                flag("--classify", ingress.classify.rule());
                flag("--unclassified", unclassified(&ingress.unclassified));
                if !ingress.class_header_from.is_empty() {
                    flag("--class-header-from", ingress.class_header_from.join(","));
                }
            }
            Traffic::Egress(routes) => {
                for r in routes {
                    flag("--route", format!("{}={LOOPBACK}:{}={}", r.class, r.port, r.upstream));
                }
            }
        }
        flag("--admin", format!("{ALL_INTERFACES}:{}", self.admin_port));
        flag("--metrics", self.metrics.clone());
        args
    }
}

impl ClassifyBy {
    /// The `--classify` rule.
    fn rule(&self) -> String {
        match self {
            ClassifyBy::Header(name) => format!("header:{name}"),
            ClassifyBy::PathPrefixes(prefixes) => {
                let pairs: Vec<String> = prefixes.iter().map(|(prefix, class)| format!("{prefix}={class}")).collect();
                format!("path:{}", pairs.join(","))
            }
        }
    }
}

/// `--unclassified`: `reject`, or the class to count such requests as.
fn unclassified(policy: &Unclassified) -> String {
    match policy {
        Unclassified::Reject => "reject".into(),
        Unclassified::Class(class) => class.clone(),
    }
}
