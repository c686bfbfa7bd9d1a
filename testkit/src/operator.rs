//! The operator under test: installed with the real Helm chart (CRD, RBAC,
//! ServiceAccount), then the `bulkhead` binary run locally with that
//! ServiceAccount's token, so every test exercises the chart's RBAC.

use std::{
    io::{Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
    time::{Duration, Instant},
};

use super::{repo_root, ControlPlane};

pub const NAMESPACE: &str = "bulkhead-system";
pub const SERVICE_ACCOUNT: &str = "bulkhead";
pub const USER: &str = "system:serviceaccount:bulkhead-system:bulkhead";

pub struct Operator {
    pub metrics_port: u16,
    pub log: PathBuf,
    pub kubeconfig: PathBuf,
    pid_file: PathBuf,
}

static OPERATOR: OnceLock<Operator> = OnceLock::new();

pub fn helm() -> PathBuf {
    let out = Command::new(repo_root().join("tests/helm")).arg("path").output().expect("tests/helm runs");
    assert!(out.status.success(), "could not install helm: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Run helm against the test control plane; panics with its output on failure.
pub fn helm_run(args: &[&str]) -> String {
    let cp = ControlPlane::get();
    let out = Command::new(helm())
        .args(args)
        .arg("--kubeconfig")
        .arg(&cp.kubeconfig)
        .current_dir(repo_root())
        .output()
        .expect("helm runs");
    super::chart::stdout_or_panic(&format!("helm {}", args.join(" ")), out)
}

static CHART: OnceLock<PathBuf> = OnceLock::new();

/// Install the chart once per test binary; returns the kubeconfig of its
/// ServiceAccount.
pub fn install_chart() -> &'static PathBuf {
    CHART.get_or_init(|| {
        let cp = ControlPlane::get();
        helm_run(&["install", "bulkhead", "charts/bulkhead", "--namespace", NAMESPACE, "--create-namespace"]);
        let kubeconfig = cp.dir.join("operator.kubeconfig");
        let status = Command::new(repo_root().join("tests/control-plane"))
            .args(["sa-kubeconfig"])
            .arg(&cp.dir)
            .args([NAMESPACE, SERVICE_ACCOUNT])
            .arg(&kubeconfig)
            .status()
            .expect("control-plane sa-kubeconfig runs");
        assert!(status.success(), "no kubeconfig for the chart's ServiceAccount");
        kubeconfig
    })
}

/// A kubeconfig for another ServiceAccount bound to the chart's roles, so the
/// audit log tells two operator replicas apart by user.
pub fn second_service_account(name: &str) -> PathBuf {
    let cp = ControlPlane::get();
    install_chart();
    cp.apply_yaml(&format!(
        r#"apiVersion: v1
kind: ServiceAccount
metadata: {{name: {name}, namespace: {NAMESPACE}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {name}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: bulkhead}}
subjects: [{{kind: ServiceAccount, name: {name}, namespace: {NAMESPACE}}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {name}-leader-election, namespace: {NAMESPACE}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: bulkhead-leader-election}}
subjects: [{{kind: ServiceAccount, name: {name}, namespace: {NAMESPACE}}}]
"#
    ));
    let kubeconfig = cp.dir.join(format!("{name}.kubeconfig"));
    let status = Command::new(repo_root().join("tests/control-plane"))
        .args(["sa-kubeconfig"])
        .arg(&cp.dir)
        .args([NAMESPACE, name])
        .arg(&kubeconfig)
        .status()
        .expect("control-plane sa-kubeconfig runs");
    assert!(status.success(), "no kubeconfig for ServiceAccount {name}");
    kubeconfig
}

/// The sidecar image the test operators inject (nothing pulls it: the end-to-end
/// suites run the proxy themselves on the operator's ConfigMap).
pub const TEST_PROXY_IMAGE: &str = "registry.invalid/bulkhead:e2e";

impl Operator {
    /// The shared operator of a test binary (no leader election), started once.
    pub fn get() -> &'static Operator {
        OPERATOR.get_or_init(|| Operator::start("bulkhead-test", &[]))
    }

    /// Start an operator process under the chart's RBAC; it is stopped when the
    /// test binary exits, however it exits.
    pub fn start(instance: &str, extra_args: &[&str]) -> Operator {
        Operator::start_as(instance, install_chart(), extra_args)
    }

    /// Start an operator process with the credentials in `kubeconfig`.
    pub fn start_as(instance: &str, kubeconfig: &Path, extra_args: &[&str]) -> Operator {
        let cp = ControlPlane::get();
        let kubeconfig = kubeconfig.to_path_buf();
        let port = free_port();
        let log = cp.dir.join(format!("operator-{instance}.log"));
        let pid_file = cp.dir.join(format!("operator-{instance}.pid"));
        let script = r#"bin=$1 port=$2 log=$3 owner=$4 pidfile=$5; shift 5
            RUST_LOG=info,kube=warn "$bin" run --metrics-addr "127.0.0.1:$port" "$@" >"$log" 2>&1 & pid=$!
            echo "$pid" >"$pidfile"
            while kill -0 "$owner" 2>/dev/null && kill -0 "$pid" 2>/dev/null; do sleep 0.5; done; kill "$pid" 2>/dev/null"#;
        // As the chart does: the operator is told its sidecar image (without
        // it, it injects none and says so in ProxyInjected).
        let image: &[&str] =
            if extra_args.contains(&"--proxy-image") { &[] } else { &["--proxy-image", TEST_PROXY_IMAGE] };
        let mut watchdog = Command::new("setsid")
            .args(["bash", "-c", script, "_"])
            .arg(crate::bulkhead_bin())
            .arg(port.to_string())
            .arg(&log)
            .arg(std::process::id().to_string())
            .arg(&pid_file)
            .args(image)
            .args(extra_args)
            .env("KUBECONFIG", &kubeconfig)
            .env("POD_NAME", instance)
            .env("POD_NAMESPACE", NAMESPACE)
            .spawn()
            .expect("operator starts");
        // The watchdog outlives this call; reap it whenever it ends.
        std::thread::spawn(move || watchdog.wait());
        let op = Operator { metrics_port: port, log, kubeconfig, pid_file };
        let deadline = Instant::now() + Duration::from_secs(30);
        while op.http_get("/readyz").map(|(code, _)| code) != Some(200) {
            assert!(Instant::now() < deadline, "operator not ready in 30s; log:\n{}", op.log_text());
            std::thread::sleep(Duration::from_millis(100));
        }
        op
    }

    /// Send SIGTERM, as Kubernetes does, and wait for the process to exit.
    pub fn stop(&self) -> bool {
        let Ok(pid) = std::fs::read_to_string(&self.pid_file) else { return false };
        let pid = pid.trim().to_string();
        let _ = Command::new("kill").arg(&pid).status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            let alive = Command::new("kill").args(["-0", &pid]).status().map(|s| s.success()).unwrap_or(false);
            if !alive {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// SIGKILL, a crash: no graceful shutdown, no Lease released. Returns once it is gone.
    pub fn kill(&self) -> bool {
        let Ok(pid) = std::fs::read_to_string(&self.pid_file) else { return false };
        let pid = pid.trim().to_string();
        let _ = Command::new("kill").args(["-9", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if !Command::new("kill").args(["-0", &pid]).status().map(|s| s.success()).unwrap_or(false) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// True while the process started by `start` is alive (it never restarted).
    pub fn is_running(&self) -> bool {
        let Ok(pid) = std::fs::read_to_string(&self.pid_file) else { return false };
        Command::new("kill").args(["-0", pid.trim()]).status().map(|s| s.success()).unwrap_or(false)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GET a path of the operator's HTTP server: (status code, body).
    pub fn http_get(&self, path: &str) -> Option<(u16, String)> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.metrics_port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let code = response.split_whitespace().nth(1)?.parse().ok()?;
        let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        Some((code, body))
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}
