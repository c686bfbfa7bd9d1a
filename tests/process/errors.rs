//! Errors as a user reads them (stderr, and the log of `run`): each cause once (issue 22).
//! thiserror's `source`, a `{source}` in the Display text and anyhow's `{:#}`
//! used to print a missing kubeconfig's cause four times on one line.

use std::process::{Command, Output};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_missing_kubeconfig_prints_its_cause_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("absent");
    let out = Command::new(env!("CARGO_BIN_EXE_bulkhead"))
        .args(["run", "--metrics-addr", "127.0.0.1:0"])
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", dir.path())
        .env("NO_COLOR", "1")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .expect("bulkhead runs");
    assert_eq!(out.status.code(), Some(1));
    // `run` logs through tracing, to stdout; the last line is the fatal error.
    let err = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    // The line starts with a timestamp; everything after it is exact.
    let (_, message) = lines[0].split_once(' ').expect("timestamp first");
    let expected = format!(
        "ERROR bulkhead: controller stopped error=no Kubernetes credentials (KUBECONFIG or in-cluster): \
         Failed to infer configuration: failed to infer config: in-cluster: (failed to read an incluster \
         environment variable: environment variable not found), kubeconfig: (failed to read kubeconfig \
         from '\"{}\"': No such file or directory (os error 2))",
        kubeconfig.display()
    );
    assert_eq!(message, expected);
}

fn proxy(config_dir: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bulkhead"))
        .args(["proxy", "--config-dir"])
        .arg(config_dir)
        .args(["--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9", "--classify", "header:x-class"])
        .env("NO_COLOR", "1")
        .output()
        .expect("bulkhead runs")
}

#[test]
fn a_bad_pools_json_prints_its_cause_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pools.json");
    std::fs::write(&path, "{\"classes\": [\n").expect("write");
    let out = proxy(dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!("error: {}: classes: EOF while parsing a list at line 2 column 0\n", path.display())
    );
}

#[test]
fn a_missing_pools_json_prints_its_cause_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = proxy(&dir.path().join("absent"));
    assert_eq!(out.status.code(), Some(1));
    let path = dir.path().join("absent").join("pools.json");
    assert_eq!(stderr(&out), format!("error: {}: No such file or directory (os error 2)\n", path.display()));
}
