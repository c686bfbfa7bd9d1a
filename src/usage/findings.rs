//! The findings other than leaks, each from the per-class figures and the
//! thresholds it names in its message.

use super::{
    advice::{ClassUsage, Finding, FindingKind},
    telemetry::Telemetry,
    thresholds::Thresholds,
};

/// Whether a class was starved: at its ceiling past the allowed share, and rejected there.
pub(super) fn starved(c: &ClassUsage, th: &Thresholds) -> bool {
    c.time_at_ceiling > th.starved_share && c.rejected.get("ceiling").copied().unwrap_or(0) > 0
}

pub(super) fn findings(
    classes: &[ClassUsage],
    per_replica_reserved: &[u32],
    t: &Telemetry,
    th: &Thresholds,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let starved_names: Vec<&str> = classes.iter().filter(|c| starved(c, th)).map(|c| c.name.as_str()).collect();
    for c in classes.iter().filter(|c| starved(c, th)) {
        out.push(Finding {
            kind: FindingKind::StarvedAtCeiling,
            classes: vec![c.name.clone()],
            message: format!(
                "{} was at its ceiling of {} for {} of the window (threshold {}) and {} requests were rejected there; \
                 recommended: reserved {} → {}, ceiling {} → {}",
                c.name,
                c.ceiling,
                percent(c.time_at_ceiling),
                percent(th.starved_share),
                c.rejected.get("ceiling").copied().unwrap_or(0),
                c.reserved,
                c.recommended_reserved,
                c.ceiling,
                c.recommended_ceiling,
            ),
        });
    }
    if !starved_names.is_empty() {
        for (c, &floor) in classes.iter().zip(per_replica_reserved) {
            let idle = f64::from(c.p95_in_flight) < th.idle_ratio * f64::from(floor);
            // A floor the recommendation keeps (a critical class's 1, say) is not reported idle.
            let lowered = c.recommended_reserved < c.reserved;
            if idle && lowered && !starved_names.contains(&c.name.as_str()) {
                let mut involved = vec![c.name.clone()];
                involved.extend(starved_names.iter().map(|s| s.to_string()));
                out.push(Finding {
                    kind: FindingKind::ReservationIdle,
                    classes: involved,
                    message: format!(
                        "{} used at most {} of its {} reserved per replica 95% of the time (under {}) while {} was \
                         starved; recommended: reserved {} → {}",
                        c.name,
                        c.p95_in_flight,
                        floor,
                        percent(th.idle_ratio),
                        starved_names.join(", "),
                        c.reserved,
                        c.recommended_reserved,
                    ),
                });
            }
        }
    }
    out.extend(collapse(classes, t, th));
    out.extend(surplus_exhausted(t, th));
    out
}

/// Rejections in the windows where the pool as a whole was mostly idle.
fn collapse(classes: &[ClassUsage], t: &Telemetry, th: &Thresholds) -> Option<Finding> {
    let (mut rejected, mut windows, mut occupancy_sum, mut with_rejections) = (0.0, 0u32, 0.0, 0u32);
    for (i, r) in t.rejections.iter().enumerate() {
        if *r < 0.5 {
            continue;
        }
        with_rejections += 1;
        if let Some(o) = t.occupancy.get(i).copied().flatten().filter(|o| *o < th.collapse_occupancy) {
            rejected += r;
            windows += 1;
            occupancy_sum += o;
        }
    }
    if windows == 0 || (rejected.round() as u64) < th.collapse_min_rejections {
        return None;
    }
    let rejecting: Vec<String> =
        classes.iter().filter(|c| c.rejected.values().any(|n| *n > 0)).map(|c| c.name.clone()).collect();
    Some(Finding {
        kind: FindingKind::UtilisationCollapse,
        message: format!(
            "{} requests were rejected (by {}) in {windows} of {with_rejections} windows with rejections while the \
             pool as a whole was {} occupied on average (under {}): the capacity is there, the partition keeps it \
             from the classes that need it",
            rejected.round(),
            if rejecting.is_empty() { "no class".to_string() } else { rejecting.join(", ") },
            percent(occupancy_sum / f64::from(windows)),
            percent(th.collapse_occupancy),
        ),
        classes: rejecting,
    })
}

fn surplus_exhausted(t: &Telemetry, th: &Thresholds) -> Option<Finding> {
    let samples: Vec<f64> = t.surplus_exhausted.iter().flatten().copied().collect();
    if samples.is_empty() {
        return None;
    }
    let share = samples.iter().sum::<f64>() / samples.len() as f64;
    (share > th.surplus_exhausted_share).then(|| Finding {
        kind: FindingKind::SurplusExhausted,
        classes: Vec::new(),
        message: format!(
            "the shared surplus was fully borrowed {} of the window (threshold {}): the floors do all the work, and a \
             burst of any class past its floor is rejected",
            percent(share),
            percent(th.surplus_exhausted_share),
        ),
    })
}

pub fn percent(share: f64) -> String {
    let p = share * 100.0;
    if p != 0.0 && p.abs() < 10.0 && p.fract() != 0.0 {
        format!("{p:.1}%")
    } else {
        format!("{p:.0}%")
    }
}
