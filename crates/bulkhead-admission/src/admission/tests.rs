use std::sync::atomic::{AtomicU32, Ordering};

use super::*;
use crate::pool_config::{Hold, PoolClass, Scope};

/// The README's worked pool: 200 in all, floors 40/30/10/5, 115 shared, so
/// ceilings 155/145/125/120.
pub(crate) fn example() -> PoolConfig {
    let class = |name: &str, reserved: u32, critical: bool| PoolClass {
        name: name.into(),
        reserved,
        ceiling: reserved + 115,
        critical,
        max_duration_ms: None,
        hold: None,
    };
    PoolConfig {
        version: crate::pool_config::POOL_CONFIG_VERSION,
        bulkhead: "example".into(),
        resource: "connections".into(),
        scope: Scope::Instance,
        divided_by: 1,
        capacity: 200,
        shared_surplus: 115,
        on_ceiling: crate::pool_config::OnCeiling::Reject,
        classes: vec![
            class("checkout", 40, false),
            class("search", 30, false),
            class("reports", 10, false),
            class("control-plane", 5, true),
        ],
    }
}

fn take(pool: &Arc<Pool>, class: &str, n: usize) -> Vec<Permit> {
    (0..n).map(|i| pool.admit(Some(class.as_bytes())).unwrap_or_else(|r| panic!("{class} #{i}: {r:?}"))).collect()
}

fn refused(pool: &Arc<Pool>, class: &str) -> Reason {
    match pool.admit(Some(class.as_bytes())) {
        Ok(p) => panic!("{class} admitted from {:?}", p.source()),
        Err(r) => r.reason,
    }
}

#[test]
fn the_worked_numbers_floor_first_then_surplus_up_to_the_ceiling() {
    let pool = Pool::new(example(), Unclassified::Reject).expect("valid");
    let checkout = take(&pool, "checkout", 155);
    assert_eq!(checkout.iter().filter(|p| p.source() == Source::Floor).count(), 40);
    assert!(checkout[..40].iter().all(|p| p.source() == Source::Floor), "the floor is used first");
    assert_eq!(refused(&pool, "checkout"), Reason::Ceiling);
    // The surplus is gone, but every other floor is intact.
    let search = take(&pool, "search", 30);
    assert!(search.iter().all(|p| p.source() == Source::Floor));
    assert_eq!(refused(&pool, "search"), Reason::SurplusExhausted);
    let _reports = take(&pool, "reports", 10);
    let _control = take(&pool, "control-plane", 5);
    assert_eq!(refused(&pool, "control-plane"), Reason::SurplusExhausted);
    let s = pool.snapshot();
    let total: u64 = s.classes.iter().map(|c| c.in_use() as u64).sum();
    assert_eq!(total, 200, "exactly the capacity");
    assert_eq!(s.class("checkout").map(|c| c.rejected_ceiling), Some(1));
    assert_eq!(s.class("search").map(|c| c.rejected_surplus_exhausted), Some(1));

    // Dropping a borrowed slot lends it to whoever asks next, exactly one.
    let mut checkout = checkout;
    let borrowed = checkout.pop().expect("a permit");
    assert_eq!(borrowed.source(), Source::Surplus);
    drop(borrowed);
    let extra = pool.admit(Some(b"search")).expect("the freed slot");
    assert_eq!(extra.source(), Source::Surplus);
    assert_eq!(pool.snapshot().surplus_in_use, 115);
    assert_eq!(refused(&pool, "reports"), Reason::SurplusExhausted);
}

impl ClassSnapshot {
    fn in_use(&self) -> u32 {
        self.floor_in_use + self.surplus_in_use
    }
}

#[test]
fn the_critical_class_keeps_its_floor_when_every_other_class_is_saturated() {
    let pool = Pool::new(example(), Unclassified::Reject).expect("valid");
    // Every other class takes all it can, in turn, until nothing more fits.
    let mut held = Vec::new();
    for class in ["reports", "search", "checkout"] {
        while let Ok(p) = pool.admit(Some(class.as_bytes())) {
            held.push(p);
        }
    }
    assert_eq!(held.len(), 195);
    let control = take(&pool, "control-plane", 5);
    assert!(control.iter().all(|p| p.source() == Source::Floor));
    assert_eq!(refused(&pool, "control-plane"), Reason::SurplusExhausted);
}

