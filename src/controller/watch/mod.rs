//! Watches: the snapshot kept current (observe), the catch-up lists after a watch failure, their backoff, and which Service backends are read.

pub(in crate::controller) mod backend_source;
pub(in crate::controller) mod catch_up;
pub(in crate::controller) mod observe;
pub(in crate::controller) mod watch_backoff;
