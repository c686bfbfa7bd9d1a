//! The command line of `bulkhead proxy`. Scripts outside the repository rely
//! on `--config-dir --listen --upstream --classify header:NAME --unclassified
//! --admin` exactly as written; the injected sidecar's flags are rendered by
//! `sidecar::SidecarArgs::argv`, and a pure test parses them here.

use std::{
    net::{SocketAddr, ToSocketAddrs},
    path::PathBuf,
    str::FromStr,
    time::Duration,
};

pub use bulkhead_admission::pool_config::Cidr;
use bulkhead_admission::{admission::Unclassified, classify::Rule};

use crate::{
    duration::{off_or_duration, positive},
    forward::{Upstream, UpstreamProtocol},
};

#[derive(clap::Args, Clone, Debug)]
pub struct ProxyArgs {
    /// Directory holding pools.json, directly or through the kubelet's ..data link.
    #[arg(long, value_name = "DIR")]
    pub config_dir: PathBuf,
    /// Listener classified by --classify (HTTP/1.1 and h2c on the same port); repeatable.
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_addr)]
    pub listen: Vec<SocketAddr>,
    /// Upstream of --listen, and of each --route that names none.
    #[arg(long, value_name = "http://HOST:PORT")]
    pub upstream: Option<Upstream>,
    /// How --listen traffic names its class: header:NAME, path:/prefix=class,... or port
    /// (only --route listeners classify); repeatable, the first rule that names a class wins.
    #[arg(long, value_name = "RULE")]
    pub classify: Vec<Rule>,
    /// What unclassified requests (no class, or a name not in the config) get: reject, or a class to count them as.
    #[arg(long, value_name = "reject|CLASS", default_value = "reject", value_parser = parse_unclassified)]
    pub unclassified: Unclassified,
    /// A listener whose traffic is one class, to its own upstream (egress, or ingress by port):
    /// CLASS=HOST:PORT[=http://UPSTREAM]; repeatable.
    #[arg(long = "route", value_name = "CLASS=HOST:PORT[=URL]")]
    pub routes: Vec<Route>,
    /// Address for /healthz, /readyz and /metrics (never counted against any class). Loopback by
    /// default, so that nothing is published unless asked; the injected sidecar gives 0.0.0.0:9901
    /// for the kubelet's probes and moves /metrics to loopback with --metrics.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:9901", value_parser = parse_addr)]
    pub admin: SocketAddr,
    /// Serve /metrics here instead of on --admin (which then serves health only), so probes
    /// can reach the pod IP while the metrics stay private (say 127.0.0.1:9902).
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_addr)]
    pub metrics: Option<SocketAddr>,
    /// Protocol spoken to upstreams (gRPC upstreams need h2c).
    #[arg(long, value_enum, default_value = "http1")]
    pub upstream_protocol: UpstreamProtocol,
    /// Tokio worker threads; 1 runs everything on one thread (best when pinned to one core).
    /// Defaults to the number of CPUs.
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
    /// Seconds a rejected client is told to wait (Retry-After).
    #[arg(long, value_name = "SECONDS", default_value_t = 1)]
    pub retry_after: u32,
    /// On SIGTERM, how long in-flight requests may take to finish before the proxy exits anyway
    /// (more than 0).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = positive)]
    pub drain_timeout: Duration,
    /// How often the config directory is checked for a new pools.json (more than 0).
    #[arg(long, value_name = "DURATION", default_value = "100ms", value_parser = positive)]
    pub reload_interval: Duration,
    /// From forwarding a request to the upstream's response head; past it the client gets 504
    /// (gRPC: DEADLINE_EXCEEDED) and the slot is freed. 0 disables.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = off_or_duration)]
    pub response_timeout: Duration,
    /// No byte in either direction of a request's bodies, or of an upgraded tunnel, for this
    /// long ends it and frees its slot; a stalled request body gets 408. A client connection
    /// with no request in flight for this long is closed (HTTP/2: GOAWAY), and one whose
    /// responses wait while the client takes nothing of them for twice this long is closed: at
    /// once if they are all it carries, else (32 of them, or past --max-unread-responses) with
    /// GOAWAY and one idle timeout for its other requests. 0 disables all of this.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = off_or_duration)]
    pub idle_timeout: Duration,
    /// A new connection's first bytes (protocol detection) and each HTTP/1.1 request head must
    /// arrive within this; HTTP/2 connections are pinged this often and closed if no answer comes
    /// within it. More than 0.
    // Never off: a client that never sent a head would hold its connection (and on the
    // admin port, a slot the kubelet's probes need) for ever.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = positive)]
    pub header_timeout: Duration,
    /// Client connections served at once over all listeners; past it new ones are closed at
    /// once. Lowered at start to what the file-descriptor limit allows with room for the
    /// upstream connections and the admin ports (a warning says so). 2048 connections that each
    /// hold the largest partial request head (46 KiB of RSS) fit in the injected 128Mi.
    #[arg(long, value_name = "N", default_value_t = 2048, value_parser = connection_count())]
    pub max_connections: usize,
    /// Responses the clients take nothing of for twice --idle-timeout, over all connections
    /// (each is held until its connection ends: 53 KiB for a large one the idle watchdog gave
    /// up); past it, a connection holding one is closed when next checked, its other requests
    /// given one idle timeout to end. Needs --idle-timeout.
    #[arg(long, value_name = "N", default_value_t = 512, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_unread_responses: u64,
    /// Connections open at once on each admin listener (--admin, --metrics); past it new ones
    /// are closed at once. Each must send its request head within --header-timeout (at most 5 s)
    /// and lasts at most 30 s.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = connection_count())]
    pub admin_connections: usize,
    /// Peers allowed to name a class by header (CIDR list); others are unclassified. Default:
    /// loopback only (a front proxy on the same host or in the same pod); 0.0.0.0/0,::/0 trusts every peer.
    #[arg(long, value_name = "CIDR[,CIDR..]", value_delimiter = ',')]
    pub class_header_from: Option<Vec<Cidr>>,
    /// Upgrade protocols tunnelled to the upstream (repeatable); others are forwarded as plain
    /// requests without the Upgrade header. h2c is never tunnelled.
    #[arg(long, value_name = "PROTOCOL", default_value = "websocket")]
    pub allow_upgrade: Vec<String>,
}

