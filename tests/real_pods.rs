//! Real pods: the operator and the injected proxy run from the image the
//! Dockerfile builds, on kubelets with containerd (tests/control-plane
//! `--real-nodes 2`), installed with the Helm chart. Nothing marks a pod
//! Ready here but its own probes; requests go to pod IPs through the bridge
//! the host routes; what runs is read from the runtime and /proc.
//!
//! The tests share one cluster and run one after another (the flood's
//! latency figures must not share the two cores with another test's rollout).

use std::{
    collections::BTreeSet,
    net::{IpAddr, SocketAddr},
    sync::OnceLock,
    thread,
    time::{Duration, Instant},
};

use bulkhead::pool_config::PoolConfig;
use bulkhead_testkit::{
    builders::pool_config,
    condition,
    operator::helm_run,
    real_node::{http_get, sample, Images, RuntimeContainer, SidecarMetrics},
    unique_suffix, wait_for, ControlPlane, TestNamespace,
};
use k8s_openapi::api::{
    apps::v1::Deployment,
    coordination::v1::Lease,
    core::v1::{ConfigMap, Node, Pod},
};
use kube::{
    api::{Api, DeleteParams, ListParams},
    Client,
};
use serde_json::json;

const RELEASE_NS: &str = "bulkhead";
const ROLLOUT: Duration = Duration::from_secs(180);
/// The fault suite's bound on a takeover after the leader is killed (its
/// Lease must expire); a deleted pod is stopped with SIGTERM, which is faster.
const TAKEOVER: Duration = Duration::from_secs(17);
const PROXY_PORT: u16 = 8081;

/// Held for a whole test: one test at a time (tokio's lock works across the
/// tests' runtimes and is not poisoned by a failed test).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Two real nodes, the images, and the chart installed from the built image
/// with two replicas (so leader election is on), once per binary.
fn cluster() -> &'static ControlPlane {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    let cp = ControlPlane::with_real_nodes(2);
    INSTALLED.get_or_init(|| {
        let images = Images::get();
        let (repo, tag) = images.operator_repo_tag();
        let started = Instant::now();
        helm_run(&[
            "install",
            "bulkhead",
            "charts/bulkhead",
            "--namespace",
            RELEASE_NS,
            "--create-namespace",
            "--set",
            &format!("image.repository={repo}"),
            "--set",
            &format!("image.tag={tag}"),
            "--set",
            "image.pullPolicy=Never",
            "--set",
            "replicaCount=2",
            "--wait",
            "--timeout",
            "4m",
        ]);
        println!("helm install --wait with the built image: {:.1} s", started.elapsed().as_secs_f64());
    });
    cp
}

async fn pods(client: &Client, ns: &str, selector: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(selector))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

fn ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Every container of the pod ready, as the kubelet's probes found it: (ready, total).
fn containers_ready(pod: &Pod) -> (usize, usize) {
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.clone()).unwrap_or_default();
    (statuses.iter().filter(|c| c.ready).count(), statuses.len())
}

fn pod_ip(pod: &Pod) -> IpAddr {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .and_then(|ip| ip.parse().ok())
        .expect("a Running pod has an IP")
}

fn node_of(pod: &Pod) -> String {
    pod.spec.as_ref().and_then(|s| s.node_name.clone()).expect("a Running pod is bound")
}

/// `want` pods of `selector`, all Ready, none terminating.
async fn wait_ready(client: &Client, ns: &str, selector: &str, want: usize, timeout: Duration) -> Vec<Pod> {
    wait_for(&format!("{want} Ready pods of {selector} in {ns}"), timeout, || async {
        let all = pods(client, ns, selector).await;
        let live: Vec<Pod> = all.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).cloned().collect();
        (live.len() == want && all.len() == want && live.iter().all(ready)).then_some(live)
    })
    .await
}

fn app_deployment(ns: &str, name: &str, image: &str, replicas: u32) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {ns}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: app
        image: {image}
        imagePullPolicy: Never
        ports: [{{containerPort: 8080}}]
        readinessProbe: {{tcpSocket: {{port: 8080}}, periodSeconds: 2}}
        resources: {{requests: {{cpu: 10m, memory: 16Mi}}}}
"#
    )
}

// --- a. the operator from its own image ------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_runs_from_its_image_and_a_deleted_leader_hands_over() {
    let _serial = SERIAL.lock().await;
    let cp = cluster();
    let client = cp.client().await;
    let images = Images::get();
    let selector = "app.kubernetes.io/name=bulkhead";
    let running = wait_ready(&client, RELEASE_NS, selector, 2, ROLLOUT).await;
    for pod in &running {
        let image = &pod.spec.as_ref().expect("spec").containers[0].image;
        assert_eq!(image.as_deref(), Some(images.operator.as_str()), "the operator runs the built image");
        assert_eq!(containers_ready(pod), (1, 1), "ready through its own probes");
    }
    let names: BTreeSet<String> = running.iter().filter_map(|p| p.metadata.name.clone()).collect();

    let leases: Api<Lease> = Api::namespaced(client.clone(), RELEASE_NS);
    let holder = || async { leases.get("bulkhead-operator").await.ok()?.spec?.holder_identity };
    let leader = wait_for("one operator pod holds the Lease", Duration::from_secs(60), || async {
        holder().await.filter(|h| names.contains(h))
    })
    .await;
    let name = format!("rp-lease-{}", unique_suffix());
    cp.apply_yaml(&tiny_bulkhead(&name));
    wait_for("the leader reconciles", Duration::from_secs(60), || async {
        condition(&client, &name, "Ready").await.filter(|c| c.0 == "True")
    })
    .await;

    let deleted = Instant::now();
    Api::<Pod>::namespaced(client.clone(), RELEASE_NS)
        .delete(&leader, &DeleteParams::default())
        .await
        .expect("delete leader");
    let successor = wait_for("the other pod takes the Lease", TAKEOVER, || async {
        holder().await.filter(|h| h != &leader && names.contains(h))
    })
    .await;
    let took = deleted.elapsed();
    println!("leader pod {leader} deleted: {successor} holds the Lease {:.2} s later", took.as_secs_f64());
    let second = format!("rp-lease-{}", unique_suffix());
    cp.apply_yaml(&tiny_bulkhead(&second));
    wait_for("the new leader reconciles", Duration::from_secs(60), || async {
        condition(&client, &second, "Ready").await.filter(|c| c.0 == "True")
    })
    .await;
    cp.kubectl(&["delete", "bulkhead", &name, &second, "--timeout=60s"]);
    // The Deployment replaces the deleted pod: two Ready again for the next test.
    wait_ready(&client, RELEASE_NS, selector, 2, ROLLOUT).await;
}

fn tiny_bulkhead(name: &str) -> String {
    format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: {name}}}\nspec:\n  dimension: Tenant\n  pool: {{resource: connections, capacity: 10}}\n  classes: [{{name: a, reserved: 1, critical: true}}]\n"
    )
}

// --- b, c, e. the injected proxy in real pods --------------------------------

/// A Fleet pool over the app Deployment; classes by path: `/sleep` is the
/// dependency that hangs, `/steady` carries steady load, `/critical` is the
/// critical lane.
fn proxied_bulkhead(name: &str, ns: &str) -> String {
    format!(
        r#"apiVersion: bulkhead.dev/v1alpha1
kind: Bulkhead
metadata: {{name: {name}}}
spec:
  dimension: Dependency
  pool: {{resource: requests, capacity: 40, scope: Fleet, sharedSurplus: 10}}
  workload:
    namespace: {ns}
    selector: {{matchLabels: {{app: app}}}}
    proxy:
      mode: Ingress
      port: {PROXY_PORT}
      upstreamPort: 8080
      unclassified: reject
      pathPrefixes:
      - {{prefix: /sleep, class: slow}}
      - {{prefix: /steady, class: steady}}
      - {{prefix: /critical, class: control-plane}}
  classes:
  - {{name: slow, reserved: 12}}
  - {{name: steady, reserved: 12}}
  - {{name: control-plane, reserved: 6, critical: true}}
"#
    )
}

