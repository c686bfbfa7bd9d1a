//! The loop back in the cluster: each Bulkhead's use is analysed once a
//! period, off the reconcile path and bounded by a timeout; the latest
//! result is kept here (next to the audit counts) until the Bulkhead goes,
//! and a finished analysis wakes the reconciles, which turn it into `Sized`,
//! `IsolatedInUse` and `status.classes[].usage`. A status write follows only
//! when the result changed what the status says, so at most once a period.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::{future::BoxFuture, Stream};
use tokio::{sync::Notify, time::Instant};
use tracing::{debug, warn};

use crate::controller::runtime::metrics::Metrics;
use crate::{
    crd::Bulkhead,
    error_chain::Chain,
    prometheus::{advise, PrometheusClient, PrometheusError},
    status::Sizing,
};

/// Runs one analysis of one Bulkhead over a window; says what to report.
pub type Analyst = Arc<dyn Fn(Bulkhead, Duration) -> BoxFuture<'static, Sizing> + Send + Sync>;

/// How the operator analyses use.
#[derive(Clone)]
pub struct UsageOptions {
    /// None: no Prometheus, so every Bulkhead reports `Sized` Unknown `NoTelemetry`.
    pub analyst: Option<Analyst>,
    /// How often each Bulkhead is analysed.
    pub period: Duration,
    /// How much history one analysis reads.
    pub window: Duration,
}

impl std::fmt::Debug for UsageOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UsageOptions")
            .field("analyst", &self.analyst.is_some())
            .field("period", &self.period)
            .field("window", &self.window)
            .finish()
    }
}

impl UsageOptions {
    /// No Prometheus.
    pub fn disabled() -> Self {
        Self { analyst: None, period: DEFAULT_PERIOD, window: DEFAULT_WINDOW }
    }

    /// The analysis `bulkhead advise` runs, against the Prometheus at `url`.
    pub fn prometheus(url: &str, period: Duration, window: Duration) -> Result<Self, PrometheusError> {
        Ok(Self::with_client(PrometheusClient::new(url)?, period, window))
    }

    /// The same against a client already set up (https, credentials).
    pub fn with_client(client: PrometheusClient, period: Duration, window: Duration) -> Self {
        let client = Arc::new(client);
        let analyst: Analyst = Arc::new(move |bulkhead, window| {
            let client = client.clone();
            Box::pin(async move { sizing(advise(&client, &bulkhead, window).await) })
        });
        Self { analyst: Some(analyst), period, window }
    }
}

/// What an analysis's outcome says: no series or no Prometheus to ask is no
/// telemetry (never a guess); any other error is a failed analysis.
pub(in crate::controller) fn sizing(result: Result<crate::usage::Advice, PrometheusError>) -> Sizing {
    match result {
        Ok(advice) => Sizing::Advised(advice),
        Err(e) if e.is_no_telemetry() => Sizing::NoTelemetry(Chain(&e).to_string()),
        Err(e) => Sizing::Failed(Chain(&e).to_string()),
    }
}

pub const DEFAULT_PERIOD: Duration = Duration::from_secs(600);
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(7 * 86_400);
/// The longest one analysis may take, whatever the period: a Prometheus
/// that hangs must not hold an analysis (and its memory) for ten minutes.
const MAX_TIMEOUT: Duration = Duration::from_secs(120);

/// Each Bulkhead's latest analysis.
pub struct Usage {
    options: UsageOptions,
    /// What every Bulkhead reports without Prometheus, or before its first
    /// analysis; shared so that an unchanged result is the very same value.
    no_prometheus: Arc<Sizing>,
    pending: Arc<Sizing>,
    entries: Mutex<HashMap<String, Entry>>,
    /// Incremented per analysis started: tells a late result from a
    /// forgotten Bulkhead's (or an earlier one of a same-named one).
    next_token: Mutex<u64>,
    finished: Arc<Notify>,
    metrics: Arc<Metrics>,
}

struct Entry {
    /// None until the first analysis since the operator started finishes.
    sizing: Option<Arc<Sizing>>,
    started: Instant,
    running: bool,
    token: u64,
}