/// `--route CLASS=HOST:PORT[=http://UPSTREAM]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub class: String,
    pub listen: SocketAddr,
    pub upstream: Option<Upstream>,
}

impl FromStr for Route {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (class, rest) = s.split_once('=').ok_or_else(|| format!("{s:?}: expected CLASS=HOST:PORT[=URL]"))?;
        if class.is_empty() {
            return Err(format!("{s:?}: no class"));
        }
        let (listen, upstream) = match rest.split_once('=') {
            Some((listen, url)) => (listen, Some(url.parse::<Upstream>().map_err(|e| e.to_string())?)),
            None => (rest, None),
        };
        Ok(Route { class: class.to_owned(), listen: parse_addr(listen)?, upstream })
    }
}

/// HOST:PORT, a literal address or a name resolved once at start.
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    s.to_socket_addrs()
        .map_err(|e| format!("{s:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{s:?}: resolves to no address"))
}

fn parse_unclassified(s: &str) -> Result<Unclassified, String> {
    match s {
        "" => Err("expected reject or a class name".into()),
        "reject" => Ok(Unclassified::Reject),
        class => Ok(Unclassified::Class(class.to_owned())),
    }
}

/// The most connections a cap may be: far past any descriptor limit
/// (Linux's `fs.nr_open` is 2^20 by default), and within what a semaphore counts.
const MAX_CONNECTION_CAP: u64 = 1 << 24;

/// A connection cap: at least 1 (0 would refuse every connection), at most [`MAX_CONNECTION_CAP`].
fn connection_count() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::new().range(1..=MAX_CONNECTION_CAP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_durations_and_policies() {
        let r: Route = "search=127.0.0.1:9000=http://127.0.0.1:8000".parse().expect("route");
        assert_eq!((r.class.as_str(), r.listen.port()), ("search", 9000));
        assert_eq!(r.upstream.map(|u| u.to_string()).as_deref(), Some("http://127.0.0.1:8000"));
        assert_eq!("a=127.0.0.1:1".parse::<Route>().map(|r| r.upstream), Ok(None));
        assert!("127.0.0.1:1".parse::<Route>().is_err());
        assert_eq!(parse_unclassified("reject"), Ok(Unclassified::Reject));
        assert_eq!(parse_unclassified("reports"), Ok(Unclassified::Class("reports".into())));
        let net: Cidr = "10.1.0.0/16".parse().expect("cidr");
        assert!(net.contains("10.1.200.3".parse().expect("ip")));
        assert!(!net.contains("10.2.0.1".parse().expect("ip")));
        assert!(net.contains("::ffff:10.1.0.9".parse().expect("mapped ip")));
        let odd: Cidr = "192.168.1.128/25".parse().expect("cidr");
        assert!(
            odd.contains("192.168.1.200".parse().expect("ip")) && !odd.contains("192.168.1.100".parse().expect("ip"))
        );
        assert!("10.0.0.0/33".parse::<Cidr>().is_err() && "x/8".parse::<Cidr>().is_err());
        assert!("::1".parse::<Cidr>().expect("host").contains("::1".parse().expect("ip")));
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        proxy: ProxyArgs,
    }

    fn parse(extra: &[&str]) -> Result<ProxyArgs, clap::Error> {
        use clap::Parser;
        let args = ["proxy", "--config-dir", "/etc/bulkhead"].iter().chain(extra);
        Cli::try_parse_from(args).map(|cli| cli.proxy)
    }

    #[test]
    fn connection_caps_are_refused_with_a_clear_error_outside_one_to_the_cap() {
        assert_eq!(parse(&[]).map(|a| (a.max_connections, a.admin_connections)).ok(), Some((2048, 64)));
        assert_eq!(parse(&[]).map(|a| a.max_unread_responses).ok(), Some(512));
        let err = parse(&["--max-unread-responses", "0"]).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("--max-unread-responses"), "{err}");
        assert_eq!(parse(&["--max-connections", "16777216"]).map(|a| a.max_connections).ok(), Some(1 << 24));
        for flag in ["--max-connections", "--admin-connections"] {
            for bad in ["0", "16777217", "18446744073709551615"] {
                let err = parse(&[flag, bad]).err().map(|e| e.to_string()).unwrap_or_default();
                assert!(err.contains(flag) && err.contains("not in 1..=16777216"), "{flag} {bad}: {err:?}");
            }
        }
    }
}
