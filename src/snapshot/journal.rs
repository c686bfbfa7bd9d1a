//! What changed in the snapshot, in order, for the audit's incremental state
//! (`audit::AuditState`): pod and node changes as deltas; anything else the
//! audit reads (namespaces, runtime classes, a relist) starts a new epoch,
//! after which a state is built again from the whole snapshot.

use std::collections::VecDeque;

use super::{ObjectKey, PodInfo};

/// Deltas kept: a reader further behind rebuilds from the snapshot.
const CAPACITY: usize = 4096;

// Nearly every delta is a pod's: boxing it would cost an allocation each.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Delta {
    /// A pod was added (`old` None), changed, or deleted (`new` None).
    Pod { key: ObjectKey, old: Option<PodInfo>, new: Option<PodInfo> },
    /// A node appeared, went, or had its labels changed.
    Node(String),
}

/// Where a reader stands in the journal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    epoch: u64,
    next: u64,
}

#[derive(Clone, Debug, Default)]
pub struct Journal {
    epoch: u64,
    /// Sequence number of `entries[0]`.
    first: u64,
    entries: VecDeque<Delta>,
}

impl Journal {
    /// The position just past the last delta.
    pub fn cursor(&self) -> Cursor {
        Cursor { epoch: self.epoch, next: self.first + self.entries.len() as u64 }
    }

    /// The deltas after `cursor`, or None when they are no longer all here
    /// (another epoch began, or the oldest were dropped).
    pub fn since(&self, cursor: Cursor) -> Option<impl Iterator<Item = &Delta>> {
        let end = self.first + self.entries.len() as u64;
        if cursor.epoch != self.epoch || cursor.next < self.first || cursor.next > end {
            return None;
        }
        let skip = usize::try_from(cursor.next - self.first).ok()?;
        Some(self.entries.iter().skip(skip))
    }

    pub fn record(&mut self, delta: Delta) {
        if self.entries.len() == CAPACITY {
            self.entries.pop_front();
            self.first += 1;
        }
        self.entries.push_back(delta);
    }

    /// Something deltas do not describe changed: every reader rebuilds.
    pub fn new_epoch(&mut self) {
        self.epoch += 1;
        self.first += self.entries.len() as u64;
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(n: &str) -> Delta {
        Delta::Node(n.to_string())
    }

    #[test]
    fn a_reader_gets_what_came_after_it_and_rebuilds_when_it_fell_behind() {
        let mut j = Journal::default();
        j.record(node("a"));
        let c = j.cursor();
        j.record(node("b"));
        assert_eq!(j.since(c).map(|d| d.cloned().collect::<Vec<_>>()), Some(vec![node("b")]));
        assert_eq!(j.since(j.cursor()).map(Iterator::count), Some(0));
        for i in 0..CAPACITY {
            j.record(node(&i.to_string()));
        }
        assert!(j.since(c).is_none(), "dropped deltas cannot be replayed");
        let c = j.cursor();
        j.new_epoch();
        assert!(j.since(c).is_none(), "a new epoch means a rebuild");
        assert_eq!(j.since(j.cursor()).map(Iterator::count), Some(0));
    }
}
