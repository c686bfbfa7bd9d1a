//! Reading `pools.json` from a mounted ConfigMap directory, and following it.
//!
//! The kubelet updates a ConfigMap volume by writing a new timestamped
//! directory and atomically renaming a `..data_tmp` symlink onto `..data`;
//! `pools.json` is a symlink through `..data`. A watch on the file itself
//! dies with the first update, so the proxy re-reads the path (which always
//! resolves through the current `..data`) every poll interval and applies
//! the document when its bytes change. A read costs a few microseconds; an
//! interval of 100 ms keeps reload latency well under a second.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use bulkhead_admission::pool_config::{content_hash, now_unix_ms, Hold, PoolConfig, POOL_CONFIG_KEY};

use bulkhead_admission::{
    admission::{ApplyError, Pool},
    metrics::ProxyMetrics,
};

/// Why `pools.json` could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {field}: {message}")]
    Parse { path: PathBuf, field: String, message: String },
    #[error("{path}: {source}")]
    Invalid { path: PathBuf, source: ApplyError },
}

pub fn config_path(dir: &Path) -> PathBuf {
    dir.join(POOL_CONFIG_KEY)
}

/// Decode a document, naming the field at fault (`classes[1].reserved: ...`).
pub fn parse(path: &Path, bytes: &[u8]) -> Result<PoolConfig, LoadError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        LoadError::Parse { path: path.to_owned(), field, message: e.into_inner().to_string() }
    })
}

/// The largest document read: a ConfigMap holds at most 1 MiB, so anything
/// bigger is not the operator's, and reading it whole would cost its size in memory.
pub const MAX_DOCUMENT: u64 = 1 << 20;

/// Read a regular file of at most [`MAX_DOCUMENT`] bytes. A FIFO or device
/// in the config directory would block a read for ever, or never end. The
/// file is opened without blocking and its type checked on the open file, so
/// a FIFO swapped in after a check cannot block the open or the read.
pub fn read_document(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::{
        io::{Error, ErrorKind, Read},
        os::unix::fs::OpenOptionsExt,
    };
    let nonblocking = i32::try_from(rustix::fs::OFlags::NONBLOCK.bits()).unwrap_or(0);
    let file = std::fs::OpenOptions::new().read(true).custom_flags(nonblocking).open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(Error::new(ErrorKind::InvalidInput, "not a regular file"));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len().min(MAX_DOCUMENT)).unwrap_or(0));
    file.take(MAX_DOCUMENT + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_DOCUMENT {
        return Err(Error::new(ErrorKind::InvalidData, format!("larger than {MAX_DOCUMENT} bytes")));
    }
    Ok(bytes)
}

/// [`read_document`] on the blocking pool, so a slow or odd file never stalls request handling.
async fn read_off_runtime(path: &Path) -> std::io::Result<Vec<u8>> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || read_document(&path)).await.map_err(std::io::Error::other)?
}

/// A document read and decoded, with the bytes it came from.
pub struct Loaded {
    pub config: PoolConfig,
    pub bytes: Vec<u8>,
}

impl Loaded {
    /// The hash the operator names this document by (`pool_config::content_hash`).
    pub fn hash(&self) -> String {
        content_hash(&self.bytes)
    }
}

/// Read, decode and validate the document in `dir`.
pub fn load(dir: &Path) -> Result<Loaded, LoadError> {
    let path = config_path(dir);
    let bytes = read_document(&path).map_err(|source| LoadError::Read { path: path.clone(), source })?;
    let config = parse(&path, &bytes)?;
    config.validate().map_err(|e| LoadError::Invalid { path, source: e.into() })?;
    Ok(Loaded { config, bytes })
}

/// What the last poll found, so each change is acted on (and counted) once.
#[derive(PartialEq, Eq)]
enum Seen {
    Bytes(Vec<u8>),
    Unreadable,
}