impl Usage {
    pub fn new(options: UsageOptions, metrics: Arc<Metrics>) -> Self {
        Self {
            metrics,
            options,
            no_prometheus: Arc::new(Sizing::NoTelemetry(
                "the operator runs without --prometheus-url: the proxies' use is not analysed".to_string(),
            )),
            pending: Arc::new(Sizing::Pending),
            entries: Mutex::default(),
            next_token: Mutex::new(0),
            finished: Arc::new(Notify::new()),
        }
    }

    /// What to report for the Bulkhead now.
    pub fn sizing(&self, bulkhead: &str) -> Arc<Sizing> {
        if self.options.analyst.is_none() {
            return self.no_prometheus.clone();
        }
        let entries = self.entries.lock().ok();
        entries.and_then(|e| e.get(bulkhead).and_then(|e| e.sizing.clone())).unwrap_or_else(|| self.pending.clone())
    }

    /// Start an analysis of `bulkhead` when one is due (none yet, or the
    /// last started a period ago and has finished); returns how long until
    /// the next is due, for the reconcile to come back then. None without
    /// Prometheus.
    pub fn schedule(self: &Arc<Self>, name: &str, bulkhead: &Bulkhead) -> Option<Duration> {
        let analyst = self.options.analyst.clone()?;
        let period = self.options.period;
        let now = Instant::now();
        let token = {
            let mut entries = self.entries.lock().ok()?;
            if let Some(e) = entries.get(name) {
                let due = e.started + period;
                if e.running || now < due {
                    return Some(due.saturating_duration_since(now).max(Duration::from_secs(1)));
                }
            }
            let token = self.token();
            let sizing = entries.get(name).and_then(|e| e.sizing.clone());
            entries.insert(name.to_string(), Entry { sizing, started: now, running: true, token });
            token
        };
        let usage = self.clone();
        let name = name.to_string();
        let bulkhead = bulkhead.clone();
        let window = self.options.window;
        let timeout = period.min(MAX_TIMEOUT);
        tokio::spawn(async move {
            let started = Instant::now();
            let sizing = match tokio::time::timeout(timeout, analyst(bulkhead, window)).await {
                Ok(sizing) => sizing,
                Err(_) => Sizing::Failed(format!("the analysis took longer than {timeout:?} and was dropped")),
            };
            let result = match &sizing {
                Sizing::Failed(why) => {
                    warn!(bulkhead = %name, %why, "usage analysis failed");
                    "failed"
                }
                Sizing::NoTelemetry(why) => {
                    debug!(bulkhead = %name, %why, "no telemetry");
                    "no_telemetry"
                }
                _ => {
                    debug!(bulkhead = %name, took = ?started.elapsed(), "usage analysed");
                    "advised"
                }
            };
            usage.metrics.record_analysis(result, started.elapsed());
            usage.finish(&name, token, sizing);
        });
        Some(period)
    }

    fn token(&self) -> u64 {
        let mut next = self.next_token.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *next += 1;
        *next
    }

    /// Keep a finished analysis (unless its Bulkhead was forgotten since),
    /// then wake the reconciles.
    fn finish(&self, name: &str, token: u64, sizing: Sizing) {
        let Ok(mut entries) = self.entries.lock() else { return };
        let Some(entry) = entries.get_mut(name).filter(|e| e.token == token) else { return };
        entry.running = false;
        // An equal result keeps the value the last status was built from, so
        // reconciles know the status is in place without building it.
        if entry.sizing.as_deref() != Some(&sizing) {
            entry.sizing = Some(Arc::new(sizing));
            drop(entries);
            self.finished.notify_one();
        }
    }

    /// The Bulkhead is gone: drop its result (a running analysis's is dropped when it ends).
    pub fn forget(&self, name: &str) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.remove(name);
        }
    }

    /// Yields each time an analysis finished with a new result, at most every `every`.
    pub fn finished(&self, every: Duration) -> impl Stream<Item = ()> + Send + 'static {
        futures::stream::unfold(self.finished.clone(), move |finished| async move {
            finished.notified().await;
            tokio::time::sleep(every).await;
            Some(((), finished))
        })
    }

    /// Set a Bulkhead's latest result as if an analysis had just finished.
    #[cfg(test)]
    pub fn set(&self, name: &str, sizing: Sizing) {
        let token = self.token();
        if let Ok(mut entries) = self.entries.lock() {
            entries.insert(
                name.to_string(),
                Entry { sizing: Some(Arc::new(sizing)), started: Instant::now(), running: false, token },
            );
        }
    }
}
