//! `tests/run`, the test command, in its dry mode (TESTS_RUN_DRY=1: the cargo
//! commands printed, nothing prepared): with arguments it runs exactly what
//! they name, end-to-end suites included; without, what CI (`.ci/run`) runs.

use std::process::Command;

fn dry_run(args: &[&str]) -> Vec<String> {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new(format!("{root}/tests/run"))
        .args(args)
        .env("TESTS_RUN_DRY", "1")
        .output()
        .expect("tests/run starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "tests/run {args:?}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout.lines().map(str::to_owned).collect()
}

#[test]
fn arguments_run_exactly_the_suite_and_filter_they_name() {
    // The README's example: one binary, one filter (not --all-targets, which
    // would override --test and run the filter over every hermetic binary).
    assert_eq!(dry_run(&["--test", "pure", "planner::"]), ["cargo test --locked --test pure planner::"]);
    // An end-to-end suite (`test = false`) is reached by name.
    assert_eq!(dry_run(&["--test", "operator"]), ["cargo test --locked --test operator"]);
    assert_eq!(
        dry_run(&["--test", "usage_e2e", "--", "--nocapture"]),
        ["cargo test --locked --test usage_e2e -- --nocapture"]
    );
}

#[test]
fn without_arguments_it_runs_the_lints_every_suite_and_the_fault_suite_last() {
    let e2e = "--test harness --test operator --test leader --test placement_e2e --test proxy_e2e \
               --test sharding_e2e --test ops_e2e --test real_pods --test usage_e2e --test sized_e2e";
    assert_eq!(
        dry_run(&[]),
        [
            "cargo fmt --check".to_string(),
            format!("cargo clippy --locked --all-targets {e2e} --test faults -- -D warnings"),
            "cargo fetch --locked".into(),
            "cargo deny --offline --log-level error check licenses bans sources".into(),
            "cargo test --locked --all-targets".into(),
            "cargo test --locked --workspace --doc".into(),
            format!("cargo test --locked {e2e}"),
            "cargo test --locked --test faults".into(),
        ]
    );
    // Every end-to-end binary Cargo.toml declares with `test = false` is run by name.
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).expect("Cargo.toml");
    let mut declared = Vec::new();
    let mut name = None;
    for line in manifest.lines() {
        if line.starts_with('[') {
            name = None;
        }
        if let Some(n) = line.strip_prefix("name = \"").and_then(|l| l.strip_suffix('"')) {
            name = Some(n.to_owned());
        }
        if line == "test = false" {
            declared.extend(name.clone());
        }
    }
    assert!(declared.len() >= 10, "{declared:?}");
    for suite in declared {
        let flag = format!("--test {suite}");
        assert!(e2e.split("--test ").any(|s| s.trim() == suite) || suite == "faults", "{flag} is never run");
    }
}