#[test]
fn a_ceiling_below_floor_plus_surplus_binds_before_the_surplus_runs_out() {
    let mut config = example();
    config.classes[2].ceiling = 12;
    let pool = Pool::new(config, Unclassified::Reject).expect("valid");
    let reports = take(&pool, "reports", 12);
    assert_eq!(reports.iter().filter(|p| p.source() == Source::Surplus).count(), 2);
    assert_eq!(refused(&pool, "reports"), Reason::Ceiling);
}

#[test]
fn unclassified_requests_follow_the_policy() {
    let pool = Pool::new(example(), Unclassified::Reject).expect("valid");
    assert_eq!(pool.admit(None).map(|_| ()).unwrap_err().reason, Reason::Unclassified);
    // A name that is not a class is unclassified too.
    let r = pool.admit(Some(b"nope")).map(|_| ()).unwrap_err();
    assert_eq!((r.reason, r.class), (Reason::Unclassified, None));
    assert_eq!(pool.snapshot().unclassified_rejected, 2);

    let pool = Pool::new(example(), Unclassified::Class("reports".into())).expect("valid");
    let held: Vec<_> = (0..125).map(|_| pool.admit(Some(b"nope")).expect("counted as reports")).collect();
    let r = pool.admit(None).map(|_| ()).unwrap_err();
    assert_eq!(r.reason, Reason::Ceiling);
    assert_eq!(r.class, Some(HeaderValue::from_static("reports")));
    assert_eq!(pool.snapshot().class("reports").map(|c| c.in_use()), Some(125));
    drop(held);
}

#[test]
fn a_config_the_pool_cannot_enforce_is_refused_and_the_old_one_stays() {
    let pool = Pool::new(example(), Unclassified::Class("reports".into())).expect("valid");
    let mut bad = example();
    bad.capacity = 10;
    assert!(matches!(pool.apply(bad), Err(ApplyError::Invalid(PoolConfigError::OverCapacity { .. }))));
    let mut no_default = example();
    no_default.classes.retain(|c| c.name != "reports");
    no_default.capacity = 190;
    assert!(matches!(pool.apply(no_default), Err(ApplyError::DefaultClassMissing { .. })));
    let mut bad_name = example();
    bad_name.classes[0].name = "check\nout".into();
    assert!(pool.apply(bad_name).unwrap_err().to_string().starts_with("classes[0].name:"));
    assert_eq!(pool.generation(), 1);
    assert_eq!(take(&pool, "checkout", 155).len(), 155);
}

#[test]
fn a_reload_carries_in_flight_counts_and_binds_new_admissions_only() {
    let pool = Pool::new(example(), Unclassified::Reject).expect("valid");
    let mut checkout = take(&pool, "checkout", 100);
    let search = take(&pool, "search", 20);

    // Lower checkout to 10 + 5: its 100 in flight stay valid, nothing new fits.
    let mut lower = example();
    lower.classes[0].reserved = 10;
    lower.classes[0].ceiling = 15;
    assert_eq!(pool.apply(lower).ok(), Some(2));
    assert_eq!(refused(&pool, "checkout"), Reason::Ceiling);
    let s = pool.snapshot();
    assert_eq!((s.class("checkout").map(|c| c.in_use()), s.generation), (Some(100), 2));
    // Until it drains below the new ceiling, then it admits again, floor first.
    checkout.truncate(14);
    let next = pool.admit(Some(b"checkout")).expect("room under the new ceiling");
    assert_eq!(next.source(), Source::Surplus, "the 10 floors are taken by carried-over permits");
    checkout.push(next);
    assert_eq!(refused(&pool, "checkout"), Reason::Ceiling);

    // Remove search: its permits stay valid and give back their slots later.
    let mut removed = example();
    removed.classes.retain(|c| c.name != "search");
    assert!(pool.apply(removed).is_ok());
    assert_eq!(refused(&pool, "search"), Reason::Unclassified);
    let s = pool.snapshot();
    let gone = s.class("search").expect("still counted");
    assert_eq!((gone.active, gone.floor_in_use), (false, 20));
    drop(search);
    assert_eq!(pool.snapshot().class("search").map(|c| c.in_use()), Some(0));
    drop(checkout);
    let s = pool.snapshot();
    assert_eq!((s.surplus_in_use, s.classes.iter().map(|c| c.in_use()).sum::<u32>()), (0, 0));
}

/// A tiny deterministic generator: the stress tests need variety, not quality.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// What the test itself believes is held: each counter is incremented after a
/// permit is granted and decremented before it is dropped, so it never exceeds
/// the pool's real count of the same permits; if one exceeds a limit, the pool
/// did. Each check reads one counter (the value its own increment returned):
/// a sum of counters read one after another would not be a single instant.
#[derive(Default)]
struct Tally {
    floor: [AtomicU32; 4],
    class: [AtomicU32; 4],
    borrowed: AtomicU32,
    total: AtomicU32,
    max_total: AtomicU32,
}

