//! The load side of `bench/scale/run`: fills the test control plane with fake
//! nodes, namespaces, pods bound directly (spec.nodeName set) and Bulkheads,
//! waits for every Bulkhead to be Ready, and churns pods while timing how
//! long a bind takes to show in a Bulkhead's `Isolated` condition.
//!
//! Layout: Bulkhead b has classes c0..c{C-1}; class c owns namespace
//! `scale-b-c` (label scale.bulkhead.dev/class=b-c) and its own nodes, so every
//! Bulkhead starts Isolated. A probe binds a pod of c0 onto a node of c1
//! (Isolated turns False), then deletes it (Isolated turns True again).

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _};
use bulkhead::crd::Bulkhead;
use futures::{stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::{
    api::{DeleteParams, PostParams},
    runtime::{watcher, WatchStreamExt},
    Api, Client, ResourceExt,
};
use serde_json::json;
use tokio::sync::watch;

#[derive(Clone, Copy)]
struct Layout {
    nodes: usize,
    pods: usize,
    bulkheads: usize,
    classes: usize,
}

impl Layout {
    fn groups(&self) -> usize {
        self.bulkheads * self.classes
    }
    fn nodes_per_class(&self) -> usize {
        (self.nodes / self.groups()).max(1)
    }
    fn node(&self, group: usize, i: usize) -> String {
        format!("scale-node-{}", (group * self.nodes_per_class() + i % self.nodes_per_class()) % self.nodes)
    }
    fn namespace(&self, group: usize) -> String {
        format!("scale-{}-{}", group / self.classes, group % self.classes)
    }
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn pod(name: &str, ns: &str, node: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "worker"}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0, "automountServiceAccountToken": false,
                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}
    }))?)
}

async fn create_all<T, F, Fut>(what: &str, count: usize, concurrency: usize, make: F) -> anyhow::Result<()>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let started = Instant::now();
    let results: Vec<Result<T, kube::Error>> =
        stream::iter(0..count).map(make).buffer_unordered(concurrency).collect().await;
    let failed: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err())
        .filter(|e| !matches!(e, kube::Error::Api(s) if s.code == 409))
        .take(3)
        .map(ToString::to_string)
        .collect();
    let secs = started.elapsed().as_secs_f64();
    println!("created {count} {what} in {secs:.1} s ({:.0}/s, {concurrency} at once)", count as f64 / secs);
    if !failed.is_empty() {
        bail!("creating {what} failed: {}", failed.join("; "));
    }
    Ok(())
}

