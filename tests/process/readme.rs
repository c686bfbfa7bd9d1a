//! Every offline command the README and the docs show (README.md,
//! TESTING.md, CONTRIBUTING.md and docs/**/*.md) runs here, its output
//! checked (trycmd), so that no page can drift from the binary.
//!
//! A block is a case when its first line is `$ bulkhead …` or
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

/// The pages whose transcripts are checked: the top-level ones and every page under docs/.
fn pages(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        let mut entries: Vec<_> =
            std::fs::read_dir(dir).expect("read docs/").map(|e| e.expect("entry").path()).collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut pages: Vec<_> = ["README.md", "TESTING.md", "CONTRIBUTING.md"].iter().map(|p| root.join(p)).collect();
    walk(&root.join("docs"), &mut pages);
    pages
}

#[test]
fn every_offline_command_in_the_docs_prints_what_it_shows() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = trycmd::TestCases::new();
    cases.register_bin("bulkhead", std::path::PathBuf::from(env!("CARGO_BIN_EXE_bulkhead"))).env("NO_COLOR", "1");
    let (mut total, mut in_readme) = (0, 0);
    for page in pages(root) {
        let text = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        let (transcript, count) = transcripts(&text);
        if count == 0 {
            continue;
        }
        if page.ends_with("README.md") && page.parent() == Some(root) {
            in_readme = count;
        }
        total += count;
        let name = page.strip_prefix(root).expect("under the root").to_string_lossy().replace('/', "__");
        let file = dir.path().join(name);
        std::fs::write(&file, &transcript).expect("write");
        cases.case(&file);
    }
    assert!(
        in_readme >= 2,
        "only {in_readme} README transcripts found: the offline demo is gone or the extraction broke"
    );
    assert!(total >= 10, "only {total} transcripts found in the docs: the extraction broke");
}

/// The version claim is made once in the chart and repeated in the
/// compatibility page: the two must name the same range.
#[test]
fn the_docs_state_the_charts_kube_version() {
    let chart = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/charts/bulkhead/Chart.yaml"))
        .expect("Chart.yaml");
    let range = chart
        .lines()
        .find_map(|l| l.strip_prefix("kubeVersion:"))
        .map(|v| v.trim().trim_matches('"'))
        .expect("the chart declares kubeVersion");
    let page = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations/compatibility.md");
    let text = std::fs::read_to_string(page).expect("docs/operations/compatibility.md");
    let claimed = format!("`kubeVersion: \"{range}\"`");
    assert!(text.contains(&claimed), "the compatibility page states {claimed}");
}

/// The quickstart's kind node runs a Kubernetes version the compatibility
/// page claims (1.20 to 1.33), not whatever kind picks by default.
#[test]
fn the_quickstart_pins_a_kind_node_in_the_claimed_range() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README.md");
    let line =
        readme.lines().find(|l| l.starts_with("kind create cluster")).expect("the quickstart creates its kind cluster");
    let version = line.split("kindest/node:v").nth(1).expect("a pinned node image").split_whitespace().next();
    let minor: u32 = version
        .and_then(|v| v.split('.').nth(1))
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("no version in {line:?}"));
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations/compatibility.md"))
        .expect("compatibility.md");
    assert!(page.contains("| 1.21 – 1.33 | **claimed"), "the claimed range moved: update this test and the README");
    assert!((20..=33).contains(&minor), "{line}: 1.{minor} is outside the claimed 1.20–1.33");
}

/// The README stays a front page: what, a demo, a quickstart, the two
/// commands. Everything else lives under docs/.
#[test]
fn the_readme_is_at_most_250_lines() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(lines <= 250, "README.md has {lines} lines; move the detail to docs/");
}

/// Every relative link of every page points at a file that exists, so
/// moving a page cannot leave the table of contents pointing nowhere.
#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages(root) {
        let text = std::fs::read_to_string(&page).expect("page");
        for (i, _) in text.match_indices("](") {
            let rest = &text[i + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            if target.contains("://") || target.starts_with('#') || target.starts_with("mailto:") {
                continue;
            }
            let file = target.split('#').next().unwrap_or(target);
            checked += 1;
            let base = page.parent().expect("a page has a directory");
            if !base.join(file).exists() {
                broken.push(format!("{}: {target}", page.strip_prefix(root).unwrap_or(&page).display()));
            }
        }
    }
    assert!(checked >= 10, "only {checked} relative links found: the extraction broke");
    assert!(broken.is_empty(), "links to files that do not exist:\n{}", broken.join("\n"));
}

/// Troubleshooting lists every `x-bulkhead-reason` the proxy can answer
/// with: every refusal of its one vocabulary (`bulkhead::proxy::Refusal`),
/// the admission's reasons among them.
#[test]
fn troubleshooting_lists_every_reason_the_proxy_answers_with() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut reasons: Vec<String> = bulkhead::proxy::Refusal::ALL.iter().map(|r| r.reason().to_string()).collect();
    reasons.sort();
    reasons.dedup();
    assert!(reasons.len() >= 10, "only {reasons:?} found: the extraction broke");
    let page = std::fs::read_to_string(root.join("docs/operations/troubleshooting.md")).expect("troubleshooting.md");
    let missing: Vec<&String> = reasons.iter().filter(|r| !page.contains(&format!("`{r}`"))).collect();
    assert!(missing.is_empty(), "docs/operations/troubleshooting.md does not name {missing:?}");
}

/// TESTING.md names every package the test scripts install with apt.
#[test]
fn testing_md_names_every_package_the_scripts_install() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let testing = std::fs::read_to_string(root.join("TESTING.md")).expect("TESTING.md");
    let mut packages = Vec::new();
    for script in ["tests/control-plane", "tests/image", "tests/lib/real-nodes.sh"] {
        let text = std::fs::read_to_string(root.join(script)).expect("script");
        for part in text.split("missing+=(").skip(1) {
            // A package name, not a variable (`missing+=("$b")` lists binaries to build).
            let name = part.split(')').next().unwrap_or_default();
            if name.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)) {
                packages.push(name.to_owned());
            }
        }
    }
    assert!(packages.len() >= 15, "only {packages:?} found: the extraction broke");
    let missing: Vec<&String> = packages.iter().filter(|p| !testing.contains(&format!("`{p}`"))).collect();
    assert!(missing.is_empty(), "TESTING.md does not name {missing:?}");
}
