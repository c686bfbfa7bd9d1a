//! Every offline command the README shows runs here, its output checked
//! (trycmd), so that the README cannot drift from the binary.
//!
//! A README block is a case when its first line is `$ bulkhead …` or
//! `$ cargo run -q -- …` (the same binary). The README's conventions are
//! translated for trycmd: stdout and stderr are shown together; a command
//! ending in `>/dev/null` shows stderr alone (its stdout is matched by `...`);
//! a `…` line stands for lines left out; `$ echo $?` and the line after it
//! give the exit code of the command before; `# …` after a command is a note.
//!
//! Left out, as they need a cluster: `kubectl` and `helm` commands, `bulkhead
//! run` itself (its `--help` is checked), and the `sh` blocks (a pipeline or a
//! setup script, not a transcript).

use std::fmt::Write as _;

/// The README's transcript blocks of the offline binary, as one trycmd markdown file.
fn transcripts(readme: &str) -> (String, usize) {
    let mut out = String::new();
    let mut count = 0;
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        if line.trim_end() != "```" {
            if let Some(info) = line.strip_prefix("```") {
                // A block of another kind (sh, yaml, …): skip it whole.
                if !info.is_empty() {
                    lines.by_ref().take_while(|l| !l.starts_with("```")).for_each(drop);
                }
            }
            continue;
        }
        let block: Vec<&str> = lines.by_ref().take_while(|l| !l.starts_with("```")).collect();
        let Some(first) = block.first().and_then(|l| command(l)) else { continue };
        if !first.starts_with("bulkhead ") {
            continue;
        }
        count += 1;
        out.push_str("```console\n");
        let (mut i, mut commands) = (0, 0);
        while i < block.len() {
            let line = block[i];
            if line == "$ echo $?" {
                i += 2; // written as `? N` after the command, below
                continue;
            }
            if let Some(cmd) = command(line) {
                let (cmd, quiet) = match cmd.strip_suffix(">/dev/null") {
                    Some(c) => (c.trim_end().to_string(), true),
                    None => (cmd, false),
                };
                if commands > 0 {
                    out.push('\n'); // ends the previous command's output, as below
                }
                commands += 1;
                let _ = writeln!(out, "$ {cmd}");
                // The exit code, when the next command of the block asks for it.
                let next = block.iter().skip(i + 1).position(|l| l.starts_with("$ ")).map(|j| i + 1 + j);
                if let Some(j) = next.filter(|j| block[*j] == "$ echo $?") {
                    let code = block.get(j + 1).map_or("", |c| c.trim());
                    let _ = writeln!(out, "? {code}");
                }
                if quiet && block.get(i + 1).is_none_or(|l| l.trim() != "…") {
                    out.push_str("...\n");
                }
            } else if line.trim() == "…" {
                out.push_str("...\n");
            } else if let Some(start) = line.strip_suffix("…") {
                // A line cut short: the rest of it may be anything.
                let _ = writeln!(out, "{start}[..]");
            } else {
                out.push_str(line);
                out.push('\n');
            }
            i += 1;
        }
        // trycmd drops the last newline of the expected output; the binary prints one.
        out.push_str("\n```\n\n");
    }
    (out, count)
}

/// The command of a `$ ` line, `cargo run -q --` written as `bulkhead`, a trailing `# note` dropped.
fn command(line: &str) -> Option<String> {
    let cmd = line.strip_prefix("$ ")?;
    let cmd = cmd.split("  #").next().unwrap_or(cmd).trim_end();
    Some(match cmd.strip_prefix("cargo run -q -- ") {
        Some(rest) => format!("bulkhead {rest}"),
        None => cmd.to_string(),
    })
}

#[test]
fn every_offline_command_in_the_readme_prints_what_it_shows() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let (cases, count) = transcripts(&readme);
    assert!(count >= 10, "only {count} README transcripts found: the extraction broke");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("readme.md");
    std::fs::write(&file, &cases).expect("write");
    trycmd::TestCases::new()
        .register_bin("bulkhead", std::path::PathBuf::from(env!("CARGO_BIN_EXE_bulkhead")))
        .env("NO_COLOR", "1")
        .case(&file);
}

/// The version claim is made once in the chart and repeated in the README:
/// the two must name the same range.
#[test]
fn the_readme_states_the_charts_kube_version() {
    let chart = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/charts/bulkhead/Chart.yaml"))
        .expect("Chart.yaml");
    let range = chart
        .lines()
        .find_map(|l| l.strip_prefix("kubeVersion:"))
        .map(|v| v.trim().trim_matches('"'))
        .expect("the chart declares kubeVersion");
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README.md");
    let claimed = format!("`kubeVersion: \"{range}\"`");
    assert!(readme.contains(&claimed), "the README's version section states {claimed}");
}
