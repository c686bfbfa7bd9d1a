//! A drill's fault (pools.json's `classes[].hold`) in the real `bulkhead proxy`:
//! each admitted request of the drilled class waits, slot taken, before it is
//! forwarded; the other classes do not wait; past the ceiling the class is
//! refused at once; `/readyz` says how many are held; the hold ends by its own
//! deadline, by a reload that lifts it, by the class's maximum duration, by a
//! client that goes away, and by the proxy stopping. The pool: capacity 10,
//! floors slow 2, fast 2, control-plane 2 (critical), surplus 4; ceilings 3, 4, 2.

use crate::proxy_support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http_body_util::BodyExt;
use proxy_support::*;
use tokio::io::AsyncWriteExt;

const DRILL: &str = "drill-7";
/// The hold of most tests: long enough to tell from "at once" on a loaded machine.
const HOLD: Duration = Duration::from_millis(1500);
/// What "at once" means here: far under the hold.
const AT_ONCE: Duration = Duration::from_millis(700);

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_millis() as u64
}

/// The pool, with `slow` held `ms` until `until` (unix ms) if given; `slow_extra` goes in slow's class.
fn drill_pools(hold: Option<(u64, u64)>, slow_extra: &str) -> String {
    let hold = hold.map_or(String::new(), |(ms, until)| {
        format!(r#","hold":{{"drill":"{DRILL}","ms":{ms},"untilUnixMs":{until}}}"#)
    });
    format!(
        r#"{{"version":1,"bulkhead":"shop","resource":"requests","scope":"Instance","dividedBy":1,
  "capacity":10,"sharedSurplus":4,"onCeiling":"reject","classes":[
  {{"name":"slow","reserved":2,"ceiling":3,"critical":false{slow_extra}{hold}}},
  {{"name":"fast","reserved":2,"ceiling":4,"critical":false}},
  {{"name":"control-plane","reserved":2,"ceiling":2,"critical":true}}]}}"#
    )
}

/// Held for `ms` for the next minute.
fn held_pools(ms: u64) -> String {
    drill_pools(Some((ms, now_ms() + 60_000)), "")
}

fn args(upstream: &str) -> Vec<&str> {
    vec!["--upstream", upstream, "--workers", "2", "--classify", "header:x-class"]
}