async fn fill(client: Client, l: Layout, concurrency: usize) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    create_all("nodes", l.nodes, concurrency, |i| {
        let nodes = nodes.clone();
        async move {
            let node: Node = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": format!("scale-node-{i}"), "labels": {
                    "kubernetes.io/hostname": format!("scale-node-{i}"),
                    "topology.kubernetes.io/zone": format!("zone-{}", i % 3)}},
                "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "FakeKubelet"}]}
            }))
            .map_err(kube::Error::SerdeError)?;
            nodes.create(&PostParams::default(), &node).await
        }
    })
    .await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    create_all("namespaces", l.groups(), concurrency, |g| {
        let namespaces = namespaces.clone();
        let name = l.namespace(g);
        async move {
            let ns: Namespace = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": name, "labels": {"scale.bulkhead.dev/class": format!("{}-{}", g / l.classes, g % l.classes)}}
            }))
            .map_err(kube::Error::SerdeError)?;
            namespaces.create(&PostParams::default(), &ns).await
        }
    })
    .await?;
    // The ServiceAccount admission plugin wants each namespace's default
    // ServiceAccount before it admits a pod there.
    for g in 0..l.groups() {
        let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), &l.namespace(g));
        let deadline = Instant::now() + Duration::from_secs(120);
        while sa.get_opt("default").await?.is_none() {
            if Instant::now() > deadline {
                bail!("no default ServiceAccount in {}", l.namespace(g));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let per_group = l.pods / l.groups();
    create_all("pods (bound directly)", per_group * l.groups(), concurrency, |i| {
        let (g, k) = (i % l.groups(), i / l.groups());
        let ns = l.namespace(g);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let node = l.node(g, k);
        async move {
            let p = pod(&format!("p-{k}"), &ns, &node).map_err(|e| kube::Error::Service(e.into()))?;
            pods.create(&PostParams::default(), &p).await
        }
    })
    .await?;
    let bulkheads: Api<Bulkhead> = Api::all(client);
    for b in 0..l.bulkheads {
        let classes: Vec<serde_json::Value> = (0..l.classes)
            .map(|c| {
                json!({"name": format!("c{c}"), "reserved": 1, "pods": {
                "namespaceSelector": {"matchLabels": {"scale.bulkhead.dev/class": format!("{b}-{c}")}},
                "podSelector": {"matchLabels": {"app": "worker"}}}})
            })
            .collect();
        let bh: Bulkhead = serde_json::from_value(json!({
            "apiVersion": "bulkhead.dev/v1alpha1", "kind": "Bulkhead",
            "metadata": {"name": format!("scale-{b}")},
            "spec": {"dimension": "Tenant", "layers": ["Node"],
                     "pool": {"resource": "connections", "capacity": 1000}, "classes": classes}
        }))?;
        bulkheads.create(&PostParams::default(), &bh).await.context("create Bulkhead")?;
    }
    println!("created {} Bulkheads of {} classes", l.bulkheads, l.classes);
    Ok(())
}

/// Each Bulkhead's (Ready, Isolated) condition status, as watched.
type Conditions = watch::Receiver<BTreeMap<String, (Option<String>, Option<String>)>>;

fn condition(bh: &Bulkhead, kind: &str) -> Option<String> {
    let status = bh.status.as_ref()?;
    let c = status.conditions.iter().find(|c| c.type_ == kind)?;
    // Only a condition about this generation counts.
    (c.observed_generation == bh.metadata.generation).then(|| c.status.clone())
}

/// Each Bulkhead's (Ready, Isolated), as the API server has them.
fn watch_bulkheads(client: Client) -> Conditions {
    let (tx, rx) = watch::channel(BTreeMap::new());
    tokio::spawn(async move {
        let api: Api<Bulkhead> = Api::all(client);
        let mut events = watcher(api, watcher::Config::default()).default_backoff().applied_objects().boxed();
        // The backoff re-watches after an error: a loaded API server drops
        // watches now and then, and ending here would freeze this view.
        while let Some(event) = events.next().await {
            let bh = match event {
                Ok(bh) => bh,
                Err(e) => {
                    eprintln!("scale-driver: Bulkhead watch error (re-watching): {e}");
                    continue;
                }
            };
            let state = (condition(&bh, "Ready"), condition(&bh, "Isolated"));
            tx.send_modify(|m| {
                m.insert(bh.name_any(), state);
            });
        }
    });
    rx
}

async fn ready(client: Client, l: Layout, since_ms: u64) -> anyhow::Result<()> {
    let mut rx = watch_bulkheads(client);
    let deadline = Instant::now() + Duration::from_secs(600);
    let all_ready = |m: &BTreeMap<String, (Option<String>, Option<String>)>| {
        (0..l.bulkheads).all(|b| {
            m.get(&format!("scale-{b}"))
                .is_some_and(|(r, i)| r.as_deref() == Some("True") && i.as_deref() == Some("True"))
        })
    };
    while !all_ready(&rx.borrow_and_update()) {
        if Instant::now() > deadline {
            bail!("not every Bulkhead was Ready and Isolated within 600 s");
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), rx.changed()).await;
    }
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as u64;
    println!("every Bulkhead Ready and Isolated {:.2} s after the operator started", (now_ms - since_ms) as f64 / 1e3);
    Ok(())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn wait_isolated(rx: &mut Conditions, name: &str, want: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if rx.borrow_and_update().get(name).and_then(|(_, i)| i.as_deref()) == Some(want) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{name}: Isolated did not turn {want} within 30 s");
        }
        let _ = tokio::time::timeout(Duration::from_millis(500), rx.changed()).await;
    }
}

