//! The admission core: exact counters for one pool, a Permit that gives back
//! exactly what it took, and atomic swaps of the limits on reload.
//!
//! One small mutex guards all counters, so "is there room?" and "take it" are
//! one step (no check-then-act race) and every invariant holds at every
//! instant a reader can observe. The critical section is a hash lookup and a
//! few integer operations, far cheaper than the proxying around it.

use std::{
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::{Duration, Instant},
};

use http::HeaderValue;
use prometheus_client::metrics::histogram::Histogram;
use rustc_hash::FxHashMap;

use tokio::sync::watch;

use crate::pool_config::{now_unix_ms, Hold, PoolConfig, PoolConfigError};

/// Where an admitted request's slot came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The class's own floor: never lent to another class.
    Floor,
    /// The shared surplus, borrowed up to the class's ceiling.
    Surplus,
}

impl Source {
    /// The value of the `pool` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Floor => "floor",
            Source::Surplus => "surplus",
        }
    }
}

/// Why a request was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The class holds as many slots as its ceiling allows.
    Ceiling,
    /// The class's floor is full and no shared slot is free.
    SurplusExhausted,
    /// No class could be named for the request and the policy is to reject.
    Unclassified,
}

impl Reason {
    /// Every reason, in the order metrics list them.
    pub const ALL: [Reason; 3] = [Reason::Ceiling, Reason::SurplusExhausted, Reason::Unclassified];

    /// The value of the `reason` metric label and of `x-bulkhead-reason`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::Ceiling => "ceiling",
            Reason::SurplusExhausted => "surplus-exhausted",
            Reason::Unclassified => "unclassified",
        }
    }
}

/// A refusal, with what a response needs to name the class.
#[derive(Clone, Debug)]
pub struct Rejection {
    /// Why the request was refused.
    pub reason: Reason,
    /// The class as a ready header value; None when unclassified.
    pub class: Option<HeaderValue>,
}

/// What to do with a request no class can be named for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unclassified {
    /// Refuse it (`x-bulkhead-reason: unclassified`).
    Reject,
    /// Count it against this class (which every config must then define).
    Class(String),
}

/// Why a config cannot be applied to a pool.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The config breaks a rule of the schema.
    #[error(transparent)]
    Invalid(#[from] PoolConfigError),
    /// A class name that is not a valid header value.
    #[allow(missing_docs)] // its fields are the numbers the message names
    #[error("classes[{index}].name: {name:?} cannot be sent in a response header")]
    NameNotHeaderSafe { index: usize, name: String },
    /// The class named for unclassified requests is not in the config.
    #[allow(missing_docs)] // its fields are the numbers the message names
    #[error("classes: no class {name:?}, which --unclassified names")]
    DefaultClassMissing { name: String },
}

/// Counters and limits of one class. Slots are never removed, so a Permit's
/// index stays valid across reloads; a class dropped by a reload is retired
/// (limits 0, not found by name) and its in-flight permits still end here.
#[derive(Debug)]
struct Class {
    name: Arc<str>,
    header: HeaderValue,
    active: bool,
    reserved: u32,
    ceiling: u32,
    critical: bool,
    /// pools.json's maxDurationMs: a request of this class is cut past it.
    max_duration: Option<Duration>,
    /// A drill's fault (pools.json's hold): admitted requests wait before they are forwarded.
    hold: Option<Hold>,
    /// Requests held now by a drill's fault, and since the pool was made.
    held: u32,
    held_total: u64,
    floor_in_use: u32,
    surplus_in_use: u32,
    /// Most in flight (floor + surplus) and most borrowed since the last
    /// scrape: a peak between two scrapes is not lost.
    high_water: u32,
    borrowed_high_water: u32,
    admitted: [u64; 2],
    rejected: [u64; 2],
    duration: Histogram,
}

impl Class {
    fn in_use(&self) -> u64 {
        u64::from(self.floor_in_use) + u64::from(self.surplus_in_use)
    }
}

#[derive(Debug)]
struct State {
    classes: Vec<Class>,
    /// Active classes by name; the lookup a request pays.
    by_name: FxHashMap<Box<[u8]>, u32>,
    /// Where unclassified requests go, if anywhere.
    default_class: Option<u32>,
    capacity: u32,
    surplus: u32,
    surplus_in_use: u32,
    unclassified_rejected: u64,
    generation: u64,
    config: Arc<PoolConfig>,
    /// `pool_config::content_hash` of the document `config` came from, when
    /// it came from one (the sidecar's file; not an in-process config).
    config_hash: Option<Arc<str>>,
    /// Whether every change must leave the invariants intact (tests only).
    #[cfg(test)]
    strict: bool,
}

