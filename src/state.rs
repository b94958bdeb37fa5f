//! The module's global state, created once in `init`.

use crate::config;
use crate::cursor::Registry;
use crate::hash::watch::Watches;
use crate::hash::HashCopy;
use crate::index::{Key, Keyspace, Snapshot};
use crate::pool::{Pool, Reaper};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

/// A SNAPSHOT.SCAN iteration in progress: its snapshot and where to resume.
pub struct ScanCursor {
    pub snap: Arc<Snapshot>,
    pub after: Key,
}

/// A SNAPSHOT.HSCAN iteration in progress: the hash copy and a position.
pub struct HashCursor {
    pub copy: Arc<HashCopy>,
    pub key: Box<[u8]>,
    pub pos: usize,
}

#[derive(Default)]
pub struct Stats {
    pub hash_scans: AtomicU64,
    pub hash_copy_retries: AtomicU64,
    pub hash_copy_fallbacks: AtomicU64,
    pub hash_longest_hold_us: AtomicU64,
    pub events: AtomicU64,
    pub index_changes: AtomicU64,
    pub scans: AtomicU64,
    pub scans_sync: AtomicU64,
    pub snapshots_opened: AtomicU64,
    pub keys_returned: AtomicU64,
    pub entries_examined: AtomicU64,
}

pub struct Module {
    /// Live index. Locked only by threads holding the server lock, hence
    /// uncontended; never locked by workers.
    index: Mutex<Keyspace>,
    pub cursors: Registry<ScanCursor>,
    pub hash_cursors: Registry<HashCursor>,
    pub watches: Watches,
    pub pool: Pool,
    pub reaper: Reaper,
    pub stats: Stats,
    started: Instant,
}

static MODULE: OnceLock<Module> = OnceLock::new();

impl Module {
    pub fn index(&self) -> MutexGuard<'_, Keyspace> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Monotonic milliseconds since the module loaded (cursor idle clock).
    pub fn mono_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    pub fn bump(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// Creates the global state (idempotent).
pub fn init(databases: usize, seed: u64) -> &'static Module {
    MODULE.get_or_init(|| Module {
        index: Mutex::new(Keyspace::new(databases)),
        cursors: Registry::new(seed),
        hash_cursors: Registry::new(seed.rotate_left(17) ^ 0x5eed),
        watches: Watches::new(),
        pool: Pool::new(
            "snapscan-worker",
            config::get(&config::WORKERS),
            config::get(&config::WORKER_NICE),
        ),
        reaper: Reaper::new(),
        stats: Stats::default(),
        started: Instant::now(),
    })
}

pub fn try_get() -> Option<&'static Module> {
    MODULE.get()
}

/// Drops idle cursors every 250 ms, forever, on its own thread. It touches
/// only the cursor registry, never server state.
pub fn start_janitor() {
    let _ = std::thread::Builder::new()
        .name("snapscan-janitor".into())
        .spawn(|| loop {
            std::thread::sleep(std::time::Duration::from_millis(250));
            if let Some(m) = try_get() {
                let idle_ms = config::get(&config::IDLE_TIMEOUT) as u64 * 1000;
                drop(m.cursors.expire_idle(m.mono_ms(), idle_ms));
                drop(m.hash_cursors.expire_idle(m.mono_ms(), idle_ms));
                m.watches.sweep();
            }
        });
}
