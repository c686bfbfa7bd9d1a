//! The connections of one h2c upstream. A stream goes on the oldest
//! connection with a stream free under the upstream's
//! SETTINGS_MAX_CONCURRENT_STREAMS and `STREAMS_PER_CONNECTION`; when every
//! connection is at its limit,
//! another is made (up to `MAX_CONNECTIONS`), as Envoy's and HAProxy's pools
//! do. On one connection, h2 would queue the streams past the limit inside
//! the proxy, in one line for every class: requests a pool admitted would
//! wait there instead of reaching the upstream, and a critical request would
//! wait behind the others. A connection past the first that carries no stream
//! for a reap period is closed.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex, PoisonError, Weak,
    },
    time::Duration,
};

use bytes::Bytes;
use h2::client::SendRequest;

/// Connections one upstream may have. Past it a stream goes on the least
/// loaded one (in h2, it waits there if the upstream's limit is reached).
/// Each connection lets the upstream send `CONNECTION_WINDOW` ahead of the
/// clients reading it, so 16 bound that at 64 MiB, inside the injected
/// 128Mi; 16 connections of `STREAMS_PER_CONNECTION` carry 1,024 streams.
pub(super) const MAX_CONNECTIONS: usize = 16;
/// Streams the proxy opens on one connection at most, below the upstream's
/// own limit if that is higher.
pub(super) const STREAMS_PER_CONNECTION: usize = 64;
/// What the upstream may send on one stream ahead of its client reading it:
/// 64 KiB, as Envoy's edge-proxy guide recommends and HAProxy's default.
pub(super) const STREAM_WINDOW: u32 = 64 << 10;
/// The connection's window holds every stream's whole window. Every class's
/// streams share a connection, and data a client leaves unread holds
/// connection window too: were it smaller, a few clients of one class that
/// stop reading large responses would take all of it, and every other
/// class's responses on the connection would stall behind them. The pool
/// keeps a connection's streams at `STREAMS_PER_CONNECTION` (until all 16
/// connections are full), so no stream waits for connection window.
pub(super) const CONNECTION_WINDOW: u32 = STREAM_WINDOW * STREAMS_PER_CONNECTION as u32;
/// A connection past the first with no stream for one to two periods is
/// closed (HAProxy purges idle server connections every 5 s, its
/// `pool-purge-delay`); the first stays while the upstream keeps it.
const REAP_PERIOD: Duration = Duration::from_secs(5);

/// One connection's handle and its load.
#[derive(Clone)]
struct Conn {
    id: u64,
    send: SendRequest<Bytes>,
    load: Arc<Load>,
}

#[derive(Default)]
struct Load {
    /// Streams the proxy has open on the connection (their slots are alive).
    open: AtomicUsize,
    /// Whether a stream was taken since the reaper last looked.
    used: AtomicBool,
}

/// A stream counted against its connection until dropped (with the response
/// body, or with the request that failed).
#[derive(Debug)]
pub(super) struct StreamSlot {
    load: Arc<Load>,
    connection: u64,
}

impl StreamSlot {
    /// The connection's number, to forget it.
    pub(super) fn connection(&self) -> u64 {
        self.connection
    }
}

impl std::fmt::Debug for Load {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Load").field("open", &self.open.load(Ordering::Relaxed)).finish_non_exhaustive()
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.load.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection to open a stream on.
pub(super) struct Picked {
    pub id: u64,
    pub send: SendRequest<Bytes>,
    pub slot: StreamSlot,
}

#[derive(Default)]
struct State {
    /// Oldest first.
    conns: Vec<Conn>,
    reaping: bool,
}

#[derive(Default)]
pub(super) struct H2Pool {
    state: Mutex<State>,
}

impl std::fmt::Debug for H2Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Pool").field("connections", &self.lock().conns.len()).finish()
    }
}

impl H2Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The oldest connection with a stream free, or with `MAX_CONNECTIONS`
    /// made, the least loaded. None: make another.
    pub(super) fn pick(&self) -> Option<Picked> {
        let state = self.lock();
        let free = state.conns.iter().find(|c| {
            let limit = c.send.current_max_send_streams().min(STREAMS_PER_CONNECTION);
            c.load.open.load(Ordering::Relaxed) < limit
        });
        match free {
            Some(conn) => Some(take(conn)),
            None if state.conns.len() >= MAX_CONNECTIONS => least_loaded(&state),
            None => None,
        }
    }

    /// The connection with the fewest streams, full or not.
    pub(super) fn least_loaded(&self) -> Option<Picked> {
        least_loaded(&self.lock())
    }

    /// Add a new connection and take a stream on it.
    pub(super) fn add(self: &Arc<Self>, id: u64, send: SendRequest<Bytes>) -> Picked {
        let conn = Conn { id, send, load: Arc::default() };
        let picked = take(&conn);
        let mut state = self.lock();
        state.conns.push(conn);
        // Started and stopped under the lock, so a second connection is never left without a reaper.
        if state.conns.len() > 1 && !state.reaping {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                state.reaping = true;
                runtime.spawn(reap(Arc::downgrade(self)));
            }
        }
        picked
    }

    /// Stop using a connection (it ended, or can open no stream).
    pub(super) fn forget(&self, id: u64) {
        self.lock().conns.retain(|c| c.id != id);
    }
}

fn least_loaded(state: &State) -> Option<Picked> {
    state.conns.iter().min_by_key(|c| c.load.open.load(Ordering::Relaxed)).map(take)
}

fn take(conn: &Conn) -> Picked {
    conn.load.open.fetch_add(1, Ordering::Relaxed);
    conn.load.used.store(true, Ordering::Relaxed);
    Picked {
        id: conn.id,
        send: conn.send.clone(),
        slot: StreamSlot { load: Arc::clone(&conn.load), connection: conn.id },
    }
}

/// Close the connections past the first that carried no stream since the
/// last look, until only one is left or the pool is gone. Dropping the last
/// handle of an h2 connection without streams closes it.
async fn reap(pool: Weak<H2Pool>) {
    loop {
        tokio::time::sleep(REAP_PERIOD).await;
        let Some(pool) = pool.upgrade() else { return };
        let mut state = pool.lock();
        let mut first = true;
        state.conns.retain(|c| {
            let keep = std::mem::take(&mut first)
                || c.load.open.load(Ordering::Relaxed) > 0
                || c.load.used.load(Ordering::Relaxed);
            c.load.used.store(false, Ordering::Relaxed);
            keep
        });
        if state.conns.len() <= 1 {
            state.reaping = false;
            return;
        }
    }
}
