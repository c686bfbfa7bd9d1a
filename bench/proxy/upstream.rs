//! Upstream for the proxy load benchmark (`bench/proxy/run`): answers every
//! request at once with `200 ok`, over HTTP/1.1 keep-alive and h2c (prior
//! knowledge) on the same port, unless the request's class is told to hang.
//!
//! ```text
//! cargo run --release --example bench-upstream -- \
//!     --listen 127.0.0.1:18080 --control 127.0.0.1:18081 [--capacity 200] \
//!     [--class-header x-bulkhead-class] [--threads 1]
//! ```
//!
//! Control port (HTTP/1.1):
//! - `POST /hang/CLASS?secs=N`: from now until N seconds from now (or until
//!   `/release/CLASS`), every request of CLASS is held without an answer;
//!   when the hang ends the held requests are answered.
//! - `POST /release/CLASS`: ends the hang of CLASS now.
//! - `GET /stats`: JSON with, per class, requests in flight (held or not),
//!   the peak since the last `/reset`, and the number answered; plus the
//!   requests waiting for a capacity slot.
//! - `POST /reset`: peaks back to the current values.
//!
//! For `bench/proxy/bodies`: a GET of `/bytes/N` is answered with N bytes
//! (at most 64 MiB), and a POST with the length of its body, read whole.
//!
//! `--capacity N` models a backend with N workers: at most N requests are
//! handled at once (held ones included) and the rest wait in one FIFO queue
//! shared by every class, as a thread pool's accept queue would. This is the
//! "no bulkhead" case: one class that hangs fills the N slots and every other
//! class waits behind it. Without `--capacity` nothing waits.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;

struct Args {
    listen: SocketAddr,
    control: SocketAddr,
    capacity: Option<usize>,
    class_header: HeaderName,
    threads: usize,
}

fn usage() -> ! {
    eprintln!(
        "usage: bench-upstream --listen HOST:PORT --control HOST:PORT [--capacity N] [--class-header NAME] [--threads N]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut listen = None;
    let mut control = None;
    let mut capacity = None;
    let mut class_header = HeaderName::from_static("x-bulkhead-class");
    let mut threads = 1;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--listen" => listen = Some(value.parse().unwrap_or_else(|_| usage())),
            "--control" => control = Some(value.parse().unwrap_or_else(|_| usage())),
            "--capacity" => {
                let n: usize = value.parse().unwrap_or_else(|_| usage());
                capacity = (n > 0).then_some(n);
            }
            "--class-header" => class_header = HeaderName::try_from(value).unwrap_or_else(|_| usage()),
            "--threads" => threads = value.parse().unwrap_or_else(|_| usage()),
            _ => usage(),
        }
    }
    Args {
        listen: listen.unwrap_or_else(|| usage()),
        control: control.unwrap_or_else(|| usage()),
        capacity,
        class_header,
        threads,
    }
}

#[derive(Default)]
struct ClassStats {
    inflight: AtomicI64,
    peak: AtomicI64,
    answered: AtomicI64,
}

struct State {
    class_header: HeaderName,
    slots: Option<Semaphore>,
    queued: AtomicI64,
    /// Fast path: no class hangs, so the map below is not read.
    any_hang: AtomicBool,
    /// Class → when its hang ends.
    hangs: Mutex<HashMap<String, Instant>>,
    /// Bumped on every release so held requests look again.
    released: watch::Sender<u64>,
    classes: Mutex<HashMap<String, Arc<ClassStats>>>,
}

impl State {
    fn class_stats(&self, class: &str) -> Arc<ClassStats> {
        let mut classes = self.classes.lock().unwrap();
        if let Some(stats) = classes.get(class) {
            return stats.clone();
        }
        classes.entry(class.to_owned()).or_default().clone()
    }

    fn hang_until(&self, class: &str) -> Option<Instant> {
        if !self.any_hang.load(Ordering::Acquire) {
            return None;
        }
        let hangs = self.hangs.lock().unwrap();
        hangs.get(class).copied().filter(|until| *until > Instant::now())
    }
}

/// Counts a request in flight for its class until dropped (also when the
/// client goes away and hyper drops the handler).
struct InFlight(Arc<ClassStats>);

