//! `bulkhead advise`: the usage advice of one Bulkhead, read from
//! Prometheus, for a person (a table and the `kubectl patch` that applies
//! it) or a script (`-o json`). Exit codes: 0 no findings, 1 findings,
//! 3 bad input, 4 no telemetry (Prometheus unreachable, no series of this
//! Bulkhead in the window, or series without a single request). Nothing is applied.

use std::fmt::Write as _;

use kube::ResourceExt;
use serde_json::{json, Value};

use crate::{
    crd::{Bulkhead, Scope},
    usage::{human_seconds, percent, Advice},
};

pub const EXIT_NO_FINDINGS: u8 = 0;
pub const EXIT_FINDINGS: u8 = 1;
/// Prometheus could not be read, or holds nothing of this Bulkhead.
pub const EXIT_NO_TELEMETRY: u8 = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AdviseFormat {
    Text,
    Json,
}

pub fn advise_exit(advice: &Advice) -> u8 {
    if !advice.saw_traffic() {
        EXIT_NO_TELEMETRY
    } else if advice.findings.is_empty() {
        EXIT_NO_FINDINGS
    } else {
        EXIT_FINDINGS
    }
}

/// The table, the findings and the patch.
pub fn advise_text(bulkhead: &Bulkhead, advice: &Advice) -> String {
    let spec = &bulkhead.spec;
    let mut out = String::new();
    let units = match spec.pool.scope {
        Scope::Instance => "per replica",
        Scope::Fleet => "fleet-wide",
    };
    let _ = writeln!(
        out,
        "bulkhead {}: {} replica(s) over {} (steps of {}); capacity {} {} ({units})",
        advice.bulkhead,
        advice.replicas_seen,
        human_seconds(advice.window_seconds),
        human_seconds(advice.step_seconds),
        advice.capacity,
        spec.pool.resource,
    );
    let header =
        ["CLASS", "RESERVED", "CEILING", "PEAK", "P95", "REJECTED ceiling/surplus", "AT CEILING", "BORROWED", "ADVICE"];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for c in &advice.classes {
        let rejected = |r: &str| c.rejected.get(r).copied().unwrap_or(0);
        let change = |from: u32, to: u32| if from == to { "=".to_string() } else { format!("{from}→{to}") };
        rows.push(vec![
            c.name.clone(),
            c.reserved.to_string(),
            c.ceiling.to_string(),
            c.peak_in_flight.to_string(),
            c.p95_in_flight.to_string(),
            format!("{}/{}", rejected("ceiling"), rejected("surplus-exhausted")),
            percent(c.time_at_ceiling),
            c.borrowed_peak.to_string(),
            if c.reserved == c.recommended_reserved && c.ceiling == c.recommended_ceiling {
                "keep".to_string()
            } else {
                format!(
                    "reserved {}, ceiling {}",
                    change(c.reserved, c.recommended_reserved),
                    change(c.ceiling, c.recommended_ceiling)
                )
            },
        ]);
    }
    let widths: Vec<usize> =
        (0..header.len()).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    for row in &rows {
        let line: Vec<String> = row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        let _ = writeln!(out, "  {}", line.join("  ").trim_end());
    }
    let _ = writeln!(
        out,
        "  (RESERVED, CEILING and ADVICE in spec units; PEAK, P95 and BORROWED in flight on one replica)\n  \
         shared surplus: {} → {}",
        advice.shared_surplus, advice.recommended_shared_surplus
    );
    if !advice.saw_traffic() {
        // Silence is no evidence: nothing is judged and nothing is patched.
        let _ = writeln!(
            out,
            "\nno traffic: no class had a request in flight or rejected in the window, so there is nothing to \
             advise on; the floors are kept as they are (try a window that covers real traffic)"
        );
        return out;
    }
    if advice.findings.is_empty() {
        let _ = writeln!(out, "\nno findings: the reservations match the use");
    } else {
        let _ = writeln!(out, "\nfindings:");
        for f in &advice.findings {
            let _ = writeln!(out, "  {}: {}", f.kind.as_str(), f.message);
        }
    }
    match kubectl_patch(bulkhead, advice) {
        Some(patch) => {
            let _ = writeln!(out, "\nto apply the advice (nothing is applied by itself):\n  {patch}");
        }
        None => {
            let _ = writeln!(out, "\nnothing to change in the spec");
        }
    }
    out
}

/// The JSON patch that applies the advice, guarded by each class's name (a
/// reordered spec makes it fail instead of resizing the wrong class). None
/// when it would change nothing.
pub fn kubectl_patch(bulkhead: &Bulkhead, advice: &Advice) -> Option<String> {
    let mut ops: Vec<Value> = Vec::new();
    for (i, class) in bulkhead.spec.classes.iter().enumerate() {
        let Some(u) = advice.classes.iter().find(|u| u.name == class.name) else { continue };
        let mut class_ops = Vec::new();
        if u.recommended_reserved != class.reserved {
            class_ops.push(json!({"op": "replace", "path": format!("/spec/classes/{i}/reserved"), "value": u.recommended_reserved}));
        }
        if class.ceiling.is_some_and(|c| c != u.recommended_ceiling) {
            class_ops.push(
                json!({"op": "replace", "path": format!("/spec/classes/{i}/ceiling"), "value": u.recommended_ceiling}),
            );
        }
        if !class_ops.is_empty() {
            ops.push(json!({"op": "test", "path": format!("/spec/classes/{i}/name"), "value": class.name}));
            ops.extend(class_ops);
        }
    }
    if bulkhead.spec.pool.shared_surplus.is_some_and(|s| s != advice.recommended_shared_surplus) {
        ops.push(
            json!({"op": "replace", "path": "/spec/pool/sharedSurplus", "value": advice.recommended_shared_surplus}),
        );
    }
    if ops.is_empty() {
        return None;
    }
    // Lowered floors first would leave the spec unfunded in between if the
    // patch were split; one patch is one write, so order is free.
    let ops = serde_json::to_string(&ops).ok()?;
    Some(format!("kubectl patch bulkhead {} --type=json -p '{ops}'", bulkhead.name_any()))
}