const NAMES: [&str; 4] = ["checkout", "search", "reports", "control-plane"];

impl Tally {
    fn add(&self, class: usize, source: Source, config: &PoolConfig) {
        let c = &config.classes[class];
        if source == Source::Floor {
            let floor = self.floor[class].fetch_add(1, Ordering::SeqCst) + 1;
            assert!(floor <= c.reserved, "{}: floor {floor} > {}", c.name, c.reserved);
        } else {
            let borrowed = self.borrowed.fetch_add(1, Ordering::SeqCst) + 1;
            assert!(borrowed <= config.shared_surplus, "borrowed {borrowed} > {}", config.shared_surplus);
        }
        let mine = self.class[class].fetch_add(1, Ordering::SeqCst) + 1;
        assert!(mine <= c.ceiling, "{}: {mine} > ceiling {}", c.name, c.ceiling);
        let total = self.total.fetch_add(1, Ordering::SeqCst) + 1;
        assert!(total <= config.capacity, "{total} > capacity {}", config.capacity);
        self.max_total.fetch_max(total, Ordering::SeqCst);
    }

    fn remove(&self, class: usize, source: Source) {
        self.total.fetch_sub(1, Ordering::SeqCst);
        self.class[class].fetch_sub(1, Ordering::SeqCst);
        match source {
            Source::Floor => &self.floor[class],
            Source::Surplus => &self.borrowed,
        }
        .fetch_sub(1, Ordering::SeqCst);
    }
}

