//! Reading the proxies' telemetry from Prometheus: the only I/O behind the
//! usage advice. `advise` reads one Bulkhead's series over a window and
//! hands them to the pure analysis in `usage`.

mod client;
mod error;
mod queries;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kube::ResourceExt;

pub use client::{ClientOptions, Labels, PrometheusClient, Sample, Series, DEFAULT_TIMEOUT, MAX_RESPONSE_BYTES};
pub use error::PrometheusError;
pub use queries::{names, read, Queries, Range};

use crate::{
    crd::Bulkhead,
    usage::{analyse, human_seconds, Advice, Thresholds},
};

/// The shortest step: proxies are scraped every 15–30 s in most clusters,
/// and a step must hold samples to compare.
pub const MIN_DEFAULT_STEP: Duration = Duration::from_secs(15);
/// Steps in a window by default (Prometheus allows 11,000 points a series).
pub const DEFAULT_STEPS: u64 = 1000;

/// How one analysis reads its window.
#[derive(Clone, Debug, Default)]
pub struct AdviseOptions {
    /// End of the window (default: now).
    pub end: Option<SystemTime>,
    /// Length of a step, the unit of the per-step findings (default: the
    /// window / 1,000, at least 15 s).
    pub step: Option<Duration>,
    pub thresholds: Thresholds,
}

/// The advice for `bulkhead` over the `window` that ends now.
pub async fn advise(
    client: &PrometheusClient,
    bulkhead: &Bulkhead,
    window: Duration,
) -> Result<Advice, PrometheusError> {
    advise_with(client, bulkhead, window, &AdviseOptions::default()).await
}

pub async fn advise_with(
    client: &PrometheusClient,
    bulkhead: &Bulkhead,
    window: Duration,
    options: &AdviseOptions,
) -> Result<Advice, PrometheusError> {
    let range = range(window, options)?;
    let telemetry = read(client, &bulkhead.name_any(), range).await?;
    Ok(analyse(bulkhead, &telemetry, &options.thresholds))
}

/// The window in whole seconds and its step (never longer than the window).
pub fn range(window: Duration, options: &AdviseOptions) -> Result<Range, PrometheusError> {
    let window = window.as_secs();
    if window == 0 {
        return Err(PrometheusError::Window("must be at least 1s".into()));
    }
    let step = match options.step {
        Some(s) if s.as_secs() == 0 => return Err(PrometheusError::Step("must be at least 1s".into())),
        // One step longer than the window would be one point that sees past it.
        Some(s) if s.as_secs() > window => {
            return Err(PrometheusError::Step(format!(
                "{} is longer than the window ({}): give a step of at most the window",
                human_seconds(s.as_secs()),
                human_seconds(window)
            )))
        }
        Some(s) => s.as_secs(),
        None => window.div_ceil(DEFAULT_STEPS).max(MIN_DEFAULT_STEP.as_secs()).min(window),
    };
    let end = options.end.unwrap_or_else(SystemTime::now).duration_since(UNIX_EPOCH).unwrap_or_default();
    Ok(Range { end: end.as_secs_f64().floor(), window, step })
}
