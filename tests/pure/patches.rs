//! The patched h2 (patches/README.md): the lock takes h2 from the vendored
//! tree, at the version the patch was made against, and the tree carries
//! exactly what patches/h2.diff says it changed. A new h2 must be vendored
//! and patched again, not picked up silently.

use std::{fs, path::Path};

/// The h2 release `patches/h2.diff` applies to.
const PATCHED_H2: &str = "0.4.21";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_lock_takes_h2_from_the_patched_tree_at_the_version_the_patch_applies_to() {
    let lock = fs::read_to_string(root().join("Cargo.lock")).expect("Cargo.lock");
    let entries: Vec<&str> = lock.split("[[package]]").filter(|p| p.contains("\nname = \"h2\"\n")).collect();
    assert_eq!(entries.len(), 1, "one h2 in the lock, the patched one: {entries:?}");
    assert!(entries[0].contains(&format!("\nversion = \"{PATCHED_H2}\"\n")), "{}", entries[0]);
    // A registry package has a source and a checksum; the vendored tree has neither.
    assert!(!entries[0].contains("source ="), "h2 comes from the registry, not patches/h2: {}", entries[0]);

    let manifest = fs::read_to_string(root().join("patches/h2/Cargo.toml")).expect("patches/h2/Cargo.toml");
    assert!(manifest.contains(&format!("\nversion = \"{PATCHED_H2}\"\n")), "patches/h2 is not h2 {PATCHED_H2}");
    let cargo = fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    assert!(cargo.contains("[patch.crates-io]\nh2 = { path = \"patches/h2\" }"), "the workspace does not patch h2");
}

#[test]
fn the_vendored_h2_carries_each_change_of_the_diff() {
    let diff = fs::read_to_string(root().join("patches/h2.diff")).expect("patches/h2.diff");
    let mut files = 0;
    let mut hunks = 0;
    for file in diff.split("\ndiff ").skip_while(|f| !f.contains("+++ ")) {
        let path = file
            .lines()
            .find_map(|l| l.strip_prefix("+++ b/"))
            .unwrap_or_else(|| panic!("a file of the diff without its path: {file:.200}"));
        let tree = fs::read_to_string(root().join("patches/h2").join(path)).expect(path);
        files += 1;
        for hunk in file.split("\n@@ ").skip(1) {
            hunks += 1;
            // What the hunk leaves: its context and added lines, in order, must be in the tree.
            let after: Vec<&str> = hunk
                .lines()
                .skip(1)
                .filter(|l| !l.starts_with('-') && !l.starts_with('\\'))
                .map(|l| l.get(1..).unwrap_or(""))
                .collect();
            let added = hunk.lines().skip(1).filter(|l| l.starts_with('+')).count();
            assert!(added > 0 || hunk.lines().any(|l| l.starts_with('-')), "an empty hunk in {path}");
            assert!(tree.contains(&after.join("\n")), "{path} does not carry this hunk of patches/h2.diff:\n{hunk}");
        }
    }
    assert_eq!((files, hunks >= files), (13, true), "patches/h2.diff changes thirteen files of h2");
}