/// The sidecars of the test's pods by pod IP, registered once each is running.
static SIDECARS: std::sync::Mutex<Vec<(IpAddr, SidecarMetrics)>> = std::sync::Mutex::new(Vec::new());

/// Find each pod's sidecar in the runtime and remember where its metrics are.
fn register_sidecars(cp: &ControlPlane, ns: &str, pods: &[Pod]) {
    for pod in pods {
        let name = pod.metadata.name.as_deref().expect("pod name");
        let sidecar = RuntimeContainer::find(cp, ns, name, "bulkhead-proxy").expect("the sidecar in containerd");
        let metrics = SidecarMetrics::of(&sidecar);
        let ip = pod_ip(pod);
        if metrics.loopback_only {
            // Kept off the pod IP: nothing answers there from outside the pod.
            let (status, _) = http_get(SocketAddr::new(ip, metrics.addr.port()), "/metrics", Duration::from_secs(2));
            assert_eq!(status, 0, "metrics of {name} are not served on its pod IP");
        }
        let mut all = SIDECARS.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|(known, _)| *known != ip);
        all.push((ip, metrics));
    }
}

fn metrics(ip: IpAddr) -> Option<String> {
    let sidecar = {
        let all = SIDECARS.lock().unwrap_or_else(|p| p.into_inner());
        all.iter().find(|(known, _)| *known == ip).map(|(_, m)| m.clone())
    };
    sidecar.expect("the pod's sidecar was registered").scrape()
}

/// Requests of `class` holding a slot: from its floor plus from the surplus.
fn in_flight(exposition: &str, class: &str) -> Option<f64> {
    let pool = |p: &str| sample(exposition, &format!("bulkhead_proxy_in_flight{{class=\"{class}\",pool=\"{p}\"}}"));
    Some(pool("floor")? + pool("surplus")?)
}

fn class_gauge(exposition: &str, metric: &str, class: &str) -> Option<f64> {
    sample(exposition, &format!("bulkhead_proxy_{metric}{{class=\"{class}\"}}"))
}

fn ceiling(config: &PoolConfig, class: &str) -> u32 {
    config.classes.iter().find(|c| c.name == class).map(|c| c.ceiling).expect("class in pools.json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_injected_proxy_enforces_the_pool_in_real_pods() {
    let _serial = SERIAL.lock().await;
    let cp = cluster();
    let client = cp.client().await;
    let images = Images::get();
    let ns = TestNamespace::new("rp-proxy", &[]).await;
    let bh = format!("rp-proxy-{}", unique_suffix());
    cp.apply_yaml(&app_deployment(&ns.name, "app", &images.app, 2));
    cp.apply_yaml(&proxied_bulkhead(&bh, &ns.name));

    // b. Injected, 2/2 Ready through the kubelet's probes, reachable by pod IP.
    let started = Instant::now();
    let running = wait_for("two app pods with the sidecar, 2/2 Ready", ROLLOUT, || async {
        let live = pods(&client, &ns.name, "app=app").await;
        let injected = live.iter().filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.spec.as_ref().is_some_and(|s| s.containers.iter().any(|c| c.name == "bulkhead-proxy"))
        });
        let injected: Vec<Pod> = injected.cloned().collect();
        (live.len() == 2 && injected.len() == 2 && injected.iter().all(|p| containers_ready(p) == (2, 2)))
            .then_some(injected)
    })
    .await;
    println!("injected pods 2/2 Ready {:.1} s after the Bulkhead was applied", started.elapsed().as_secs_f64());
    let ips: Vec<IpAddr> = running.iter().map(pod_ip).collect();
    register_sidecars(cp, &ns.name, &running);
    for ip in &ips {
        let (status, _) = http_get(SocketAddr::new(*ip, PROXY_PORT), "/steady/hello", Duration::from_secs(5));
        assert_eq!(status, 200, "a request to pod {ip} reaches the app through the proxy");
        let (status, _) = http_get(SocketAddr::new(*ip, PROXY_PORT), "/unknown", Duration::from_secs(5));
        assert_eq!(status, 503, "an unclassified request is rejected by the proxy at {ip}");
    }
    // The proxy's limits are the ConfigMap's, as the kubelet projected it into
    // the pod, once the Bulkhead says every pod enforces it (the rollout's
    // surge re-split the Fleet pool over the pods that existed meanwhile).
    wait_converged(&client, &ns.name, &bh, Duration::from_secs(60)).await;
    let config = wait_for("the pool config", Duration::from_secs(30), || pool_config(&client, &ns.name, &bh)).await;
    assert_eq!(config.divided_by, 2, "a Fleet pool over two replicas");
    for ip in &ips {
        let exposition = metrics(*ip).expect("the proxy's metrics");
        for class in ["slow", "steady", "control-plane"] {
            assert_eq!(
                class_gauge(&exposition, "class_ceiling", class),
                Some(f64::from(ceiling(&config, class))),
                "pod {ip} enforces the ConfigMap's ceiling of {class}"
            );
        }
    }

    // e. The restricted securityContext, as the runtime runs it.
    let pod_name = running[0].metadata.name.clone().expect("name");
    let sidecar = RuntimeContainer::find(cp, &ns.name, &pod_name, "bulkhead-proxy").expect("the sidecar in containerd");
    assert_eq!(sidecar.uids(), vec![65532; 4], "the proxy process runs as 65532 (real, effective, saved, fs)");
    assert!(sidecar.root_mount_options().iter().any(|o| o == "ro"), "its root is mounted read-only");
    assert!(!sidecar.root_writable(), "a write below its root is refused");
    let cmdline = sidecar.cmdline();
    assert_eq!(cmdline.get(1).map(String::as_str), Some("proxy"), "it runs `bulkhead proxy`: {cmdline:?}");
    // The runtime's descriptor limit lets the sidecar keep its default
    // --max-connections (2048: two descriptors each, plus the admin budget);
    // with fewer it lowers the cap, and says so on /metrics.
    let exposition = metrics(pod_ip(&running[0])).expect("the sidecar's metrics");
    let limit = sample(&exposition, "bulkhead_proxy_connections_limit");
    assert_eq!(limit, Some(2048.0), "descriptors {:?}: the sidecar's connection cap was lowered", sidecar.nofile());
    println!(
        "sidecar {} on {}: pid {}, uids {:?}, descriptors (soft, hard) {:?}, connection cap {limit:?}, cmdline {:?}",
        sidecar.id,
        sidecar.node,
        sidecar.pid,
        sidecar.uids(),
        sidecar.nofile(),
        cmdline
    );

    // b. Enforcement you can see: Enforced once every pod reports the planned
    // config; scaling and a spec change reach the running pods within seconds
    // and never over-commit the pool; a bypass, a pod without the sidecar and
    // a sidecar that cannot take a new config each turn Enforced.
    enforcement_you_can_see(cp, &client, &ns.name, &bh, images).await;

    // c. The seed's verification: saturate `slow` and watch the others.
    let running = wait_ready(&client, &ns.name, "app=app", 2, ROLLOUT).await;
    register_sidecars(cp, &ns.name, &running);
    let ips: Vec<IpAddr> = running.iter().map(pod_ip).collect();
    let config = pool_config(&client, &ns.name, &bh).await.expect("pool config");
    flood(&ips, &config);

    cp.kubectl(&["delete", "bulkhead", &bh, "--timeout=60s"]);
    wait_for("the sidecar is withdrawn", ROLLOUT, || async {
        let deploy = Api::<Deployment>::namespaced(client.clone(), &ns.name).get("app").await.ok()?;
        let containers = deploy.spec?.template.spec?.containers;
        (containers.len() == 1 && containers[0].name == "app").then_some(())
    })
    .await;
}

