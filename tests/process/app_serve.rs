//! The test app (`tests/images/app-serve`) as its image runs it: busybox
//! `nc -ll -e` forks one script per connection, with only the applets
//! `tests/image` links into the image. Needs `/bin/busybox` (Debian's
//! busybox-static, which `tests/run` installs through `tests/image packages`).

use crate::proxy_support;

use std::{
    net::SocketAddr,
    os::unix::process::CommandExt,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use proxy_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BUSYBOX: &str = "/bin/busybox";

/// The applets `tests/image` links into the app's image.
fn image_applets() -> Vec<String> {
    let recipe = std::fs::read_to_string(bulkhead_testkit::repo_root().join("tests/image")).expect("tests/image");
    let line = recipe.lines().find(|l| l.trim_start().starts_with("for applet in ")).expect("the applet list");
    let list = line.trim_start().trim_start_matches("for applet in ");
    list.split(';').next().expect("a list").split_whitespace().map(str::to_owned).collect()
}

/// One app, listening on a port of its own, with `env` set.
struct App {
    nc: Child,
    addr: SocketAddr,
    _bin: tempfile::TempDir,
}

impl App {
    async fn start(env: &[(&str, &str)]) -> App {
        assert!(Path::new(BUSYBOX).exists(), "{BUSYBOX} is missing: `tests/image packages` installs busybox-static");
        // A PATH of the image's applets only, so a command the image lacks fails here too.
        let bin = tempfile::tempdir().expect("tempdir");
        for applet in image_applets() {
            std::os::unix::fs::symlink(BUSYBOX, bin.path().join(applet)).expect("link an applet");
        }
        let script = bulkhead_testkit::repo_root().join("tests/images/app-serve");
        let addr = free_port();
        let nc = Command::new(BUSYBOX)
            .args(["nc", "-ll", "-p", &addr.port().to_string(), "-e", "sh"])
            .arg(&script)
            .env_clear()
            .env("PATH", bin.path())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // A group of its own: the scripts nc forked end with it (their traps give the workers back).
            .process_group(0)
            .spawn()
            .expect("busybox nc runs");
        let app = App { nc, addr, _bin: bin };
        let started = Instant::now();
        while get(&app.url("/healthz")).await.map(|(s, _)| s) != Some(200) {
            assert!(started.elapsed() < WAIT, "the app never answered on {addr}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        app
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for App {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", "--", &format!("-{}", self.nc.id())]).status();
        let _ = self.nc.wait();
    }
}

/// A GET, timed.
async fn timed(url: String) -> (u16, String, Duration) {
    let started = Instant::now();
    let (status, body) = get(&url).await.unwrap_or_else(|| panic!("{url}: no answer"));
    (status, body.trim_end().to_owned(), started.elapsed())
}

fn workers_taken(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.count())
}

/// Wait (bounded) until `n` workers are taken.
async fn await_workers(dir: &Path, n: usize) {
    let started = Instant::now();
    while workers_taken(dir) != n {
        assert!(started.elapsed() < WAIT, "never {n} workers taken in {}", dir.display());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn two_workers_held_by_calls_make_every_other_request_wait_but_the_health_check() {
    let downstream = App::start(&[]).await;
    let hangs = downstream.url("/sleep/3");
    let workers = tempfile::tempdir().expect("tempdir");
    let dir = workers.path().join("workers");
    let app = App::start(&[("WORKERS", "2"), ("WORKERS_DIR", dir.to_str().expect("utf-8")), ("CALL_X", &hangs)]).await;

    let calls: Vec<_> = (0..2).map(|_| tokio::spawn(timed(app.url("/call/x")))).collect();
    await_workers(&dir, 2).await;
    let (status, _, took) = timed(app.url("/healthz")).await;
    assert!(status == 200 && took < Duration::from_secs(1), "/healthz took {took:?}: it takes no worker");
    // Both workers wait on the dependency that hangs: `/` waits for one of them.
    let (status, body, took) = timed(app.url("/")).await;
    assert_eq!((status, body.as_str()), (200, "ok"));
    assert!(took >= Duration::from_millis(1500), "`/` took {took:?} with both workers busy");
    for call in calls {
        let (status, body, _) = call.await.expect("no panic");
        assert_eq!((status, body.as_str()), (200, "slept 3"), "the call answers with the body it got");
    }
    await_workers(&dir, 0).await;

    // Without WORKERS nothing is shared: `/` answers at once beside the same two calls.
    let app = App::start(&[("CALL_X", &hangs)]).await;
    let calls: Vec<_> = (0..2).map(|_| tokio::spawn(timed(app.url("/call/x")))).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, _, took) = timed(app.url("/")).await;
    assert!(status == 200 && took < Duration::from_secs(1), "`/` took {took:?} with no worker limit");
    for call in calls {
        assert_eq!(call.await.expect("no panic").0, 200);
    }
}

/// Answers every connection with a 503, as a sidecar's rejection does.
async fn refusing_downstream() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = [0u8; 1024];
                let _ = tcp.read(&mut head).await;
                let _ = tcp
                    .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_call_answers_with_the_body_it_got_or_says_how_it_failed() {
    let downstream = App::start(&[]).await;
    let refusing = format!("http://{}/", refusing_downstream().await);
    let (ok, dead) = (downstream.url("/"), format!("http://{}/", free_port()));
    let app = App::start(&[("CALL_PAY_MENTS", &ok), ("CALL_REFUSED", &refusing), ("CALL_DEAD", &dead)]).await;
    let (status, body, _) = timed(app.url("/call/pay-ments")).await;
    assert_eq!((status, body.as_str()), (200, "ok"), "class pay-ments calls $CALL_PAY_MENTS");
    assert_eq!(timed(app.url("/call/refused")).await.0, 503, "the downstream's 503 is passed on");
    assert_eq!(timed(app.url("/call/dead")).await.0, 502, "a call that fails otherwise is a 502");
    assert_eq!(timed(app.url("/call/nope")).await.0, 404, "no $CALL_NOPE");
    assert_eq!(timed(app.url("/sleep/0")).await.1, "slept 0");
}

#[tokio::test]
async fn a_drill_on_an_egress_sidecar_shows_a_worker_pool_shared_across_classes() {
    // The leak BulkheadDrill exists to find, in miniature: the app's `slow` calls go through an
    // egress route listener whose class is held, and the app serves everything from two workers.
    let up = Upstream::start().await;
    let until = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("now").as_millis() + 60_000;
    let pools = pools(5).replace(
        r#""name":"checkout","reserved":2,"ceiling":5,"critical":false"#,
        &format!(r#""name":"checkout","reserved":2,"ceiling":5,"critical":false,"hold":{{"drill":"d","ms":3000,"untilUnixMs":{until}}}"#),
    );
    assert!(pools.contains("hold"));
    let config = ConfigDir::new(&pools);
    let route = free_port();
    let route_arg = format!("checkout={route}");
    let url = up.url();
    let proxy = Proxy::start(config.path(), &["--upstream", &url, "--classify", "port", "--route", &route_arg]).await;
    let workers = tempfile::tempdir().expect("tempdir");
    let dir = workers.path().join("workers");
    let call = format!("http://{route}/fast");
    let app =
        App::start(&[("WORKERS", "2"), ("WORKERS_DIR", dir.to_str().expect("utf-8")), ("CALL_CHECKOUT", &call)]).await;

    let calls: Vec<_> = (0..2).map(|_| tokio::spawn(timed(app.url("/call/checkout")))).collect();
    await_workers(&dir, 2).await;
    let started = Instant::now();
    while !get(&format!("http://{}/readyz", proxy.admin)).await.is_some_and(|(_, b)| b.contains(" held=2")) {
        assert!(started.elapsed() < WAIT, "the sidecar never held both calls:\n{}", proxy.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A request of no held class waits behind the held calls: the isolation leaks above the sidecar.
    let (status, _, took) = timed(app.url("/")).await;
    assert_eq!(status, 200);
    assert!(took >= Duration::from_millis(1500), "`/` took {took:?} while both workers waited on the hold");
    for call in calls {
        let (status, body, took) = call.await.expect("no panic");
        assert_eq!((status, body.as_str()), (200, "ok"));
        assert!(took >= Duration::from_secs(3), "held {took:?}");
    }
}
