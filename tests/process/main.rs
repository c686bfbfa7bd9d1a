//! The real `bulkhead` binary as a process, no cluster: the CLI and its exit
//! codes, `check` as a CI gate, error output, the docs' transcripts, shutdown
//! with an unreachable API server, `bulkhead proxy` against an in-test
//! upstream and hostile clients (loopback only), and the test app of the
//! real-node images under busybox `nc`.
//! `cargo test --test process proxy_hostile::` runs one file's tests.

mod app_serve;
mod bin;
mod check_gate;
mod check_verdicts;
mod cli;
mod docs_flags;
mod durations;
mod errors;
mod proxy;
mod proxy_abuse;
mod proxy_drill;
mod proxy_hostile;
mod proxy_shared_connection;
mod proxy_spoofing;
mod proxy_upstream;
mod readme;
mod shutdown;
mod tests_run;

// The shared support, from the test kit (testkit/).
use bulkhead_testkit::proxy as proxy_support;
