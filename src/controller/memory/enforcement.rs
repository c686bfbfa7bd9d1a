//! Asking the sidecars what they enforce: for each Bulkhead with
//! spec.workload.proxy, a task asks every running selected pod's sidecar
//! for `/readyz` on its admin port, whose body names the content hash of the
//! pool config in force (`config=<hash>`). Off the reconcile path and
//! bounded: at most `PROBES_IN_FLIGHT` questions at once, each within
//! `PROBE_TIMEOUT` and `MAX_ANSWER` bytes. Often while a pod lags behind the
//! planned config, rarely at rest. The answers are kept here; a new result
//! wakes the reconciles, which turn it into `Enforced` and `status.enforcement`.

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use futures::Stream;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    sync::{Notify, Semaphore},
    time::Instant,
};

use crate::controller::runtime::metrics::Metrics;
use crate::{
    plan::{Enforcer, Plan},
    snapshot::ObjectKey,
    status::{Answer, Observed},
};

/// How often each sidecar is asked.
#[derive(Clone, Copy, Debug)]
pub struct EnforcementOptions {
    /// At rest: every pod answered with the planned config.
    pub rest: Duration,
    /// While a pod lags or cannot be asked, after the grace period.
    pub lagging: Duration,
    /// How long a pod may lag, or not answer, before `Enforced` says so.
    pub grace: Duration,
}

impl Default for EnforcementOptions {
    fn default() -> Self {
        Self { rest: Duration::from_secs(10), lagging: Duration::from_secs(2), grace: Duration::from_secs(10) }
    }
}

/// While within the grace period, pods are asked this often: a change
/// reaches a sidecar in about a second, and the status should show it then.
const EAGER: Duration = Duration::from_millis(250);
/// Questions in flight at once, over every Bulkhead.
const PROBES_IN_FLIGHT: usize = 32;
/// One question: connect, ask, read the answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The largest answer read: /readyz answers in one short line.
const MAX_ANSWER: u64 = 4096;

/// The pods of one Bulkhead to ask, and the hash they should report.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Target {
    hash: String,
    pods: Vec<(ObjectKey, Option<SocketAddr>)>,
}

struct Entry {
    token: u64,
    target: Target,
    /// When the operator planned (and, if `measured`, wrote) `target.hash`.
    written: Instant,
    /// Whether the time to converge on this hash is measured: the operator
    /// wrote it while running (not a config found in place at start).
    measured: bool,
    /// When each pod was first found not on the planned config.
    since: BTreeMap<ObjectKey, (Instant, Time)>,
    last_convergence_seconds: Option<f64>,
    observed: Option<Arc<Observed>>,
    wake: Arc<Notify>,
}

/// Each Bulkhead's latest answers.
pub struct Enforcement {
    options: EnforcementOptions,
    entries: Mutex<HashMap<String, Entry>>,
    next_token: Mutex<u64>,
    probes: Arc<Semaphore>,
    changed: Arc<Notify>,
    metrics: Arc<Metrics>,
}

