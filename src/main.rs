//! The `bulkhead` binary: the controller and the offline tools.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use bulkhead::offline::{load_files, plan_files, OutputFormat};

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
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Exit codes shared by the offline commands.
const EXIT_INVALID_INPUT: u8 = 3;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run { metrics_addr, log_format, leader_elect, lease_namespace, lease_name } => {
            init_tracing(log_format);
            let lease = leader_elect.then_some(bulkhead::controller::LeaseRef { namespace: lease_namespace, name: lease_name });
            match run(metrics_addr, lease) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = format!("{e:#}"), "controller stopped");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Crd => {
            print!("{}", bulkhead::crd::crd_yaml());
            ExitCode::SUCCESS
        }
        Command::Plan { files, output } => plan(&files, output),
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
async fn run(metrics_addr: SocketAddr, leader_election: Option<bulkhead::controller::LeaseRef>) -> anyhow::Result<()> {
    let client = kube::Client::try_default().await.context("no Kubernetes credentials (KUBECONFIG or in-cluster)")?;
    let options = bulkhead::controller::RunOptions {
        metrics_addr,
        instance: std::env::var("POD_NAME").ok(),
        leader_election,
    };
    bulkhead::controller::run(client, options).await?;
    Ok(())
}

fn plan(files: &[PathBuf], output: OutputFormat) -> ExitCode {
    let input = match load_files(files) {
        Ok(input) => input,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_INVALID_INPUT);
        }
    };
    if input.bulkheads.is_empty() {
        eprintln!("error: no Bulkhead in {}", files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", "));
        return ExitCode::from(EXIT_INVALID_INPUT);
    }
    let report = plan_files(&input, &now());
    if let Err(e) = print_list(&report.list, output) {
        eprintln!("error: {e:#}");
        return ExitCode::FAILURE;
    }
    for line in &report.summary {
        eprintln!("{line}");
    }
    if report.invalid { ExitCode::from(EXIT_INVALID_INPUT) } else { ExitCode::SUCCESS }
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
