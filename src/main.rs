//! The `bulkhead` binary: the controller, the enforcement proxy and the offline tools.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use bulkhead::{
    audit::AuditConfig,
    error_chain::Chain,
    evaluate::Config,
    offline::{
        advise_exit, advise_text, check_report, evaluate_all, load_files, plan_report, AdviseFormat, Input,
        OutputFormat, EXIT_INVALID_INPUT, EXIT_NO_TELEMETRY,
    },
    plan::{
        default_proxy_security_context, parse_security_context, ImageAllowList, OptIn, PlanConfig,
        DEFAULT_NAMESPACE_OPT_IN, DEFAULT_NODE_OPT_IN,
    },
    prometheus::{ClientOptions, PrometheusClient},
    shard::Calculation,
};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "bulkhead", version, about = "Partitioned capacity and verified isolation for Kubernetes")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The custom resources this operator defines.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum CrdKind {
    #[value(name = "Bulkhead")]
    Bulkhead,
    #[value(name = "BulkheadDrill")]
    BulkheadDrill,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller (KUBECONFIG or in-cluster credentials).
    Run {
        /// Address for /healthz, /readyz and /metrics.
        #[arg(long, default_value = "0.0.0.0:8080")]
        metrics_addr: SocketAddr,
        /// Log format.
        #[arg(long, value_enum, default_value = "text")]
        log_format: LogFormat,
        /// Reconcile only while holding a Lease, so several replicas are safe.
        #[arg(long)]
        leader_elect: bool,
        /// Namespace of the Lease (defaults to $POD_NAMESPACE, else "default").
        #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
        lease_namespace: String,
        /// Name of the Lease (default: bulkhead-operator, or bulkhead-operator-NAME with
        /// --operator-name).
        #[arg(long)]
        lease_name: Option<String>,
        /// Act only on Bulkheads labelled bulkhead.dev/operator=NAME; without it, only on
        /// Bulkheads without that label. Give each operator of a cluster its own (the chart's
        /// operatorName), so that no two act on the same Bulkhead.
        #[arg(long, value_name = "NAME", value_parser = operator_name)]
        operator_name: Option<String>,
        /// After SIGTERM or SIGINT, how long in-flight reconciles may take before the process stops
        /// anyway (a second signal stops it at once); more than 0.
        #[arg(long, value_name = "DURATION", default_value = "4s", value_parser = bulkhead::duration::positive)]
        shutdown_grace: std::time::Duration,
        #[command(flatten)]
        usage: UsageArgs,
        // Boxed: the webhook's flags made the variant the largest by far.
        #[command(flatten)]
        admission: Box<AdmissionArgs>,
        #[command(flatten)]
        config: Box<ConfigArgs>,
    },
    /// Enforce a pool config: a reverse proxy that admits each request to its class's pool or rejects it at once.
    ///
    /// An HTTP/1.1 and h2c reverse proxy in front of a service (ingress) or of a dependency
    /// (egress): each request takes a slot of its class's floor, else of the shared surplus up
    /// to the class's ceiling, else is rejected at once; the slot is held until the response
    /// body ends. pools.json is followed as the kubelet updates the mounted ConfigMap.
    Proxy {
        // Boxed: the proxy's flags outweigh every other command's.
        #[command(flatten)]
        args: Box<bulkhead::proxy::ProxyArgs>,
        /// Log format.
        #[arg(long, value_enum, default_value = "text")]
        log_format: LogFormat,
    },
    /// Print the CustomResourceDefinitions' YAML (Bulkhead, then BulkheadDrill).
    Crd {
        /// Print only this kind's definition.
        #[arg(long, value_enum)]
        only: Option<CrdKind>,
    },
    /// Offline: print the objects the operator would write and the status it would report.
    Plan {
        /// YAML or JSON files, directories (their *.yaml, *.yml, *.json) or - for stdin:
        /// Bulkheads and cluster objects (multi-document or kind: List); 16 MiB in all.
        #[arg(short = 'f', long = "file", required = true)]
        files: Vec<PathBuf>,
        #[arg(short = 'o', long = "output", value_enum, default_value = "yaml")]
        output: OutputFormat,
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Offline: audit the layers the classes share; exit 0 isolated, 1 shared or
    /// unfundable, 2 only unverified with --strict, 3 bad input.
    Check {
        /// YAML or JSON files, directories (their *.yaml, *.yml, *.json) or - for stdin:
        /// Bulkheads and cluster objects (multi-document or kind: List); 16 MiB in all.
        #[arg(short = 'f', long = "file", required = true)]
        files: Vec<PathBuf>,
        #[arg(short = 'o', long = "output", value_enum, default_value = "yaml")]
        output: OutputFormat,
        /// Fail (exit 2) when a required layer is only Unverified.
        #[arg(long)]
        strict: bool,
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Each class's use against its reservation, from Prometheus; exit 0 no findings, 1 findings, 3 bad input, 4 no telemetry.
    ///
    /// Reads the proxies' series of the Bulkhead in FILE over the window and prints, per class,
    /// the peak and p95 in flight, rejections, time at the ceiling and a fundable resize, and the
    /// findings (StarvedAtCeiling, ReservationIdle, UtilisationCollapse, SurplusExhausted,
    /// IsolationLeak). Exit 4: Prometheus unreachable, or no series of the Bulkhead in the window.
    /// Nothing is applied: the text output ends with the `kubectl patch` that would.
    Advise {
        /// YAML or JSON files, directories or - for stdin, holding the Bulkhead to advise on.
        #[arg(short = 'f', long = "file", required = true)]
        files: Vec<PathBuf>,
        /// Base URL of Prometheus's HTTP API, e.g. http://127.0.0.1:9090 or
        /// https://user:password@prometheus.example (user and password go in a Basic
        /// Authorization header).
        #[arg(long, value_name = "URL")]
        prometheus: String,
        #[command(flatten)]
        access: PrometheusAccess,
        /// How far back to look, whole seconds: 30s, 15m, 6h, 1h30m, 7d, 2w.
        #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = bulkhead::duration::whole_seconds)]
        window: std::time::Duration,
        /// Length of one step, the unit of time-at-ceiling and of leak windows, at most the window
        /// (default: the window / 1000, at least 15s; at least two scrape intervals).
        #[arg(long, value_name = "DURATION", value_parser = bulkhead::duration::whole_seconds)]
        step: Option<std::time::Duration>,
        /// The Bulkhead to advise on when the files hold several.
        #[arg(long, value_name = "NAME")]
        bulkhead: Option<String>,
        /// The longest one query may take (a week of a large fleet takes Prometheus tens of seconds).
        #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = bulkhead::duration::whole_seconds)]
        query_timeout: std::time::Duration,
        #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
        output: AdviseFormat,
    },
    /// Offline: how many other tenants one failed shard affects, shared, partitioned or shuffle-sharded; exit 3 bad input.
    ///
    /// One tenant's shard fails (its K nodes lost). Of the other T - 1 tenants, prints how many
    /// are fully affected (all their nodes lost), partially affected (some) and unaffected, when
    ///
    /// shared: every tenant is on every node;
    ///
    /// partitioned: floor(N / K) groups of K nodes (the N mod K other nodes unused), the tenants
    /// spread over the groups as evenly as they go, the failed tenant in a largest group, so
    /// ceil(T / groups) - 1 others are fully affected;
    ///
    /// shuffleSharded: each tenant on K of the N nodes drawn at random (exact expectations),
    /// with combinations = C(N, K), the number of distinct shards.
    Shard {
        /// Nodes (N), at most 100,000.
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        nodes: usize,
        /// Nodes per tenant (K), 1 to N and at most 64 (a Bulkhead's own bound).
        #[arg(long, value_name = "K", allow_negative_numbers = true)]
        shard_size: usize,
        /// Tenants (T), 1 to 1,000,000,000.
        #[arg(long, value_name = "T", allow_negative_numbers = true)]
        tenants: u64,
        /// A table for people, or one JSON object.
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: ShardOutput,
    },
}

/// The admission webhook (isolation at admission), served by every replica.
#[derive(clap::Args, Clone)]
struct AdmissionArgs {
    /// Serve the admission webhook (HTTPS) on HOST:PORT; without it, none is served and node
    /// groups are only audited.
    #[arg(long, value_name = "HOST:PORT")]
    admission_listen: Option<SocketAddr>,
    /// Read the webhook's tls.crt and tls.key from DIR (a cert-manager Secret, mounted; re-read
    /// every minute). Without it, the operator makes a certificate once and keeps it in
    /// --admission-secret.
    #[arg(long, value_name = "DIR")]
    admission_tls_dir: Option<PathBuf>,
    /// The Secret (in $POD_NAMESPACE) that holds the certificate the operator made.
    #[arg(long, value_name = "NAME", default_value = "bulkhead-webhook-tls")]
    admission_secret: String,
    /// The Service in front of the webhook: the certificate is made for NAME.$POD_NAMESPACE.svc.
    #[arg(long, value_name = "NAME", default_value = "bulkhead-webhook")]
    admission_service: String,
    /// The ValidatingWebhookConfiguration whose caBundle the operator keeps (with a certificate it made).
    #[arg(long, value_name = "NAME")]
    admission_webhook: Option<String>,
    /// Namespaces whose pods are not reviewed, comma-separated (node agents that tolerate every taint).
    #[arg(long, value_name = "NS,...", default_value = "kube-system", value_delimiter = ',')]
    admission_exempt_namespaces: Vec<String>,
    /// The operator's own user (system:serviceaccount:NS:NAME): the only one allowed to change
    /// the ConfigMaps and ResourceQuotas it owns.
    #[arg(long, value_name = "USER")]
    admission_operator_user: Option<String>,
    /// The namespace of the Secret and the Service.
    #[arg(long = "admission-namespace", env = "POD_NAMESPACE", default_value = "default", hide_env_values = true)]
    admission_namespace: String,
}

impl AdmissionArgs {
    fn options(self) -> Option<bulkhead::controller::AdmissionOptions> {
        use bulkhead::controller::{AdmissionOptions, TlsSource};
        let listen = self.admission_listen?;
        let tls = match self.admission_tls_dir {
            Some(dir) => TlsSource::Dir(dir),
            None => TlsSource::SelfSigned {
                namespace: self.admission_namespace,
                secret: self.admission_secret,
                service: self.admission_service,
                webhook: self.admission_webhook,
            },
        };
        let exempt_namespaces = self.admission_exempt_namespaces.into_iter().filter(|n| !n.is_empty()).collect();
        Some(AdmissionOptions { listen, tls, exempt_namespaces, operator_user: self.admission_operator_user })
    }
}

/// Where the proxies' telemetry is and how often to read it (the `Sized` condition).
#[derive(clap::Args, Clone)]
struct UsageArgs {
    /// Prometheus that scrapes the proxies (http://host:9090, or https://…); each Bulkhead's use
    /// is then analysed every --usage-period. Without it, Sized is Unknown (NoTelemetry).
    #[arg(long, value_name = "URL")]
    prometheus_url: Option<String>,
    #[command(flatten)]
    access: PrometheusAccess,
    /// How often each Bulkhead's use is analysed (at most one status write each), whole seconds.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = bulkhead::duration::whole_seconds)]
    usage_period: std::time::Duration,
    /// How much history one analysis reads, whole seconds.
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = bulkhead::duration::whole_seconds)]
    usage_window: std::time::Duration,
}