/// Steady load on `path` over every pod, `threads` at a time, for `length`:
/// (statuses, latencies).
fn steady(ips: &[IpAddr], path: &'static str, threads: usize, length: Duration) -> (Vec<u16>, Vec<Duration>) {
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let ips = ips.to_vec();
            thread::spawn(move || {
                let (mut statuses, mut latencies) = (Vec::new(), Vec::new());
                let end = Instant::now() + length;
                let mut i = t;
                while Instant::now() < end {
                    let ip = ips[i % ips.len()];
                    i += 1;
                    let (status, took) = http_get(SocketAddr::new(ip, PROXY_PORT), path, Duration::from_secs(10));
                    statuses.push(status);
                    latencies.push(took);
                    thread::sleep(Duration::from_millis(20));
                }
                (statuses, latencies)
            })
        })
        .collect();
    let mut all = (Vec::new(), Vec::new());
    for h in handles {
        let (s, l) = h.join().expect("load thread");
        all.0.extend(s);
        all.1.extend(l);
    }
    all
}

fn percentile(latencies: &[Duration], p: f64) -> Duration {
    let mut sorted = latencies.to_vec();
    sorted.sort();
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn flood(ips: &[IpAddr], config: &PoolConfig) {
    const EXCESS: usize = 5;
    let slow = ceiling(config, "slow") as usize;
    let steady_threads = 3;
    let (base_status, base_lat) = steady(ips, "/steady/baseline", steady_threads, Duration::from_secs(4));
    assert!(base_status.iter().all(|s| *s == 200), "baseline: every steady request succeeds: {base_status:?}");

    // `slow`'s dependency hangs: per pod, its ceiling plus EXCESS requests at once.
    let hung: Vec<_> = ips
        .iter()
        .flat_map(|ip| (0..slow + EXCESS).map(move |_| *ip))
        .map(|ip| {
            thread::spawn(move || http_get(SocketAddr::new(ip, PROXY_PORT), "/sleep/25", Duration::from_secs(40)))
        })
        .collect();
    // Held at exactly the ceiling on every replica.
    let deadline = Instant::now() + Duration::from_secs(20);
    for ip in ips {
        loop {
            let m = metrics(*ip).unwrap_or_default();
            let in_flight = in_flight(&m, "slow").unwrap_or(-1.0);
            if in_flight == slow as f64 {
                break;
            }
            assert!(Instant::now() < deadline, "pod {ip}: slow in flight {in_flight}, want its ceiling {slow}");
            thread::sleep(Duration::from_millis(100));
        }
    }
    let flood_started = Instant::now();
    let (critical_status, critical_lat) = {
        let critical = thread::spawn({
            let ips = ips.to_vec();
            move || steady(&ips, "/critical/probe", 1, Duration::from_secs(6))
        });
        let during = steady(ips, "/steady/during", steady_threads, Duration::from_secs(6));
        let critical = critical.join().expect("critical load");
        // Still exactly at the ceiling at the end of the window, on every pod.
        for ip in ips {
            let m = metrics(*ip).expect("metrics");
            assert_eq!(in_flight(&m, "slow"), Some(slow as f64), "pod {ip} holds slow at its ceiling");
        }
        assert!(during.0.iter().all(|s| *s == 200), "no steady request is rejected or fails: {:?}", during.0);
        let p50 = percentile(&during.1, 0.5);
        let p99 = percentile(&during.1, 0.99);
        println!(
            "flood: slow held at {slow} per replica on {} replicas; steady {} requests, p50 {:.1} ms p99 {:.1} ms (baseline {} requests, p50 {:.1} ms p99 {:.1} ms)",
            ips.len(),
            during.1.len(),
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            base_lat.len(),
            percentile(&base_lat, 0.5).as_secs_f64() * 1e3,
            percentile(&base_lat, 0.99).as_secs_f64() * 1e3,
        );
        assert!(p99 < Duration::from_secs(1), "steady requests are not held behind slow: p99 {p99:?}");
        critical
    };
    assert!(flood_started.elapsed() < Duration::from_secs(20), "the window ended before slow's requests returned");
    assert!(critical_status.iter().all(|s| *s == 200), "no critical request is rejected: {critical_status:?}");
    println!(
        "flood: critical lane {} requests, p99 {:.1} ms, none rejected",
        critical_lat.len(),
        percentile(&critical_lat, 0.99).as_secs_f64() * 1e3
    );

    // The excess was refused at once; the admitted ones were held until the dependency answered.
    let results: Vec<(u16, Duration)> = hung.into_iter().map(|h| h.join().expect("slow request")).collect();
    let rejected: Vec<&(u16, Duration)> = results.iter().filter(|r| r.0 == 503).collect();
    let admitted = results.iter().filter(|r| r.0 == 200).count();
    assert_eq!(rejected.len(), EXCESS * ips.len(), "exactly the excess is rejected: {results:?}");
    assert_eq!(admitted, slow * ips.len(), "exactly the ceiling is admitted: {results:?}");
    let slowest_rejection = rejected.iter().map(|r| r.1).max().unwrap_or_default();
    assert!(slowest_rejection < Duration::from_secs(1), "rejected at once, not queued: {slowest_rejection:?}");
    println!(
        "flood: {} excess slow requests got 503 within {:.1} ms",
        rejected.len(),
        slowest_rejection.as_secs_f64() * 1e3
    );
    for ip in ips {
        let m = metrics(*ip).expect("metrics");
        let rejected = sample(&m, "bulkhead_proxy_rejected_total{class=\"slow\",reason=\"ceiling\"}");
        println!("pod {ip}: slow rejected at its ceiling {rejected:?}");
    }
}

// --- b. enforcement you can see ---------------------------------------------

/// The sidecar's admin port (/readyz names the config in force).
const ADMIN_PORT: u16 = 9901;
/// The issue's bound from a change to the running pods enforcing it (goal 2 s).
const PROPAGATION: Duration = Duration::from_secs(5);

/// The content hash of the pool config the sidecar at `ip` enforces, from its /readyz.
async fn enforced_hash(ip: IpAddr) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(SocketAddr::new(ip, ADMIN_PORT)).await.ok()?;
        stream.write_all(b"GET /readyz HTTP/1.0\r\n\r\n").await.ok()?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.ok()?;
        let text = String::from_utf8(answer).ok()?;
        text.split_whitespace().find_map(|w| w.strip_prefix("config=")).map(str::to_string)
    };
    tokio::time::timeout(Duration::from_secs(1), ask).await.ok().flatten()
}

/// The pool config written now: (content hash, slow's ceiling per replica, dividedBy).
async fn written(client: &Client, ns: &str, bh: &str) -> Option<(String, u32, u64)> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns).get(&format!("bulkhead-{bh}")).await.ok()?;
    let document = cm.data?.get("pools.json")?.clone();
    let config: PoolConfig = serde_json::from_str(&document).ok()?;
    Some((bulkhead::pool_config::content_hash(document.as_bytes()), ceiling(&config, "slow"), config.divided_by))
}

