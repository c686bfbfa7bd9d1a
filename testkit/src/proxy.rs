//! What the proxy tests share: a kubelet-style config directory, an upstream
//! whose responses the test holds open, the real `bulkhead proxy` process,
//! and HTTP/1.1 and h2c clients. Loopback only; every wait is bounded.

use std::{
    convert::Infallible,
    net::{SocketAddr, TcpListener as StdListener},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use futures::channel::mpsc;
use http::{Request, Response};
use http_body_util::{combinators::BoxBody, BodyExt, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::{
    client::legacy::{connect::HttpConnector, Client},
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
};
use tokio::sync::watch;

pub const WAIT: Duration = Duration::from_secs(15);

/// capacity 10 = floors 2 + 2 + 2 + surplus 4; ceilings 5, 4, 2.
pub fn pools(checkout_ceiling: u32) -> String {
    pools_with(10, checkout_ceiling)
}

pub fn pools_with(capacity: u32, checkout_ceiling: u32) -> String {
    format!(
        r#"{{"version":1,"bulkhead":"shop","resource":"requests","scope":"Instance","dividedBy":1,
  "capacity":{capacity},"sharedSurplus":4,"onCeiling":"reject","classes":[
  {{"name":"checkout","reserved":2,"ceiling":{checkout_ceiling},"critical":false}},
  {{"name":"search","reserved":2,"ceiling":4,"critical":false}},
  {{"name":"control-plane","reserved":2,"ceiling":2,"critical":true}}]}}"#
    )
}

/// A ConfigMap volume as the kubelet lays it out and updates it.
pub struct ConfigDir {
    pub dir: tempfile::TempDir,
    current: Option<PathBuf>,
    serial: u32,
}

impl ConfigDir {
    pub fn new(pools_json: &str) -> Self {
        let mut c = ConfigDir { dir: tempfile::tempdir().expect("tempdir"), current: None, serial: 0 };
        c.update(pools_json);
        std::os::unix::fs::symlink("..data/pools.json", c.path().join("pools.json")).expect("pools.json link");
        c
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// New timestamped directory, `..data_tmp` pointing at it, renamed onto `..data`, old one removed.
    pub fn update(&mut self, pools_json: &str) {
        self.serial += 1;
        let name = format!("..2026_12_03_10_00_00.{:09}", self.serial);
        let fresh = self.path().join(&name);
        std::fs::create_dir(&fresh).expect("timestamped dir");
        std::fs::write(fresh.join("pools.json"), pools_json).expect("write");
        let tmp = self.path().join("..data_tmp");
        std::os::unix::fs::symlink(&name, &tmp).expect("..data_tmp");
        std::fs::rename(&tmp, self.path().join("..data")).expect("atomic swap");
        if let Some(old) = self.current.replace(fresh) {
            std::fs::remove_dir_all(old).expect("old dir");
        }
    }
}

/// An exposition line without the `bulkhead="…"` label every proxy series
/// carries, so that a test names a series by the labels it is about.
pub fn unlabelled(line: &str) -> String {
    const KEY: &str = "bulkhead=\"";
    let Some(start) = line.find(KEY) else { return line.to_owned() };
    let value = start + KEY.len();
    let (mut a, mut b) = (start, line[value..].find('"').map_or(line.len(), |e| value + e + 1));
    if line[b..].starts_with(',') {
        b += 1;
    } else if line[..a].ends_with(',') {
        a -= 1;
    }
    format!("{}{}", &line[..a], &line[b..]).replacen("{}", "", 1)
}

pub fn free_port() -> SocketAddr {
    let l = StdListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr")
}

type UpBody = BoxBody<Bytes, Infallible>;

/// Length of the upstream's `/large` response.
pub const LARGE: usize = 2 << 20;

/// An upstream: `/hold` sends its head and a first chunk, then the rest only
/// when the test calls `release`; `/flood` streams as fast as it is read;
/// `/large` answers [`LARGE`] bytes; `/slow` answers `ok` after 1.5 s;
/// `…/headers` and `…/trailers` echo the request's head and trailers;
/// `/take` reads the request body and never answers; `/early` (`/early0`: empty)
/// answers before it reads the body;
/// anything else answers `ok` at once, echoing the x-forwarded-for it saw.
pub struct Upstream {
    pub addr: SocketAddr,
    release: watch::Sender<u64>,
    /// Request bodies `/take` has read to their end.
    taken: Arc<AtomicUsize>,
}

impl Upstream {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind upstream");
        let addr = listener.local_addr().expect("addr");
        let (release, rx) = watch::channel(0u64);
        let taken = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&taken);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let rx = rx.clone();
                let counter = Arc::clone(&counter);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| answer(req, rx.clone(), Arc::clone(&counter)));
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection_with_upgrades(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Upstream { addr, release, taken }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Let every response held so far finish.
    /// How many request bodies `/take` has read to their end.
    pub fn bodies_taken(&self) -> usize {
        self.taken.load(Ordering::Relaxed)
    }

    pub fn release(&self) {
        self.release.send_modify(|v| *v += 1);
    }
}