/// How to reach a Prometheus behind TLS or a token (`run` and `advise`).
#[derive(clap::Args, Clone)]
struct PrometheusAccess {
    /// PEM file of the CAs that sign an https Prometheus's certificate, instead of the system's.
    #[arg(long, value_name = "FILE")]
    prometheus_ca_file: Option<PathBuf>,
    /// File holding a bearer token for Prometheus, read again for every request (in a pod:
    /// /var/run/secrets/kubernetes.io/serviceaccount/token).
    #[arg(long, value_name = "FILE")]
    prometheus_bearer_token_file: Option<PathBuf>,
}

impl From<PrometheusAccess> for ClientOptions {
    fn from(a: PrometheusAccess) -> Self {
        ClientOptions { ca_file: a.prometheus_ca_file, bearer_token_file: a.prometheus_bearer_token_file }
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ShardOutput {
    Table,
    Json,
}

/// What the planner and the layer audit cannot learn from the API.
#[derive(clap::Args, Clone)]
struct ConfigArgs {
    /// RuntimeClass handlers that give a pod its own guest kernel (a trailing * matches a prefix).
    #[arg(long = "sandbox-handler", value_delimiter = ',', default_values_t = AuditConfig::default().sandbox_handlers)]
    sandbox_handlers: Vec<String>,
    /// Node label naming the machine (hypervisor) under a node; without it the Host layer is Unverified.
    #[arg(long)]
    host_label: Option<String>,
    /// Image of the injected proxy sidecar when a Bulkhead names none (the chart passes its own
    /// image). Without it such a Bulkhead gets no sidecar (ProxyInjected False, NoProxyImage).
    #[arg(long, env = "BULKHEAD_PROXY_IMAGE", value_name = "IMAGE")]
    proxy_image: Option<String>,
    /// Images a Bulkhead may name in spec.workload.proxy.image besides --proxy-image,
    /// comma-separated; an entry ending in * is a prefix (registry.example/bulkhead:*). Without
    /// it only --proxy-image is allowed: any other gets ProxyInjected False, ImageNotAllowed, and
    /// no sidecar.
    #[arg(long, value_name = "IMAGES", value_parser = ImageAllowList::parse)]
    proxy_image_allow: Option<ImageAllowList>,
    /// Write in a namespace (pool config, sidecars, placement, quotas, NetworkPolicy) only when it
    /// carries this label; "none" or "" for any namespace. Elsewhere nothing is written or
    /// deleted, and Ready is False, NamespaceNotOptedIn.
    #[arg(long, value_name = "LABEL=VALUE", default_value = DEFAULT_NAMESPACE_OPT_IN, value_parser = namespace_opt_in)]
    namespace_opt_in: Requirement,
    /// Claim (label and taint) a node for a node group only when it carries this label; "none" or
    /// "" for any node the group's selector matches.
    #[arg(long, value_name = "LABEL=VALUE", default_value = DEFAULT_NODE_OPT_IN, value_parser = node_opt_in)]
    node_opt_in: Requirement,
    /// securityContext of the injected proxy container, as JSON (default: restricted, user
    /// 65532; on OpenShift give it without runAsUser).
    #[arg(long, value_name = "JSON", value_parser = parse_security_context)]
    proxy_security_context: Option<serde_json::Value>,
}

impl From<ConfigArgs> for Config {
    fn from(a: ConfigArgs) -> Self {
        Config {
            plan: PlanConfig {
                proxy_image: a.proxy_image,
                proxy_image_allow: a.proxy_image_allow.unwrap_or_default(),
                namespace_opt_in: a.namespace_opt_in.0,
                node_opt_in: a.node_opt_in.0,
                proxy_security_context: a.proxy_security_context.unwrap_or_else(default_proxy_security_context),
                fault: None,
            },
            audit: AuditConfig { sandbox_handlers: a.sandbox_handlers, host_label: a.host_label, admission: false },
        }
    }
}

/// An opt-in label (`--namespace-opt-in`, `--node-opt-in`), or none required.
#[derive(Clone)]
struct Requirement(Option<OptIn>);

fn namespace_opt_in(s: &str) -> Result<Requirement, String> {
    OptIn::parse(s).map(Requirement)
}

fn node_opt_in(s: &str) -> Result<Requirement, String> {
    OptIn::parse_for_nodes(s).map(Requirement)
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// mimalloc without transparent huge pages (Cargo.toml says why): 0.69–1.0×
/// the CPU of an HTTP/2 request through the proxy (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return parse_error(e),
    };
    match cli.command {
        Command::Run {
            metrics_addr,
            log_format,
            leader_elect,
            lease_namespace,
            lease_name,
            operator_name,
            shutdown_grace,
            usage,
            admission,
            config,
        } => {
            init_tracing(log_format);
            let name = lease_name.unwrap_or_else(|| match &operator_name {
                Some(operator) => format!("bulkhead-operator-{operator}"),
                None => "bulkhead-operator".to_string(),
            });
            let lease = leader_elect.then_some(bulkhead::controller::LeaseRef { namespace: lease_namespace, name });
            match run(metrics_addr, lease, shutdown_grace, usage, admission, (*config).into(), operator_name) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %Chain(&*e), "controller stopped");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Proxy { args, log_format } => {
            init_tracing(log_format);
            match proxy(*args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {}", Chain(&*e));
                    ExitCode::FAILURE
                }
            }
        }
        Command::Crd { only } => {
            match only {
                Some(CrdKind::Bulkhead) => print!("{}", bulkhead::crd::crd_yaml()),
                Some(CrdKind::BulkheadDrill) => print!("{}", bulkhead::crd::drill_crd_yaml()),
                None => print!("{}---\n{}", bulkhead::crd::crd_yaml(), bulkhead::crd::drill_crd_yaml()),
            }
            ExitCode::SUCCESS
        }
        Command::Plan { files, output, config } => plan(&files, output, &config.into()),
        Command::Check { files, output, strict, config } => check(&files, output, strict, &config.into()),
        Command::Shard { nodes, shard_size, tenants, output } => shard(nodes, shard_size, tenants, output),
        Command::Advise { files, prometheus, access, window, step, bulkhead, query_timeout, output } => {
            let client = match PrometheusClient::with_options(&prometheus, &access.into()) {
                Ok(c) => c.with_timeout(query_timeout),
                Err(e) => {
                    eprintln!("error: {}", Chain(&e));
                    return ExitCode::from(EXIT_INVALID_INPUT);
                }
            };
            advise(&files, &client, window, step, bulkhead.as_deref(), output)
        }
    }
}

