//! The import order of the library, checked so that it stays:
//!
//! crd → {pool_config, snapshot} → select → {plan, audit} → status → {controller, offline}
//!
//! each module importing only from those to its left (`shard` from nothing),
//! and no two files of one module importing each other. The sidecar
//! (`crates/bulkhead-proxy`, with the `duration` grammar) and the admission
//! core are crates of their own, checked by `cargo tree`. `cargo test --test pure -- --nocapture architecture::`
//! prints the graph as it is.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

/// Each top-level module and the modules it may import.
const ALLOWED: &[(&str, &[&str])] = &[
    ("crd", &[]),
    ("pool_config", &["crd"]),
    ("snapshot", &["crd"]),
    ("select", &["crd", "snapshot"]),
    ("plan", &["crd", "pool_config", "snapshot", "select", "shard"]),
    ("audit", &["crd", "snapshot", "select"]),
    ("status", &["crd", "pool_config", "snapshot", "select", "shard", "plan", "audit", "usage"]),
    ("evaluate", &["crd", "snapshot", "select", "plan", "audit", "status"]),
    (
        "controller",
        &[
            "crd",
            "pool_config",
            "snapshot",
            "select",
            "plan",
            "audit",
            "status",
            "evaluate",
            "error_chain",
            "usage",
            "prometheus",
            "duration",
        ],
    ),
    (
        "offline",
        &[
            "crd",
            "pool_config",
            "snapshot",
            "select",
            "plan",
            "audit",
            "status",
            "evaluate",
            "usage",
            "prometheus",
            "duration",
        ],
    ),
    ("shard", &[]),
    ("logging", &[]),
    ("error_chain", &[]),
    ("usage", &["crd", "pool_config", "plan", "duration"]),
    ("prometheus", &["crd", "pool_config", "plan", "usage", "duration", "error_chain"]),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level module a file belongs to (`src/plan/nodes.rs` → plan).
fn module_of(file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src()).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    match first {
        "lib.rs" | "main.rs" => None,
        f => Some(f.trim_end_matches(".rs").to_string()),
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).expect("read src").flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Code without comments and string literals, so a path in a doc comment or
/// a message is not an import.
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '"' => {
                let mut escaped = false;
                for n in chars.by_ref() {
                    if escaped {
                        escaped = false;
                    } else if n == '\\' {
                        escaped = true;
                    } else if n == '"' {
                        break;
                    }
                }
                out.push_str("\"\"");
            }
            c => out.push(c),
        }
    }
    out
}

/// The first path segments after every `prefix::` (`crate::plan::x` → plan;
/// `crate::{plan::x, audit}` → plan, audit).
fn segments_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let needle = format!("{prefix}::");
    let mut rest = code;
    while let Some(i) = rest.find(&needle) {
        let before = rest[..i].chars().last();
        rest = &rest[i + needle.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // e.g. `my_crate::`
        }
        let trimmed = rest.trim_start();
        if let Some(group) = trimmed.strip_prefix('{') {
            let mut depth = 1;
            let mut end = 0;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = j;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let mut depth = 0;
            let mut item = String::new();
            for c in group[..end].chars().chain(std::iter::once(',')) {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        let first: String =
                            item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                        if !first.is_empty() {
                            found.insert(first);
                        }
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
        } else {
            let first: String = trimmed.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !first.is_empty() {
                found.insert(first);
            }
        }
    }
    found
}

struct Graph {
    /// module → modules it imports, with one file doing so for each.
    modules: BTreeMap<String, BTreeMap<String, PathBuf>>,
    /// file → sibling files of its module it names through `super::`.
    siblings: BTreeMap<PathBuf, BTreeSet<PathBuf>>,
}

fn graph() -> Graph {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let top: BTreeSet<String> = files.iter().filter_map(|f| module_of(f)).collect();
    let mut modules: BTreeMap<String, BTreeMap<String, PathBuf>> = BTreeMap::new();
    let mut siblings = BTreeMap::new();
    for file in &files {
        let Some(module) = module_of(file) else { continue };
        let code = code_only(&std::fs::read_to_string(file).expect("read source"));
        let imports = modules.entry(module.clone()).or_default();
        for used in segments_after(&code, "crate") {
            if used != module && top.contains(&used) {
                imports.entry(used).or_insert_with(|| file.clone());
            }
        }
        // Sibling files named directly: `super::status::X` from crd/spec.rs.
        let dir = file.parent().expect("file in a folder");
        let is_mod = file.file_name().is_some_and(|n| n == "mod.rs");
        if !is_mod && dir != src() {
            let named: BTreeSet<PathBuf> = segments_after(&code, "super")
                .into_iter()
                .map(|s| dir.join(format!("{s}.rs")))
                .filter(|p| p.exists() && p != file)
                .collect();
            siblings.insert(file.clone(), named);
        }
    }
    Graph { modules, siblings }
}

