//! The `bulkhead` binary: the controller, the enforcement proxy and the offline tools.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use bulkhead::{
    audit::AuditConfig,
    offline::{check_report, evaluate, load_files, plan_report, Input, OutputFormat, EXIT_INVALID_INPUT},
};

#[derive(Parser)]
#[command(name = "bulkhead", version, about = "Partitioned capacity and verified isolation for Kubernetes")]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
        /// Name of the Lease.
        #[arg(long, default_value = "bulkhead-operator")]
        lease_name: String,
        #[command(flatten)]
        audit: AuditArgs,
    },
    /// Enforce a pool config: a reverse proxy that admits each request to its class's pool or rejects it at once.
    ///
    /// An HTTP/1.1 and h2c reverse proxy in front of a service (ingress) or of a dependency
    /// (egress): each request takes a slot of its class's floor, else of the shared surplus up
    /// to the class's ceiling, else is rejected at once; the slot is held until the response
    /// body ends. pools.json is followed as the kubelet updates the mounted ConfigMap.
    Proxy {
        #[command(flatten)]
        args: bulkhead::proxy::ProxyArgs,
        /// Log format.
        #[arg(long, value_enum, default_value = "text")]
        log_format: LogFormat,
    },
    /// Print the CustomResourceDefinition YAML.
    Crd,
    /// Offline: print the objects the operator would write and the status it would report.
    Plan {
        /// YAML or JSON files: Bulkheads and cluster objects (multi-document or kind: List).
        #[arg(short = 'f', long = "file", required = true)]
        files: Vec<PathBuf>,
        #[arg(short = 'o', long = "output", value_enum, default_value = "yaml")]
        output: OutputFormat,
        #[command(flatten)]
        audit: AuditArgs,
    },
    /// Offline: audit the layers the classes share; exit 0 isolated, 1 shared or
    /// unfundable, 2 only unverified with --strict, 3 bad input.
    Check {
        /// YAML or JSON files: Bulkheads and cluster objects (multi-document or kind: List).
        #[arg(short = 'f', long = "file", required = true)]
        files: Vec<PathBuf>,
        #[arg(short = 'o', long = "output", value_enum, default_value = "yaml")]
        output: OutputFormat,
        /// Fail (exit 2) when a required layer is only Unverified.
        #[arg(long)]
        strict: bool,
        #[command(flatten)]
        audit: AuditArgs,
    },
}

/// What the layer audit cannot learn from the API.
#[derive(clap::Args, Clone)]
struct AuditArgs {
    /// RuntimeClass handlers that give a pod its own guest kernel (a trailing * matches a prefix).
    #[arg(long = "sandbox-handler", value_delimiter = ',', default_values_t = AuditConfig::default().sandbox_handlers)]
    sandbox_handlers: Vec<String>,
    /// Node label naming the machine (hypervisor) under a node; without it the Host layer is Unverified.
    #[arg(long)]
    host_label: Option<String>,
}

impl From<AuditArgs> for AuditConfig {
    fn from(a: AuditArgs) -> Self {
        AuditConfig { sandbox_handlers: a.sandbox_handlers, host_label: a.host_label }
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run { metrics_addr, log_format, leader_elect, lease_namespace, lease_name, audit } => {
            init_tracing(log_format);
            let lease = leader_elect.then_some(bulkhead::controller::LeaseRef { namespace: lease_namespace, name: lease_name });
            match run(metrics_addr, lease, audit.into()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = format!("{e:#}"), "controller stopped");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Proxy { args, log_format } => {
            init_tracing(log_format);
            match proxy(args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Crd => {
            print!("{}", bulkhead::crd::crd_yaml());
            ExitCode::SUCCESS
        }
        Command::Plan { files, output, audit } => plan(&files, output, &audit.into()),
        Command::Check { files, output, strict, audit } => check(&files, output, strict, &audit.into()),
    }
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

#[tokio::main]
async fn run(
    metrics_addr: SocketAddr,
    leader_election: Option<bulkhead::controller::LeaseRef>,
    audit: AuditConfig,
) -> anyhow::Result<()> {
    let client = kube::Client::try_default().await.context("no Kubernetes credentials (KUBECONFIG or in-cluster)")?;
    let options = bulkhead::controller::RunOptions {
        metrics_addr,
        instance: std::env::var("POD_NAME").ok(),
        leader_election,
        audit,
    };
    bulkhead::controller::run(client, options).await?;
    Ok(())
}

fn proxy(args: bulkhead::proxy::ProxyArgs) -> anyhow::Result<()> {
    let runtime = bulkhead::proxy::runtime(args.workers).context("cannot start the async runtime")?;
    runtime.block_on(bulkhead::proxy::run(args))?;
    Ok(())
}

/// Read the files, or say which one is bad (exit 3).
fn read_input(files: &[PathBuf]) -> Result<Input, ExitCode> {
    let input = load_files(files).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(EXIT_INVALID_INPUT)
    })?;
    if input.bulkheads.is_empty() {
        eprintln!("error: no Bulkhead in {}", files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", "));
        return Err(ExitCode::from(EXIT_INVALID_INPUT));
    }
    Ok(input)
}

fn plan(files: &[PathBuf], output: OutputFormat, audit: &AuditConfig) -> ExitCode {
    let input = match read_input(files) {
        Ok(input) => input,
        Err(code) => return code,
    };
    let report = plan_report(&evaluate(&input, audit, &now()));
    if let Err(e) = print_list(&report.list, output) {
        eprintln!("error: {e:#}");
        return ExitCode::FAILURE;
    }
    for line in &report.summary {
        eprintln!("{line}");
    }
    if report.invalid { ExitCode::from(EXIT_INVALID_INPUT) } else { ExitCode::SUCCESS }
}

fn check(files: &[PathBuf], output: OutputFormat, strict: bool, audit: &AuditConfig) -> ExitCode {
    let input = match read_input(files) {
        Ok(input) => input,
        Err(code) => return code,
    };
    let report = check_report(&evaluate(&input, audit, &now()), strict);
    if let Err(e) = print_list(&report.list, output) {
        eprintln!("error: {e:#}");
        return ExitCode::FAILURE;
    }
    for line in &report.summary {
        eprintln!("{line}");
    }
    ExitCode::from(report.exit)
}

fn print_list(list: &serde_json::Value, output: OutputFormat) -> anyhow::Result<()> {
    let text = match output {
        OutputFormat::Yaml => serde_yaml::to_string(list)?,
        OutputFormat::Json => serde_json::to_string_pretty(list)? + "\n",
    };
    print!("{text}");
    Ok(())
}

fn now() -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now())
}
