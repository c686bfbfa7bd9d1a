//! `bulkhead run` stops on time with an API server that cannot be reached
//! (issue 22): its watches back off instead of logging hundreds of lines a
//! second, SIGTERM ends it within the grace period even though its graceful
//! path waits on that API server, and a second signal ends it at once. No
//! cluster: the kubeconfig points at a port where nothing listens.

use std::{
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

fn start(dir: &std::path::Path, metrics: &str, extra: &[&str]) -> Child {
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: x, cluster: {server: \"https://127.0.0.1:1\", insecure-skip-tls-verify: true}}]\n\
         contexts: [{name: x, context: {cluster: x, user: x}}]\ncurrent-context: x\nusers: [{name: x, user: {token: t}}]\n",
    )
    .expect("kubeconfig");
    Command::new(env!("CARGO_BIN_EXE_bulkhead"))
        .args(["run", "--metrics-addr", metrics])
        .args(extra)
        .env("KUBECONFIG", &kubeconfig)
        .env("NO_COLOR", "1")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("RUST_LOG")
        .stdout(Stdio::from(std::fs::File::create(dir.join("log")).expect("log file")))
        .stderr(Stdio::null())
        .spawn()
        .expect("bulkhead runs")
}

fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics port");
    stream.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").expect("request");
    let mut body = String::new();
    stream.read_to_string(&mut body).expect("response");
    body
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    let rc = unsafe { libc::kill(child.id() as i32, sig) };
    assert_eq!(rc, 0, "kill({}, {sig})", child.id());
}

/// Waits up to `limit` for the child to exit: (exit code, time taken).
fn exit_within(child: &mut Child, limit: Duration) -> (Option<i32>, Duration) {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return (status.code(), started.elapsed());
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running {limit:?} after the signal");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_stops_it_within_the_grace_period_and_the_log_stays_quiet() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
    let mut child = start(dir.path(), &format!("127.0.0.1:{port}"), &[]);
    // Long enough for every watch to fail several times, and for the
    // controller's graceful path to be waiting on the API server.
    thread::sleep(Duration::from_secs(8));
    // Each failed attempt is counted, by kind.
    let metrics = scrape(port);
    for kind in ["Pod", "Node", "Bulkhead"] {
        let series = format!("bulkhead_watch_failures_total{{kind=\"{kind}\"}} ");
        let count: f64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix(&series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series} in:\n{metrics}"));
        assert!(count >= 2.0, "{kind}: {count} failed attempts counted in 8 s");
    }
    signal(&child, libc::SIGTERM);
    let (code, took) = exit_within(&mut child, Duration::from_secs(5));
    assert_eq!(code, Some(0), "a clean stop");
    let log = std::fs::read_to_string(dir.path().join("log")).expect("log");
    let lines = log.lines().count();
    println!("SIGTERM -> exit {:.2} s; {lines} log lines in 8 s", took.as_secs_f64());
    // Before the backoff was fixed: about 260 lines a second.
    assert!(lines < 400, "{lines} log lines in 8 s:\n{}", log.lines().take(20).collect::<Vec<_>>().join("\n"));
}

#[test]
fn a_second_signal_stops_it_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A grace period far longer than the test waits: only the second signal can end it in time.
    let mut child = start(dir.path(), "127.0.0.1:0", &["--shutdown-grace", "60s"]);
    thread::sleep(Duration::from_secs(8));
    signal(&child, libc::SIGTERM);
    thread::sleep(Duration::from_millis(500));
    assert!(child.try_wait().expect("wait").is_none(), "still finishing after the first signal");
    signal(&child, libc::SIGINT);
    let (code, took) = exit_within(&mut child, Duration::from_secs(2));
    assert_eq!(code, Some(130), "the exit code of an interrupted process");
    println!("second signal -> exit {:.3} s", took.as_secs_f64());
}
