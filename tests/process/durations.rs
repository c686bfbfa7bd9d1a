//! Every duration flag of every command, found in `--help`, means one thing
//! by 0: the limit is off (its help says "0 disables", and the proxy then
//! holds no timer at all: a 1.5 s answer and a 1.5 s pause in a body get
//! through), or 0 is refused at start with exit 3 and the flag named. And
//! every one reads the same grammar: `1h30m` is accepted everywhere, a bare
//! `30` nowhere.

use std::{process::Command, time::Duration};

use crate::proxy_support::*;

/// The commands and the least each needs besides the flag under test. `run`
/// gets a kubeconfig that does not exist, so that a value it accepts ends
/// at once on the missing credentials instead of starting a controller.
const COMMANDS: &[(&str, &[&str])] = &[
    ("run", &[]),
    ("proxy", &["--config-dir", "/nonexistent/bulkhead", "--listen", "127.0.0.1:0"]),
    ("advise", &["-f", "examples/four-dependencies.yaml", "--prometheus", "http://127.0.0.1:1"]),
    ("plan", &["-f", "examples/four-dependencies.yaml"]),
    ("check", &["-f", "examples/four-dependencies.yaml"]),
    ("shard", &["--nodes", "8", "--shard-size", "2", "--tenants", "800"]),
];

/// The flags whose 0 turns the limit off: waiting without them is bounded
/// by something else (the class ceilings, --max-connections).
const OFF_AT_ZERO: &[&str] = &["--response-timeout", "--idle-timeout"];

fn bulkhead(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_bulkhead"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("bulkhead runs");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// (command, flag, the flag's help paragraph) of every `--flag <DURATION>`.
fn duration_flags() -> Vec<(&'static str, String, String)> {
    let mut found = Vec::new();
    for (command, _) in COMMANDS {
        let out = Command::new(env!("CARGO_BIN_EXE_bulkhead")).args([command, "--help"]).output().expect("help");
        let help = String::from_utf8_lossy(&out.stdout).into_owned();
        let lines: Vec<&str> = help.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some((flag, _)) = line.trim().split_once(" <DURATION>") else { continue };
            let text: Vec<&str> =
                lines[i + 1..].iter().take_while(|l| !l.trim_start().starts_with('-')).map(|l| l.trim()).collect();
            found.push((*command, flag.to_owned(), text.join(" ")));
        }
    }
    found
}

#[test]
fn every_duration_flag_refuses_0_by_name_unless_0_turns_it_off() {
    let flags = duration_flags();
    let names: Vec<String> = flags.iter().map(|(c, f, _)| format!("{c} {f}")).collect();
    // The list is read from --help: a new flag is checked without being added here.
    assert!(flags.len() >= 11, "too few duration flags found in --help: {names:?}");
    for name in ["run --shutdown-grace", "proxy --header-timeout", "advise --step", "run --usage-period"] {
        assert!(names.iter().any(|n| n == name), "{name} not found in {names:?}");
    }
    for (command, flag, help) in &flags {
        let (_, base) = COMMANDS.iter().find(|(c, _)| c == command).expect("a known command");
        let mut args = vec![*command];
        args.extend_from_slice(base);
        args.extend([flag.as_str(), "0"]);
        let (code, stderr) = bulkhead(&args);
        if OFF_AT_ZERO.contains(&flag.as_str()) {
            assert!(help.contains("0 disables"), "{command} {flag}: the help does not say 0 disables: {help}");
            assert!(!stderr.contains("invalid value"), "{command} {flag} 0 is off, not refused: {stderr}");
        } else {
            assert_eq!(code, 3, "{command} {flag} 0: {stderr}");
            assert!(
                stderr.contains(&format!("'{flag} <DURATION>'")) && stderr.contains("must be longer than 0"),
                "{command} {flag} 0: {stderr}"
            );
            assert!(!help.contains("0 disables"), "{command} {flag}: the help promises what 0 does not do");
        }
        // One grammar: a compound duration is read by every flag, a bare number by none.
        args.pop();
        args.push("1h30m");
        let (_, stderr) = bulkhead(&args);
        assert!(!stderr.contains("invalid value"), "{command} {flag} 1h30m: {stderr}");
        args.pop();
        args.push("30");
        let (code, stderr) = bulkhead(&args);
        assert!(code == 3 && stderr.contains("a number without a unit"), "{command} {flag} 30: {stderr}");
    }
}

#[test]
fn advise_refuses_a_step_longer_than_its_window_and_a_window_in_fractions_of_a_second() {
    let base = ["advise", "-f", "examples/four-dependencies.yaml", "--prometheus", "http://127.0.0.1:1"];
    let (code, stderr) = bulkhead(&[&base[..], &["--window", "1h", "--step", "2h"]].concat());
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("--step: 2h is longer than the window (1h)"), "{stderr}");
    let (code, stderr) = bulkhead(&[&base[..], &["--window", "1500ms"]].concat());
    assert!(code == 3 && stderr.contains("whole number of seconds"), "{stderr}");
    // A step equal to the window is one point: accepted (and then Prometheus is unreachable).
    let (code, stderr) = bulkhead(&[&base[..], &["--window", "1h30m", "--step", "90m"]].concat());
    assert!(code == 4 && stderr.contains("unreachable"), "{stderr}");
}

/// 0 turns --response-timeout and --idle-timeout off, not into a timer that
/// fires at once: an answer whose head takes 1.5 s and a body that pauses
/// for 1.5 s both get through whole.
#[tokio::test]
async fn zero_response_and_idle_timeouts_hold_no_timer() {
    let up = Upstream::start().await;
    let config = ConfigDir::new(&pools(5));
    let url = up.url();
    let extra = ["--upstream", &url, "--classify", "header:x-class", "--response-timeout", "0", "--idle-timeout", "0"];
    let proxy = Proxy::start(config.path(), &extra).await;
    let client = http1();
    let slow = send(&client, request(&proxy.url("/slow"), Some("checkout"))).await;
    assert_eq!(slow.status(), 200, "{:?}", slow.headers());
    let held = hold(&client, &proxy, Some("checkout")).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    up.release();
    finish(held).await;
}