/// clap exits 2 on a usage error, which `check --strict` uses for "only
/// Unverified remains": every usage error exits 3 (bad input) instead, for
/// every subcommand (clap's message names the flag). Help and version exit 0.
fn parse_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let _ = e.print();
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
        _ => ExitCode::from(EXIT_INVALID_INPUT),
    }
}

/// `--operator-name`: a label value that is also a DNS label (it ends the
/// default Lease name).
fn operator_name(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(s.to_owned())
    } else {
        Err(format!("{s:?}: expected a DNS label (a-z, 0-9 and -, at most 63)"))
    }
}

fn shard(nodes: usize, shard_size: usize, tenants: u64, output: ShardOutput) -> ExitCode {
    let calc = match Calculation::new(nodes, shard_size, tenants) {
        Ok(calc) => calc,
        Err(e) => {
            eprintln!("error: {}: {e}", e.flag());
            return ExitCode::from(EXIT_INVALID_INPUT);
        }
    };
    match output {
        ShardOutput::Table => print!("{}", calc.table()),
        ShardOutput::Json => match serde_json::to_string_pretty(&calc) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        },
    }
    ExitCode::SUCCESS
}

fn init_tracing(format: LogFormat) {
    bulkhead::logging::init(match format {
        LogFormat::Text => bulkhead::logging::LogFormat::Text,
        LogFormat::Json => bulkhead::logging::LogFormat::Json,
    });
}

