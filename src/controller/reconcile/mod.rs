//! One reconcile: its steps (guard, evaluate, execute, report), the writes, the finalizer, Events and the stamps on pods.

pub(in crate::controller) mod apply;
pub(in crate::controller) mod events;
pub(in crate::controller) mod finalizer;
pub(in crate::controller) mod recorder;
pub(in crate::controller) mod stamp;
pub(in crate::controller) mod steps;
pub(in crate::controller) mod untyped;
