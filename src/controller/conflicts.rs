//! Placement conflicts remembered between reconciles. A workload whose fields
//! another manager owns is not re-applied on every event (each attempt is a
//! refused request) until the workload or what placement wants of it changes.

use std::{collections::BTreeMap, sync::Mutex};

use super::apply::PlacementConflict;
use crate::{
    plan::Change,
    snapshot::{ObjectKey, WorkloadKind},
};

#[derive(Default)]
pub struct ConflictMemory(Mutex<BTreeMap<String, BTreeMap<(WorkloadKind, ObjectKey), PlacementConflict>>>);

impl ConflictMemory {
    /// Drop the placements that would hit a remembered conflict again (same
    /// workload generation, same patch); return them as still in conflict.
    pub fn skip_remembered(&self, bulkhead: &str, changes: Vec<Change>) -> (Vec<Change>, Vec<PlacementConflict>) {
        let memory = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(known) = memory.get(bulkhead) else { return (changes, Vec::new()) };
        let mut still = Vec::new();
        let mut rest = Vec::new();
        for change in changes {
            if let Change::PlaceWorkload(p) = &change {
                if let Some(c) = known.get(&(p.kind, p.key.clone())) {
                    if c.generation == p.generation && c.fingerprint == p.fingerprint {
                        still.push(c.clone());
                        continue;
                    }
                }
            }
            rest.push(change);
        }
        (rest, still)
    }

    /// The conflicts of a Bulkhead now; anything not listed is forgotten.
    pub fn replace(&self, bulkhead: &str, conflicts: &[PlacementConflict]) {
        let mut memory = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if conflicts.is_empty() {
            memory.remove(bulkhead);
        } else {
            memory.insert(
                bulkhead.to_string(),
                conflicts.iter().map(|c| ((c.kind, c.key.clone()), c.clone())).collect(),
            );
        }
    }
}
