//! What the operator's tests share, as a library (a dev-dependency of the
//! operator crate, never published): helpers a test binary does not use are
//! no dead code here, so no test includes another's files by path.
//!
//! At the root, the end-to-end suites' cluster: one real control plane per
//! test binary (started with `tests/control-plane up`, or reused from
//! `BULKHEAD_CP_DIR`), a namespace per test, fake nodes where a test needs
//! them. Nothing here skips: a missing control plane fails the test with the
//! reason. The modules:
//!
//! | module | what |
//! |---|---|
//! | `operator` | the operator binary run under the Helm chart's RBAC |
//! | `audit` | the writes the API server's audit log records |
//! | `kubelet` | a stand-in kubelet for the fake nodes |
//! | `real_node` | real pods: images, HTTP to pod IPs, what the runtime says |
//! | `workload` | the Deployment the end-to-end tests write as YAML |
//! | `proxy` | the proxy tests' config directory, upstream, `bulkhead proxy` process and clients |
//! | `prometheus` | a real Prometheus scraping the given targets |
//! | `chart` | the chart rendered by real Helm, and the metric names really exported |
//! | `fixtures` | API objects for the pure tests, fed through `Snapshot::apply` |
//! | `builders` | typed Bulkheads, pool configs and the pool config the operator wrote |

pub mod audit;
pub mod builders;
pub mod chart;
pub mod fixtures;
pub mod kubelet;
pub mod operator;
pub mod prometheus;
pub mod proxy;
pub mod real_node;
pub mod workload;

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Namespace;
use kube::{
    api::{Api, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
    Client, Config,
};

/// The repository's root, the folder above this crate.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(1).expect("the repository holds testkit/").to_path_buf()
}

/// The `bulkhead` binary cargo built for the operator crate's integration
/// tests (what `CARGO_BIN_EXE_bulkhead` names in them): beside the `deps/`
/// folder that holds the running test binary.
pub fn bulkhead_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe.parent().and_then(Path::parent).expect("the test binary lies in <target>/<profile>/deps");
    dir.join(format!("bulkhead{}", std::env::consts::EXE_SUFFIX))
}

pub struct ControlPlane {
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub kubectl: PathBuf,
}

static CONTROL_PLANE: OnceLock<ControlPlane> = OnceLock::new();