fn live_ips(all: &[Pod]) -> Vec<IpAddr> {
    all.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.status.as_ref()?.pod_ip.as_deref()?.parse().ok())
        .collect()
}

async fn enforcement(client: &Client, bh: &str) -> Option<bulkhead::crd::EnforcementStatus> {
    Api::<bulkhead::crd::Bulkhead>::all(client.clone()).get(bh).await.ok()?.status?.enforcement
}

/// What the 100 ms samples of slow's ceilings over the Ready pods found.
#[derive(Debug, Default)]
struct Samples {
    count: usize,
    max_sum: u32,
    /// Samples whose sum passed the fleet ceiling: (time since the start, sum).
    over: Vec<(Duration, u32)>,
    /// Ready pods whose config could not be read in a sample.
    unread: usize,
}

/// Every 100 ms until `stop`: the sum of slow's per-replica ceiling over the
/// Ready pods, each read from the config hash its sidecar reports (the
/// ConfigMap's versions give each hash's ceiling). `targets` gets the Ready
/// pods' IPs for the load.
async fn sample_ceilings(
    client: Client,
    ns: String,
    bh: String,
    fleet_ceiling: u32,
    targets: std::sync::Arc<std::sync::Mutex<Vec<IpAddr>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Samples {
    let mut ceilings = std::collections::HashMap::new();
    let mut samples = Samples::default();
    let started = Instant::now();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let tick = Instant::now();
        if let Some((hash, slow, _)) = written(&client, &ns, &bh).await {
            ceilings.insert(hash, slow);
        }
        let ready: Vec<IpAddr> = pods(&client, &ns, "app=app").await.iter().filter(|p| ready(p)).map(pod_ip).collect();
        *targets.lock().unwrap_or_else(|p| p.into_inner()) = ready.clone();
        let hashes = futures::future::join_all(ready.iter().map(|ip| enforced_hash(*ip))).await;
        let mut sum = 0;
        for hash in hashes {
            match hash.and_then(|h| ceilings.get(&h).copied()) {
                Some(c) => sum += c,
                None => samples.unread += 1,
            }
        }
        samples.count += 1;
        samples.max_sum = samples.max_sum.max(sum);
        if sum > fleet_ceiling {
            samples.over.push((started.elapsed(), sum));
        }
        tokio::time::sleep_until((tick + Duration::from_millis(100)).into()).await;
    }
    samples
}

/// Keep `slow` at its ceiling: `threads` requests that hang 2 s each, over the targets.
fn saturate(
    targets: std::sync::Arc<std::sync::Mutex<Vec<IpAddr>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: usize,
) -> Vec<thread::JoinHandle<(u32, u32)>> {
    (0..threads)
        .map(|t| {
            let (targets, stop) = (targets.clone(), stop.clone());
            thread::spawn(move || {
                let (mut admitted, mut rejected) = (0, 0);
                let mut i = t;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let ip = {
                        let ips = targets.lock().unwrap_or_else(|p| p.into_inner());
                        (!ips.is_empty()).then(|| ips[i % ips.len()])
                    };
                    i += 1;
                    let Some(ip) = ip else {
                        thread::sleep(Duration::from_millis(50));
                        continue;
                    };
                    match http_get(SocketAddr::new(ip, PROXY_PORT), "/sleep/2", Duration::from_secs(10)).0 {
                        200 => admitted += 1,
                        503 => {
                            rejected += 1;
                            thread::sleep(Duration::from_millis(20));
                        }
                        _ => thread::sleep(Duration::from_millis(20)),
                    }
                }
                (admitted, rejected)
            })
        })
        .collect()
}

/// Wait until every pod at `ips` that still runs reports `hash` on /readyz.
async fn all_enforce(client: &Client, ns: &str, ips: &[IpAddr], hash: &str, within: Duration) {
    wait_for(&format!("the running pods {ips:?} enforce {hash}"), within, || async {
        let live = live_ips(&pods(client, ns, "app=app").await);
        let asked: Vec<IpAddr> = ips.iter().copied().filter(|ip| live.contains(ip)).collect();
        let answers = futures::future::join_all(asked.iter().map(|ip| enforced_hash(*ip))).await;
        (!asked.is_empty() && answers.iter().all(|a| a.as_deref() == Some(hash))).then_some(())
    })
    .await;
}

/// Scale `app` to `to`: (from the scale to every earlier pod still running
/// on the new config, from the config's write being seen to that, slow's new ceiling).
async fn scale(cp: &ControlPlane, client: &Client, ns: &str, bh: &str, to: u64) -> (Duration, Duration, u32) {
    let before = written(client, ns, bh).await.expect("a pool config").0;
    let earlier = live_ips(&pods(client, ns, "app=app").await);
    let scaled = Instant::now();
    cp.kubectl(&["-n", ns, "scale", "deployment/app", &format!("--replicas={to}")]);
    let (hash, slow, _) = wait_for(&format!("the config for {to} replicas"), ROLLOUT, || async {
        written(client, ns, bh).await.filter(|w| w.2 == to && w.0 != before)
    })
    .await;
    let seen = Instant::now();
    all_enforce(client, ns, &earlier, &hash, ROLLOUT).await;
    (scaled.elapsed(), seen.elapsed(), slow)
}

