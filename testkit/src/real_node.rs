//! Real pods: the images built from this repository (tests/image), plain
//! HTTP/1.1 to pod IPs, and what the container runtime on the host says about
//! a container (its process, its user, its root filesystem). Nothing here
//! reads a manifest to learn what runs: it asks the runtime and /proc.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
    time::{Duration, Instant},
};

use super::{repo_root, ControlPlane};

/// The operator and test-app images, built and imported into every real node once per test binary.
pub struct Images {
    pub operator: String,
    pub app: String,
}

static IMAGES: OnceLock<Images> = OnceLock::new();

impl Images {
    pub fn get() -> &'static Images {
        IMAGES.get_or_init(|| {
            let cp = ControlPlane::get();
            let started = Instant::now();
            let out = Command::new(repo_root().join("tests/image"))
                .args(["build", "--into"])
                .arg(&cp.dir)
                .output()
                .expect("tests/image runs");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "tests/image build failed:\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let line = |key: &str| {
                stdout
                    .lines()
                    .find_map(|l| l.strip_prefix(&format!("{key}=")))
                    .unwrap_or_else(|| panic!("tests/image build printed no {key}=: {stdout}"))
                    .to_string()
            };
            let images = Images { operator: line("operator"), app: line("app") };
            println!(
                "images: operator={} app={} (built and imported in {:.0} s)",
                images.operator,
                images.app,
                started.elapsed().as_secs_f64()
            );
            images
        })
    }

    /// (repository, tag) of the operator image, as the chart's values take it.
    pub fn operator_repo_tag(&self) -> (&str, &str) {
        self.operator.rsplit_once(':').expect("the operator image has a tag")
    }
}

/// One HTTP/1.1 exchange on a fresh connection: (status, elapsed). Status 0
/// when the connection failed or no status line came back within `timeout`.
pub fn http_get(addr: SocketAddr, path: &str, timeout: Duration) -> (u16, Duration) {
    let started = Instant::now();
    let status = (|| {
        let mut stream = TcpStream::connect_timeout(&addr, timeout).ok()?;
        stream.set_read_timeout(Some(timeout)).ok()?;
        stream.set_write_timeout(Some(timeout)).ok()?;
        let req = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
        stream.write_all(req.as_bytes()).ok()?;
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response);
        let text = String::from_utf8_lossy(&response);
        text.split_whitespace().nth(1)?.parse::<u16>().ok()
    })()
    .unwrap_or(0);
    (status, started.elapsed())
}