impl ControlPlane {
    /// The control plane of this test binary, started on first use with three fake nodes.
    pub fn get() -> &'static ControlPlane {
        Self::start_with(&["--nodes", "3"])
    }

    /// The control plane of this test binary with `n` real nodes (kubelets
    /// with containerd) and no fake ones; call it before anything calls `get`.
    pub fn with_real_nodes(n: u32) -> &'static ControlPlane {
        let cp = Self::start_with(&["--nodes", "0", "--real-nodes", &n.to_string()]);
        let listed = cp.kubectl(&["get", "nodes", "-l", "test.bulkhead.dev/real-node=true", "-o", "name"]);
        assert!(
            listed.lines().count() >= n as usize,
            "the control plane at {} has fewer than {n} real nodes:\n{listed}",
            cp.dir.display()
        );
        cp
    }

    fn start_with(args: &[&str]) -> &'static ControlPlane {
        CONTROL_PLANE.get_or_init(|| {
            let dir = match std::env::var("BULKHEAD_CP_DIR") {
                Ok(dir) if !dir.is_empty() => PathBuf::from(dir),
                _ => start_control_plane(args),
            };
            let kubeconfig = dir.join("admin.kubeconfig");
            assert!(kubeconfig.exists(), "control plane at {} has no admin.kubeconfig", dir.display());
            let kubectl = env_line(&dir, "BULKHEAD_KUBECTL");
            let cp = ControlPlane { dir, kubeconfig, kubectl: PathBuf::from(kubectl) };
            // The cluster admin's opt-in: the operator claims no node without
            // it (--node-opt-in). A test that needs a node left out removes it.
            cp.kubectl(&["label", "nodes", "--all", NODE_OPT_IN, "--overwrite"]);
            cp
        })
    }

    pub async fn client(&self) -> Client {
        client_for(&self.kubeconfig).await
    }

    /// Run kubectl as cluster-admin; panics with its stderr when it fails.
    pub fn kubectl(&self, args: &[&str]) -> String {
        let out = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .expect("kubectl runs");
        assert!(out.status.success(), "kubectl {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// kubectl apply -f - with the given YAML; panics when it fails.
    pub fn apply_yaml(&self, yaml: &str) -> String {
        let (ok, stdout, stderr) = self.try_apply_yaml(yaml);
        assert!(ok, "kubectl apply failed: {stderr}\n{yaml}");
        stdout
    }

    /// kubectl apply -f - with the given YAML: (succeeded, stdout, stderr).
    pub fn try_apply_yaml(&self, yaml: &str) -> (bool, String, String) {
        use std::io::Write;
        let mut child = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["apply", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        child.stdin.take().expect("stdin").write_all(yaml.as_bytes()).expect("write yaml");
        let out = child.wait_with_output().expect("kubectl finishes");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// SIGKILL `etcd` or `kube-apiserver` (tests/control-plane kill): a crash.
    pub fn kill(&self, component: &str) {
        self.script(&["kill", &self.dir.display().to_string(), component]);
    }

    /// Start a killed component again with its data, flags and ports; returns once it is ready.
    pub fn restart(&self, component: &str) {
        self.script(&["restart", &self.dir.display().to_string(), component]);
    }

    fn script(&self, args: &[&str]) {
        let out =
            Command::new(repo_root().join("tests/control-plane")).args(args).output().expect("control-plane runs");
        assert!(
            out.status.success(),
            "tests/control-plane {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Register one fake node with extra labels, opted in to be claimed
    /// (`NODE_OPT_IN`) as the control plane's own nodes are.
    pub fn add_node(&self, name: &str, zone: &str, labels: &[(&str, &str)]) {
        self.add_node_opted(name, zone, labels, true);
    }

    /// Register one fake node with extra labels, opted in to be claimed or not.
    pub fn add_node_opted(&self, name: &str, zone: &str, labels: &[(&str, &str)], opted_in: bool) {
        let status = Command::new(repo_root().join("tests/control-plane"))
            .args(["node", name, zone])
            .env("BULKHEAD_CP_DIR", &self.dir)
            .status()
            .expect("control-plane node runs");
        assert!(status.success(), "could not register node {name}");
        for (k, v) in labels {
            self.kubectl(&["label", "node", name, &format!("{k}={v}"), "--overwrite"]);
        }
        if opted_in {
            self.kubectl(&["label", "node", name, NODE_OPT_IN, "--overwrite"]);
        }
    }
}

fn start_control_plane(args: &[&str]) -> PathBuf {
    let script = repo_root().join("tests/control-plane");
    let out = Command::new(&script)
        .arg("up")
        .args(args)
        .args(["--watch-pid", &std::process::id().to_string()])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the test control plane did not start (tests/control-plane up): {}\n{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = stdout
        .lines()
        .find_map(|l| l.strip_prefix("export BULKHEAD_CP_DIR="))
        .unwrap_or_else(|| panic!("tests/control-plane up printed no BULKHEAD_CP_DIR: {stdout}"));
    PathBuf::from(dir)
}

fn env_line(dir: &Path, var: &str) -> String {
    let out = Command::new(repo_root().join("tests/control-plane"))
        .args(["env", &dir.display().to_string()])
        .output()
        .expect("control-plane env runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("export {var}=")).map(str::to_string))
        .unwrap_or_else(|| panic!("tests/control-plane env printed no {var}: {stdout}"))
}

pub async fn client_for(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("kubeconfig readable");
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.expect("kubeconfig valid");
    Client::try_from(config).expect("client")
}

/// The label that opts a namespace in (the operator's default
/// `--namespace-opt-in`), as `key=value`.
pub const NAMESPACE_OPT_IN: &str = bulkhead::plan::DEFAULT_NAMESPACE_OPT_IN;
/// The label that opts a node in to be claimed (the default `--node-opt-in`).
pub const NODE_OPT_IN: &str = bulkhead::plan::DEFAULT_NODE_OPT_IN;

/// A namespace for one test, deleted when the guard drops (also on panic).
pub struct TestNamespace {
    pub name: String,
    kubeconfig: PathBuf,
    kubectl: PathBuf,
}

impl TestNamespace {
    /// A namespace with these labels, opted in (`NAMESPACE_OPT_IN`): the
    /// operator writes in no other.
    pub async fn new(prefix: &str, labels: &[(&str, &str)]) -> Self {
        let (key, value) = NAMESPACE_OPT_IN.split_once('=').expect("KEY=VALUE");
        let mut labels = labels.to_vec();
        labels.push((key, value));
        Self::not_opted_in(prefix, &labels).await
    }

    /// A namespace with exactly these labels: without `NAMESPACE_OPT_IN`, the
    /// operator writes nothing there.
    pub async fn not_opted_in(prefix: &str, labels: &[(&str, &str)]) -> Self {
        let cp = ControlPlane::get();
        let name = format!("{prefix}-{}", unique_suffix());
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels.iter().copied().collect::<std::collections::BTreeMap<_, _>>()}
        }))
        .expect("namespace");
        Api::<Namespace>::all(cp.client().await).create(&PostParams::default(), &ns).await.expect("create namespace");
        TestNamespace { name, kubeconfig: cp.kubeconfig.clone(), kubectl: cp.kubectl.clone() }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // Synchronous on purpose: Drop may run while a panicking runtime unwinds.
        let _ = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["delete", "namespace", &self.name, "--wait=false", "--ignore-not-found"])
            .output();
    }
}

pub fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    // The leading letter keeps an all-digit suffix from reading as a YAML
    // integer where it ends up in a label value.
    format!("u{:x}{}", nanos % 0xfffff, N.fetch_add(1, Ordering::Relaxed))
}

/// A condition of Bulkhead `name` as (status, reason, message), once its status
/// describes the current generation.
pub async fn condition(client: &Client, name: &str, type_: &str) -> Option<(String, String, String)> {
    let bh = Api::<bulkhead::crd::Bulkhead>::all(client.clone()).get(name).await.ok()?;
    let status = bh.status?;
    if status.observed_generation != bh.metadata.generation {
        return None;
    }
    let c = status.conditions.into_iter().find(|c| c.type_ == type_)?;
    Some((c.status, c.reason, c.message))
}

/// Poll `check` until it returns Some or `timeout` passes; panics with `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Names of the objects `api` lists that start with `prefix` (e.g. a Bulkhead's
/// `bulkhead-<name>.` quotas and PriorityClasses).
pub async fn names_with_prefix<K>(api: &kube::Api<K>, prefix: &str) -> kube::Result<std::collections::BTreeSet<String>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let list = api.list(&kube::api::ListParams::default()).await?;
    Ok(list.items.into_iter().filter_map(|o| o.meta().name.clone()).filter(|n| n.starts_with(prefix)).collect())
}