/// One pool of capacity split into class floors and a shared surplus.
#[derive(Debug)]
pub struct Pool {
    state: Mutex<State>,
    unclassified: Unclassified,
    buckets: Vec<f64>,
    /// Bumped by every applied config, so held requests look again at their
    /// class's hold (a reload that lifts it releases them at once).
    reloaded: watch::Sender<u64>,
}

/// One admitted request's slot; dropping it gives back exactly that slot.
#[derive(Debug)]
pub struct Permit {
    pool: Arc<Pool>,
    class: u32,
    /// The decided class as a header value, for the upstream.
    header: HeaderValue,
    /// The class's maximum duration, if it has one.
    max_duration: Option<Duration>,
    /// How long a drill's fault holds the request before it is forwarded.
    hold: Option<Duration>,
    source: Source,
    start: Instant,
}

impl Permit {
    /// Whether the slot came from the class's floor or the shared surplus.
    pub fn source(&self) -> Source {
        self.source
    }

    /// The longest the request may take (the class's maxDurationMs).
    pub fn max_duration(&self) -> Option<Duration> {
        self.max_duration
    }

    /// The class this permit counts against, as a header value.
    pub fn class_header(&self) -> &HeaderValue {
        &self.header
    }

    /// How long a drill's fault holds this request, slot taken, before it is
    /// forwarded: the class's `hold.ms`, cut short by its `untilUnixMs`,
    /// read at admission. None without a hold or once it has ended.
    pub fn hold(&self) -> Option<Duration> {
        self.hold
    }

    /// What the forwarder needs to hold this request (see [`DrillHold`]).
    pub fn drill_hold(&self) -> Option<DrillHold> {
        self.hold.map(|duration| DrillHold { pool: Arc::clone(&self.pool), class: self.class, duration })
    }
}

/// A drill's hold on one admitted request, for whoever forwards it: how
/// long to wait, and the pool's count of held requests to join meanwhile.
#[derive(Clone, Debug)]
pub struct DrillHold {
    pool: Arc<Pool>,
    class: u32,
    duration: Duration,
}

impl PartialEq for DrillHold {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.pool, &other.pool) && self.class == other.class && self.duration == other.duration
    }
}

impl Eq for DrillHold {}

impl DrillHold {
    /// How long to hold, as read at admission.
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// Start holding: the request counts as held (`bulkhead_proxy_held`,
    /// `/readyz` `held=`) until the returned guard is dropped.
    pub fn begin(self) -> Held {
        let reloaded = self.pool.reloaded.subscribe();
        {
            let mut s = self.pool.lock();
            if let Some(c) = s.classes.get_mut(self.class as usize) {
                c.held += 1;
                c.held_total += 1;
            }
        }
        Held { pool: self.pool, class: self.class, reloaded }
    }
}

/// A request being held by a drill's fault; dropping it ends the count.
#[derive(Debug)]
pub struct Held {
    pool: Arc<Pool>,
    class: u32,
    reloaded: watch::Receiver<u64>,
}

impl Held {
    /// Resolves when a config is applied: then [`Held::remaining`] may have changed.
    pub async fn reloaded(&mut self) {
        if self.reloaded.changed().await.is_err() {
            // The pool is gone (it is not, while this holds an Arc of it): never again.
            std::future::pending::<()>().await;
        }
    }

    /// How much longer the class's hold in force now would hold a request
    /// arriving now; None when no hold is in force (lifted, or ended).
    pub fn remaining(&self) -> Option<Duration> {
        let s = self.pool.lock();
        let hold = s.classes.get(self.class as usize)?.hold.as_ref()?;
        hold.remaining_at(now_unix_ms())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut s = self.pool.lock();
        if let Some(c) = s.classes.get_mut(self.class as usize) {
            c.held = c.held.saturating_sub(1);
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.pool.release(self.class, self.source, self.start);
    }
}

/// Seconds; request durations span sub-millisecond answers to long streams.
pub const DURATION_BUCKETS: [f64; 14] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0];

impl Pool {
    /// A pool enforcing `config` (validated here), generation 1.
    pub fn new(config: PoolConfig, unclassified: Unclassified) -> Result<Arc<Pool>, ApplyError> {
        Self::new_hashed(config, unclassified, None)
    }