/// The value of one sample in a Prometheus text exposition, by its exact
/// name and label set as printed (e.g. `bulkhead_proxy_class_in_flight{class="a"}`),
/// leaving out the `bulkhead` label every proxy series carries.
pub fn sample(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|l| unlabelled(l).strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

use super::proxy::unlabelled;

/// A container as the runtime on a real node knows it.
#[derive(Debug)]
pub struct RuntimeContainer {
    pub id: String,
    pub node: String,
    /// The host PID of the container's first process.
    pub pid: u32,
}

impl RuntimeContainer {
    /// The container named `container` of pod `namespace/pod`, from the
    /// containerd of whichever real node runs it (CRI labels its containers).
    pub fn find(cp: &ControlPlane, namespace: &str, pod: &str, container: &str) -> Option<RuntimeContainer> {
        for node_dir in node_dirs(cp) {
            let socket = node_dir.join("containerd.sock");
            let ctr = |args: &[&str]| -> Option<String> {
                let out = Command::new("ctr").arg("-a").arg(&socket).args(["-n", "k8s.io"]).args(args).output().ok()?;
                out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
            };
            let Some(ids) = ctr(&["containers", "ls", "-q"]) else { continue };
            for id in ids.lines() {
                let Some(info) = ctr(&["containers", "info", id]) else { continue };
                let Ok(info) = serde_json::from_str::<serde_json::Value>(&info) else { continue };
                let labels = &info["Labels"];
                if labels["io.kubernetes.pod.namespace"] == namespace
                    && labels["io.kubernetes.pod.name"] == pod
                    && labels["io.kubernetes.container.name"] == container
                {
                    let tasks = ctr(&["tasks", "ls"])?;
                    let pid = tasks.lines().find_map(|l| {
                        let mut f = l.split_whitespace();
                        (f.next()? == id).then(|| f.next()?.parse().ok())?
                    })?;
                    let node = node_dir.file_name()?.to_string_lossy().into_owned();
                    return Some(RuntimeContainer { id: id.to_string(), node, pid });
                }
            }
        }
        None
    }

    /// Real, effective, saved and filesystem uids of its process (/proc/PID/status).
    pub fn uids(&self) -> Vec<u32> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).expect("/proc/PID/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .expect("a Uid line")
            .split_whitespace()
            .map(|u| u.parse().expect("numeric uid"))
            .collect()
    }

    /// The options of the mount at / inside its mount namespace (/proc/PID/mountinfo).
    pub fn root_mount_options(&self) -> Vec<String> {
        let info = std::fs::read_to_string(format!("/proc/{}/mountinfo", self.pid)).expect("/proc/PID/mountinfo");
        // Fields: id parent major:minor root mount-point options ...; the last mount at / wins.
        let root = info.lines().rfind(|l| l.split_whitespace().nth(4) == Some("/")).expect("a mount at /");
        root.split_whitespace().nth(5).expect("mount options").split(',').map(str::to_string).collect()
    }

    /// Its descriptor limit (soft, hard) as it runs (/proc/PID/limits).
    pub fn nofile(&self) -> (String, String) {
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", self.pid)).expect("/proc/PID/limits");
        let line = limits.lines().find(|l| l.starts_with("Max open files")).expect("a Max open files line");
        let mut f = line.trim_start_matches("Max open files").split_whitespace();
        (f.next().expect("soft").to_owned(), f.next().expect("hard").to_owned())
    }

    /// Its command line, as the kernel has it.
    pub fn cmdline(&self) -> Vec<String> {
        let raw = std::fs::read(format!("/proc/{}/cmdline", self.pid)).expect("/proc/PID/cmdline");
        raw.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
    }

    /// Whether the process can write below / (a probe from the host into its root).
    pub fn root_writable(&self) -> bool {
        let probe = Path::new("/proc").join(self.pid.to_string()).join("root/.bulkhead-write-probe");
        // As root on the host a read-only mount still refuses the write.
        let wrote = std::fs::write(&probe, b"x").is_ok();
        let _ = std::fs::remove_file(&probe);
        wrote
    }
}

fn node_dirs(cp: &ControlPlane) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(cp.dir.join("nodes")) else { return Vec::new() };
    entries.flatten().map(|e| e.path()).filter(|p| p.join("containerd.sock").exists()).collect()
}

/// Where a sidecar serves /metrics, read from its command line (`--metrics`,
/// else `--admin`), scraped from inside its pod's network namespace: the
/// default keeps metrics off the pod IP.
#[derive(Clone, Debug)]
pub struct SidecarMetrics {
    pub pid: u32,
    /// Where to scrape from inside the pod.
    pub addr: SocketAddr,
    /// The sidecar binds metrics to loopback only: nothing outside the pod reaches them.
    pub loopback_only: bool,
}

impl SidecarMetrics {
    pub fn of(container: &RuntimeContainer) -> SidecarMetrics {
        let args = container.cmdline();
        let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
        let listen = flag("--metrics").or_else(|| flag("--admin")).expect("the sidecar names a metrics address");
        let mut addr: SocketAddr = listen.parse().expect("a HOST:PORT metrics address");
        let loopback_only = addr.ip().is_loopback();
        if addr.ip().is_unspecified() {
            addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        SidecarMetrics { pid: container.pid, addr, loopback_only }
    }

    /// GET /metrics from inside the pod (nsenter into its network namespace).
    pub fn scrape(&self) -> Option<String> {
        let out = Command::new("nsenter")
            .arg(format!("--net=/proc/{}/ns/net", self.pid))
            .args(["curl", "-sf", "-m", "5"])
            .arg(format!("http://{}/metrics", self.addr))
            .output()
            .ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}
