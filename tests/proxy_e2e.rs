//! The enforcement sidecar end to end, on the real control plane: the
//! operator injects `bulkhead proxy` into a Deployment and writes its pool
//! config; the test lays that ConfigMap out on disk as the kubelet does
//! (timestamped directory, atomic `..data` swap), runs the real proxy on it
//! against a local upstream, and changes the Bulkhead (the Deployment's
//! replica count of a Fleet pool, then a class's `reserved`): the proxy must
//! enforce each new ceiling exactly, measured from the change, without
//! cutting a request in flight. Deleting the Bulkhead restores the template.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use bulkhead::pool_config::PoolConfig;
use bulkhead_testkit::{condition, operator::Operator, unique_suffix, wait_for, ControlPlane, TestNamespace};
use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
use kube::{api::Api, Client};
use serde_json::{json, Value};

const SETTLE: Duration = Duration::from_secs(30);
const HEADER: &str = "x-bulkhead-class";

fn deployment(ns: &str, replicas: u32) -> String {
    bulkhead_testkit::workload::DeploymentYaml {
        container: "app",
        container_fields: "ports: [{containerPort: 8080}]",
        ..bulkhead_testkit::workload::DeploymentYaml::new(ns, "api", replicas)
    }
    .render()
}

/// A Fleet pool over the `api` Deployment, with the sidecar in front of it.
fn bulkhead(name: &str, ns: &str, checkout_reserved: u32) -> String {
    format!(
        r#"apiVersion: bulkhead.dev/v1alpha1
kind: Bulkhead
metadata: {{name: {name}}}
spec:
  dimension: Dependency
  pool: {{resource: requests, capacity: 80, scope: Fleet, sharedSurplus: 20}}
  workload:
    namespace: {ns}
    selector: {{matchLabels: {{app: api}}}}
    proxy: {{mode: Ingress, port: 8081, upstreamPort: 8080, classifyHeader: {HEADER}, unclassified: reject}}
  classes:
  - {{name: checkout, reserved: {checkout_reserved}}}
  - {{name: search, reserved: 10}}
  - {{name: control-plane, reserved: 4, critical: true}}
"#
    )
}

// --- a local upstream and a plain HTTP/1.1 client --------------------------

/// Answers `GET /hold/<ms>` after holding it that long.
fn upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind upstream");
    let addr = listener.local_addr().expect("upstream address");
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || serve_one(stream));
        }
    });
    addr
}

fn serve_one(mut stream: TcpStream) {
    // Keep-alive: the proxy pools its upstream connections.
    loop {
        let Some(head) = read_head(&mut stream) else { return };
        let hold = head
            .split_whitespace()
            .nth(1)
            .and_then(|path| path.strip_prefix("/hold/"))
            .and_then(|ms| ms.parse::<u64>().ok())
            .unwrap_or(0);
        thread::sleep(Duration::from_millis(hold));
        if stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").is_err() {
            return;
        }
    }
}

fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// One request through the proxy; its status code (0 when the connection failed).
fn request(proxy: SocketAddr, class: &str, hold_ms: u64) -> u16 {
    let Ok(mut stream) = TcpStream::connect(proxy) else { return 0 };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
    let req = format!("GET /hold/{hold_ms} HTTP/1.1\r\nhost: api\r\n{HEADER}: {class}\r\nconnection: close\r\n\r\n");
    if stream.write_all(req.as_bytes()).is_err() {
        return 0;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// `n` requests of `class` at once, each held `hold_ms` upstream: (admitted, rejected).
fn burst(proxy: SocketAddr, class: &str, n: usize, hold_ms: u64) -> (usize, usize) {
    let handles: Vec<_> = (0..n)
        .map(|_| {
            thread::spawn({
                let class = class.to_string();
                move || request(proxy, &class, hold_ms)
            })
        })
        .collect();
    let codes: Vec<u16> = handles.into_iter().map(|h| h.join().unwrap_or(0)).collect();
    let admitted = codes.iter().filter(|c| **c == 200).count();
    let rejected = codes.iter().filter(|c| **c == 503).count();
    assert_eq!(admitted + rejected, n, "every request is admitted or rejected: {codes:?}");
    (admitted, rejected)
}

// --- the kubelet's way of updating a mounted ConfigMap ----------------------

/// A ConfigMap volume as the kubelet writes it: the files live in a
/// timestamped directory, `..data` points at it, and each key is a link
/// through `..data`. An update writes a new directory and renames a new link
/// over `..data`, atomically.
struct MountedConfigMap {
    dir: PathBuf,
    generation: u32,
}

impl MountedConfigMap {
    fn new(dir: &Path, pools_json: &str) -> Self {
        let mut mount = MountedConfigMap { dir: dir.to_path_buf(), generation: 0 };
        mount.update(pools_json);
        std::os::unix::fs::symlink("..data/pools.json", dir.join("pools.json")).expect("key link");
        mount
    }

    fn update(&mut self, pools_json: &str) {
        self.generation += 1;
        let stamped = format!("..2026_12_03_10_00_{:02}.{}", self.generation, std::process::id());
        std::fs::create_dir(self.dir.join(&stamped)).expect("timestamped dir");
        std::fs::write(self.dir.join(&stamped).join("pools.json"), pools_json).expect("write config");
        let tmp = self.dir.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&stamped, &tmp).expect("new data link");
        std::fs::rename(&tmp, self.dir.join("..data")).expect("atomic swap");
    }
}

// --- the proxy process ------------------------------------------------------

struct Proxy {
    child: Child,
    listen: SocketAddr,
    admin: SocketAddr,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port")
}

fn start_proxy(config_dir: &Path, upstream: SocketAddr) -> Proxy {
    let (listen, admin) = (free_addr(), free_addr());
    let child = Command::new(env!("CARGO_BIN_EXE_bulkhead"))
        .args(["proxy", "--config-dir"])
        .arg(config_dir)
        .args(["--listen", &listen.to_string(), "--upstream", &format!("http://{upstream}")])
        .args(["--classify", &format!("header:{HEADER}"), "--unclassified", "reject", "--admin", &admin.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("proxy starts");
    let proxy = Proxy { child, listen, admin };
    let deadline = Instant::now() + Duration::from_secs(10);
    while http_get(admin, "/readyz").map(|r| r.0) != Some(200) {
        assert!(Instant::now() < deadline, "proxy not ready in 10s");
        thread::sleep(Duration::from_millis(50));
    }
    proxy
}

fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((code, body))
}

/// The ceiling the proxy enforces for `class` now, from its metrics.
fn enforced_ceiling(proxy: &Proxy, class: &str) -> Option<u32> {
    let (_, body) = http_get(proxy.admin, "/metrics")?;
    body.lines()
        .map(bulkhead_testkit::proxy::unlabelled)
        .filter(|l| l.starts_with(&format!("bulkhead_proxy_class_ceiling{{class=\"{class}\"}}")))
        .find_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u32)
}

// --- the cluster side ---------------------------------------------------------

async fn pools_json(client: &Client, ns: &str, name: &str) -> Option<String> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns).get(&format!("bulkhead-{name}")).await.ok()?;
    cm.data?.remove("pools.json")
}

fn ceiling_of(pools_json: &str, class: &str) -> u32 {
    let config: PoolConfig = serde_json::from_str(pools_json).expect("pools.json");
    config.classes.iter().find(|c| c.name == class).map(|c| c.ceiling).expect("class in pools.json")
}

async fn template(client: &Client, ns: &str) -> Value {
    let d = Api::<Deployment>::namespaced(client.clone(), ns).get("api").await.expect("deployment");
    json!(d.spec.expect("spec").template)
}