fn run(
    metrics_addr: SocketAddr,
    leader_election: Option<bulkhead::controller::LeaseRef>,
    shutdown_grace: std::time::Duration,
    usage: UsageArgs,
    admission: Box<AdmissionArgs>,
    config: Config,
    operator_name: Option<String>,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let result = runtime.block_on(async {
        let usage = usage_options(usage)?;
        let client =
            bulkhead::controller::client().await.context("no Kubernetes credentials (KUBECONFIG or in-cluster)")?;
        // Node groups are kept at admission only where the webhook is served.
        let admission = admission.options();
        let mut config = config;
        config.audit.admission = admission.is_some();
        let options = bulkhead::controller::RunOptions {
            metrics_addr,
            instance: std::env::var("POD_NAME").ok(),
            leader_election,
            config,
            shutdown_grace,
            usage,
            enforcement: bulkhead::controller::EnforcementOptions::default(),
            operator_name,
            admission,
        };
        bulkhead::controller::run(client, options).await?;
        anyhow::Ok(())
    });
    // Tasks still waiting on an API server that does not answer must not keep
    // the process alive past the grace period.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    result
}

/// The analysis the controller runs (`prometheus::advise`), or none.
fn usage_options(args: UsageArgs) -> anyhow::Result<bulkhead::controller::UsageOptions> {
    let Some(url) = args.prometheus_url else {
        return Ok(bulkhead::controller::UsageOptions::disabled());
    };
    let client = PrometheusClient::with_options(&url, &args.access.into())?;
    Ok(bulkhead::controller::UsageOptions::with_client(client, args.usage_period, args.usage_window))
}