#[test]
fn modules_import_only_from_their_left() {
    let graph = graph();
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    println!("module imports (crate::…):");
    let mut violations = Vec::new();
    for (module, imports) in &graph.modules {
        println!("  {module:<12} → {}", imports.keys().cloned().collect::<Vec<_>>().join(", "));
        let Some(ok) = allowed.get(module.as_str()) else {
            violations.push(format!("module {module} has no place in the import order (add it to ALLOWED)"));
            continue;
        };
        for (used, file) in imports {
            if !ok.contains(&used.as_str()) {
                violations.push(format!("{module} imports {used} ({})", file.display()));
            }
        }
    }
    assert!(violations.is_empty(), "imports against the order:\n{}", violations.join("\n"));
}

#[test]
fn no_two_files_of_a_module_import_each_other() {
    let graph = graph();
    let mut cycles = Vec::new();
    for (file, named) in &graph.siblings {
        for other in named {
            if graph.siblings.get(other).is_some_and(|back| back.contains(file)) && file < other {
                cycles.push(format!("{} ↔ {}", file.display(), other.display()));
            }
        }
    }
    assert!(cycles.is_empty(), "files importing each other:\n{}", cycles.join("\n"));
}

#[test]
fn the_scanner_sees_grouped_and_plain_imports() {
    let code = code_only(
        "use crate::{\n    crd::Bulkhead, // crate::proxy in a comment\n    plan::{a, b},\n};\nlet x = crate::audit::audit(\"crate::offline\");",
    );
    let found: Vec<String> = segments_after(&code, "crate").into_iter().collect();
    assert_eq!(found, vec!["audit", "crd", "plan"]);
}

/// `cargo tree -p PACKAGE -e normal`, one crate a line.
fn normal_dependencies(package: &str) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["tree", "--locked", "--offline", "-p", package, "-e", "normal", "--prefix", "none"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The admission crate is what a service embeds: it must stay free of
/// Kubernetes and of the operator's server and CLI stacks.
#[test]
fn the_admission_crate_depends_on_no_kubernetes_crate() {
    let tree = normal_dependencies("bulkhead-admission");
    let crates: Vec<&str> = tree.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert!(crates.contains(&"bulkhead-admission") && crates.contains(&"http"), "unexpected tree:\n{tree}");
    let forbidden = ["kube", "kube-client", "kube-runtime", "k8s-openapi", "clap", "axum", "hyper", "hyper-util"];
    let found: Vec<&&str> = forbidden.iter().filter(|f| crates.contains(f)).collect();
    assert!(found.is_empty(), "bulkhead-admission pulls in {found:?}:\n{tree}");
}

/// The sidecar is a crate of its own so that it links no Kubernetes client
/// and no planner: only the admission crate, hyper, h2 and tokio.
#[test]
fn the_proxy_crate_depends_on_no_kubernetes_crate_and_not_on_the_operator() {
    let tree = normal_dependencies("bulkhead-proxy");
    let crates: Vec<&str> = tree.lines().filter_map(|l| l.split_whitespace().next()).collect();
    for wanted in ["bulkhead-proxy", "bulkhead-admission", "hyper", "h2", "tokio"] {
        assert!(crates.contains(&wanted), "{wanted} missing from the tree:\n{tree}");
    }
    let forbidden = ["bulkhead", "kube", "kube-client", "kube-runtime", "k8s-openapi", "schemars"];
    let found: Vec<&&str> = forbidden.iter().filter(|f| crates.contains(f)).collect();
    assert!(found.is_empty(), "bulkhead-proxy pulls in {found:?}:\n{tree}");
    // Nothing of the operator is left in its old place.
    assert!(!src().join("proxy").exists(), "src/proxy/ is back: the sidecar lives in crates/bulkhead-proxy");
}
