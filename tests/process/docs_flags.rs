//! The flags the docs name, held against the binary: every flag table
//! (docs/reference/proxy.md's limits, the README's) and every command
//! synopsis (`bulkhead advise -f FILE … [--window 7d]` in docs/reference and
//! docs/guides) names flags the command has, with the defaults its `--help`
//! gives (and `--help`'s defaults are clap's, the ones the binary parses).
//! A default the help does not print (`--class-header-from`'s loopback) must
//! at least be what the help text says. The `--help` transcripts themselves
//! are checked whole by `readme.rs`.

use std::{collections::BTreeMap, path::Path, process::Command};

/// A flag's help: its default (clap's `[default: …]`) and its whole text.
struct Flag {
    default: Option<String>,
    text: String,
}

fn help(command: &str) -> BTreeMap<String, Flag> {
    let out = Command::new(env!("CARGO_BIN_EXE_bulkhead")).args([command, "--help"]).output().expect("help");
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut flags = BTreeMap::new();
    let lines: Vec<&str> = help.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let Some(start) = trimmed.find("--").filter(|_| trimmed.starts_with('-')) else { continue };
        let name: String =
            trimmed[start..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect::<String>();
        let text: Vec<&str> =
            lines[i + 1..].iter().take_while(|l| !l.trim_start().starts_with('-')).map(|l| l.trim()).collect();
        let text = text.join(" ");
        let default = text.find("[default: ").map(|at| {
            let rest = &text[at + "[default: ".len()..];
            rest[..rest.find(']').unwrap_or(rest.len())].to_string()
        });
        flags.insert(name, Flag { default, text });
    }
    // --help and at least one flag of the command's own (`crd` has one).
    assert!(flags.contains_key("--help") && flags.len() >= 2, "{command} --help: no flags read from\n{help}");
    flags
}

/// "60 s" and "60s", "2,048" and "2048" are one default.
fn same(doc: &str, help: &str) -> bool {
    let norm = |s: &str| s.chars().filter(|c| !c.is_whitespace() && *c != ',').collect::<String>().to_lowercase();
    norm(doc) == norm(help)
}

fn read(page: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(page)).unwrap_or_else(|e| panic!("{page}: {e}"))
}

/// Rows `| `--flag` | default | …` (proxy.md: `cell`) or `| `--flag` [default] | …` (README).
fn table_rows(text: &str, cell: bool) -> Vec<(String, Option<String>)> {
    let mut rows = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("| `--") else { continue };
        let Some((flag, rest)) = rest.split_once('`') else { continue };
        let flag = format!("--{flag}");
        let rest = rest.trim_start();
        let default = if cell {
            rest.strip_prefix('|').and_then(|r| r.split('|').next()).map(|d| d.trim().to_string())
        } else {
            rest.strip_prefix('[').and_then(|b| b.split_once(']')).map(|(d, _)| d.to_string())
        };
        rows.push((flag, default.filter(|d| !d.is_empty())));
    }
    rows
}

#[test]
fn every_flag_table_names_real_flags_with_their_real_defaults() {
    let proxy = help("proxy");
    let mut checked = 0;
    for (page, cell) in [("docs/reference/proxy.md", true), ("README.md", false)] {
        let rows = table_rows(&read(page), cell);
        assert!(rows.len() >= 6, "{page}: only {} flag rows found: the extraction broke", rows.len());
        for (flag, default) in rows {
            let Some(real) = proxy.get(&flag) else { panic!("{page}: {flag} is not a flag of bulkhead proxy") };
            let Some(default) = default else { continue };
            match &real.default {
                Some(d) => assert!(same(&default, d), "{page}: {flag} documented as {default:?}, --help says {d:?}"),
                None => assert!(
                    real.text.to_lowercase().contains(&default.to_lowercase()),
                    "{page}: {flag} documented as [{default}], which its help does not say: {}",
                    real.text
                ),
            }
            checked += 1;
        }
    }
    assert!(checked >= 12, "only {checked} defaults checked");
}

/// `bulkhead SUB …` synopses: in a code span or a block line of its own.
fn synopses(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in text.lines() {
        for (i, part) in line.split('`').enumerate() {
            // Odd parts are inside a code span; a block line is taken whole.
            let code = i % 2 == 1 || !line.contains('`');
            if code && part.trim_start().starts_with("bulkhead ") && part.contains(" [-") {
                found.push(part.trim().to_string());
            }
        }
    }
    found
}

#[test]
fn every_synopsis_names_real_flags_with_their_real_defaults() {
    let pages = ["docs/reference/cli.md", "docs/guides/usage-advice.md", "docs/guides/shuffle-sharding.md"];
    let mut checked = 0;
    let mut helps: BTreeMap<String, BTreeMap<String, Flag>> = BTreeMap::new();
    for page in pages {
        let text = read(page).replace("\n                ", " ");
        for synopsis in synopses(&text) {
            let command = synopsis.split_whitespace().nth(1).expect("a subcommand").to_string();
            let flags = helps.entry(command.clone()).or_insert_with(|| help(&command));
            let words: Vec<&str> = synopsis.split_whitespace().collect();
            for (i, word) in words.iter().enumerate() {
                let word = word.trim_start_matches('[').trim_end_matches(']');
                let Some(flag) = word.strip_prefix("--").map(|f| format!("--{f}")) else { continue };
                let Some(real) = flags.get(&flag) else { panic!("{page}: {flag} is not a flag of bulkhead {command}") };
                checked += 1;
                // `[--strict]`: a switch; `--prometheus URL`: required, no default.
                if words[i].ends_with(']') || !words[i].starts_with('[') {
                    continue;
                }
                let Some(value) = words.get(i + 1).map(|v| v.trim_end_matches(']')) else { continue };
                // A placeholder (FILE, DURATION, H,…) says nothing of the default.
                if value.starts_with(['-', '[']) || value.chars().any(|c| c.is_ascii_uppercase()) {
                    continue;
                }
                let default = real.default.as_deref().unwrap_or_else(|| panic!("{page}: {flag} has no default"));
                assert!(
                    same(value, default),
                    "{page}: `{synopsis}` gives {flag} {value}, --help's default is {default}"
                );
            }
        }
    }
    assert!(checked >= 15, "only {checked} flags of synopses checked: the extraction broke");
}