fn proxy(args: bulkhead::proxy::ProxyArgs) -> anyhow::Result<()> {
    let runtime = bulkhead::proxy::runtime(args.workers).context("cannot start the async runtime")?;
    runtime.block_on(bulkhead::proxy::run(args))?;
    Ok(())
}

/// Read the files, or say which one is bad (exit 3).
fn read_input(files: &[PathBuf]) -> Result<Input, ExitCode> {
    let input = load_files(files).map_err(|e| {
        eprintln!("error: {}", Chain(&e));
        ExitCode::from(EXIT_INVALID_INPUT)
    })?;
    for note in &input.notes {
        eprintln!("note: {note}");
    }
    if input.bulkheads.is_empty() {
        eprintln!(
            "error: no Bulkhead in {}",
            files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", ")
        );
        return Err(ExitCode::from(EXIT_INVALID_INPUT));
    }
    Ok(input)
}

fn plan(files: &[PathBuf], output: OutputFormat, config: &Config) -> ExitCode {
    let input = match read_input(files) {
        Ok(input) => input,
        Err(code) => return code,
    };
    let report = plan_report(&evaluate_all(&input, config, &now()));
    if let Err(e) = print_list(&report.list, output) {
        eprintln!("error: {e:#}");
        return ExitCode::FAILURE;
    }
    for line in &report.summary {
        eprintln!("{line}");
    }
    if report.invalid {
        ExitCode::from(EXIT_INVALID_INPUT)
    } else {
        ExitCode::SUCCESS
    }
}

