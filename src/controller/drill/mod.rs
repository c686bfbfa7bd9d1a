//! Running `BulkheadDrill`s: the watch that starts, refuses and stops them
//! (`manager`), one task per running drill (`runner`), the drill's own load
//! (`load`) over plain HTTP/1.1 (`exchange`), and what the reconciles of
//! Bulkheads read of them (`registry`: the faults in place and the drills
//! the watch holds). The verdict and the conditions are pure, in
//! `status::drill`.

mod exchange;
mod load;
mod manager;
mod registry;
mod runner;
#[cfg(test)]
mod tests;

pub(super) use manager::spawn;
pub(super) use registry::Drills;
