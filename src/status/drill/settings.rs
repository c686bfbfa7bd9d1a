//! A drill spec read against its Bulkhead and the plan: every default
//! filled in, every bound checked, every refusal naming the field.

use std::time::Duration;

use crate::{
    crd::{Bulkhead, BulkheadDrillSpec, ProxyMode},
    duration,
    plan::Plan,
};

/// The longest a drill may hold a class (and a request).
pub const MAX_DRILL: Duration = Duration::from_secs(600);
/// The most requests of the drilled class the drill keeps in flight.
pub const MAX_SATURATE: u32 = 256;
const MAX_BASELINE: Duration = Duration::from_secs(120);
const MIN_WINDOW: Duration = Duration::from_secs(5);
const MAX_TIMEOUT: Duration = Duration::from_secs(60);

/// A drill ready to run.
#[derive(Clone, Debug, PartialEq)]
pub struct DrillSettings {
    pub bulkhead: String,
    pub class: String,
    pub hold: Duration,
    pub duration: Duration,
    pub baseline: Duration,
    /// The drilled class's ceiling on one pod.
    pub ceiling: u32,
    /// The Bulkhead's critical classes.
    pub critical: Vec<String>,
    /// Where the fault sits.
    pub mode: ProxyMode,
    pub load: LoadSettings,
}

/// The drill's own traffic.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadSettings {
    pub port: u16,
    path: String,
    pub class_header: Option<String>,
    /// The classes measured besides the drilled one, in the Bulkhead's order.
    pub measured: Vec<String>,
    /// Requests per second to each measured class, over all pods.
    pub rate: u32,
    /// Requests of the drilled class in flight, over all pods.
    pub saturate: u32,
    pub timeout: Duration,
}

impl LoadSettings {
    /// The request path for `class`.
    pub fn path(&self, class: &str) -> String {
        self.path.replace("{class}", class)
    }
}

/// What a drill waits for before it begins (each may come in time: the
/// Bulkhead, its workload and its sidecars are often applied with the drill):
/// a pool config planned and running pods that carry the sidecar.
pub fn not_ready(plan: &Plan, pods: usize) -> Option<String> {
    if !plan.is_valid() || plan.proxy.config_hash.is_none() || plan.proxy.withheld {
        return Some("the Bulkhead has no pool config in force yet (see its Ready condition)".into());
    }
    (pods == 0).then(|| "no running pod of the Bulkhead's workload carries its sidecar yet".into())
}

/// Read `spec` against `bulkhead` and its current `plan` (with `pods`
/// running selected pods); the error names the field at fault.
pub fn settings(
    spec: &BulkheadDrillSpec,
    bulkhead: &Bulkhead,
    plan: &Plan,
    pods: usize,
) -> Result<DrillSettings, String> {
    let name = &spec.bulkhead;
    let proxy = bulkhead.spec.workload.as_ref().and_then(|w| w.proxy.as_ref()).ok_or_else(|| {
        format!(
            "spec.bulkhead: Bulkhead {name} has no spec.workload.proxy; a drill needs its sidecars to place the fault"
        )
    })?;
    let classes: Vec<&str> = bulkhead.spec.classes.iter().map(|c| c.name.as_str()).collect();
    let capacity = plan.capacity.classes.iter().find(|c| c.name == spec.class).ok_or_else(|| {
        format!("spec.class: {} is not a class of Bulkhead {name} (classes: {})", spec.class, classes.join(", "))
    })?;
    if capacity.critical {
        return Err(format!(
            "spec.class: {} is a critical class of Bulkhead {name}; a drill never saturates the critical lane",
            spec.class
        ));
    }
    if proxy.mode == ProxyMode::Egress && !proxy.routes.iter().any(|r| r.class == spec.class) {
        return Err(format!(
            "spec.class: {} has no route in Bulkhead {name}'s spec.workload.proxy.routes; its egress sidecar never sees its calls",
            spec.class
        ));
    }
    if capacity.ceiling_per_replica == 0 {
        return Err(format!("spec.class: {}'s ceiling on each pod is 0; there is nothing to hold", spec.class));
    }
    let hold =
        bounded("spec.hold", spec.hold.as_deref(), Duration::from_secs(30), Duration::from_millis(1), MAX_DRILL)?;
    let length = bounded("spec.duration", spec.duration.as_deref(), Duration::from_secs(60), MIN_WINDOW, MAX_DRILL)?;
    let baseline =
        bounded("spec.baseline", spec.baseline.as_deref(), Duration::from_secs(20), MIN_WINDOW, MAX_BASELINE)?;
    let load = &spec.load;
    for (i, class) in load.classes.iter().enumerate() {
        if !classes.contains(&class.as_str()) {
            return Err(format!("spec.load.classes[{i}]: {class} is not a class of Bulkhead {name}"));
        }
    }
    let measured = classes
        .iter()
        .filter(|c| **c != spec.class && (load.classes.is_empty() || load.classes.iter().any(|l| l == *c)))
        .map(|c| c.to_string())
        .collect();
    let timeout = bounded(
        "spec.load.timeout",
        load.timeout.as_deref(),
        Duration::from_secs(5),
        Duration::from_millis(10),
        MAX_TIMEOUT,
    )?;
    let pods = u32::try_from(pods).unwrap_or(u32::MAX);
    let saturate = load.saturate.unwrap_or_else(|| capacity.ceiling_per_replica.saturating_mul(pods).saturating_add(1));
    Ok(DrillSettings {
        bulkhead: name.clone(),
        class: spec.class.clone(),
        hold,
        duration: length,
        baseline,
        ceiling: capacity.ceiling_per_replica,
        critical: plan.capacity.classes.iter().filter(|c| c.critical).map(|c| c.name.clone()).collect(),
        mode: proxy.mode,
        load: LoadSettings {
            port: load.port,
            path: load.path.clone().unwrap_or_else(|| "/".into()),
            class_header: load.class_header.clone(),
            measured,
            rate: load.rate.unwrap_or(20).clamp(1, 200),
            saturate: saturate.clamp(1, MAX_SATURATE),
            timeout,
        },
    })
}

/// A duration field: its default when absent, refused outside `min..=max`.
fn bounded(
    field: &str,
    given: Option<&str>,
    default: Duration,
    min: Duration,
    max: Duration,
) -> Result<Duration, String> {
    let Some(text) = given else { return Ok(default) };
    let d = duration::parse(text).map_err(|e| format!("{field}: {e}"))?;
    if d < min || d > max {
        return Err(format!("{field}: {text} is outside {} ..= {}", show(min), show(max)));
    }
    Ok(d)
}

fn show(d: Duration) -> String {
    if d.as_millis() < 1000 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}s", d.as_secs())
    }
}