impl Enforcement {
    pub fn new(options: EnforcementOptions, metrics: Arc<Metrics>) -> Self {
        Self {
            options,
            entries: Mutex::default(),
            next_token: Mutex::new(0),
            probes: Arc::new(Semaphore::new(PROBES_IN_FLIGHT)),
            changed: Arc::new(Notify::new()),
            metrics,
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Ask `plan`'s pods from now on (a task per Bulkhead, started on first
    /// use), and return the latest answers about its planned config. `wrote`:
    /// this reconcile wrote the pool config, so its convergence is timed.
    /// Without a sidecar or a planned config there is nothing to ask.
    pub fn observe(self: &Arc<Self>, name: &str, plan: &Plan, wrote: bool) -> Option<Arc<Observed>> {
        let proxy = &plan.proxy;
        let Some(hash) = proxy.config_hash.clone().filter(|_| proxy.requested) else {
            self.forget(name);
            return None;
        };
        let pods = proxy
            .pods
            .iter()
            .filter_map(|p| match p.enforcer {
                Enforcer::Sidecar { admin } => Some((p.key.clone(), admin)),
                _ => None,
            })
            .collect();
        let target = Target { hash, pods };
        let mut entries = self.entries();
        if let Some(entry) = entries.get_mut(name) {
            if entry.target != target {
                if entry.target.hash != target.hash {
                    entry.written = Instant::now();
                    entry.measured = true;
                    entry.since.clear();
                }
                entry.target = target;
                entry.wake.notify_one();
            }
            return entry.observed.clone();
        }
        let token = {
            let mut next = self.next_token.lock().unwrap_or_else(PoisonError::into_inner);
            *next += 1;
            *next
        };
        let wake = Arc::new(Notify::new());
        entries.insert(
            name.to_string(),
            Entry {
                token,
                target,
                written: Instant::now(),
                measured: wrote,
                since: BTreeMap::new(),
                last_convergence_seconds: None,
                observed: None,
                wake: wake.clone(),
            },
        );
        tokio::spawn(self.clone().ask_while_tracked(name.to_string(), token, wake));
        None
    }

    /// The Bulkhead is gone, or has no sidecar any more: stop asking.
    pub fn forget(&self, name: &str) {
        self.entries().remove(name);
    }

    /// Yields each time some Bulkhead's answers changed, at most every `every`.
    pub fn changed(&self, every: Duration) -> impl Stream<Item = ()> + Send + 'static {
        futures::stream::unfold(self.changed.clone(), move |changed| async move {
            changed.notified().await;
            tokio::time::sleep(every).await;
            Some(((), changed))
        })
    }

    async fn ask_while_tracked(self: Arc<Self>, name: String, token: u64, wake: Arc<Notify>) {
        loop {
            let Some(target) = self.entries().get(&name).filter(|e| e.token == token).map(|e| e.target.clone()) else {
                return;
            };
            let answers = ask_all(&self.probes, &target.pods).await;
            let Some(next) = self.record(&name, token, &target, answers) else { return };
            tokio::select! {
                () = tokio::time::sleep(next) => {}
                () = wake.notified() => {}
            }
        }
    }

    /// Keep the answers about `target` and say when to ask again; None once
    /// the Bulkhead is forgotten.
    fn record(
        &self,
        name: &str,
        token: u64,
        target: &Target,
        answers: Vec<(ObjectKey, Result<String, String>)>,
    ) -> Option<Duration> {
        let mut entries = self.entries();
        let entry = entries.get_mut(name).filter(|e| e.token == token)?;
        if entry.target.hash != target.hash {
            return Some(Duration::ZERO); // planned again meanwhile: ask about the new one
        }
        let (now, wall) = (Instant::now(), now_time());
        let mut observed = Observed { hash: target.hash.clone(), ..Observed::default() };
        let mut within_grace = false;
        for (key, answer) in answers {
            let result = if answer.is_ok() { "answered" } else { "unreachable" };
            self.metrics
                .enforcement_probes
                .get_or_create(&crate::controller::runtime::metrics::ResultLabels { result })
                .inc();
            let answer = match answer {
                Ok(hash) if hash == target.hash => {
                    entry.since.remove(&key);
                    Answer::Current
                }
                other => {
                    let (first, since) = entry.since.entry(key.clone()).or_insert_with(|| (now, wall.clone())).clone();
                    let overdue = now.duration_since(first) >= self.options.grace;
                    within_grace |= !overdue;
                    match other {
                        Ok(has) => Answer::Lagging { has, since, overdue },
                        Err(why) => Answer::Unreachable { why, since, overdue },
                    }
                }
            };
            observed.answers.insert(key, answer);
        }
        entry.since.retain(|k, _| observed.answers.contains_key(k));
        let all_current = observed.answers.values().all(|a| *a == Answer::Current);
        if all_current && !observed.answers.is_empty() && entry.measured {
            let took = now.duration_since(entry.written);
            self.metrics.config_convergence.observe(took.as_secs_f64());
            entry.last_convergence_seconds = Some((took.as_secs_f64() * 1000.0).round() / 1000.0);
            entry.measured = false;
        }
        observed.last_convergence_seconds = entry.last_convergence_seconds;
        if entry.observed.as_deref() != Some(&observed) {
            entry.observed = Some(Arc::new(observed));
            self.changed.notify_one();
        }
        Some(match (all_current, within_grace) {
            (true, _) => self.options.rest,
            (false, true) => EAGER,
            (false, false) => self.options.lagging,
        })
    }
}

/// Ask every pod, at most `PROBES_IN_FLIGHT` at once over the process.
async fn ask_all(
    probes: &Semaphore,
    pods: &[(ObjectKey, Option<SocketAddr>)],
) -> Vec<(ObjectKey, Result<String, String>)> {
    let asks = pods.iter().map(|(key, addr)| async move {
        let answer = match addr {
            None => Err("no pod IP or admin port to ask".to_string()),
            Some(addr) => match probes.acquire().await {
                Ok(_permit) => ask(*addr).await,
                Err(_) => Err("the operator is stopping".to_string()),
            },
        };
        (key.clone(), answer)
    });
    futures::future::join_all(asks).await
}

/// One question: `GET /readyz`, and the `config=` of the answer.
async fn ask(addr: SocketAddr) -> Result<String, String> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream.write_all(b"GET /readyz HTTP/1.0\r\nHost: bulkhead-proxy\r\n\r\n").await?;
        let mut answer = Vec::with_capacity(256);
        (&mut stream).take(MAX_ANSWER).read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    match tokio::time::timeout(PROBE_TIMEOUT, exchange).await {
        Err(_) => Err("no answer within 1s".to_string()),
        Ok(Err(e)) => Err(describe(&e)),
        Ok(Ok(answer)) => config_hash(&answer).ok_or_else(|| "its admin port names no config hash".to_string()),
    }
}