async fn answer(
    mut req: Request<Incoming>,
    release: watch::Receiver<u64>,
    taken: Arc<AtomicUsize>,
) -> Result<Response<UpBody>, Infallible> {
    if req.uri().path() == "/upgrade" {
        // Switch to a line echo protocol until the client closes.
        let upgrade = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            if let Ok(upgraded) = upgrade.await {
                let (mut r, mut w) = tokio::io::split(TokioIo::new(upgraded));
                let _ = tokio::time::timeout(WAIT, tokio::io::copy(&mut r, &mut w)).await;
            }
        });
        let mut res = Response::new(Empty::new().boxed());
        *res.status_mut() = http::StatusCode::SWITCHING_PROTOCOLS;
        res.headers_mut().insert("connection", http::HeaderValue::from_static("upgrade"));
        res.headers_mut().insert("upgrade", http::HeaderValue::from_static("echo"));
        return Ok(res);
    }
    if req.uri().path() == "/slow" {
        // An answer whose head takes 1.5 s.
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    if req.uri().path().starts_with("/early") {
        // Answers at once and reads the request body afterwards, as an application that
        // refuses an upload (a 404, a 413) while its server drains the rest; `/early0`
        // with an empty body.
        let empty = req.uri().path() == "/early0";
        let body = req.into_body();
        tokio::spawn(async move { tokio::time::timeout(WAIT, body.collect()).await });
        let answer = if empty { Bytes::new() } else { Bytes::from_static(b"early") };
        return Ok(Response::new(Full::new(answer).boxed()));
    }
    if req.uri().path() == "/take" {
        // Reads the whole request body, counts it, and never answers (bounded by WAIT).
        if req.into_body().collect().await.is_ok() {
            taken.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep(WAIT).await;
        return Ok(Response::new(Empty::new().boxed()));
    }
    if req.uri().path() == "/never" {
        // An upstream that takes the request and never answers (bounded by WAIT).
        tokio::time::sleep(WAIT).await;
    }
    if req.uri().path() == "/flood" {
        // A response that goes on (up to 256 MiB) as fast as it is read: for clients that never read it.
        let chunk = Bytes::from(vec![b'x'; 64 << 10]);
        let frames = std::iter::repeat_n(chunk, 4096).map(|c| Ok(Frame::data(c)));
        return Ok(Response::new(StreamBody::new(futures::stream::iter(frames)).boxed()));
    }
    if req.uri().path() == "/large" {
        // 2 MiB with a length, written as fast as the proxy reads: hyper's upstream reads grow to hundreds of KiB.
        return Ok(Response::new(Full::new(Bytes::from(vec![b'x'; LARGE])).boxed()));
    }
    if req.uri().path() == "/body" {
        // An application that reads the whole request body before answering.
        let length = req.into_body().collect().await.map_or(0, |b| b.to_bytes().len());
        return Ok(Response::new(Full::new(Bytes::from(length.to_string())).boxed()));
    }
    if req.uri().path().ends_with("/trailers") {
        // The request body's trailers as the upstream saw them, one `name: value` a line.
        let trailers = req.into_body().collect().await.ok().and_then(|b| b.trailers().cloned()).unwrap_or_default();
        let seen: String =
            trailers.iter().map(|(n, v)| format!("{n}: {}\n", String::from_utf8_lossy(v.as_bytes()))).collect();
        return Ok(Response::new(Full::new(Bytes::from(seen)).boxed()));
    }
    if req.uri().path().ends_with("/headers") {
        // The request head as the upstream saw it, one `name: value` a line, after its path (and authority).
        let mut seen = format!("path: {}\n", req.uri().path());
        if let Some(authority) = req.uri().authority() {
            // HTTP/2's :authority (an HTTP/1.1 request in origin form has none).
            seen.push_str(&format!("authority: {authority}\n"));
        }
        for (name, value) in req.headers() {
            seen.push_str(&format!("{}: {}\n", name, String::from_utf8_lossy(value.as_bytes())));
        }
        return Ok(Response::new(Full::new(Bytes::from(seen)).boxed()));
    }
    if req.uri().path() != "/hold" {
        let xff = req.headers().get("x-forwarded-for").cloned();
        let mut res = Response::new(Full::new(Bytes::from_static(b"ok")).boxed());
        if let Some(xff) = xff {
            res.headers_mut().insert("x-seen-forwarded-for", xff);
        }
        return Ok(res);
    }
    let target = *release.borrow() + 1;
    let (tx, rx) = mpsc::unbounded::<Result<Frame<Bytes>, Infallible>>();
    let _ = tx.unbounded_send(Ok(Frame::data(Bytes::from_static(b"start\n"))));
    let mut release = release;
    tokio::spawn(async move {
        let _ = tokio::time::timeout(WAIT, release.wait_for(|v| *v >= target)).await;
        let _ = tx.unbounded_send(Ok(Frame::data(Bytes::from_static(b"end\n"))));
    });
    Ok(Response::new(StreamBody::new(rx).boxed()))
}

/// The real binary, killed if the test ends without stopping it.
pub struct Proxy {
    child: Child,
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    log: tempfile::NamedTempFile,
}

impl Proxy {
    /// `bulkhead proxy --config-dir DIR --listen L --admin A` plus `extra`.
    pub async fn start(config_dir: &Path, extra: &[&str]) -> Self {
        Self::start_limited(config_dir, extra, None).await
    }

    /// `start`, with at most `nofile` file descriptors (util-linux's prlimit).
    /// A port picked free can be taken by another test before the proxy
    /// binds it: such a start is tried again on other ports.
    pub async fn start_limited(config_dir: &Path, extra: &[&str], nofile: Option<u64>) -> Self {
        for _ in 0..4 {
            if let Some(proxy) = Self::try_start(config_dir, extra, nofile).await {
                return proxy;
            }
        }
        panic!("the proxy found its ports taken four times in a row");
    }

    /// One start; None when it exited because a port was taken meanwhile.
    async fn try_start(config_dir: &Path, extra: &[&str], nofile: Option<u64>) -> Option<Self> {
        let (listen, admin) = (free_port(), free_port());
        let log = tempfile::NamedTempFile::new().expect("log file");
        let mut args = vec![
            "proxy".to_owned(),
            "--config-dir".into(),
            config_dir.display().to_string(),
            "--listen".into(),
            listen.to_string(),
            "--admin".into(),
            admin.to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        // BULKHEAD_PROXY_BIN runs the tests against another build (an older one, to see a test fail).
        let bin = std::env::var_os("BULKHEAD_PROXY_BIN").map_or_else(crate::bulkhead_bin, PathBuf::from);
        let mut command = match nofile {
            Some(n) => {
                let mut c = Command::new("prlimit");
                c.arg(format!("--nofile={n}:{n}")).arg("--").arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let child = command
            .args(&args)
            .env("RUST_LOG", "info")
            .stdout(log.reopen().expect("log"))
            .stderr(log.reopen().expect("log"))
            .stdin(Stdio::null())
            .spawn()
            .expect("bulkhead runs");
        let mut proxy = Proxy { child, listen, admin, log };
        let deadline = Instant::now() + WAIT;
        while get(&format!("http://{}/readyz", proxy.admin)).await.map(|(s, _)| s) != Some(200) {
            let exited = proxy.child.try_wait().ok().flatten().is_some();
            if exited && proxy.log().contains("Address already in use") {
                return None;
            }
            assert!(Instant::now() < deadline, "proxy not ready:\n{}", proxy.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Some(proxy)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// The process's resident memory (VmRSS), in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("proc status");
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
        line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("VmRSS in kB")
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.listen)
    }

    /// The exposition, each line `unlabelled`.
    pub async fn metrics(&self) -> String {
        let text = self.raw_metrics().await;
        text.lines().map(|l| unlabelled(l) + "\n").collect()
    }

    pub async fn raw_metrics(&self) -> String {
        get(&format!("http://{}/metrics", self.admin)).await.map(|(_, b)| b).unwrap_or_default()
    }

    /// The value of one series, e.g. `bulkhead_proxy_in_flight{class="checkout",pool="floor"}`.
    pub async fn metric(&self, series: &str) -> f64 {
        let text = self.metrics().await;
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{series} not in\n{text}"))
    }

    pub async fn in_flight(&self, class: &str) -> f64 {
        let floor = self.metric(&format!(r#"bulkhead_proxy_in_flight{{class="{class}",pool="floor"}}"#)).await;
        floor + self.metric(&format!(r#"bulkhead_proxy_in_flight{{class="{class}",pool="surplus"}}"#)).await
    }

    pub async fn generation(&self) -> u64 {
        self.metric("bulkhead_proxy_config_generation").await as u64
    }

    /// Wait (bounded) until the generation is `n`; how long it took.
    pub async fn await_generation(&self, n: u64) -> Duration {
        let started = Instant::now();
        while self.generation().await != n {
            assert!(started.elapsed() < WAIT, "generation {n} never applied:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        started.elapsed()
    }

    pub fn terminate(&self) {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("kill runs");
        assert!(status.success());
    }

    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Wait (bounded) for the process to exit.
    pub async fn exited(&mut self, within: Duration) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(started.elapsed() < within, "still running after {within:?}:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub type HttpClient = Client<HttpConnector, Empty<Bytes>>;

pub fn http1() -> HttpClient {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

pub fn h2c() -> HttpClient {
    Client::builder(TokioExecutor::new()).http2_only(true).build(HttpConnector::new())
}

pub fn request(url: &str, class: Option<&str>) -> Request<Empty<Bytes>> {
    let mut b = Request::builder().uri(url);
    if let Some(class) = class {
        b = b.header("x-class", class);
    }
    b.body(Empty::new()).expect("request")
}

/// A GET whose whole body is read; None if the connection failed.
pub async fn get(url: &str) -> Option<(u16, String)> {
    let res = tokio::time::timeout(WAIT, http1().request(request(url, None))).await.ok()?.ok()?;
    let status = res.status().as_u16();
    let body = res.into_body().collect().await.ok()?.to_bytes();
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

/// Send and return the response with its body unread.
pub async fn send(client: &HttpClient, req: Request<Empty<Bytes>>) -> Response<Incoming> {
    tokio::time::timeout(WAIT, client.request(req)).await.expect("in time").expect("a response")
}

/// A `/hold` response that has started streaming: its head and first chunk are here.
pub async fn hold(client: &HttpClient, proxy: &Proxy, class: Option<&str>) -> Response<Incoming> {
    let mut res = send(client, request(&proxy.url("/hold"), class)).await;
    assert_eq!(res.status(), 200, "{:?}", res.headers());
    let first = tokio::time::timeout(WAIT, res.body_mut().frame()).await.expect("in time");
    let chunk = first.expect("a frame").expect("no error").into_data().expect("data");
    assert_eq!(chunk, "start\n");
    res
}

/// Read the rest of a held body (after `release`): it must end cleanly with `end`.
pub async fn finish(res: Response<Incoming>) {
    let body = tokio::time::timeout(WAIT, res.into_body().collect()).await.expect("in time").expect("not cut");
    assert_eq!(body.to_bytes(), "end\n");
}

pub fn header<'a>(res: &'a Response<Incoming>, name: &str) -> &'a str {
    res.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}