    /// [`Pool::new`] of a config read from a document whose
    /// `pool_config::content_hash` is `hash`.
    pub fn new_hashed(
        config: PoolConfig,
        unclassified: Unclassified,
        hash: Option<&str>,
    ) -> Result<Arc<Pool>, ApplyError> {
        let pool = Pool {
            state: Mutex::new(State {
                classes: Vec::new(),
                by_name: FxHashMap::default(),
                default_class: None,
                capacity: 0,
                surplus: 0,
                surplus_in_use: 0,
                unclassified_rejected: 0,
                generation: 0,
                config: Arc::new(config.clone()),
                config_hash: None,
                #[cfg(test)]
                strict: true,
            }),
            unclassified,
            buckets: DURATION_BUCKETS.to_vec(),
            reloaded: watch::Sender::new(0),
        };
        pool.apply_hashed(config, hash)?;
        Ok(Arc::new(pool))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock (no user code runs under it).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Swap in a new config atomically and return its generation. In-flight
    /// counts carry over by class name; lower limits bind new admissions only.
    pub fn apply(&self, config: PoolConfig) -> Result<u64, ApplyError> {
        self.apply_hashed(config, None)
    }

    /// [`Pool::apply`] of a config read from a document whose
    /// `pool_config::content_hash` is `hash`: the hash changes with the
    /// config, under one lock, so no reader sees one without the other.
    pub fn apply_hashed(&self, config: PoolConfig, hash: Option<&str>) -> Result<u64, ApplyError> {
        config.validate()?;
        let mut headers = Vec::with_capacity(config.classes.len());
        for (index, class) in config.classes.iter().enumerate() {
            let header = HeaderValue::from_str(&class.name)
                .map_err(|_| ApplyError::NameNotHeaderSafe { index, name: class.name.clone() })?;
            headers.push(header);
        }
        if let Unclassified::Class(name) = &self.unclassified {
            if !config.classes.iter().any(|c| &c.name == name) {
                return Err(ApplyError::DefaultClassMissing { name: name.clone() });
            }
        }
        let mut s = self.lock();
        for class in &mut s.classes {
            class.active = false;
            class.reserved = 0;
            class.ceiling = 0;
            class.hold = None;
        }
        s.by_name.clear();
        for (c, header) in config.classes.iter().zip(headers) {
            let index = match s.classes.iter().position(|k| *k.name == *c.name) {
                Some(i) => i,
                None => {
                    s.classes.push(Class {
                        name: Arc::from(c.name.as_str()),
                        header,
                        active: false,
                        reserved: 0,
                        ceiling: 0,
                        critical: false,
                        max_duration: None,
                        hold: None,
                        held: 0,
                        held_total: 0,
                        floor_in_use: 0,
                        surplus_in_use: 0,
                        high_water: 0,
                        borrowed_high_water: 0,
                        admitted: [0; 2],
                        rejected: [0; 2],
                        duration: Histogram::new(self.buckets.iter().copied()),
                    });
                    s.classes.len() - 1
                }
            };
            let class = &mut s.classes[index];
            class.active = true;
            class.reserved = c.reserved;
            class.ceiling = c.ceiling;
            class.critical = c.critical;
            class.max_duration = c.max_duration_ms.map(Duration::from_millis);
            class.hold.clone_from(&c.hold);
            // Fewer than 2^32 classes: the config came from a JSON document.
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            s.by_name.insert(c.name.as_bytes().into(), index);
        }
        s.default_class = match &self.unclassified {
            Unclassified::Reject => None,
            Unclassified::Class(name) => s.by_name.get(name.as_bytes()).copied(),
        };
        s.capacity = config.capacity;
        s.surplus = config.shared_surplus;
        s.generation += 1;
        s.config = Arc::new(config);
        s.config_hash = hash.map(Arc::from);
        #[cfg(test)]
        {
            s.strict = s.violation().is_none();
        }
        let generation = s.generation;
        drop(s);
        // Works with no receiver too: nobody is held now.
        self.reloaded.send_replace(generation);
        Ok(generation)
    }

    /// Admit a request of the named class (None: unclassified) or refuse it
    /// at once: the floor first, then the surplus up to the ceiling.
    pub fn admit(self: &Arc<Self>, class: Option<&[u8]>) -> Result<Permit, Rejection> {
        let mut guard = self.lock();
        let s = &mut *guard;
        let found = class.and_then(|name| s.by_name.get(name)).copied().or(s.default_class);
        let Some(index) = found else {
            s.unclassified_rejected += 1;
            return Err(Rejection { reason: Reason::Unclassified, class: None });
        };
        let c = &mut s.classes[index as usize];
        let source = if c.floor_in_use < c.reserved {
            c.floor_in_use += 1;
            Source::Floor
        } else if c.in_use() >= u64::from(c.ceiling) {
            c.rejected[0] += 1;
            return Err(Rejection { reason: Reason::Ceiling, class: Some(c.header.clone()) });
        } else if s.surplus_in_use >= s.surplus {
            c.rejected[1] += 1;
            return Err(Rejection { reason: Reason::SurplusExhausted, class: Some(c.header.clone()) });
        } else {
            c.surplus_in_use += 1;
            s.surplus_in_use += 1;
            c.borrowed_high_water = c.borrowed_high_water.max(c.surplus_in_use);
            Source::Surplus
        };
        c.high_water = c.high_water.max(c.floor_in_use + c.surplus_in_use);
        c.admitted[source as usize] += 1;
        let (header, max_duration) = (c.header.clone(), c.max_duration);
        // Without a drill, one Option check: the clock is read only while a class has a hold.
        let hold = c.hold.as_ref().and_then(|h| h.remaining_at(now_unix_ms()));
        #[cfg(test)]
        s.check();
        drop(guard);
        Ok(Permit { pool: Arc::clone(self), class: index, header, max_duration, hold, source, start: Instant::now() })
    }

    fn release(&self, class: u32, source: Source, start: Instant) {
        let took = start.elapsed().as_secs_f64();
        let mut guard = self.lock();
        let s = &mut *guard;
        let Some(c) = s.classes.get_mut(class as usize) else { return };
        match source {
            Source::Floor => c.floor_in_use = c.floor_in_use.saturating_sub(1),
            Source::Surplus => {
                c.surplus_in_use = c.surplus_in_use.saturating_sub(1);
                s.surplus_in_use = s.surplus_in_use.saturating_sub(1);
            }
        }
        c.duration.observe(took);
        #[cfg(test)]
        s.check();
    }

    /// The generation of the config in force (1 at start, +1 per applied reload).
    pub fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// The generation in force and the hash of the document it came from.
    pub fn in_force(&self) -> (u64, Option<Arc<str>>) {
        let s = self.lock();
        (s.generation, s.config_hash.clone())
    }

    /// Requests held by a drill's fault now, every class together.
    pub fn held(&self) -> u64 {
        self.lock().classes.iter().map(|c| u64::from(c.held)).sum()
    }

    /// The config in force.
    pub fn config(&self) -> Arc<PoolConfig> {
        Arc::clone(&self.lock().config)
    }

    /// A consistent copy of every counter, for metrics and tests.
    pub fn snapshot(&self) -> PoolSnapshot {
        Self::copy(&self.lock())
    }

    /// A snapshot for a scrape: the high-water marks then start again from
    /// what is in flight now, so each scrape sees the peak since the one
    /// before. With several scrapers each sees only the peak since the last
    /// scrape by any of them, so each misses the peaks the others took and
    /// reads them low: for the usage advice, let one Prometheus scrape the
    /// sidecars.
    pub fn scrape(&self) -> PoolSnapshot {
        let mut s = self.lock();
        let snapshot = Self::copy(&s);
        for c in &mut s.classes {
            c.high_water = c.floor_in_use + c.surplus_in_use;
            c.borrowed_high_water = c.surplus_in_use;
        }
        snapshot
    }

    fn copy(s: &State) -> PoolSnapshot {
        PoolSnapshot {
            bulkhead: s.config.bulkhead.clone(),
            divided_by: s.config.divided_by,
            generation: s.generation,
            config_hash: s.config_hash.clone(),
            capacity: s.capacity,
            surplus: s.surplus,
            surplus_in_use: s.surplus_in_use,
            unclassified_rejected: s.unclassified_rejected,
            classes: s
                .classes
                .iter()
                .map(|c| ClassSnapshot {
                    name: Arc::clone(&c.name),
                    active: c.active,
                    critical: c.critical,
                    reserved: c.reserved,
                    ceiling: c.ceiling,
                    floor_in_use: c.floor_in_use,
                    surplus_in_use: c.surplus_in_use,
                    high_water: c.high_water,
                    borrowed_high_water: c.borrowed_high_water,
                    admitted_floor: c.admitted[0],
                    admitted_surplus: c.admitted[1],
                    rejected_ceiling: c.rejected[0],
                    rejected_surplus_exhausted: c.rejected[1],
                    held: c.held,
                    held_total: c.held_total,
                    duration: c.duration.clone(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
impl State {
    /// Assert the invariants, recomputed from scratch, after every change;
    /// except after a reload lowered a limit under in-flight work (which
    /// carries over by design), until the pool is back within its limits.
    fn check(&mut self) {
        if std::thread::panicking() {
            // A permit dropped while a failed test unwinds: report the first failure, not an abort.
            return;
        }
        match (self.violation(), self.strict) {
            (Some(v), true) => panic!("{v}"),
            (None, false) => self.strict = true,
            _ => {}
        }
    }

    fn violation(&self) -> Option<String> {
        let mut in_use = 0u64;
        let mut borrowed = 0u64;
        for c in &self.classes {
            if c.floor_in_use > c.reserved {
                return Some(format!("{}: floor {} > reserved {}", c.name, c.floor_in_use, c.reserved));
            }
            if c.in_use() > u64::from(c.ceiling) {
                return Some(format!("{}: {} in use > ceiling {}", c.name, c.in_use(), c.ceiling));
            }
            in_use += c.in_use();
            borrowed += u64::from(c.surplus_in_use);
        }
        if borrowed != u64::from(self.surplus_in_use) {
            return Some(format!("surplus total drifted: {borrowed} != {}", self.surplus_in_use));
        }
        if borrowed > u64::from(self.surplus) {
            return Some(format!("borrowed {borrowed} > surplus {}", self.surplus));
        }
        (in_use > u64::from(self.capacity)).then(|| format!("in use {in_use} > capacity {}", self.capacity))
    }
}

/// Counters of a pool at one instant.
#[derive(Clone, Debug)]
pub struct PoolSnapshot {
    /// The Bulkhead named in pools.json (every series carries it).
    pub bulkhead: String,
    /// pools.json's dividedBy: the replicas fleet-wide numbers were divided by.
    pub divided_by: u64,
    /// Configs applied since the pool was made (1 = the first).
    pub generation: u64,
    /// Hash of the document the config in force came from, if any.
    pub config_hash: Option<Arc<str>>,
    /// Units this replica may hand out in all.
    pub capacity: u32,
    /// Units any class may borrow beyond its floor.
    pub surplus: u32,
    /// Surplus units borrowed now.
    pub surplus_in_use: u32,
    /// Requests refused because no class could be named.
    pub unclassified_rejected: u64,
    /// Every class, retired ones included.
    pub classes: Vec<ClassSnapshot>,
}

/// Counters and limits of one class at one instant.
#[derive(Clone, Debug)]
pub struct ClassSnapshot {
    /// The class's name, as in the config.
    pub name: Arc<str>,
    /// False once a reload removed the class (its in-flight permits still count here).
    pub active: bool,
    /// Whether the config marks the class critical.
    pub critical: bool,
    /// Its floor on this replica.
    pub reserved: u32,
    /// The most it may hold on this replica, floor and borrowed together.
    pub ceiling: u32,
    /// Floor slots held now.
    pub floor_in_use: u32,
    /// Surplus slots it holds now.
    pub surplus_in_use: u32,
    /// Most in flight since the last scrape (see `Pool::scrape`).
    pub high_water: u32,
    /// Most borrowed from the surplus since the last scrape.
    pub borrowed_high_water: u32,
    /// Requests admitted from its floor, since the pool was made.
    pub admitted_floor: u64,
    /// Requests admitted from the surplus.
    pub admitted_surplus: u64,
    /// Requests refused at its ceiling.
    pub rejected_ceiling: u64,
    /// Requests refused with its floor full and no surplus left.
    pub rejected_surplus_exhausted: u64,
    /// Requests held now by a drill's fault (admitted, not yet forwarded).
    pub held: u32,
    /// Requests a drill's fault has held since the pool was made.
    pub held_total: u64,
    /// Time from admission until the slot was given back, in seconds.
    pub duration: Histogram,
}

impl PoolSnapshot {
    /// The class of that name, if the pool has it.
    pub fn class(&self, name: &str) -> Option<&ClassSnapshot> {
        self.classes.iter().find(|c| &*c.name == name)
    }
}

#[cfg(test)]
pub(crate) mod tests;
