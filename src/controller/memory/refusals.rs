//! Placement refusals remembered between reconciles. A workload whose fields
//! another manager owns is not re-applied on every event (each attempt is a
//! refused request) until the workload or what placement wants of it changes.
//! Other refusals (a webhook's denial, an invalid result) may be fixed
//! elsewhere, so they are retried after a while.

use std::{
    collections::BTreeMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use crate::controller::reconcile::apply::{Concern, PlacementRefusal};
use crate::{
    plan::Change,
    snapshot::{ObjectKey, WorkloadKind},
};

/// How long a refusal other than a conflict holds before the apply is tried again.
pub(in crate::controller) const REJECTION_RETRY: Duration = Duration::from_secs(60);

type Key = (Concern, WorkloadKind, ObjectKey);

/// Per Bulkhead: each refused workload patch, with when it was first refused.
type Memory = BTreeMap<String, BTreeMap<Key, (PlacementRefusal, Instant)>>;

#[derive(Default)]
pub struct RefusalMemory(Mutex<Memory>);

impl RefusalMemory {
    /// Drop the placements that would hit a remembered refusal again (same
    /// workload generation, same patch; a rejection only while it is recent);
    /// return them as still refused.
    pub fn skip_remembered(&self, bulkhead: &str, changes: Vec<Change>) -> (Vec<Change>, Vec<PlacementRefusal>) {
        let memory = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(known) = memory.get(bulkhead) else { return (changes, Vec::new()) };
        let mut still = Vec::new();
        let mut rest = Vec::new();
        for change in changes {
            let patch = match &change {
                Change::PlaceWorkload(p) => Some((Concern::Placement, p.kind, &p.key, p.generation, &p.fingerprint)),
                Change::InjectProxy(p) => Some((Concern::Proxy, p.kind, &p.key, p.generation, &p.fingerprint)),
                _ => None,
            };
            if let Some((concern, kind, key, generation, fingerprint)) = patch {
                if let Some((c, noticed)) = known.get(&(concern, kind, key.clone())) {
                    let same = c.generation == generation && &c.fingerprint == fingerprint;
                    if same && (c.conflict || noticed.elapsed() < REJECTION_RETRY) {
                        still.push(c.clone());
                        continue;
                    }
                }
            }
            rest.push(change);
        }
        (rest, still)
    }

    /// The refusals of a Bulkhead now; anything not listed is forgotten. A
    /// refusal already known keeps the time it was first seen.
    pub fn replace(&self, bulkhead: &str, refusals: &[PlacementRefusal]) {
        let mut memory = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let previous = memory.remove(bulkhead).unwrap_or_default();
        if refusals.is_empty() {
            return;
        }
        let now = Instant::now();
        let entries = refusals
            .iter()
            .map(|c| {
                let key = (c.concern, c.kind, c.key.clone());
                let noticed = previous.get(&key).filter(|(p, _)| p == c).map_or(now, |(_, at)| *at);
                (key, (c.clone(), noticed))
            })
            .collect();
        memory.insert(bulkhead.to_string(), entries);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plan::WorkloadPlacement;

    fn placement(name: &str, generation: i64, fingerprint: &str) -> Change {
        Change::PlaceWorkload(WorkloadPlacement {
            kind: WorkloadKind::Deployment,
            key: ObjectKey::new("shop", name),
            class: "checkout".into(),
            generation: Some(generation),
            fingerprint: fingerprint.into(),
            body: json!({}),
            up_to_date: false,
            take_from: Vec::new(),
        })
    }

    fn refusal(name: &str, generation: i64, fingerprint: &str, conflict: bool) -> PlacementRefusal {
        PlacementRefusal {
            concern: Concern::Placement,
            kind: WorkloadKind::Deployment,
            key: ObjectKey::new("shop", name),
            generation: Some(generation),
            fingerprint: fingerprint.into(),
            conflict,
            message: "refused".into(),
        }
    }

    #[test]
    fn a_remembered_refusal_is_skipped_until_the_workload_or_the_patch_changes() {
        let memory = RefusalMemory::default();
        memory.replace("shop", &[refusal("a", 1, "f1", true), refusal("b", 1, "f1", false)]);
        let planned = vec![placement("a", 1, "f1"), placement("b", 1, "f1"), placement("c", 1, "f1")];
        let (rest, still) = memory.skip_remembered("shop", planned);
        assert_eq!(rest, vec![placement("c", 1, "f1")], "a conflict and a recent rejection are not retried");
        assert_eq!(still.len(), 2);
        // A new generation or a new patch is tried again.
        let (rest, _) = memory.skip_remembered("shop", vec![placement("a", 2, "f1"), placement("b", 1, "f2")]);
        assert_eq!(rest.len(), 2);
        // Another Bulkhead's memory is its own; an empty list forgets.
        assert_eq!(memory.skip_remembered("other", vec![placement("a", 1, "f1")]).0.len(), 1);
        memory.replace("shop", &[]);
        assert_eq!(memory.skip_remembered("shop", vec![placement("a", 1, "f1")]).0.len(), 1);
    }
}
