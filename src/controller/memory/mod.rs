//! What is kept about each Bulkhead between reconciles: backoff, refusals, audit counts, the latest usage analysis and the sidecars' answers.

pub(in crate::controller) mod audits;
pub(in crate::controller) mod backoff;
pub(in crate::controller) mod enforcement;
pub(in crate::controller) mod kept;
pub(in crate::controller) mod refusals;
pub(in crate::controller) mod usage;