#[test]
fn threads_holding_random_numbers_of_permits_never_exceed_any_limit() {
    let config = example();
    let pool = Pool::new(config.clone(), Unclassified::Reject).expect("valid");
    let tally = Arc::new(Tally::default());
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let (pool, tally, config) = (Arc::clone(&pool), Arc::clone(&tally), config.clone());
            std::thread::spawn(move || {
                let mut rng = XorShift(0x9E37_79B9_7F4A_7C15 ^ ((t + 1) * 0x1234_5678));
                let mut held: Vec<(usize, Permit)> = Vec::new();
                let (mut admitted, mut refused) = (0u32, 0u32);
                for _ in 0..20_000 {
                    // Grow to a random depth, then shed a random number.
                    if held.len() < 60 && !rng.next().is_multiple_of(3) {
                        let class = (rng.next() % 4) as usize;
                        match pool.admit(Some(NAMES[class].as_bytes())) {
                            Ok(p) => {
                                tally.add(class, p.source(), &config);
                                held.push((class, p));
                                admitted += 1;
                            }
                            Err(_) => refused += 1,
                        }
                    } else if !held.is_empty() {
                        let i = (rng.next() as usize) % held.len();
                        let (class, p) = held.swap_remove(i);
                        tally.remove(class, p.source());
                        drop(p);
                    }
                    if rng.next().is_multiple_of(64) {
                        std::thread::yield_now();
                    }
                }
                for (class, p) in held.drain(..) {
                    tally.remove(class, p.source());
                }
                (admitted, refused)
            })
        })
        .collect();
    let (mut admitted, mut refused) = (0, 0);
    for t in threads {
        let (a, r) = t.join().expect("no invariant broke");
        admitted += a;
        refused += r;
    }
    assert!(admitted > 10_000 && refused > 1_000, "saturated: {admitted} admitted, {refused} refused");
    assert!(tally.max_total.load(Ordering::SeqCst) > 150, "the pool was pushed near capacity");
    let s = pool.snapshot();
    assert_eq!(s.surplus_in_use, 0);
    assert!(s.classes.iter().all(|c| c.in_use() == 0), "every permit gave back its slot");
    let counted: u64 = s.classes.iter().map(|c| c.admitted_floor + c.admitted_surplus).sum();
    assert_eq!(counted, u64::from(admitted));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_with_random_hold_times_never_exceed_any_limit() {
    let config = example();
    let pool = Pool::new(config.clone(), Unclassified::Reject).expect("valid");
    let tally = Arc::new(Tally::default());
    let tasks: Vec<_> = (0..400u64)
        .map(|t| {
            let (pool, tally, config) = (Arc::clone(&pool), Arc::clone(&tally), config.clone());
            tokio::spawn(async move {
                let mut rng = XorShift(0xD1B5_4A32_D192_ED03 ^ ((t + 1) * 0x9E37_79B9));
                let mut admitted = 0u32;
                for _ in 0..30 {
                    let class = (rng.next() % 4) as usize;
                    if let Ok(p) = pool.admit(Some(NAMES[class].as_bytes())) {
                        tally.add(class, p.source(), &config);
                        admitted += 1;
                        tokio::time::sleep(std::time::Duration::from_micros(rng.next() % 3000)).await;
                        tally.remove(class, p.source());
                    } else {
                        tokio::task::yield_now().await;
                    }
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        admitted += tokio::time::timeout(std::time::Duration::from_secs(30), t)
            .await
            .expect("bounded")
            .expect("no invariant broke");
    }
    let s = pool.snapshot();
    let refused: u64 = s.classes.iter().map(|c| c.rejected_ceiling + c.rejected_surplus_exhausted).sum();
    assert!(admitted > 2_000 && refused > 100, "saturated: {admitted} admitted, {refused} refused");
    assert!(s.classes.iter().all(|c| c.in_use() == 0));
}

fn with_hold(ms: u64, until_unix_ms: u64) -> PoolConfig {
    let mut config = example();
    config.classes[2].hold = Some(Hold { drill: "drill-1".into(), ms, until_unix_ms });
    config
}

#[test]
fn the_permit_reports_a_hold_only_while_it_is_in_force() {
    let now = now_unix_ms();
    // No hold: nothing to report, and nothing to hold with.
    let pool = Pool::new(example(), Unclassified::Reject).expect("valid");
    let plain = pool.admit(Some(b"reports")).expect("room");
    assert_eq!((plain.hold(), plain.drill_hold()), (None, None));

    // In force: ms, on that class only.
    let pool = Pool::new(with_hold(1_500, now + 60_000), Unclassified::Reject).expect("valid");
    let held = pool.admit(Some(b"reports")).expect("room");
    assert_eq!(held.hold(), Some(Duration::from_millis(1_500)));
    assert_eq!(held.drill_hold().map(|h| h.duration()), Some(Duration::from_millis(1_500)));
    assert_eq!(pool.admit(Some(b"search")).expect("room").hold(), None, "only the drilled class");

    // Near its end: cut short by untilUnixMs (it is read at admission; allow for the clock moving).
    let pool = Pool::new(with_hold(600_000, now + 2_000), Unclassified::Reject).expect("valid");
    let hold = pool.admit(Some(b"reports")).expect("room").hold().expect("in force");
    assert!(hold <= Duration::from_millis(2_000) && hold > Duration::from_millis(1_000), "{hold:?}");

    // Past its end (the operator stopped before lifting it): nothing is held.
    let pool = Pool::new(with_hold(1_500, now.saturating_sub(1)), Unclassified::Reject).expect("valid");
    assert_eq!(pool.admit(Some(b"reports")).expect("room").hold(), None);

    // A reload that lifts it: new permits are not held.
    let pool = Pool::new(with_hold(1_500, now + 60_000), Unclassified::Reject).expect("valid");
    pool.apply(example()).expect("valid");
    assert_eq!(pool.admit(Some(b"reports")).expect("room").hold(), None);
}

#[tokio::test]
async fn a_held_request_is_counted_while_held_and_sees_a_reload_lift_the_hold() {
    let pool = Pool::new(with_hold(30_000, now_unix_ms() + 60_000), Unclassified::Reject).expect("valid");
    let permits = take(&pool, "reports", 3);
    let mut held: Vec<Held> = permits.iter().map(|p| p.drill_hold().expect("held").begin()).collect();
    let class = |pool: &Pool| pool.snapshot().class("reports").map(|c| (c.held, c.held_total));
    assert_eq!((pool.held(), class(&pool)), (3, Some((3, 3))));
    assert!(held[0].remaining().is_some_and(|r| r <= Duration::from_secs(30)));
    drop(held.pop());
    assert_eq!((pool.held(), class(&pool)), (2, Some((2, 3))), "the gauge falls, the counter stays");

    // A reload that keeps the hold wakes the held requests; they find it still in force.
    pool.apply(with_hold(30_000, now_unix_ms() + 60_000)).expect("valid");
    tokio::time::timeout(Duration::from_secs(1), held[0].reloaded()).await.expect("woken");
    assert!(held[0].remaining().is_some());
    // One that lifts it: woken, and nothing remains.
    pool.apply(example()).expect("valid");
    tokio::time::timeout(Duration::from_secs(1), held[1].reloaded()).await.expect("woken");
    assert_eq!(held[1].remaining(), None);
    drop(held);
    assert_eq!(pool.held(), 0);
    drop(permits);
}
