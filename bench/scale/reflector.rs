//! The reference for `bench/scale/run`: a plain kube-rs reflector of full
//! Pods and Nodes, as an operator that caches whole objects would hold them.
//! It prints when both stores are listed, then every second the watch events
//! it has received (pods, nodes), so the script can count pod events.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Instant,
};

use futures::{future, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    runtime::{reflector, watcher, WatchStreamExt},
    Api, Client,
};

/// Counts the changes a watch delivers (not the initial list).
fn count<K>(n: Arc<AtomicU64>) -> impl FnMut(&watcher::Event<K>) {
    move |e| {
        if matches!(e, watcher::Event::Apply(_) | watcher::Event::Delete(_)) {
            n.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let client = Client::try_default().await?;
    let started = Instant::now();
    let (pods, pod_writer) = reflector::store::<Pod>();
    let (nodes, node_writer) = reflector::store::<Node>();
    let pod_events = Arc::new(AtomicU64::new(0));
    let node_events = Arc::new(AtomicU64::new(0));
    let pod_stream = watcher(Api::<Pod>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .inspect_ok(count(pod_events.clone()))
        .reflect(pod_writer)
        .for_each(|_| future::ready(()));
    let node_stream = watcher(Api::<Node>::all(client), watcher::Config::default())
        .default_backoff()
        .inspect_ok(count(node_events.clone()))
        .reflect(node_writer)
        .for_each(|_| future::ready(()));
    tokio::spawn(pod_stream);
    tokio::spawn(node_stream);
    pods.wait_until_ready().await?;
    nodes.wait_until_ready().await?;
    println!(
        "reflector listed {} pods and {} nodes in {:.2} s",
        pods.state().len(),
        nodes.state().len(),
        started.elapsed().as_secs_f64()
    );
    // The script reads the latest line to count pod events over a window.
    loop {
        println!(
            "reflector events: pods {} nodes {} (store: {} pods)",
            pod_events.load(Ordering::Relaxed),
            node_events.load(Ordering::Relaxed),
            pods.state().len()
        );
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}
