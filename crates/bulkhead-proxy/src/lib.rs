//! `bulkhead proxy`: the enforcement sidecar. An HTTP/1.1 and h2c reverse
//! proxy that admits each request against the pools of `pools.json` (a class's
//! floor, then the shared surplus up to its ceiling, else an immediate
//! rejection), holds the slot until the response body ends, and follows the
//! mounted ConfigMap. The admission core is also a tower Layer
//! ([`AdmissionLayer`]) for services that enforce the pools in process.
//!
//! A crate of its own (`bulkhead-proxy`), so that the sidecar links no
//! Kubernetes client and no planner: it depends only on the
//! `bulkhead-admission` crate (the admission core and the pool-config
//! schema), on hyper, h2 and tokio. `cargo tree -p bulkhead-proxy -e normal`
//! shows it. The operator's one binary runs it as `bulkhead proxy`.
//! `duration` (the one grammar of every flag's durations) lives here, the
//! lowest crate that reads flags, and the operator uses it too.

#![forbid(unsafe_code)]

mod activity;
mod admin;
mod class_headers;
mod connections;
mod counted;
mod date;
mod dial;
pub mod duration;
mod fds;
pub mod forward;
mod h1_upstream;
mod h2_pool;
mod h2_server;
mod h2_upstream;
mod head;
mod held;
mod hop_headers;
mod idle;
mod inbound;
pub mod options;
mod recv_body;
mod refusal;
pub mod reload;
mod replay;
mod screen;
mod server;
pub mod sidecar;
mod stack;
mod stall;
mod timeouts;
mod unread;
mod upload;
mod woken;

// The admission core lives in its own crate, free of Kubernetes; the proxy
// re-exports its modules so that `proxy::admission::Pool` and the rest keep
// their paths.
pub use bulkhead_admission::{admission, classify, layer, metrics, normalize, reject, synthetic};

use std::{
    net::SocketAddr,
    sync::{atomic::Ordering, Arc},
    time::Instant,
};

use tokio::{net::TcpListener, sync::watch};

pub use admission::{DrillHold, Held, Permit, Pool, Reason, Rejection, Source, Unclassified};
pub use classify::{Classifier, Rule};
pub use layer::{Admission, AdmissionLayer, Classify, Gate, HoldPermit, PermitBody};
pub use metrics::{PoolCollector, ProxyMetrics};
pub use options::{ProxyArgs, Route};
pub use refusal::Refusal;
pub use reject::Rejector;
pub use sidecar::SidecarArgs;

/// Why the proxy could not start (or stopped).
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error(transparent)]
    Config(#[from] reload::LoadError),
    #[error("{0}")]
    Usage(String),
    #[error("cannot listen on {addr}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("admin server")]
    Admin(#[source] std::io::Error),
}

/// The runtime `--workers` asks for: one thread runs everything on the
/// current thread (no work stealing, best when pinned to one core).
pub fn runtime(workers: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    let workers = workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    if workers <= 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build()
    }
}

/// One listener to open: where, what classifies it, where it forwards.
struct Plan {
    addr: SocketAddr,
    classifier: Classifier,
    upstream: forward::Upstream,
}

fn plan(args: &ProxyArgs) -> Result<Vec<Plan>, ProxyError> {
    let usage = |m: &str| ProxyError::Usage(m.to_owned());
    if args.listen.is_empty() && args.routes.is_empty() {
        return Err(usage("nothing to listen on: give --listen or --route"));
    }
    let by_port = args.classify.contains(&Rule::Port);
    if by_port && args.routes.is_empty() {
        return Err(usage("--classify port needs --route CLASS=HOST:PORT listeners"));
    }
    let mut plans = Vec::new();
    for &addr in &args.listen {
        if args.classify.is_empty() {
            return Err(usage("--listen needs --classify (header:NAME, path:/prefix=class,... or port)"));
        }
        let upstream = args.upstream.clone().ok_or_else(|| usage("--listen needs --upstream"))?;
        plans.push(Plan { addr, classifier: Classifier::Rules(args.classify.clone()), upstream });
    }
    for route in &args.routes {
        let upstream = route.upstream.clone().or_else(|| args.upstream.clone()).ok_or_else(|| {
            ProxyError::Usage(format!("--route {}: no upstream (add =http://... or --upstream)", route.class))
        })?;
        plans.push(Plan { addr: route.listen, classifier: Classifier::Fixed(route.class.as_str().into()), upstream });
    }
    Ok(plans)
}

