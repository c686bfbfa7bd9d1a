//! The drill's own traffic, measured from the client side, where a worker
//! pool shared behind the sidecar shows (the sidecar cannot see it). Each
//! measured class gets a paced closed loop of at most 4 workers at
//! `rate` requests per second over all pods; the drilled class gets as much
//! while the baseline is measured, and `saturate` unpaced workers once the
//! fault is in place. Every request has its own connection and timeout, and
//! the samples kept are bounded.

use std::{
    net::{IpAddr, SocketAddr},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, PoisonError,
    },
    time::Duration,
};

use tokio::{sync::Notify, task::JoinSet, time::Instant};

use super::exchange::{exchange, get_request};
use crate::status::drill::{DrillSettings, Outcome, Sample};

/// Samples kept at most (about 40 bytes each): 200 rps for 10 minutes on
/// every class of a large Bulkhead would otherwise grow without bound.
const MAX_SAMPLES: usize = 400_000;
/// Workers of one paced class.
const PACED_WORKERS: u32 = 4;
/// A saturating worker whose request came back at once (rejected) waits
/// this long before the next, so a rejection does not become a busy loop.
const AFTER_FAST: Duration = Duration::from_millis(250);

pub(super) struct Load {
    started: Instant,
    samples: Arc<Mutex<Vec<Sample>>>,
    saturating: Arc<AtomicBool>,
    wake: Arc<Notify>,
    /// The classes loaded, the drilled one first.
    pub(super) classes: Vec<String>,
    _tasks: JoinSet<()>,
}

struct Worker {
    class: usize,
    request: Arc<[u8]>,
    targets: Arc<[SocketAddr]>,
    first: usize,
    timeout: Duration,
    interval: Duration,
    samples: Arc<Mutex<Vec<Sample>>>,
    started: Instant,
}

impl Worker {
    async fn once(&self, n: usize) -> Duration {
        let target = self.targets[(self.first + n) % self.targets.len()];
        let t0 = Instant::now();
        let outcome = match exchange(target, &self.request, self.timeout).await {
            Ok((429 | 503, _)) => Outcome::Rejected,
            Ok((code, _)) if (200..400).contains(&code) => Outcome::Ok,
            Ok(_) | Err(_) => Outcome::Error,
        };
        let latency = t0.elapsed();
        let mut samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        if samples.len() < MAX_SAMPLES {
            samples.push(Sample { class: self.class, at: self.started.elapsed(), latency, outcome });
        }
        latency
    }

    /// Paced: one request per `interval`, or the next at once after a slow one.
    async fn paced(self, until_saturating: Option<(Arc<AtomicBool>, Arc<Notify>)>) {
        let mut n = 0usize;
        loop {
            if let Some((flag, _)) = &until_saturating {
                if flag.load(Ordering::Relaxed) {
                    return self.saturate().await;
                }
            }
            let t0 = Instant::now();
            self.once(n).await;
            n += 1;
            let next = t0 + self.interval;
            match &until_saturating {
                Some((_, wake)) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(next) => {}
                        () = wake.notified() => {}
                    }
                }
                None => tokio::time::sleep_until(next).await,
            }
        }
    }

    /// Unpaced: the next request as soon as one ends (held requests end late).
    async fn saturate(self) {
        let mut n = 0usize;
        loop {
            let took = self.once(n).await;
            n += 1;
            if took < AFTER_FAST {
                tokio::time::sleep(AFTER_FAST).await;
            }
        }
    }
}

impl Load {
    /// Start loading every class of `settings` on `pods` (their IPs).
    pub(super) fn start(settings: &DrillSettings, pods: &[IpAddr]) -> Load {
        let load = &settings.load;
        let targets: Arc<[SocketAddr]> = pods.iter().map(|ip| SocketAddr::new(*ip, load.port)).collect();
        let mut classes = vec![settings.class.clone()];
        classes.extend(load.measured.iter().cloned());
        let samples = Arc::new(Mutex::new(Vec::with_capacity(4096)));
        let saturating = Arc::new(AtomicBool::new(false));
        let wake = Arc::new(Notify::new());
        let started = Instant::now();
        let mut tasks = JoinSet::new();
        let paced = PACED_WORKERS.min(load.rate).max(1);
        let interval = Duration::from_secs_f64(f64::from(paced) / f64::from(load.rate.max(1)));
        for (class, name) in classes.iter().enumerate() {
            let header = load.class_header.as_deref().map(|h| (h, name.as_str()));
            let request: Arc<[u8]> = get_request(&load.path(name), header).into();
            let drilled = class == 0;
            let workers = if drilled { load.saturate.max(paced) } else { paced };
            for w in 0..workers {
                let worker = Worker {
                    class,
                    request: request.clone(),
                    targets: targets.clone(),
                    first: usize::try_from(w).unwrap_or(0),
                    timeout: if drilled { settings.hold + load.timeout } else { load.timeout },
                    interval,
                    samples: samples.clone(),
                    started,
                };
                if !drilled {
                    tasks.spawn(worker.paced(None));
                } else if w < paced {
                    tasks.spawn(worker.paced(Some((saturating.clone(), wake.clone()))));
                } else {
                    let (flag, wake) = (saturating.clone(), wake.clone());
                    tasks.spawn(async move {
                        while !flag.load(Ordering::Relaxed) {
                            let notified = wake.notified();
                            if flag.load(Ordering::Relaxed) {
                                break;
                            }
                            notified.await;
                        }
                        worker.saturate().await;
                    });
                }
            }
        }
        Load { started, samples, saturating, wake, classes, _tasks: tasks }
    }

    /// The fault is in place: the drilled class's workers stop pacing.
    pub(super) fn saturate(&self) {
        self.saturating.store(true, Ordering::Relaxed);
        self.wake.notify_waiters();
    }

    /// Time since the load began.
    pub(super) fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// The first rejection or failure of one of `classes` (indexes) since `since`.
    pub(super) fn trouble(&self, classes: &[usize], since: Duration) -> Option<(usize, Outcome)> {
        let samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        samples
            .iter()
            .rev()
            .take_while(|s| s.at >= since)
            .find(|s| classes.contains(&s.class) && s.outcome != Outcome::Ok)
            .map(|s| (s.class, s.outcome))
    }

    /// Stop every worker and hand over what they recorded.
    pub(super) fn finish(self) -> Vec<Sample> {
        let Load { samples, _tasks, .. } = self;
        drop(_tasks);
        let mut samples = std::mem::take(&mut *samples.lock().unwrap_or_else(PoisonError::into_inner));
        samples.sort_by_key(|s| s.at);
        samples
    }
}