fn check(files: &[PathBuf], output: OutputFormat, strict: bool, config: &Config) -> ExitCode {
    let input = match read_input(files) {
        Ok(input) => input,
        Err(code) => return code,
    };
    let report = check_report(&evaluate_all(&input, config, &now()), strict);
    if let Err(e) = print_list(&report.list, output) {
        eprintln!("error: {e:#}");
        return ExitCode::FAILURE;
    }
    for line in &report.summary {
        eprintln!("{line}");
    }
    ExitCode::from(report.exit)
}

fn advise(
    files: &[PathBuf],
    client: &PrometheusClient,
    window: std::time::Duration,
    step: Option<std::time::Duration>,
    name: Option<&str>,
    output: AdviseFormat,
) -> ExitCode {
    use kube::ResourceExt;
    let bad = |message: String| {
        eprintln!("error: {message}");
        ExitCode::from(EXIT_INVALID_INPUT)
    };
    let input = match read_input(files) {
        Ok(input) => input,
        Err(code) => return code,
    };
    let mut matching = input.bulkheads.iter().filter(|b| name.is_none_or(|n| b.name_any() == n));
    let (Some(bulkhead), None) = (matching.next(), matching.next()) else {
        let names: Vec<String> = input.bulkheads.iter().map(|b| b.name_any()).collect();
        return bad(match name {
            Some(n) => format!("--bulkhead {n}: not one of {}", names.join(", ")),
            None => {
                format!("the files hold {} Bulkheads ({}): name one with --bulkhead", names.len(), names.join(", "))
            }
        });
    };
    let options = bulkhead::prometheus::AdviseOptions { step, ..Default::default() };
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .map(|rt| rt.block_on(bulkhead::prometheus::advise_with(client, bulkhead, window, &options)));
    let advice = match result {
        Ok(Ok(advice)) => advice,
        Ok(Err(e)) => {
            eprintln!("error: {}", Chain(&e));
            // A bad URL, file or window is bad input; anything Prometheus did or did not answer, no telemetry.
            return ExitCode::from(if e.is_bad_input() { EXIT_INVALID_INPUT } else { EXIT_NO_TELEMETRY });
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    match output {
        AdviseFormat::Text => print!("{}", advise_text(bulkhead, &advice)),
        AdviseFormat::Json => match serde_json::to_string_pretty(&advice) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        },
    }
    ExitCode::from(advise_exit(&advice))
}

fn print_list(list: &serde_json::Value, output: OutputFormat) -> anyhow::Result<()> {
    let text = match output {
        OutputFormat::Yaml => bulkhead::crd::to_yaml(list)?,
        OutputFormat::Json => serde_json::to_string_pretty(list)? + "\n",
    };
    print!("{text}");
    Ok(())
}

fn now() -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now())
}