impl InFlight {
    fn new(stats: Arc<ClassStats>) -> Self {
        let now = stats.inflight.fetch_add(1, Ordering::Relaxed) + 1;
        stats.peak.fetch_max(now, Ordering::Relaxed);
        InFlight(stats)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, Ordering::Relaxed);
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

async fn serve(state: Arc<State>, request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let class = request.headers().get(&state.class_header).and_then(|v| v.to_str().ok()).unwrap_or("-");
    let stats = state.class_stats(class);
    let _permit = match &state.slots {
        Some(slots) => {
            state.queued.fetch_add(1, Ordering::Relaxed);
            let permit = slots.acquire().await;
            state.queued.fetch_sub(1, Ordering::Relaxed);
            Some(permit.expect("semaphore never closes"))
        }
        None => None,
    };
    let _inflight = InFlight::new(stats.clone());
    if state.hang_until(class).is_some() {
        let mut released = state.released.subscribe();
        while let Some(until) = state.hang_until(class) {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => {}
                _ = released.changed() => {}
            }
        }
    }
    stats.answered.fetch_add(1, Ordering::Relaxed);
    if request.method() == Method::POST {
        // Read to its end, so that the body's cost is on the way here.
        let read = request.into_body().collect().await.map(|body| body.to_bytes().len()).unwrap_or(0);
        return Ok(text(StatusCode::OK, format!("{read}\n")));
    }
    if let Some(n) = request.uri().path().strip_prefix("/bytes/") {
        return Ok(match n.parse::<usize>() {
            Ok(n) if n <= MAX_BYTES => text(StatusCode::OK, big_body().slice(..n)),
            _ => text(StatusCode::BAD_REQUEST, format!("at most {MAX_BYTES} bytes\n")),
        });
    }
    Ok(text(StatusCode::OK, Bytes::from_static(b"ok\n")))
}

const MAX_BYTES: usize = 64 << 20;

/// One buffer every `/bytes/N` answer is a slice of, so the upstream spends
/// nothing per request on making the body.
fn big_body() -> Bytes {
    static BODY: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    BODY.get_or_init(|| Bytes::from(vec![b'x'; MAX_BYTES])).clone()
}

async fn control(state: Arc<State>, request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    let query = request.uri().query().unwrap_or("").to_owned();
    let method = request.method().clone();
    let reply = match (&method, path.as_str()) {
        (&Method::GET, "/stats") => {
            let classes = state.classes.lock().unwrap();
            let mut names: Vec<&String> = classes.keys().collect();
            names.sort();
            let body: Vec<String> = names
                .iter()
                .map(|name| {
                    let s = &classes[*name];
                    format!(
                        "{:?}:{{\"inflight\":{},\"peak\":{},\"answered\":{}}}",
                        name,
                        s.inflight.load(Ordering::Relaxed),
                        s.peak.load(Ordering::Relaxed),
                        s.answered.load(Ordering::Relaxed)
                    )
                })
                .collect();
            text(
                StatusCode::OK,
                format!("{{\"queued\":{},\"classes\":{{{}}}}}\n", state.queued.load(Ordering::Relaxed), body.join(",")),
            )
        }
        (&Method::POST, "/reset") => {
            for stats in state.classes.lock().unwrap().values() {
                stats.peak.store(stats.inflight.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            text(StatusCode::OK, "reset\n")
        }
        (&Method::POST, p) if p.starts_with("/hang/") => {
            let class = p["/hang/".len()..].to_owned();
            let secs: f64 =
                query.split('&').find_map(|kv| kv.strip_prefix("secs=")).and_then(|v| v.parse().ok()).unwrap_or(60.0);
            let until = Instant::now() + Duration::from_secs_f64(secs.max(0.0));
            state.hangs.lock().unwrap().insert(class.clone(), until);
            state.any_hang.store(true, Ordering::Release);
            text(StatusCode::OK, format!("{class} hangs for {secs} s\n"))
        }
        (&Method::POST, p) if p.starts_with("/release/") => {
            let class = &p["/release/".len()..];
            let mut hangs = state.hangs.lock().unwrap();
            hangs.remove(class);
            state.any_hang.store(!hangs.is_empty(), Ordering::Release);
            drop(hangs);
            state.released.send_modify(|n| *n += 1);
            text(StatusCode::OK, format!("{class} released\n"))
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    };
    Ok(reply)
}

async fn run(args: Args) -> std::io::Result<()> {
    let state = Arc::new(State {
        class_header: args.class_header,
        slots: args.capacity.map(Semaphore::new),
        queued: AtomicI64::new(0),
        any_hang: AtomicBool::new(false),
        hangs: Mutex::new(HashMap::new()),
        released: watch::channel(0).0,
        classes: Mutex::new(HashMap::new()),
    });
    let data = TcpListener::bind(args.listen).await?;
    let ctl = TcpListener::bind(args.control).await?;
    eprintln!(
        "bench-upstream: serving {} (HTTP/1.1 + h2c), control {}, capacity {}",
        args.listen,
        args.control,
        args.capacity.map_or("unlimited".to_owned(), |n| n.to_string())
    );

    let ctl_state = state.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = ctl.accept().await else { continue };
            let state = ctl_state.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| control(state.clone(), req));
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });

    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new());
    builder.http2().timer(TokioTimer::new()).max_concurrent_streams(4096);
    let builder = Arc::new(builder);
    loop {
        let (stream, _) = match data.accept().await {
            Ok(conn) => conn,
            Err(err) => {
                // Out of file descriptors and the like: back off, do not spin.
                eprintln!("bench-upstream: accept: {err}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let builder = builder.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| serve(state.clone(), req));
            let _ = builder.serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

fn main() -> std::io::Result<()> {
    let args = parse_args();
    let runtime = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()?
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(args.threads).enable_all().build()?
    };
    runtime.block_on(run(args))
}
