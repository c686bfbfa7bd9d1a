//! The sidecar's command line as a contract: the arguments the planner
//! renders for every field of spec.workload.proxy, read back by `bulkhead
//! proxy`'s own parser, are the listeners, classification and ports the
//! spec asks for. No process.

use std::{net::SocketAddr, path::PathBuf};

use bulkhead::{
    crd::ProxySpec,
    plan::{sidecar_args, PROXY_CONFIG_DIR},
    pool_config::Cidr,
    proxy::{forward::Upstream, ProxyArgs, Route, Rule, Unclassified},
};
use clap::Parser;

/// `bulkhead proxy` as the binary parses it.
#[derive(Parser)]
enum Bulkhead {
    Proxy(ProxyArgs),
}

/// What a sidecar's flags say about its traffic, as parsed.
#[derive(Debug, PartialEq)]
struct Flags {
    config_dir: PathBuf,
    listen: Vec<SocketAddr>,
    upstream: Option<Upstream>,
    classify: Vec<Rule>,
    unclassified: Unclassified,
    routes: Vec<Route>,
    class_header_from: Option<Vec<Cidr>>,
    admin: SocketAddr,
    metrics: Option<SocketAddr>,
}

/// The planner's args for `spec`, through the real parser.
fn round_trip(spec: &str) -> Flags {
    let proxy: ProxySpec = serde_saphyr::from_str(spec).expect("a proxy spec");
    let argv = sidecar_args(&proxy).argv();
    let Bulkhead::Proxy(args) = Bulkhead::try_parse_from(std::iter::once("bulkhead".to_owned()).chain(argv.clone()))
        .unwrap_or_else(|e| panic!("{argv:?} does not parse: {e}"));
    Flags {
        config_dir: args.config_dir,
        listen: args.listen,
        upstream: args.upstream,
        classify: args.classify,
        unclassified: args.unclassified,
        routes: args.routes,
        class_header_from: args.class_header_from,
        admin: args.admin,
        metrics: args.metrics,
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("an address")
}

fn upstream(s: &str) -> Upstream {
    s.parse().expect("an upstream")
}

fn header(name: &'static str) -> Rule {
    Rule::Header(http::HeaderName::from_static(name))
}

/// Every field of spec.workload.proxy that becomes a flag, each in a spec
/// below. A new field fails to compile here until it is listed and tested.
#[test]
fn every_field_is_covered() {
    let ProxySpec {
        mode: _,
        port: _,
        upstream_port: _,
        classify_header: _,
        path_prefixes: _,
        unclassified: _,
        routes: _,
        class_header_from: _,
        metrics_address: _,
        admin_port: _,
        // The container's image, not an argument.
        image: _,
        // A NetworkPolicy object beside the pods, not an argument.
        network_policy: _,
    } = serde_saphyr::from_str("{}").expect("an empty proxy spec");
}

#[test]
fn an_ingress_sidecar_by_default_header() {
    let flags = round_trip("{mode: Ingress, port: 8081, upstreamPort: 8080}");
    let want = Flags {
        config_dir: PROXY_CONFIG_DIR.into(),
        listen: vec![addr("0.0.0.0:8081")],
        upstream: Some(upstream("http://127.0.0.1:8080")),
        classify: vec![header("x-bulkhead-class")],
        unclassified: Unclassified::Reject,
        routes: vec![],
        class_header_from: None,
        admin: addr("0.0.0.0:9901"),
        metrics: Some(addr("127.0.0.1:9902")),
    };
    assert_eq!(flags, want);
}

#[test]
fn an_ingress_sidecar_with_its_own_header_trusted_peers_default_class_and_ports() {
    let flags = round_trip(
        "{mode: Ingress, port: 8443, upstreamPort: 8000, classifyHeader: x-tenant, unclassified: search, \
         classHeaderFrom: [10.0.0.0/8, 'fd00::/8'], adminPort: 9911, metricsAddress: '0.0.0.0:9100'}",
    );
    let want = Flags {
        config_dir: PROXY_CONFIG_DIR.into(),
        listen: vec![addr("0.0.0.0:8443")],
        upstream: Some(upstream("http://127.0.0.1:8000")),
        classify: vec![header("x-tenant")],
        unclassified: Unclassified::Class("search".into()),
        routes: vec![],
        class_header_from: Some(vec!["10.0.0.0/8".parse().expect("cidr"), "fd00::/8".parse().expect("cidr")]),
        admin: addr("0.0.0.0:9911"),
        metrics: Some(addr("0.0.0.0:9100")),
    };
    assert_eq!(flags, want);
}

#[test]
fn an_ingress_sidecar_by_path_prefix_and_an_explicit_reject() {
    let flags = round_trip(
        "{port: 8081, upstreamPort: 8080, unclassified: reject, pathPrefixes: \
         [{prefix: /pay, class: checkout}, {prefix: /pay/admin/, class: control-plane}, {prefix: /, class: search}]}",
    );
    // The proxy matches the longest prefix first, without its trailing slash.
    let prefixes = [("/pay/admin", "control-plane"), ("/pay", "checkout"), ("", "search")];
    let want = Flags {
        config_dir: PROXY_CONFIG_DIR.into(),
        listen: vec![addr("0.0.0.0:8081")],
        upstream: Some(upstream("http://127.0.0.1:8080")),
        classify: vec![Rule::Path(prefixes.iter().map(|(p, c)| (p.to_string(), c.to_string())).collect())],
        unclassified: Unclassified::Reject,
        routes: vec![],
        class_header_from: None,
        admin: addr("0.0.0.0:9901"),
        metrics: Some(addr("127.0.0.1:9902")),
    };
    assert_eq!(flags, want);
}

#[test]
fn an_egress_sidecar_has_one_local_listener_per_route() {
    let flags = round_trip(
        "{mode: Egress, adminPort: 9000, metricsAddress: '[::]:9102', routes: \
         [{class: checkout, port: 15001, upstream: 'http://payments.shop:80'}, \
         {class: search, port: 15002, upstream: 'http://10.0.0.7:9200'}]}",
    );
    let route = |class: &str, listen: &str, to: &str| Route {
        class: class.into(),
        listen: addr(listen),
        upstream: Some(upstream(to)),
    };
    let want = Flags {
        config_dir: PROXY_CONFIG_DIR.into(),
        listen: vec![],
        upstream: None,
        classify: vec![],
        unclassified: Unclassified::Reject,
        routes: vec![
            route("checkout", "127.0.0.1:15001", "http://payments.shop:80"),
            route("search", "127.0.0.1:15002", "http://10.0.0.7:9200"),
        ],
        class_header_from: None,
        admin: addr("0.0.0.0:9000"),
        metrics: Some(addr("[::]:9102")),
    };
    assert_eq!(flags, want);
}
