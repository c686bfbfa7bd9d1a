//! Shuffle sharding: the calculator against figures worked out by hand, the
//! `bulkhead shard` command as a user runs it, and the assignment's guarantees.

use std::{
    collections::{BTreeMap, HashMap},
    process::Command,
};

use bulkhead::shard::{assign, report, Calculation, Impact};

fn bulkhead(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_bulkhead")).args(args).output().expect("bulkhead runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn shard_json(nodes: &str, k: &str, tenants: &str) -> serde_json::Value {
    let (code, out, err) =
        bulkhead(&["shard", "--nodes", nodes, "--shard-size", k, "--tenants", tenants, "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("one JSON object")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * b.abs().max(1.0)
}

fn assert_impact(i: Impact, fully: f64, partially: f64, unaffected: f64) {
    assert!(
        close(i.fully_affected, fully) && close(i.partially_affected, partially) && close(i.unaffected, unaffected),
        "{i:?} != ({fully}, {partially}, {unaffected})"
    );
}

#[test]
fn shard_calculator_worked_example_8_nodes_k2_800_tenants() {
    let c = Calculation::new(8, 2, 800).expect("valid");
    assert_eq!(c.combinations.to_string(), "28"); // 8·7/2
                                                  // Shared: the failed "shard" is every node, so all 799 others lose everything.
    assert_impact(c.shared, 799.0, 0.0, 0.0);
    // Partitioned: 8/2 = 4 groups of 2 nodes, 800/4 = 200 tenants each.
    assert_eq!((c.groups, c.tenants_in_failed_group), (4, 200));
    assert_impact(c.partitioned, 199.0, 0.0, 600.0);
    // Shuffle: of the 28 pairs, 1 is the failed one, C(6,2) = 15 avoid both its
    // nodes, 28 − 1 − 15 = 12 share one node (2 nodes × 6 others).
    assert_impact(c.shuffle_sharded, 799.0 / 28.0, 799.0 * 12.0 / 28.0, 799.0 * 15.0 / 28.0);
    assert!(close(c.shuffle_sharded.fully_affected, 28.535714285714285));
    assert!((c.shuffle_sharded.fully_affected + c.shuffle_sharded.partially_affected - 370.96).abs() < 0.01);
}

#[test]
fn shard_calculator_one_node_each() {
    // K = 1: 8 partitions of 100 tenants; a random node holds 1/8 of the others,
    // and one node cannot be half lost.
    let c = Calculation::new(8, 1, 800).expect("valid");
    assert_impact(c.partitioned, 99.0, 0.0, 700.0);
    assert_impact(c.shuffle_sharded, 799.0 / 8.0, 0.0, 799.0 * 7.0 / 8.0);
}

#[test]
fn shard_calculator_100_nodes_k5_10000_tenants() {
    let c = Calculation::new(100, 5, 10_000).expect("valid");
    // 100·99·98·97·96 / 5! = 9,034,502,400 / 120.
    assert_eq!(c.combinations.to_string(), "75287520");
    // Disjoint shards: C(95, 5) = 95·94·93·92·91 / 120 = 57,940,519; partial:
    // 75,287,520 − 57,940,519 − 1 = 17,347,000.
    assert_impact(
        c.shuffle_sharded,
        9_999.0 / 75_287_520.0,
        9_999.0 * 17_347_000.0 / 75_287_520.0,
        9_999.0 * 57_940_519.0 / 75_287_520.0,
    );
    assert!((c.shuffle_sharded.fully_affected - 0.000_132_81).abs() < 1e-8);
    // 20 groups of 5 nodes, 500 tenants each.
    assert_impact(c.partitioned, 499.0, 0.0, 9_500.0);
}

#[test]
fn shard_calculator_uneven_partitions_and_edges() {
    // 10 nodes, K = 3: floor(10/3) = 3 groups (1 node unused); 100 tenants over
    // 3 groups are 34 + 33 + 33, the failed one in a group of 34.
    let c = Calculation::new(10, 3, 100).expect("valid");
    assert_eq!((c.groups, c.tenants_in_failed_group), (3, 34));
    assert_impact(c.partitioned, 33.0, 0.0, 66.0);
    // C(10,3) = 120, C(7,3) = 35 disjoint, 84 partial: 99/120, 99·84/120, 99·35/120.
    assert_impact(c.shuffle_sharded, 0.825, 69.3, 28.875);

    // K = N: one shard, everyone on it, every scheme is "shared".
    let c = Calculation::new(5, 5, 10).expect("valid");
    assert_eq!(c.combinations.to_string(), "1");
    for i in [c.shared, c.partitioned, c.shuffle_sharded] {
        assert_impact(i, 9.0, 0.0, 0.0);
    }
    // K > N/2: any two shards of 4 in 6 nodes meet, C(2,4) = 0 disjoint; C(6,4) = 15.
    let c = Calculation::new(6, 4, 3).expect("valid");
    assert_impact(c.shuffle_sharded, 2.0 / 15.0, 2.0 * 14.0 / 15.0, 0.0);
    // A lone tenant affects nobody.
    let c = Calculation::new(8, 2, 1).expect("valid");
    for i in [c.shared, c.partitioned, c.shuffle_sharded] {
        assert_impact(i, 0.0, 0.0, 0.0);
    }
}

#[test]
fn shard_json_has_exactly_the_documented_keys() {
    let v = shard_json("8", "2", "800");
    let keys = |v: &serde_json::Value| v.as_object().expect("object").keys().cloned().collect::<Vec<_>>();
    for k in ["nodes", "shardSize", "tenants", "combinations", "shared", "partitioned", "shuffleSharded"] {
        assert!(v.get(k).is_some(), "missing {k}: {v}");
    }
    for scheme in ["shared", "partitioned", "shuffleSharded"] {
        for k in ["fullyAffected", "partiallyAffected", "unaffected"] {
            assert!(v[scheme][k].is_number(), "{scheme}.{k}: {v}");
        }
    }
    assert_eq!(keys(&v["shared"]), ["fullyAffected", "partiallyAffected", "unaffected"]);
    // Printed in the documented order, for people reading it.
    let (_, out, _) = bulkhead(&["shard", "--nodes", "8", "--shard-size", "2", "--tenants", "800", "-o", "json"]);
    let at = |k: &str| out.find(&format!("\"{k}\":")).unwrap_or(usize::MAX);
    let order = ["nodes", "shardSize", "tenants", "combinations", "shared", "partitioned", "shuffleSharded"];
    assert!(order.windows(2).all(|w| at(w[0]) < at(w[1])), "{out}");
    assert_eq!((v["nodes"].as_u64(), v["shardSize"].as_u64(), v["tenants"].as_u64()), (Some(8), Some(2), Some(800)));
    assert_eq!(v["combinations"].as_u64(), Some(28));
    assert_eq!(v["shared"]["fullyAffected"].as_u64(), Some(799));
    assert_eq!(v["partitioned"]["fullyAffected"].as_u64(), Some(199));
    // Not rounded: the double nearest 799/28.
    assert_eq!(v["shuffleSharded"]["fullyAffected"].as_f64(), Some(799.0 / 28.0));
    assert_eq!(v["shuffleSharded"]["partiallyAffected"].as_f64(), Some(799.0 * 12.0 / 28.0));
}

#[test]
fn shard_json_combinations_are_exact_big_integers() {
    // 2048·2047·2046·2045 / 24 = 256·2047·682·2045 = 730,862,190,080: below 2^53, a number.
    let (_, out, _) = bulkhead(&["shard", "--nodes", "2048", "--shard-size", "4", "--tenants", "10", "-o", "json"]);
    assert!(out.contains("\"combinations\": 730862190080,"), "{out}");
    // C(10000, 50), 136 digits (the same as Python's math.comb(10000, 50)): a string.
    let v = shard_json("10000", "50", "10000");
    assert_eq!(
        v["combinations"].as_str(),
        Some("2908278909389142271847230340700194141792775352175623328689755142765200327255273774449137255973857545988680883354070106655258790398204800")
    );
    assert!(v["shuffleSharded"]["fullyAffected"].as_f64().is_some_and(|x| x > 0.0 && x < 1e-130));
    // Either side of 2^53 (= 9,007,199,254,740,992) within the calculator's bounds (100,000 nodes):
    // C(100000, 3) is a number, C(100000, 4) a string (both as Python's math.comb gives them).
    assert_eq!(shard_json("100000", "3", "2")["combinations"].as_u64(), Some(166_661_666_700_000));
    assert_eq!(shard_json("100000", "4", "2")["combinations"].as_str(), Some("4166416671249975000"));
}

#[test]
fn shard_table_is_readable() {
    let (code, out, err) = bulkhead(&["shard", "--nodes", "8", "--shard-size", "2", "--tenants", "800"]);
    assert_eq!(code, 0, "{err}");
    let row = |name: &str| {
        out.lines().find(|l| l.starts_with(name)).map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>())
    };
    assert_eq!(row("shared "), Some(vec!["799", "0", "0"]), "{out}");
    assert_eq!(row("partitioned "), Some(vec!["199", "0", "600"]), "{out}");
    assert_eq!(row("shuffleSharded "), Some(vec!["28.54", "342.43", "428.04"]), "{out}");
    assert!(out.contains("C(8, 2) = 28 distinct shards"), "{out}");
    let (_, out, _) = bulkhead(&["shard", "--nodes", "100", "--shard-size", "5", "--tenants", "10000"]);
    assert!(out.contains("0.000133") && out.contains("75,287,520"), "{out}");
}

#[test]
fn shard_bad_input_exits_3_naming_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (&["--nodes", "8", "--shard-size", "9", "--tenants", "10"], "--shard-size"),
        (&["--nodes", "8", "--shard-size", "0", "--tenants", "10"], "--shard-size"),
        (&["--nodes", "8", "--shard-size", "2", "--tenants", "0"], "--tenants"),
        (&["--nodes", "0", "--shard-size", "0", "--tenants", "10"], "--nodes"),
        (&["--nodes", "eight", "--shard-size", "2", "--tenants", "10"], "--nodes"),
        (&["--nodes", "8", "--shard-size", "2.5", "--tenants", "10"], "--shard-size"),
        (&["--nodes", "8", "--shard-size", "2", "--tenants", "-1"], "--tenants"),
        (&["--nodes", "8", "--shard-size", "2"], "--tenants"),
        (&["--nodes", "8", "--shard-size", "2", "--tenants", "10", "-o", "xml"], "--output"),
    ];
    for (args, flag) in cases {
        let (code, out, err) = bulkhead(&[&["shard"], *args].concat());
        assert_eq!(code, 3, "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?} should name {flag}: {err}");
        assert!(out.is_empty(), "{out}");
    }
    // Help is not an error.
    let (code, out, _) = bulkhead(&["shard", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("floor(N / K) groups"), "{out}");
}

// ---- assignment ----

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

fn sorted(s: &[String]) -> Vec<String> {
    let mut s = s.to_vec();
    s.sort();
    s
}

/// Every tenant has K distinct listed nodes.
fn assert_well_formed(shards: &BTreeMap<String, Vec<String>>, tenants: &[String], nodes: &[String], k: usize) {
    assert_eq!(shards.len(), tenants.len());
    for (t, s) in shards {
        let mut d = sorted(s);
        d.dedup();
        assert_eq!(d.len(), k, "{t}: {s:?}");
        assert!(s.iter().all(|n| nodes.contains(n)), "{t}: {s:?}");
    }
}

#[test]
fn shard_assign_800_tenants_on_8_nodes_spreads_forced_duplicates() {
    let (tenants, nodes) = (names("tenant-", 800), names("node-", 8));
    let a = assign(&tenants, &nodes, 2, &BTreeMap::new()).expect("assign");
    assert_well_formed(&a.shards, &tenants, &nodes, 2);
    // 800 = 28·28 + 16: every one of the C(8,2) = 28 shards is used 28 or 29 times.
    let mut uses: HashMap<Vec<String>, usize> = HashMap::new();
    for s in a.shards.values() {
        *uses.entry(sorted(s)).or_default() += 1;
    }
    assert_eq!(uses.len(), 28);
    assert!(uses.values().all(|&u| u == 28 || u == 29), "{uses:?}");
    assert_eq!(uses.values().filter(|&&u| u == 29).count(), 16);
    let r = report(&a.shards, &nodes);
    // 1600 slots over 8 nodes: 200 each.
    assert_eq!((r.load_min, r.load_max), (200, 200), "{r:?}");
    assert_eq!(r.distinct_shards, 28);
    // Pairs of tenants on the same shard: 16·C(29,2) + 12·C(28,2) = 16·406 + 12·378.
    assert_eq!(r.identical_pairs, 16 * 406 + 12 * 378);
    assert_eq!(r.identical_examples.len(), 10);
    assert_eq!(r.largest_overlap, 2);
    // The worst tenant is on a shard of 29: 28 others share it, and the other
    // shards meeting it (12 of them) hold the partially affected.
    let w = r.worst.expect("worst");
    assert_eq!(w.fully_affected, 28);
    assert!((12 * 28..=12 * 29).contains(&w.partially_affected), "{w:?}");
}

#[test]
fn shard_assign_10000_tenants_on_100_nodes_has_no_identical_pair() {
    let (tenants, nodes) = (names("tenant-", 10_000), names("node-", 100));
    let a = assign(&tenants, &nodes, 5, &BTreeMap::new()).expect("assign");
    assert_well_formed(&a.shards, &tenants, &nodes, 5);
    let r = report(&a.shards, &nodes);
    assert_eq!((r.distinct_shards, r.identical_pairs), (10_000, 0), "{r:?}");
    assert!(r.identical_examples.is_empty());
    // 100,000 pair-uses over C(100,2) = 4,950 pairs force overlap 2; 100,000
    // triple-uses over C(100,3) = 161,700 triples do not force 3, but greedy
    // sampling gets there, and 4 (50,000 uses of 3.9 million quadruples) it avoids.
    assert!(r.largest_overlap <= 3, "{r:?}");
    // 50,000 slots on 100 nodes: 500 each, within a few.
    assert!(r.load_min >= 495 && r.load_max <= 505, "{r:?}");
    let w = r.worst.expect("worst");
    assert_eq!(w.fully_affected, 0);
    // About 5·500 others on its nodes, fewer for the ones met twice (the expectation is 2,304).
    assert!(w.partially_affected <= 5 * 505, "{w:?}");
}

#[test]
fn shard_assign_is_deterministic_whatever_the_input_order() {
    let (tenants, nodes) = (names("t", 300), names("n", 30));
    let a = assign(&tenants, &nodes, 3, &BTreeMap::new()).expect("assign");
    let mut rev_t = tenants.clone();
    rev_t.reverse();
    let mut rev_n = nodes.clone();
    rev_n.reverse();
    assert_eq!(assign(&rev_t, &rev_n, 3, &BTreeMap::new()).expect("assign"), a);
    assert_eq!(a.placed.len(), 300);
    // Given its own output as the previous assignment, nothing changes.
    let again = assign(&tenants, &nodes, 3, &a.shards).expect("assign");
    assert_eq!(again.shards, a.shards);
    assert!(again.placed.is_empty() && again.repaired.is_empty());
}

#[test]
fn shard_assign_adding_or_removing_a_tenant_moves_no_other() {
    let (tenants, nodes) = (names("t", 500), names("n", 40));
    let a = assign(&tenants, &nodes, 4, &BTreeMap::new()).expect("assign");

    let mut more = tenants.clone();
    more.push("newcomer".into());
    let b = assign(&more, &nodes, 4, &a.shards).expect("assign");
    assert_eq!(b.placed, ["newcomer"]);
    for t in &tenants {
        assert_eq!(b.shards[t], a.shards[t], "{t} moved");
    }
    // Unused shards remain, so the newcomer duplicates nobody.
    let new = sorted(&b.shards["newcomer"]);
    assert!(tenants.iter().all(|t| sorted(&a.shards[t]) != new));

    let fewer: Vec<String> = tenants.iter().filter(|t| *t != "t7").cloned().collect();
    let c = assign(&fewer, &nodes, 4, &a.shards).expect("assign");
    assert!(c.placed.is_empty() && c.repaired.is_empty());
    assert!(!c.shards.contains_key("t7"));
    for t in &fewer {
        assert_eq!(c.shards[t], a.shards[t], "{t} moved");
    }
}

#[test]
fn shard_assign_losing_a_node_replaces_it_only_where_it_was() {
    let (tenants, nodes) = (names("t", 1_000), names("n", 50));
    let a = assign(&tenants, &nodes, 5, &BTreeMap::new()).expect("assign");
    let lost = "n13";
    let left: Vec<String> = nodes.iter().filter(|n| *n != lost).cloned().collect();
    let b = assign(&tenants, &left, 5, &a.shards).expect("assign");
    assert_well_formed(&b.shards, &tenants, &left, 5);
    let held: Vec<String> =
        a.shards.iter().filter(|(_, s)| s.iter().any(|n| n == lost)).map(|(t, _)| t.clone()).collect();
    assert!(!held.is_empty());
    assert_eq!(b.repaired, held, "repaired are the holders of the lost node, by name");
    assert!(b.placed.is_empty());
    for t in &tenants {
        let (before, after) = (&a.shards[t], &b.shards[t]);
        let changed: Vec<usize> = (0..5).filter(|&i| before[i] != after[i]).collect();
        if held.contains(t) {
            // One position: the lost node's, now a node the shard did not have.
            assert_eq!(changed.len(), 1, "{t}: {before:?} → {after:?}");
            assert_eq!(before[changed[0]], lost);
        } else {
            assert!(changed.is_empty(), "{t} moved: {before:?} → {after:?}");
        }
    }
    // The replacements keep things spread: no identical shards (C(49,5) ≫ 1,000),
    // overlaps no worse than before, loads close to 1000·5/49 ≈ 102.
    let (ra, rb) = (report(&a.shards, &nodes), report(&b.shards, &left));
    assert_eq!(rb.identical_pairs, 0, "{rb:?}");
    assert!(rb.largest_overlap <= ra.largest_overlap.max(3), "{ra:?} {rb:?}");
    assert!(rb.load_max - rb.load_min <= 10, "{rb:?}");
}

#[test]
fn shard_assign_balances_node_load() {
    // T·K/N = 2,000·3/70 ≈ 85.7; the two-choices draw keeps every node near it.
    let (tenants, nodes) = (names("tenant-", 2_000), names("node-", 70));
    let a = assign(&tenants, &nodes, 3, &BTreeMap::new()).expect("assign");
    let r = report(&a.shards, &nodes);
    assert!(r.load_min >= 83 && r.load_max <= 88, "{r:?}");
    assert_eq!(r.identical_pairs, 0);
    // 2,000 tenants each cover 3 pairs of the C(70,2) = 2,415 pairs: overlap 2 is forced.
    assert_eq!(r.largest_overlap, 2);
}

/// `bulkhead shard` takes the shard sizes a Bulkhead may declare, and no more.
#[test]
fn the_calculator_bounds_shard_size_as_the_crd_does() {
    assert_eq!(bulkhead::shard::MAX_SHARD_SIZE, bulkhead::crd::MAX_SHARD_SIZE as usize);
}