/// Run the proxy until SIGTERM (or SIGINT), then drain and return.
pub async fn run(args: ProxyArgs) -> Result<(), ProxyError> {
    let plans = plan(&args)?;
    let loaded = reload::load(&args.config_dir)?;
    let path = reload::config_path(&args.config_dir);
    let invalid = |source| reload::LoadError::Invalid { path: path.clone(), source };
    // Named by the document's hash from the start: the operator asks for it.
    let hash = loaded.hash();
    let pool = Pool::new_hashed(loaded.config, args.unclassified.clone(), Some(&hash)).map_err(invalid)?;
    let mut metrics = ProxyMetrics::new(Arc::clone(&pool));
    let max_connections = fds::connection_budget(args.max_connections, args.admin_connections);
    let connections = connections::Connections::new(max_connections, pool.config().bulkhead.to_string());
    metrics.register_collector(Box::new(connections::ConnectionCollector(Arc::clone(&connections))));
    let metrics = Arc::new(metrics);
    metrics.applied_now();
    for plan in &plans {
        if let Classifier::Fixed(class) = &plan.classifier {
            if !pool.config().classes.iter().any(|c| *c.name == **class) {
                tracing::warn!(class = &**class, listen = %plan.addr, "route names a class not in the config: unclassified until one is");
            }
        }
    }

    let (stop_tx, stop) = watch::channel(false);
    let (drain_tx, drain) = watch::channel(());
    // The flags' deadlines; the timeouts module does not read the flags, so
    // options (which names forward's types) and forward (which uses these) stay apart.
    let timeouts = timeouts::Timeouts {
        header: args.header_timeout,
        response: args.response_timeout,
        idle: args.idle_timeout,
        drain: args.drain_timeout,
    };
    let protocols = Arc::new(server::Protocols::new(timeouts.header));
    let limits = forward::Limits {
        timeouts,
        allow_upgrade: args.allow_upgrade.iter().map(|p| p.to_ascii_lowercase()).collect(),
    };
    let admin_limits = admin::AdminLimits { connections: args.admin_connections, head: timeouts.admin_head() };
    let accept = server::Accept { connections, timeouts, unread: unread::UnreadBudget::new(args.max_unread_responses) };
    // Without --class-header-from only loopback peers may name a class by header.
    let trusted = args.class_header_from.clone().unwrap_or_else(options::Cidr::loopback);
    let class_header_from: Option<Arc<[options::Cidr]>> = Some(Arc::from(trusted));
    let rejector = Rejector::new(args.retry_after);
    let admin =
        Arc::new(admin::Admin { pool: Arc::clone(&pool), metrics: Arc::clone(&metrics), draining: Default::default() });
    let admin_tcp =
        TcpListener::bind(args.admin).await.map_err(|source| ProxyError::Bind { addr: args.admin, source })?;
    let metrics_tcp = match args.metrics {
        Some(addr) => Some(TcpListener::bind(addr).await.map_err(|source| ProxyError::Bind { addr, source })?),
        None => None,
    };
    let mut bound = Vec::new();
    for plan in plans {
        let tcp = TcpListener::bind(plan.addr).await.map_err(|source| ProxyError::Bind { addr: plan.addr, source })?;
        tracing::info!(listen = %plan.addr, upstream = %plan.upstream, classify = ?plan.classifier, "listening");
        let class_headers = Arc::new(class_headers::ClassHeaders::new(&plan.classifier));
        let screen = screen::Screen::new(&plan.classifier, Arc::clone(&class_headers), class_header_from.clone());
        let forward = forward::Forward::new(
            plan.upstream,
            args.upstream_protocol,
            limits.clone(),
            class_headers,
            drain.clone(),
            stop.clone(),
        );
        let admission = AdmissionLayer::with_rejector(Arc::clone(&pool), plan.classifier, rejector.clone());
        let listener = stack::Listener::new(screen, admission, forward);
        bound.push((tcp, Arc::new(listener)));
    }
    for (tcp, listener) in bound {
        tokio::spawn(server::accept(
            tcp,
            listener,
            Arc::clone(&protocols),
            accept.clone(),
            stop.clone(),
            drain.clone(),
        ));
    }
    drop(drain);
    tokio::spawn(reload::follow(
        args.config_dir.clone(),
        loaded.bytes,
        Arc::clone(&pool),
        Arc::clone(&metrics),
        args.reload_interval,
        stop.clone(),
    ));
    let (admin_stop_tx, admin_stop) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let split = metrics_tcp.is_some();
    let admin_task = tokio::spawn(admin::serve(
        admin_tcp,
        Arc::clone(&admin),
        admin::Serves { health: true, metrics: !split },
        admin_limits,
        stopped(admin_stop.clone()),
    ));
    let metrics_task = metrics_tcp.map(|tcp| {
        let serves = admin::Serves { health: false, metrics: true };
        tokio::spawn(admin::serve(tcp, Arc::clone(&admin), serves, admin_limits, stopped(admin_stop.clone())))
    });
    tracing::info!(admin = %args.admin, generation = pool.generation(), "proxy ready");

    let signal = terminated().await;
    tracing::info!(signal, drain_timeout = ?timeouts.drain, "stopping: no new connections, draining in-flight requests");
    admin.draining.store(true, Ordering::Relaxed);
    let started = Instant::now();
    let _ = stop_tx.send(true);
    let in_flight =
        || pool.snapshot().classes.iter().map(|c| u64::from(c.floor_in_use + c.surplus_in_use)).sum::<u64>();
    match tokio::time::timeout(timeouts.drain, drain_tx.closed()).await {
        Ok(()) => tracing::info!(took = ?started.elapsed(), "drained"),
        Err(_) => tracing::warn!(in_flight = in_flight(), "drain timeout: exiting with requests in flight"),
    }
    let _ = admin_stop_tx.send(true);
    if let Some(task) = metrics_task {
        if let Ok(Err(e)) = task.await {
            return Err(ProxyError::Admin(e));
        }
    }
    match admin_task.await {
        Ok(Err(e)) => Err(ProxyError::Admin(e)),
        _ => Ok(()),
    }
}

/// Waits for SIGTERM or SIGINT and names it.
async fn terminated() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        // Without signal handlers the proxy can only be killed; keep serving.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}