/// Change slow's reservation: (from the patch to every running pod on the new config, slow's new ceiling).
async fn change_reserved(cp: &ControlPlane, client: &Client, ns: &str, bh: &str, reserved: u32) -> (Duration, u32) {
    let before = written(client, ns, bh).await.expect("a pool config").0;
    let running = live_ips(&pods(client, ns, "app=app").await);
    let patched = Instant::now();
    let patch = format!(r#"[{{"op": "replace", "path": "/spec/classes/0/reserved", "value": {reserved}}}]"#);
    cp.kubectl(&["patch", "bulkhead", bh, "--type", "json", "-p", &patch]);
    let (hash, slow, _) = wait_for("the changed config", Duration::from_secs(60), || async {
        written(client, ns, bh).await.filter(|w| w.0 != before)
    })
    .await;
    all_enforce(client, ns, &running, &hash, Duration::from_secs(60)).await;
    (patched.elapsed(), slow)
}

async fn wait_enforced(client: &Client, bh: &str, status: &str, reason: &str, within: Duration) -> String {
    let what = format!("Enforced={status} {reason}");
    wait_for(&what, within, || async {
        condition(client, bh, "Enforced").await.filter(|c| c.0 == status && c.1 == reason).map(|c| c.2)
    })
    .await
}

/// Enforced=True about the pool config written now; its message.
async fn wait_converged(client: &Client, ns: &str, bh: &str, within: Duration) -> String {
    wait_for("Enforced=True Converged on the config written now", within, || async {
        let (status, reason, message) = condition(client, bh, "Enforced").await?;
        let hash = written(client, ns, bh).await?.0;
        let summary = enforcement(client, bh).await?;
        (status == "True" && reason == "Converged" && summary.config_hash == hash && message.contains(&hash))
            .then_some(message)
    })
    .await
}

async fn enforcement_you_can_see(cp: &ControlPlane, client: &Client, ns: &str, bh: &str, images: &Images) {
    let started = Instant::now();
    let message = wait_converged(client, ns, bh, Duration::from_secs(60)).await;
    let (hash, _, _) = written(client, ns, bh).await.expect("a pool config");
    assert!(message.contains(&hash), "{message}");
    let summary = enforcement(client, bh).await.expect("status.enforcement");
    assert_eq!((summary.pods, summary.converged, summary.config_hash.as_str()), (2, 2, hash.as_str()));
    println!("Enforced=True Converged {:.1} s after the pods were Ready: {message}", started.elapsed().as_secs_f64());

    // Scale 2 -> 3 -> 2, three times, with slow held at its ceiling and every
    // Ready pod's ceiling sampled each 100 ms.
    let fleet_ceiling = 22; // slow: reserved 12 + sharedSurplus 10
    let targets = std::sync::Arc::new(std::sync::Mutex::new(live_ips(&pods(client, ns, "app=app").await)));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = tokio::spawn(sample_ceilings(
        client.clone(),
        ns.to_string(),
        bh.to_string(),
        fleet_ceiling,
        targets.clone(),
        stop.clone(),
    ));
    let load = saturate(targets, stop.clone(), 30);
    let (mut ups, mut downs) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let (from_scale, from_write, slow) = scale(cp, client, ns, bh, 3).await;
        assert_eq!(slow, 7, "three replicas share slow's 22");
        wait_ready(client, ns, "app=app", 3, ROLLOUT).await;
        ups.push((from_scale, from_write));
        let (from_scale, from_write, slow) = scale(cp, client, ns, bh, 2).await;
        assert_eq!(slow, 11, "two replicas again");
        wait_ready(client, ns, "app=app", 2, ROLLOUT).await;
        downs.push((from_scale, from_write));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let samples = sampler.await.expect("sampler");
    let (admitted, rejected) =
        load.into_iter().map(|h| h.join().expect("load")).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let secs = |d: &Duration| format!("{:.2}", d.as_secs_f64());
    println!(
        "scale 2->3, kubectl scale -> both running pods on the new config: {:?} s (from the ConfigMap write: {:?} s)",
        ups.iter().map(|u| secs(&u.0)).collect::<Vec<_>>(),
        ups.iter().map(|u| secs(&u.1)).collect::<Vec<_>>()
    );
    println!(
        "scale 3->2, kubectl scale -> the remaining pods on the new config: {:?} s (from the write, which waits for the third pod to be gone: {:?} s)",
        downs.iter().map(|d| secs(&d.0)).collect::<Vec<_>>(),
        downs.iter().map(|d| secs(&d.1)).collect::<Vec<_>>()
    );
    println!(
        "over-commit samples (slow, fleet ceiling {fleet_ceiling}): {} samples every 100 ms, highest sum over Ready pods {}, {} above the ceiling {:?}, {} unread; load: {admitted} slow requests admitted, {rejected} rejected at the ceiling",
        samples.count, samples.max_sum, samples.over.len(), samples.over, samples.unread
    );
    for (from_scale, _) in &ups {
        assert!(*from_scale <= PROPAGATION, "a scale up reached the running pods in {from_scale:?}");
    }
    assert!(samples.count > 100 && rejected > 0, "sampled while slow was saturated: {samples:?}, {rejected} rejected");
    assert!(samples.over.is_empty(), "the Ready pods never hold more than slow's fleet ceiling: {samples:?}");

    // A spec change: slow's reservation, three times.
    let mut changes = Vec::new();
    for reserved in [10, 12, 10] {
        let (took, slow) = change_reserved(cp, client, ns, bh, reserved).await;
        assert_eq!(slow, (reserved + 10) / 2);
        changes.push(took);
    }
    println!(
        "kubectl patch (reserved) -> every running pod on the new config: {:?} s",
        changes.iter().map(secs).collect::<Vec<_>>()
    );
    for took in &changes {
        assert!(*took <= PROPAGATION, "a spec change reached the running pods in {took:?}");
    }
    // The metric a user reads agrees with /readyz.
    let (_, slow, _) = written(client, ns, bh).await.expect("config");
    let running = wait_ready(client, ns, "app=app", 2, ROLLOUT).await;
    register_sidecars(cp, ns, &running);
    for pod in &running {
        let exposition = metrics(pod_ip(pod)).expect("metrics");
        assert_eq!(class_gauge(&exposition, "class_ceiling", "slow"), Some(f64::from(slow)));
    }
    wait_converged(client, ns, bh, Duration::from_secs(30)).await;
    let summary = enforcement(client, bh).await.expect("status.enforcement");
    println!("status.enforcement after the changes: {summary:?}");
    assert!(summary.last_convergence_seconds.is_some_and(|s| s < 5.0), "{summary:?}");

    // Bypassed: a Service to the app's own port; cleared when it points at the proxy.
    cp.apply_yaml(&format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: app, namespace: {ns}}}\nspec:\n  selector: {{app: app}}\n  ports: [{{port: 80, targetPort: 8080}}]\n"
    ));
    let message = wait_enforced(client, bh, "False", "Bypassed", Duration::from_secs(30)).await;
    assert!(message.contains(&format!("Service {ns}/app port 80 sends to 8080")), "{message}");
    cp.kubectl(&[
        "-n",
        ns,
        "patch",
        "service",
        "app",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"ports":[{"port":80,"targetPort":8081}]}}"#,
    ]);
    wait_converged(client, ns, bh, Duration::from_secs(30)).await;

    // SidecarMissing: a pod of the workload that runs without the sidecar.
    cp.apply_yaml(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: stray, namespace: {ns}, labels: {{app: app}}}}\nspec:\n  terminationGracePeriodSeconds: 2\n  containers:\n  - {{name: app, image: {}, imagePullPolicy: Never}}\n",
        images.app
    ));
    let message = wait_enforced(client, bh, "False", "SidecarMissing", ROLLOUT).await;
    assert!(message.contains("stray (no bulkhead-proxy container)"), "{message}");
    cp.kubectl(&["-n", ns, "delete", "pod", "stray", "--wait=true"]);
    wait_converged(client, ns, bh, Duration::from_secs(60)).await;

    // Converging: a sidecar whose config is mounted by subPath, which the
    // kubelet never updates, cannot take the next config.
    let (operator_repo, operator_tag) = images.operator_repo_tag();
    cp.apply_yaml(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: pinned, namespace: {ns}, labels: {{app: app}}}}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - {{name: app, image: {app}, imagePullPolicy: Never}}
  - name: bulkhead-proxy
    image: {operator_repo}:{operator_tag}
    imagePullPolicy: Never
    args: [proxy, --config-dir, /etc/bulkhead/pools, --listen, "0.0.0.0:{PROXY_PORT}", --upstream, "http://127.0.0.1:8080", --classify, "header:x-bulkhead-class", --admin, "0.0.0.0:{ADMIN_PORT}"]
    ports: [{{name: bulkhead-admin, containerPort: {ADMIN_PORT}}}]
    volumeMounts: [{{name: bulkhead-pools, mountPath: /etc/bulkhead/pools/pools.json, subPath: pools.json}}]
  volumes: [{{name: bulkhead-pools, configMap: {{name: bulkhead-{bh}}}}}]
"#,
        app = images.app
    ));
    wait_for("pinned runs", ROLLOUT, || async {
        let all = pods(client, ns, "app=app").await;
        all.iter().find(|p| p.metadata.name.as_deref() == Some("pinned")).filter(|p| ready(p)).map(|_| ())
    })
    .await;
    // Whether it took the config its arrival made (a third pod re-splits the
    // pool) depends on when its kubelet mounted the file; the next one it cannot take.
    cp.kubectl(&[
        "patch",
        "bulkhead",
        bh,
        "--type",
        "json",
        "-p",
        r#"[{"op": "replace", "path": "/spec/classes/0/reserved", "value": 12}]"#,
    ]);
    let changed = Instant::now();
    let message = wait_enforced(client, bh, "False", "Converging", Duration::from_secs(60)).await;
    assert!(message.contains("pinned (enforces "), "{message}");
    println!("Converging {:.1} s after the change (grace 10 s): {message}", changed.elapsed().as_secs_f64());
    cp.kubectl(&["-n", ns, "delete", "pod", "pinned", "--wait=true"]);
    wait_converged(client, ns, bh, Duration::from_secs(60)).await;
}