/// One Bulkhead's probes, one after another, until `until`.
async fn probe(client: Client, l: Layout, b: usize, until: Instant) -> anyhow::Result<Vec<(f64, f64)>> {
    let mut rx = watch_bulkheads(client.clone());
    let name = format!("scale-{b}");
    wait_isolated(&mut rx, &name, "True").await?;
    let ns = l.namespace(b * l.classes);
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let foreign = l.node(b * l.classes + 1, 0);
    let mut out = Vec::new();
    let mut i = 0;
    while Instant::now() < until {
        let probe = pod(&format!("probe-{i}"), &ns, &foreign)?;
        let t0 = Instant::now();
        pods.create(&PostParams::default(), &probe).await?;
        wait_isolated(&mut rx, &name, "False").await?;
        let bound = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        pods.delete(&format!("probe-{i}"), &DeleteParams { grace_period_seconds: Some(0), ..Default::default() })
            .await?;
        wait_isolated(&mut rx, &name, "True").await?;
        out.push((bound, t1.elapsed().as_secs_f64()));
        i += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Ok(out)
}

/// Steady churn: each tick deletes one pod of a class and creates one in its
/// place on the class's own nodes (isolation does not change).
/// `start`: replacements made by earlier runs (the sequence goes on from there).
async fn churn(client: Client, l: Layout, rate: usize, until: Instant, start: usize) -> anyhow::Result<usize> {
    let per_group = l.pods / l.groups();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(1) as f64));
    let mut ops = 0usize;
    let mut next = start;
    let mut in_flight = futures::stream::FuturesUnordered::new();
    while Instant::now() < until {
        tick.tick().await;
        let g = next % l.groups();
        let k = (next / l.groups()) % per_group;
        next += 1;
        let ns = l.namespace(g);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let node = l.node(g, k + 1);
        let generation = next / (l.groups() * per_group);
        let old = if generation == 0 { format!("p-{k}") } else { format!("p-{k}-r{}", generation - 1) };
        let new = pod(&format!("p-{k}-r{generation}"), &ns, &node)?;
        in_flight.push(async move {
            let dp = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
            let _ = pods.delete(&old, &dp).await;
            pods.create(&PostParams::default(), &new).await.map(|_| ())
        });
        ops += 2;
        while in_flight.len() > 64 {
            in_flight.try_next().await?;
        }
    }
    while in_flight.try_next().await?.is_some() {}
    Ok(ops)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let l = Layout {
        nodes: arg(&args, "--nodes", 1000),
        pods: arg(&args, "--pods", 20_000),
        bulkheads: arg(&args, "--bulkheads", 10),
        classes: arg(&args, "--classes", 20),
    };
    let client = Client::try_default().await?;
    match args.get(1).map(String::as_str) {
        Some("fill") => fill(client, l, arg(&args, "--concurrency", 32)).await,
        Some("ready") => ready(client, l, arg(&args, "--since-ms", 0) as u64).await,
        Some("churn") => {
            let seconds = arg(&args, "--seconds", 60) as u64;
            let rate = arg(&args, "--rate", 20);
            let start = arg(&args, "--start", 0);
            let until = Instant::now() + Duration::from_secs(seconds);
            if arg(&args, "--probes", 1) == 0 {
                let ops = churn(client.clone(), l, rate, until, start).await?;
                println!("quiet churn: {ops} pod writes ({rate} pairs/s) over {seconds} s, no probes");
                return Ok(());
            }
            let probes: Vec<_> = (0..l.bulkheads).map(|b| tokio::spawn(probe(client.clone(), l, b, until))).collect();
            let ops = churn(client.clone(), l, rate, until, start).await?;
            let mut bound = Vec::new();
            let mut deleted = Vec::new();
            for p in probes {
                for (b, d) in p.await?? {
                    bound.push(b);
                    deleted.push(d);
                }
            }
            let probe_ops = bound.len() * 2;
            bound.sort_by(f64::total_cmp);
            deleted.sort_by(f64::total_cmp);
            println!(
                "churn: {ops} pod writes in the background ({rate} pairs/s) and {probe_ops} probe writes over {seconds} s"
            );
            println!(
                "bind -> Isolated False: n={} p50 {:.3} s p99 {:.3} s max {:.3} s",
                bound.len(),
                percentile(&bound, 0.5),
                percentile(&bound, 0.99),
                bound.last().copied().unwrap_or(f64::NAN)
            );
            println!(
                "delete -> Isolated True: n={} p50 {:.3} s p99 {:.3} s max {:.3} s",
                deleted.len(),
                percentile(&deleted, 0.5),
                percentile(&deleted, 0.99),
                deleted.last().copied().unwrap_or(f64::NAN)
            );
            println!("pod writes total: {}", ops + probe_ops);
            Ok(())
        }
        _ => bail!("usage: scale-driver fill|ready|churn [--nodes N] [--pods N] [--bulkheads N] [--classes N] ..."),
    }
}
