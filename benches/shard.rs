//! Shuffle-sharding benchmark. `cargo bench --bench shard` prints the time to
//! assign 10,000 and 100,000 tenants to shards of 5 of 1,000 nodes (single
//! thread; goal for 10,000: under 100 ms), to repair after a lost node, and to
//! compute the report; under `cargo test` a small smoke pass checks the result.
//!
//! Times are the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), so that other
//! work on a shared machine does not inflate them; wall time is printed too.
//! BENCH_TENANTS=10000 times one size (for profiling).

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use bulkhead::shard::{assign, report, Assignment, ShardReport};

const NODES: usize = 1_000;
const K: usize = 5;

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i:06}")).collect()
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// CPU time of this thread.
fn cpu_now() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Median CPU and wall time of `runs` calls of `f`, and its last result.
fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, Duration, T) {
    let (mut cpu, mut wall) = (Vec::new(), Vec::new());
    let mut last = None;
    for _ in 0..runs {
        let (c, w) = (cpu_now(), Instant::now());
        let out = f();
        cpu.push(cpu_now() - c);
        wall.push(w.elapsed());
        last = Some(out);
    }
    (median(cpu), median(wall), last.expect("runs > 0"))
}

fn fresh(tenants: &[String], nodes: &[String]) -> Assignment {
    assign(tenants, nodes, K, &BTreeMap::new()).expect("assign")
}

fn describe(r: &ShardReport) -> String {
    format!(
        "distinct {}, identical pairs {}, largest overlap {}, load {}..{} (mean {:.1}), worst tenant: {} fully + {} partially",
        r.distinct_shards,
        r.identical_pairs,
        r.largest_overlap,
        r.load_min,
        r.load_max,
        r.load_mean,
        r.worst.as_ref().map_or(0, |w| w.fully_affected),
        r.worst.as_ref().map_or(0, |w| w.partially_affected),
    )
}

fn main() {
    let nodes = names("node-", NODES);
    if !std::env::args().any(|a| a == "--bench") {
        // Smoke pass under `cargo test`: 2,000 tenants, spread as promised.
        let tenants = names("tenant-", 2_000);
        let a = fresh(&tenants, &nodes);
        let r = report(&a.shards, &nodes);
        assert_eq!((r.tenants, r.distinct_shards, r.identical_pairs), (2_000, 2_000, 0), "{r:?}");
        assert!(r.largest_overlap <= 2, "{r:?}");
        assert!(r.load_min >= 8 && r.load_max <= 12, "10 per node expected: {r:?}");
        assert_eq!(fresh(&tenants, &nodes), a, "deterministic");
        println!("shard bench smoke: 1 passed, 0 failed");
        return;
    }
    let sizes: Vec<(usize, usize)> = match std::env::var("BENCH_TENANTS").ok().and_then(|n| n.parse().ok()) {
        Some(n) => vec![(n, 5)],
        None => vec![(10_000, 11), (100_000, 3)],
    };
    println!("shuffle-shard assignment, shards of {K} of {NODES} nodes, single thread, median CPU time (wall):");
    for (count, runs) in sizes {
        let tenants = names("tenant-", count);
        let (c_assign, w_assign, a) = time(runs, || fresh(&tenants, &nodes));
        let (c_report, w_report, r) = time(runs, || report(&a.shards, &nodes));
        // One node lost: only the shards that held it are repaired.
        let left: Vec<String> = nodes.iter().skip(1).cloned().collect();
        let (c_repair, w_repair, b) = time(runs, || assign(&tenants, &left, K, &a.shards).expect("assign"));
        println!("  {count:>7} tenants, {runs} runs:");
        println!("    assign          {:>8.1} ms ({:.1})", ms(c_assign), ms(w_assign));
        println!("    report          {:>8.1} ms ({:.1})", ms(c_report), ms(w_report));
        println!(
            "    lose one node   {:>8.1} ms ({:.1}), {} shards repaired",
            ms(c_repair),
            ms(w_repair),
            b.repaired.len()
        );
        println!("    {}", describe(&r));
    }
}
