//! A real Prometheus (Debian's `prometheus`, installed by `tests/image
//! packages`) for the tests: on 127.0.0.1 at a free port, its TSDB in a
//! temporary directory, scraping the given targets every second; stopped
//! when dropped.
//! A missing binary fails the test: it never skips.

use std::{
    net::{SocketAddr, TcpListener},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use bulkhead::prometheus::{PrometheusClient, Sample};

/// How long Prometheus may take to start and answer.
pub const READY_WITHIN: Duration = Duration::from_secs(30);
pub const SCRAPE_INTERVAL: &str = "1s";

pub struct Prometheus {
    child: Child,
    pub addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Scrape each of `targets` (host:port serving /metrics) as job `bulkhead-proxy`.
    pub async fn start(targets: &[SocketAddr]) -> Self {
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        Self::start_with_scrape_configs(&format!(
            "  - job_name: bulkhead-proxy\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        ))
        .await
    }

    /// `scrape_configs` is the YAML list under `scrape_configs:`, indented by two.
    pub async fn start_with_scrape_configs(scrape_configs: &str) -> Self {
        Self::start_serving(scrape_configs, None, |addr| PrometheusClient::new(&format!("http://{addr}")).ok()).await
    }

    /// The same, serving its API as `web_config` says (`--web.config.file`:
    /// TLS, basic auth); `client` asks it whether it is ready.
    pub async fn start_with_web_config(
        scrape_configs: &str,
        web_config: &str,
        client: impl Fn(SocketAddr) -> Option<PrometheusClient>,
    ) -> Self {
        Self::start_serving(scrape_configs, Some(web_config), client).await
    }

    async fn start_serving(
        scrape_configs: &str,
        web_config: Option<&str>,
        client: impl Fn(SocketAddr) -> Option<PrometheusClient>,
    ) -> Self {
        let bin = std::env::var("PROMETHEUS_BIN").unwrap_or_else(|_| "prometheus".into());
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: {SCRAPE_INTERVAL}\n  scrape_timeout: {SCRAPE_INTERVAL}\n  \
                 evaluation_interval: {SCRAPE_INTERVAL}\nscrape_configs:\n{scrape_configs}"
            ),
        )
        .expect("write prometheus.yml");
        let addr = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port");
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log file");
        let mut command = Command::new(&bin);
        if let Some(web) = web_config {
            let file = dir.path().join("web.yml");
            std::fs::write(&file, web).expect("write web.yml");
            command.arg(format!("--web.config.file={}", file.display()));
        }
        let child = command
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--storage.tsdb.retention.time=1d")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run {bin:?} ({e}): install Debian's prometheus (tests/image packages does)")
            });
        let mut p = Prometheus { child, addr, dir };
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Ok(Some(status)) = p.child.try_wait() {
                panic!("prometheus exited {status}:\n{}", p.log());
            }
            if ready(client(addr)).await {
                return p;
            }
            assert!(Instant::now() < deadline, "prometheus not ready within {READY_WITHIN:?}:\n{}", p.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn client(&self) -> PrometheusClient {
        PrometheusClient::new(&self.url()).expect("a valid URL")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// An instant query now.
    pub async fn query(&self, promql: &str) -> Vec<Sample> {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs_f64();
        self.client().query(promql, now).await.unwrap_or_else(|e| panic!("{promql}: {e}"))
    }

    /// Wait (bounded by `within`) until `promql` returns at least `n` series.
    pub async fn wait_for_series(&self, promql: &str, n: usize, within: Duration) -> Vec<Sample> {
        let deadline = Instant::now() + within;
        loop {
            let found = self.query(promql).await;
            if found.len() >= n {
                return found;
            }
            assert!(Instant::now() < deadline, "{promql}: {} series after {within:?}:\n{}", found.len(), self.log());
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

async fn ready(client: Option<PrometheusClient>) -> bool {
    let Some(client) = client else { return false };
    // /-/ready is plain text; an instant query of `1` proves the query engine is up too.
    client.with_timeout(Duration::from_secs(2)).query("1", 0.0).await.is_ok()
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