/// Follow `dir` until `stop` fires, applying each changed document that is
/// valid and keeping the last good config on any other. `applied` is the
/// document applied at start: a change from it is a reload (reading it
/// again here could miss a change made between the two reads).
pub async fn follow(
    dir: PathBuf,
    applied: Vec<u8>,
    pool: Arc<Pool>,
    metrics: Arc<ProxyMetrics>,
    interval: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let path = config_path(&dir);
    // Named once when the config read at start has a drill's fault in it.
    let mut holds = Holds::default();
    holds.applied(&pool.config(), now_unix_ms());
    // Reads go to the blocking pool: a FIFO or a huge file must not stall a runtime thread.
    let mut seen = Seen::Bytes(applied);
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        holds.tick(now_unix_ms());
        let now = match read_off_runtime(&path).await {
            Ok(bytes) => Seen::Bytes(bytes),
            Err(e) => {
                if seen != Seen::Unreadable {
                    tracing::warn!(path = %path.display(), error = %e, "pool config unreadable; keeping the last good one");
                    metrics.reload("unreadable");
                }
                Seen::Unreadable
            }
        };
        if now == seen {
            continue;
        }
        if let Seen::Bytes(bytes) = &now {
            if apply(&path, bytes, &pool, &metrics) {
                holds.applied(&pool.config(), now_unix_ms());
            }
        }
        seen = now;
    }
}

/// Whether the document was applied.
fn apply(path: &Path, bytes: &[u8], pool: &Pool, metrics: &ProxyMetrics) -> bool {
    let hash = content_hash(bytes);
    let result = parse(path, bytes).and_then(|config| {
        pool.apply_hashed(config, Some(&hash)).map_err(|source| LoadError::Invalid { path: path.to_owned(), source })
    });
    match result {
        Ok(generation) => {
            metrics.reload("applied");
            metrics.applied_now();
            tracing::info!(generation, %hash, "pool config applied");
            true
        }
        Err(e) => {
            metrics.reload("invalid");
            tracing::warn!(error = %e, %hash, "pool config rejected; keeping the last good one");
            false
        }
    }
}

/// The drills' faults in force, by class, so that each is logged once when a
/// config places it, once when a config lifts it, and once when its own
/// deadline (`untilUnixMs`) ends it.
#[derive(Debug, Default)]
struct Holds {
    /// (class, its hold, whether its deadline has been logged as passed).
    known: Vec<(String, Hold, bool)>,
}

impl Holds {
    /// A config was applied: log the holds it places, changes and lifts.
    fn applied(&mut self, config: &PoolConfig, now: u64) {
        let placed: Vec<(String, Hold)> =
            config.classes.iter().filter_map(|c| c.hold.clone().map(|h| (c.name.clone(), h))).collect();
        for (class, hold, _) in &self.known {
            if !placed.iter().any(|(c, h)| c == class && h.drill == hold.drill) {
                tracing::info!(drill = %hold.drill, %class, "drill hold lifted: requests of the class are forwarded at once again");
            }
        }
        let mut known = Vec::with_capacity(placed.len());
        for (class, hold) in placed {
            let before = self.known.iter().find(|(c, h, _)| *c == class && h.drill == hold.drill);
            let ended = match before {
                Some((_, h, ended)) if *h == hold => *ended,
                _ => {
                    let active = hold.active_at(now);
                    tracing::info!(drill = %hold.drill, %class, ms = hold.ms, until_unix_ms = hold.until_unix_ms, active,
                        "drill hold applied: each admitted request of the class waits before it is forwarded");
                    !active
                }
            };
            known.push((class, hold, ended));
        }
        self.known = known;
    }

    /// Log each hold whose deadline has passed, once.
    fn tick(&mut self, now: u64) {
        for (class, hold, ended) in &mut self.known {
            if !*ended && !hold.active_at(now) {
                *ended = true;
                tracing::info!(drill = %hold.drill, %class, "drill hold ended: its deadline (untilUnixMs) passed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_document_names_the_field() {
        let text = br#"{"version":1,"bulkhead":"b","resource":"r","scope":"Instance","dividedBy":1,"capacity":2,
            "sharedSurplus":1,"onCeiling":"reject","classes":[{"name":"a","reserved":"ten","ceiling":2,"critical":false}]}"#;
        let e = parse(Path::new("pools.json"), text).expect_err("malformed");
        assert!(e.to_string().starts_with("pools.json: classes[0].reserved: invalid type"), "{e}");
    }
}