/// `held=N` of the proxy's /readyz.
async fn readyz_held(proxy: &Proxy) -> u64 {
    let (status, body) = get(&format!("http://{}/readyz", proxy.admin)).await.expect("readyz answers");
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("ok generation="), "{body}");
    body.split_whitespace()
        .find_map(|w| w.strip_prefix("held="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no held= in {body:?}"))
}

/// Wait (bounded) until /readyz says `n` are held.
async fn await_held(proxy: &Proxy, n: u64) {
    let started = Instant::now();
    while readyz_held(proxy).await != n {
        assert!(started.elapsed() < WAIT, "never {n} held:\n{}", proxy.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A GET of `class` on `url`, sent now on a connection of its own: its status,
/// reason header and how long the whole exchange took.
fn spawn_get(url: String, class: Option<&'static str>) -> tokio::task::JoinHandle<(u16, String, Duration)> {
    tokio::spawn(async move {
        let started = Instant::now();
        let res = send(&http1(), request(&url, class)).await;
        let reason = header(&res, "x-bulkhead-reason").to_owned();
        let status = res.status().as_u16();
        let _ = res.into_body().collect().await;
        (status, reason, started.elapsed())
    })
}

async fn joined(task: tokio::task::JoinHandle<(u16, String, Duration)>) -> (u16, String, Duration) {
    tokio::time::timeout(WAIT, task).await.expect("in time").expect("no panic")
}

#[tokio::test]
async fn the_drilled_class_is_held_to_its_ceiling_while_the_others_answer_at_once() {
    let up = Upstream::start().await;
    let config = ConfigDir::new(&held_pools(HOLD.as_millis() as u64));
    let url = up.url();
    let proxy = Proxy::start(config.path(), &args(&url)).await;
    assert_eq!(readyz_held(&proxy).await, 0);

    // (a) slow's ceiling of 3, all held; the slots stay taken meanwhile.
    let held: Vec<_> = (0..3).map(|_| spawn_get(proxy.url("/fast"), Some("slow"))).collect();
    // (c) /readyz and the gauge count them.
    await_held(&proxy, 3).await;
    assert_eq!(proxy.metric(r#"bulkhead_proxy_held{class="slow"}"#).await, 3.0);
    assert_eq!(proxy.in_flight("slow").await, 3.0, "a held request holds its slot");
    // (b) Past the ceiling: refused at once, as always; never held.
    let (status, reason, took) = joined(spawn_get(proxy.url("/fast"), Some("slow"))).await;
    assert_eq!((status, reason.as_str()), (503, "ceiling"));
    assert!(took < AT_ONCE, "the rejection took {took:?}");
    // Another class is not held.
    let (status, _, took) = joined(spawn_get(proxy.url("/fast"), Some("fast"))).await;
    assert_eq!(status, 200);
    assert!(took < AT_ONCE, "fast took {took:?} while slow was held");
    assert_eq!(readyz_held(&proxy).await, 3);

    for task in held {
        let (status, _, took) = joined(task).await;
        assert_eq!(status, 200, "held, then forwarded");
        assert!(took >= HOLD, "slow answered after {took:?}, before its hold of {HOLD:?}");
    }
    assert_eq!(readyz_held(&proxy).await, 0);
    assert_eq!(proxy.metric(r#"bulkhead_proxy_held{class="slow"}"#).await, 0.0);
    assert_eq!(proxy.metric(r#"bulkhead_proxy_held_requests_total{class="slow"}"#).await, 3.0);
    assert_eq!(proxy.metric(r#"bulkhead_proxy_held_requests_total{class="fast"}"#).await, 0.0);
    assert_eq!(proxy.in_flight("slow").await, 0.0);
    let log = proxy.log();
    assert!(log.contains("drill hold applied") && log.contains(DRILL), "{log}");
}

#[tokio::test]
async fn a_hold_past_its_deadline_holds_nothing() {
    let up = Upstream::start().await;
    // (d) The operator stopped before lifting it: its untilUnixMs is in the past.
    let config = ConfigDir::new(&drill_pools(Some((30_000, now_ms() - 1_000)), ""));
    let url = up.url();
    let proxy = Proxy::start(config.path(), &args(&url)).await;
    let (status, _, took) = joined(spawn_get(proxy.url("/fast"), Some("slow"))).await;
    assert_eq!(status, 200);
    assert!(took < AT_ONCE, "slow took {took:?} with its hold over");
    assert_eq!(readyz_held(&proxy).await, 0);
    assert_eq!(proxy.metric(r#"bulkhead_proxy_held_requests_total{class="slow"}"#).await, 0.0);
}

#[tokio::test]
async fn a_hold_ends_by_its_deadline_though_ms_is_longer() {
    let up = Upstream::start().await;
    // Held 30 s, but the drill ends in 1.5 s: each request waits at most until then.
    let config = ConfigDir::new(&drill_pools(Some((30_000, now_ms() + 1_500)), ""));
    let url = up.url();
    let proxy = Proxy::start(config.path(), &args(&url)).await;
    let (status, _, took) = joined(spawn_get(proxy.url("/fast"), Some("slow"))).await;
    assert_eq!(status, 200);
    assert!(took < Duration::from_secs(5), "held {took:?}, past the drill's deadline");
    // Nothing is held after it.
    let (_, _, took) = joined(spawn_get(proxy.url("/fast"), Some("slow"))).await;
    assert!(took < AT_ONCE, "slow took {took:?} after the deadline");
    let started = Instant::now();
    while !proxy.log().contains("drill hold ended") {
        assert!(started.elapsed() < WAIT, "the deadline was never logged:\n{}", proxy.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_reload_that_lifts_the_hold_releases_the_held_requests_at_once() {
    let up = Upstream::start().await;
    // (e) Held 30 s: far longer than the test waits for them.
    let mut config = ConfigDir::new(&held_pools(30_000));
    let url = up.url();
    let proxy = Proxy::start(config.path(), &args(&url)).await;
    let held: Vec<_> = (0..2).map(|_| spawn_get(proxy.url("/fast"), Some("slow"))).collect();
    await_held(&proxy, 2).await;

    let lifted = Instant::now();
    config.update(&drill_pools(None, ""));
    proxy.await_generation(2).await;
    for task in held {
        let (status, _, _) = joined(task).await;
        assert_eq!(status, 200, "released, then forwarded");
    }
    assert!(lifted.elapsed() < Duration::from_secs(5), "released {:?} after the reload", lifted.elapsed());
    assert_eq!(readyz_held(&proxy).await, 0);
    // New requests are not held.
    let (status, _, took) = joined(spawn_get(proxy.url("/fast"), Some("slow"))).await;
    assert_eq!(status, 200);
    assert!(took < AT_ONCE, "slow took {took:?} after the hold was lifted");
    let log = proxy.log();
    assert!(log.contains("drill hold lifted") && log.contains(DRILL), "{log}");
}

#[tokio::test]
async fn the_class_maximum_duration_ends_a_hold_with_the_usual_504() {
    let up = Upstream::start().await;
    let config = ConfigDir::new(&drill_pools(Some((30_000, now_ms() + 60_000)), r#","maxDurationMs":500"#));
    let url = up.url();
    let proxy = Proxy::start(config.path(), &args(&url)).await;
    let (status, reason, took) = joined(spawn_get(proxy.url("/fast"), Some("slow"))).await;
    assert_eq!((status, reason.as_str()), (504, "upstream-timeout"));
    assert!(took >= Duration::from_millis(500) && took < Duration::from_secs(5), "504 after {took:?}");
    assert_eq!((readyz_held(&proxy).await, proxy.in_flight("slow").await), (0, 0.0));
}

#[tokio::test]
async fn a_client_that_goes_away_while_held_frees_its_slot() {
    let up = Upstream::start().await;
    let config = ConfigDir::new(&held_pools(30_000));
    let url = up.url();
    let proxy = Proxy::start(config.path(), &args(&url)).await;

    // HTTP/1.1: the client closes its connection while its request is held.
    let mut tcp = tokio::net::TcpStream::connect(proxy.listen).await.expect("connect");
    tcp.write_all(b"GET /fast HTTP/1.1\r\nhost: x\r\nx-class: slow\r\n\r\n").await.expect("send");
    await_held(&proxy, 1).await;
    drop(tcp);
    let started = Instant::now();
    while readyz_held(&proxy).await != 0 || proxy.in_flight("slow").await != 0.0 {
        assert!(started.elapsed() < Duration::from_secs(5), "HTTP/1.1: still held after the client left");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // HTTP/2: the client resets its stream (drops the request) while held.
    let task = {
        let client = h2c();
        let url = proxy.url("/fast");
        tokio::spawn(async move { client.request(request(&url, Some("slow"))).await })
    };
    await_held(&proxy, 1).await;
    task.abort();
    let started = Instant::now();
    while readyz_held(&proxy).await != 0 || proxy.in_flight("slow").await != 0.0 {
        assert!(started.elapsed() < Duration::from_secs(5), "h2c: still held after the stream was reset");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(proxy.metric(r#"bulkhead_proxy_held_requests_total{class="slow"}"#).await, 2.0);
}

#[tokio::test]
async fn stopping_the_proxy_forwards_what_it_held_at_once() {
    let up = Upstream::start().await;
    let config = ConfigDir::new(&held_pools(30_000));
    let url = up.url();
    let mut proxy = Proxy::start(config.path(), &args(&url)).await;
    let held = spawn_get(proxy.url("/fast"), Some("slow"));
    await_held(&proxy, 1).await;
    let stopped = Instant::now();
    proxy.terminate();
    let (status, _, _) = joined(held).await;
    assert_eq!(status, 200, "forwarded when the drain began");
    assert!(proxy.exited(Duration::from_secs(10)).await.success());
    assert!(stopped.elapsed() < Duration::from_secs(5), "the drain waited {:?} for the hold", stopped.elapsed());
}

#[tokio::test]
async fn an_egress_route_listener_holds_its_class_and_not_the_others() {
    let up = Upstream::start().await;
    let config = ConfigDir::new(&held_pools(HOLD.as_millis() as u64));
    let (slow, fast) = (free_port(), free_port());
    let (slow_route, fast_route) = (format!("slow={slow}"), format!("fast={fast}"));
    let url = up.url();
    let mut a = args(&url);
    a.extend(["--classify", "port", "--route", &slow_route, "--route", &fast_route]);
    let proxy = Proxy::start(config.path(), &a).await;
    let held = spawn_get(format!("http://{slow}/fast"), None);
    await_held(&proxy, 1).await;
    let (status, _, took) = joined(spawn_get(format!("http://{fast}/fast"), None)).await;
    assert_eq!(status, 200);
    assert!(took < AT_ONCE, "fast took {took:?} while slow was held");
    let (status, _, took) = joined(held).await;
    assert_eq!(status, 200);
    assert!(took >= HOLD, "slow answered after {took:?}");
}