/// The hash in a /readyz answer: `ok generation=3 config=0123456789abcdef`.
fn config_hash(answer: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(answer).ok()?;
    let body = text.split_once("\r\n\r\n")?.1;
    let hash = body.split_whitespace().find_map(|word| word.strip_prefix("config="))?;
    let valid = !hash.is_empty() && hash.len() <= 64 && hash.bytes().all(|b| b.is_ascii_alphanumeric());
    valid.then(|| hash.to_string())
}

/// A stable account of why a pod could not be asked (the condition message
/// carries it, so it must not change from one question to the next).
fn describe(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
        std::io::ErrorKind::ConnectionReset => "connection reset".to_string(),
        kind => kind.to_string(),
    }
}

/// Now, to the second, as condition messages carry it.
fn now_time() -> Time {
    let ts = jiff::Timestamp::now();
    Time(jiff::Timestamp::from_second(ts.as_second()).unwrap_or(ts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_read_from_the_readyz_body_and_nothing_else() {
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 42\r\n\r\nok generation=3 config=0123456789abcdef\n";
        assert_eq!(config_hash(ok).as_deref(), Some("0123456789abcdef"));
        let draining = b"HTTP/1.1 503 Service Unavailable\r\n\r\ndraining generation=1 config=none\n";
        assert_eq!(config_hash(draining).as_deref(), Some("none"));
        // An older sidecar names no hash; a header cannot stand in for the body.
        assert_eq!(config_hash(b"HTTP/1.1 200 OK\r\nx: config=ab\r\n\r\nok generation=1\n"), None);
        assert_eq!(config_hash(b"HTTP/1.1 200 OK\r\n\r\nok config=a/b\n"), None);
    }

    #[tokio::test]
    async fn a_port_that_refuses_is_named_and_one_that_hangs_is_bounded() {
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = closed.local_addr().expect("addr");
        drop(closed);
        assert_eq!(ask(addr).await, Err("connection refused".to_string()));
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let started = std::time::Instant::now();
        let answer = ask(silent.local_addr().expect("addr")).await;
        assert_eq!(answer, Err("no answer within 1s".to_string()));
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    }
}