// --- d. placement on real nodes ---------------------------------------------

fn placement_bulkhead(name: &str, team: &str, pool: &str) -> String {
    let pods = |app: &str| {
        format!(
            "{{namespaceSelector: {{matchLabels: {{team: {team}}}}}, podSelector: {{matchLabels: {{app: {app}}}}}}}"
        )
    };
    format!(
        r#"apiVersion: bulkhead.dev/v1alpha1
kind: Bulkhead
metadata: {{name: {name}}}
spec:
  dimension: Criticality
  layers: [Node]
  pool: {{resource: connections, capacity: 20}}
  classes:
  - name: isolated
    reserved: 10
    pods: {isolated}
    nodes: {{selector: {{matchLabels: {{pool: {pool}}}}}, count: 1}}
    antiAffinity: {{topologyKey: kubernetes.io/hostname}}
  - name: rest
    reserved: 10
    pods: {rest}
"#,
        isolated = pods("isolated"),
        rest = pods("rest"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_group_holds_its_class_on_real_nodes_and_deleting_restores_the_template() {
    let _serial = SERIAL.lock().await;
    let cp = cluster();
    let client = cp.client().await;
    let images = Images::get();
    let team = format!("rp{}", unique_suffix());
    let ns = TestNamespace::new("rp-place", &[("team", &team)]).await;
    let pool = format!("rp-{}", unique_suffix());
    let nodes: Api<Node> = Api::all(client.clone());
    let real: Vec<String> = nodes
        .list(&ListParams::default().labels("test.bulkhead.dev/real-node=true"))
        .await
        .expect("nodes")
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert_eq!(real.len(), 2, "two real nodes");
    for n in &real {
        cp.kubectl(&["label", "node", n, &format!("pool={pool}")]);
    }
    cp.apply_yaml(&app_deployment(&ns.name, "isolated", &images.app, 2));
    cp.apply_yaml(&app_deployment(&ns.name, "rest", &images.app, 2));
    wait_ready(&client, &ns.name, "app=isolated", 2, ROLLOUT).await;
    let bh = format!("rp-place-{}", unique_suffix());
    cp.apply_yaml(&placement_bulkhead(&bh, &team, &pool));

    let claim_key = format!("bulkhead.dev/{bh}");
    let claimed = wait_for("one real node claimed for `isolated`", Duration::from_secs(60), || async {
        let list = nodes.list(&ListParams::default().labels(&claim_key)).await.ok()?;
        (list.items.len() == 1).then(|| list.items[0].metadata.name.clone())?
    })
    .await;
    // The rollout moves every `isolated` pod onto the claimed node, and no `rest` pod stays there.
    wait_for("isolated pods only on the claimed node, rest pods elsewhere", ROLLOUT, || async {
        let iso = pods(&client, &ns.name, "app=isolated").await;
        let rest = pods(&client, &ns.name, "app=rest").await;
        let settled = iso.len() == 2
            && iso.iter().all(|p| ready(p) && node_of(p) == claimed)
            && rest.iter().all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(claimed.as_str()));
        settled.then_some(())
    })
    .await;
    println!("placement: `isolated` runs only on {claimed}");

    cp.kubectl(&["delete", "bulkhead", &bh, "--timeout=60s"]);
    wait_for("the template is restored and the pods roll back", ROLLOUT, || async {
        let deploy = Api::<Deployment>::namespaced(client.clone(), &ns.name).get("isolated").await.ok()?;
        let spec = deploy.spec?.template.spec?;
        let restored = spec.node_selector.is_none()
            && spec.tolerations.unwrap_or_default().is_empty()
            && spec.affinity.is_none()
            && spec.priority_class_name.is_none();
        let iso = pods(&client, &ns.name, "app=isolated").await;
        let rolled = iso.len() == 2
            && iso.iter().all(|p| {
                ready(p) && p.spec.as_ref().is_some_and(|s| s.node_selector.is_none() && s.affinity.is_none())
            });
        (restored && rolled).then_some(())
    })
    .await;
    let node = nodes.get(&claimed).await.expect("claimed node");
    let labels = node.metadata.labels.unwrap_or_default();
    assert!(!labels.contains_key(&claim_key), "the claim label is gone");
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(!taints.iter().any(|t| t.key == claim_key), "the claim taint is gone: {taints:?}");
    for n in &real {
        cp.kubectl(&["label", "node", n, "pool-"]);
    }
}

// --- f. BulkheadDrill: the verification step on real pods --------------------

/// The issue's bound from `kubectl apply` of an example to its verdict.
const DRILL_VERDICT: Duration = Duration::from_secs(300);

/// An example file with the built images in place of its placeholders.
fn drill_example(file: &str, images: &Images) -> String {
    let path = bulkhead_testkit::repo_root().join("examples/drill").join(file);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .replace("BULKHEAD_IMAGE", &images.operator)
        .replace("APP_IMAGE", &images.app)
}

async fn drill(client: &Client, name: &str) -> Option<bulkhead::crd::BulkheadDrill> {
    Api::<bulkhead::crd::BulkheadDrill>::all(client.clone()).get(name).await.ok()
}

async fn drill_status(client: &Client, name: &str) -> bulkhead::crd::BulkheadDrillStatus {
    drill(client, name).await.and_then(|d| d.status).unwrap_or_default()
}

/// Every live pod of the example's app enforces `hash` and holds nothing.
async fn pods_enforce(client: &Client, ns: &str, hash: &str) -> bool {
    let ips = live_ips(&pods(client, ns, "app=app").await);
    for ip in &ips {
        if enforced_hash(*ip).await.as_deref() != Some(hash) {
            return false;
        }
    }
    !ips.is_empty()
}

/// Apply an example, wait for its drill's verdict, print its figures, and
/// check the Bulkhead's VerifiedUnderLoad says the same.
async fn run_drill_example(cp: &ControlPlane, client: &Client, file: &str, drill_name: &str, bh: &str) -> String {
    let images = Images::get();
    let started = Instant::now();
    cp.apply_yaml(&drill_example(file, images));
    let status = wait_for(&format!("{drill_name} reaches a verdict"), DRILL_VERDICT, || async {
        let s = drill_status(client, drill_name).await;
        s.verdict.is_some().then_some(s)
    })
    .await;
    let verdict = status.verdict.clone().expect("verdict");
    println!(
        "{file}: verdict {verdict} {:.1} s after kubectl apply; held peak {:?} of ceiling {:?}\n  {}",
        started.elapsed().as_secs_f64(),
        status.held_peak,
        status.ceiling,
        status.message.as_deref().unwrap_or_default()
    );
    for c in &status.classes {
        let (b, d) = (c.baseline.clone().unwrap_or_default(), c.during.clone().unwrap_or_default());
        println!(
            "  {}{}: baseline {} req p50 {} ms p99 {} ms rej {} % err {} % | during {} req p50 {} ms p99 {} ms rej {} % err {} %",
            c.name,
            if c.drilled { " (drilled)" } else { "" },
            b.requests, b.p50_ms, b.p99_ms, b.rejected_percent, b.error_percent,
            d.requests, d.p50_ms, d.p99_ms, d.rejected_percent, d.error_percent
        );
    }
    let (expected_status, expected_reason) = match verdict.as_str() {
        "Isolated" => ("True", "NoLatencyCoupling"),
        "Leak" => ("False", "LatencyCoupled"),
        _ => ("Unknown", "Inconclusive"),
    };
    let verified = wait_for("VerifiedUnderLoad follows the verdict", Duration::from_secs(30), || async {
        condition(client, bh, "VerifiedUnderLoad").await.filter(|c| c.0 == expected_status && c.1 == expected_reason)
    })
    .await;
    assert!(verified.2.contains(drill_name), "the condition names the drill: {verified:?}");
    verdict
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drill_tells_a_leaky_app_from_an_isolated_one_and_lifts_its_fault() {
    let _serial = SERIAL.lock().await;
    let cp = cluster();
    let client = cp.client().await;

    // The leaky app: 3 workers for every class, payments may hold 4 calls.
    let leaky = run_drill_example(cp, &client, "leaky.yaml", "drill-leaky-payments", "drill-leaky").await;
    let status = drill_status(&client, "drill-leaky-payments").await;
    assert_eq!(leaky, "Leak", "{status:?}");
    assert!(
        status.message.as_deref().is_some_and(|m| m.contains("search moved") || m.contains("search")),
        "{status:?}"
    );
    cp.kubectl(&["delete", "namespace", "drill-leaky", "--wait=false"]);
    cp.kubectl(&["delete", "bulkhead", "drill-leaky", "--timeout=60s"]);

    // The isolated app: a worker per request. The same Bulkhead and drill.
    let isolated = run_drill_example(cp, &client, "isolated.yaml", "drill-isolated-payments", "drill-isolated").await;
    let status = drill_status(&client, "drill-isolated-payments").await;
    assert_eq!(isolated, "Isolated", "{status:?}");
    assert!(status.held_peak >= status.ceiling, "the drill saturated payments: {status:?}");

    // Deleting a drill mid-way lifts its fault from every pod at once.
    let plain = enforcement(&client, "drill-isolated").await.expect("enforcement").config_hash;
    let long = |name: &str, class: &str| {
        format!(
            "apiVersion: bulkhead.dev/v1alpha1\nkind: BulkheadDrill\nmetadata: {{name: {name}}}\nspec:\n  bulkhead: drill-isolated\n  class: {class}\n  hold: 5m\n  baseline: 5s\n  duration: 5m\n  load: {{port: 8080, path: '/call/{{class}}', classes: [search], rate: 5}}\n"
        )
    };
    cp.apply_yaml(&long("drill-deleted", "payments"));
    let holding = wait_for("the fault is in force on every pod", Duration::from_secs(90), || async {
        let s = drill_status(&client, "drill-deleted").await;
        s.fault_time.is_some().then_some(s)
    })
    .await;
    let fault = holding.fault_config_hash.clone().expect("the fault's hash");
    assert_ne!(fault, plain);
    assert!(pods_enforce(&client, "drill-isolated", &fault).await, "every pod reported the fault");
    let deleted = Instant::now();
    cp.kubectl(&["delete", "bulkheaddrill", "drill-deleted", "--wait=false"]);
    wait_for("every pod enforces the config without the fault", Duration::from_secs(15), || async {
        pods_enforce(&client, "drill-isolated", &plain).await.then_some(())
    })
    .await;
    println!("drill deleted mid-way: every pod off the fault {:.2} s later", deleted.elapsed().as_secs_f64());

    // An operator restart mid-drill: the new leader reports it aborted and never places the fault.
    cp.apply_yaml(&long("drill-restarted", "payments"));
    let holding = wait_for("the second fault is in force", Duration::from_secs(90), || async {
        let s = drill_status(&client, "drill-restarted").await;
        s.fault_time.is_some().then_some(s)
    })
    .await;
    assert!(pods_enforce(&client, "drill-isolated", holding.fault_config_hash.as_deref().expect("hash")).await);
    let leases: Api<Lease> = Api::namespaced(client.clone(), RELEASE_NS);
    let leader = leases.get("bulkhead-operator").await.ok().and_then(|l| l.spec?.holder_identity).expect("a leader");
    let killed = Instant::now();
    Api::<Pod>::namespaced(client.clone(), RELEASE_NS).delete(&leader, &DeleteParams::default()).await.expect("delete");
    let aborted = wait_for("the new leader reports the drill aborted", Duration::from_secs(60), || async {
        let s = drill_status(&client, "drill-restarted").await;
        (s.verdict.as_deref() == Some("Aborted")).then_some(s)
    })
    .await;
    assert!(aborted.message.as_deref().is_some_and(|m| m.contains("restarted")), "{aborted:?}");
    wait_for("every pod enforces the config without the fault again", Duration::from_secs(30), || async {
        pods_enforce(&client, "drill-isolated", &plain).await.then_some(())
    })
    .await;
    println!(
        "leader killed mid-drill: aborted and every pod off the fault {:.2} s later",
        killed.elapsed().as_secs_f64()
    );

    // A critical class is never drilled: refused, the field named.
    cp.apply_yaml(&long("drill-critical", "control-plane"));
    let refused = wait_for("the critical drill is refused", Duration::from_secs(60), || async {
        let s = drill_status(&client, "drill-critical").await;
        (s.phase.as_deref() == Some("Refused")).then_some(s)
    })
    .await;
    assert!(
        refused.message.as_deref().is_some_and(|m| m.starts_with("spec.class:") && m.contains("critical")),
        "{refused:?}"
    );

    cp.kubectl(&["delete", "bulkheaddrills", "--all", "--wait=false"]);
    cp.kubectl(&["delete", "namespace", "drill-isolated", "--wait=false"]);
    cp.kubectl(&["delete", "bulkhead", "drill-isolated", "--timeout=60s"]);
    wait_ready(&client, RELEASE_NS, "app.kubernetes.io/name=bulkhead", 2, ROLLOUT).await;
}

// --- g. isolation at admission -----------------------------------------------

/// A pod in `ns` with `labels`, that tolerates and selects class `class`'s
/// nodes of Bulkhead `bh` when `crossing`; plain otherwise.
fn admission_pod(ns: &str, name: &str, image: &str, bh: &str, class: Option<&str>) -> Pod {
    let mut spec = json!({
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "app", "image": image, "imagePullPolicy": "Never"}],
    });
    if let Some(class) = class {
        let key = format!("bulkhead.dev/{bh}");
        spec["tolerations"] = json!([{"key": key, "operator": "Equal", "value": class, "effect": "NoSchedule"}]);
        spec["nodeSelector"] = json!({ key: class });
    }
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns, "labels": {"app": "adm"}}, "spec": spec}))
        .expect("pod")
}