/// Follows the ConfigMap as the kubelet would (it polls; so does this), and
/// returns when the proxy enforces `class`'s new ceiling: (config, time taken).
async fn follow_until_enforced(
    client: &Client,
    ns: &str,
    name: &str,
    mount: &mut MountedConfigMap,
    proxy: &Proxy,
    class: &str,
    old: &str,
) -> (String, Duration) {
    let started = Instant::now();
    let new = wait_for("the operator rewrites the pool config", SETTLE, || async {
        pools_json(client, ns, name).await.filter(|j| j != old)
    })
    .await;
    mount.update(&new);
    let want = ceiling_of(&new, class);
    wait_for(&format!("the proxy enforces ceiling {want} for {class}"), SETTLE, || async {
        (enforced_ceiling(proxy, class) == Some(want)).then_some(())
    })
    .await;
    (new, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_injects_the_sidecar_and_the_proxy_enforces_each_new_config() {
    let cp = ControlPlane::get();
    Operator::get();
    let client = cp.client().await;
    let ns = TestNamespace::new("proxy", &[]).await;
    let name = format!("proxy-{}", unique_suffix());
    cp.apply_yaml(&deployment(&ns.name, 2));
    let before = template(&client, &ns.name).await;
    cp.apply_yaml(&bulkhead(&name, &ns.name, 20));

    // The operator writes the pool config and injects the sidecar.
    let first = wait_for("the pool config", SETTLE, || pools_json(&client, &ns.name, &name)).await;
    let injected = wait_for("the sidecar in the template", SETTLE, || async {
        let t = template(&client, &ns.name).await;
        let containers = t["spec"]["containers"].as_array()?;
        containers.iter().any(|c| c["name"] == "bulkhead-proxy").then_some(t)
    })
    .await;
    let sidecar = injected["spec"]["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == "bulkhead-proxy"))
        .cloned()
        .expect("sidecar");
    assert_eq!(sidecar["args"][0], "proxy");
    assert_eq!(sidecar["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(sidecar["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(sidecar["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(sidecar["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(sidecar["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    assert!(sidecar["resources"]["requests"]["cpu"].is_string(), "{sidecar}");
    let mount = &sidecar["volumeMounts"][0];
    assert!(mount.get("subPath").is_none(), "mounted as a directory, never subPath: {mount}");
    let volume = injected["spec"]["volumes"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["name"] == "bulkhead-pools"))
        .cloned()
        .expect("volume");
    assert_eq!(volume["configMap"]["name"], format!("bulkhead-{name}"));
    let (status, reason, message) =
        wait_for("ProxyInjected", SETTLE, || async { condition(&client, &name, "ProxyInjected").await }).await;
    assert_eq!((status.as_str(), reason.as_str()), ("True", "SidecarInjected"), "{message}");

    // The real proxy on the config as the kubelet lays it out.
    let dir = tempfile::tempdir().expect("mount dir");
    let mut mounted = MountedConfigMap::new(dir.path(), &first);
    let proxy = start_proxy(dir.path(), upstream());
    let ceiling = ceiling_of(&first, "checkout");
    assert_eq!(enforced_ceiling(&proxy, "checkout"), Some(ceiling));
    assert_eq!(burst(proxy.listen, "checkout", ceiling as usize + 3, 1500), (ceiling as usize, 3));

    // Requests in flight across the change must finish.
    let in_flight: Vec<_> = (0..3)
        .map(|_| {
            let listen = proxy.listen;
            thread::spawn(move || request(listen, "checkout", 4000))
        })
        .collect();
    thread::sleep(Duration::from_millis(300));

    // 1. The Fleet pool splits over more replicas: a smaller ceiling per replica.
    cp.kubectl(&["-n", &ns.name, "scale", "deployment/api", "--replicas=4"]);
    let (second, took) =
        follow_until_enforced(&client, &ns.name, &name, &mut mounted, &proxy, "checkout", &first).await;
    let smaller = ceiling_of(&second, "checkout");
    assert!(smaller < ceiling, "4 replicas share the fleet: {smaller} < {ceiling}");
    println!("replicas 2 -> 4: ceiling {ceiling} -> {smaller}, enforced {:.2} s after the change", took.as_secs_f64());
    let finished: Vec<u16> = in_flight.into_iter().map(|h| h.join().unwrap_or(0)).collect();
    assert_eq!(finished, vec![200, 200, 200], "no request in flight is cut by a reload");
    assert_eq!(burst(proxy.listen, "checkout", smaller as usize + 3, 1500), (smaller as usize, 3));

    // 2. A class's reserved grows: a larger ceiling.
    cp.apply_yaml(&bulkhead(&name, &ns.name, 40));
    let (third, took) =
        follow_until_enforced(&client, &ns.name, &name, &mut mounted, &proxy, "checkout", &second).await;
    let larger = ceiling_of(&third, "checkout");
    assert!(larger > smaller, "{larger} > {smaller}");
    println!("reserved 20 -> 40: ceiling {smaller} -> {larger}, enforced {:.2} s after the change", took.as_secs_f64());
    assert_eq!(burst(proxy.listen, "checkout", larger as usize + 3, 1500), (larger as usize, 3));

    // Deleting the Bulkhead withdraws the sidecar: the template is as before.
    cp.kubectl(&["delete", "bulkhead", &name, "--wait=true"]);
    let restored = wait_for("the template restored", SETTLE, || async {
        let t = template(&client, &ns.name).await;
        (t == before).then_some(t)
    })
    .await;
    assert_eq!(restored, before);
    drop(proxy);
}