/// Milliseconds of `n` server-side dry-run creates of `pod` (admission runs, nothing is stored).
async fn dry_run_creates(client: &Client, pod: &Pod, n: usize) -> Vec<f64> {
    let api: Api<Pod> = Api::namespaced(client.clone(), pod.metadata.namespace.as_deref().expect("ns"));
    let params = kube::api::PostParams { dry_run: true, ..Default::default() };
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let mut p = pod.clone();
        p.metadata.name = Some(format!("dry-{i}"));
        let t = Instant::now();
        api.create(&params, &p).await.expect("a dry-run create is admitted");
        out.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    out.sort_by(f64::total_cmp);
    out
}

fn p50_p99(sorted: &[f64]) -> (f64, f64) {
    let at = |q: f64| sorted[((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1];
    (at(0.5), at(0.99))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_refuses_a_pod_that_crosses_into_another_classs_nodes() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    let _serial = SERIAL.lock().await;
    let cp = cluster();
    let client = cp.client().await;
    let images = Images::get();
    let suffix = unique_suffix();
    let (team_a, team_b) = (format!("a{suffix}"), format!("b{suffix}"));
    let ns_a = TestNamespace::new("rp-adm-a", &[("team", &team_a)]).await;
    let ns_b = TestNamespace::new("rp-adm-b", &[("team", &team_b)]).await;
    let bh = format!("rp-adm-{suffix}");
    cp.apply_yaml(&format!(
        r#"apiVersion: bulkhead.dev/v1alpha1
kind: Bulkhead
metadata: {{name: {bh}}}
spec:
  dimension: Tenant
  layers: [Node]
  pool: {{resource: connections, capacity: 20}}
  classes:
  - name: a
    reserved: 8
    pods: {{namespaceSelector: {{matchLabels: {{team: {team_a}}}}}, podSelector: {{matchLabels: {{app: adm}}}}}}
    nodes: {{selector: {{matchLabels: {{test.bulkhead.dev/real-node: "true"}}}}, count: 1}}
  - name: b
    reserved: 8
    pods: {{namespaceSelector: {{matchLabels: {{team: {team_b}}}}}, podSelector: {{matchLabels: {{app: adm}}}}}}
  - {{name: ops, reserved: 2, critical: true}}
"#
    ));
    let nodes: Api<Node> = Api::all(client.clone());
    let key = format!("bulkhead.dev/{bh}");
    let claimed = wait_for("a real node claimed for class a", Duration::from_secs(60), || async {
        let list = nodes.list(&ListParams::default().labels(&format!("{key}=a"))).await.ok()?;
        list.items.first().and_then(|n| n.metadata.name.clone())
    })
    .await;
    let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    wait_for("the operator wrote its CA into the webhook configuration", Duration::from_secs(90), || async {
        let config = webhooks.get("bulkhead").await.ok()?;
        config.webhooks?.iter().all(|w| w.client_config.ca_bundle.is_some()).then_some(())
    })
    .await;

    // A pod of class b that tolerates and selects a's node is refused at create, the class named.
    let crossing = admission_pod(&ns_b.name, "crosser", &images.app, &bh, Some("a"));
    let pods_b: Api<Pod> = Api::namespaced(client.clone(), &ns_b.name);
    let refused = wait_for("the crossing pod is refused (the webhook answers)", Duration::from_secs(60), || async {
        match pods_b.create(&kube::api::PostParams::default(), &crossing).await {
            Err(kube::Error::Api(e)) if e.code == 403 || e.code == 400 => Some(e.message),
            Ok(_) => {
                // Admitted: the webhook did not answer yet (failurePolicy Ignore). Try again.
                let _ = pods_b.delete("crosser", &DeleteParams::default()).await;
                None
            }
            Err(_) => None,
        }
    })
    .await;
    println!("refused: {refused}");
    assert!(refused.contains(&format!("Bulkhead {bh}")) && refused.contains("class a"), "{refused}");
    assert!(refused.contains("spec.tolerations[0]") && refused.contains(&format!("team={team_a}")), "{refused}");

    // The same pod in class a's namespace is admitted, and runs on a's node.
    let member = admission_pod(&ns_a.name, "member", &images.app, &bh, Some("a"));
    Api::<Pod>::namespaced(client.clone(), &ns_a.name)
        .create(&kube::api::PostParams::default(), &member)
        .await
        .expect("class a's own pod is admitted");
    let running = wait_ready(&client, &ns_a.name, "app=adm", 1, ROLLOUT).await;
    assert_eq!(node_of(&running[0]), claimed);

    // What admission costs a pod create: dry runs (admission runs, nothing is stored).
    let plain = admission_pod(&ns_b.name, "plain", &images.app, &bh, None);
    let keyed = admission_pod(&ns_a.name, "keyed", &images.app, &bh, Some("a"));
    let _ = dry_run_creates(&client, &plain, 5).await; // warm connections
    let with_plain = dry_run_creates(&client, &plain, 60).await;
    let with_keyed = dry_run_creates(&client, &keyed, 60).await;
    let skip = json!({"webhooks": [{"name": "pods.bulkhead.dev", "namespaceSelector": {"matchLabels": {"bulkhead.dev/never": "true"}}}]});
    webhooks
        .patch("bulkhead", &kube::api::PatchParams::default(), &kube::api::Patch::Strategic(&skip))
        .await
        .expect("patch");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let without = dry_run_creates(&client, &plain, 60).await;
    let restore = json!({"webhooks": [{"name": "pods.bulkhead.dev", "namespaceSelector": {}}]});
    webhooks
        .patch("bulkhead", &kube::api::PatchParams::default(), &kube::api::Patch::Strategic(&restore))
        .await
        .expect("patch");
    for (what, ms) in [
        ("no keys, webhook on", &with_plain),
        ("class a's keys, webhook on", &with_keyed),
        ("no keys, webhook skipped", &without),
    ] {
        let (p50, p99) = p50_p99(ms);
        println!("pod create (dry run, 60): {what}: p50 {p50:.2} ms, p99 {p99:.2} ms");
    }

    // The operator down: with failurePolicy Ignore (1.20) the crossing pod is admitted, and the
    // audit names it as having bypassed admission once the operator is back.
    let policy = webhooks.get("bulkhead").await.expect("config").webhooks.expect("webhooks")[0].failure_policy.clone();
    println!("failurePolicy on this server: {policy:?}");
    cp.kubectl(&["-n", RELEASE_NS, "scale", "deployment", "bulkhead", "--replicas=0"]);
    wait_for("no operator pod", ROLLOUT, || async {
        pods(&client, RELEASE_NS, "app.kubernetes.io/name=bulkhead").await.is_empty().then_some(())
    })
    .await;
    let t = Instant::now();
    let admitted = pods_b.create(&kube::api::PostParams::default(), &crossing).await;
    println!(
        "operator down: the crossing pod {} in {:.0} ms",
        if admitted.is_ok() { "admitted" } else { "refused" },
        t.elapsed().as_secs_f64() * 1000.0
    );
    assert!(admitted.is_ok(), "failurePolicy Ignore: an outage does not block pod creation: {admitted:?}");
    cp.kubectl(&["-n", RELEASE_NS, "scale", "deployment", "bulkhead", "--replicas=2"]);
    wait_ready(&client, RELEASE_NS, "app.kubernetes.io/name=bulkhead", 2, ROLLOUT).await;
    let evidence = wait_for("the audit names the pod that bypassed admission", Duration::from_secs(120), || async {
        let b = Api::<bulkhead::crd::Bulkhead>::all(client.clone()).get(&bh).await.ok()?;
        let node = b.status?.layers.into_iter().find(|l| l.name == bulkhead::crd::Layer::Node)?;
        let enforced = node.admission == Some(bulkhead::crd::NodeAdmission::Enforced);
        let found = node
            .pairs
            .iter()
            .flat_map(|p| p.evidence.iter())
            .find(|e| e.contains("crosser") && e.contains("bypassed admission"));
        found.filter(|_| enforced).cloned()
    })
    .await;
    println!("audited: {evidence}");

    let _ = pods_b.delete("crosser", &DeleteParams::default()).await;
    cp.kubectl(&["delete", "bulkhead", &bh, "--timeout=60s"]);
}
