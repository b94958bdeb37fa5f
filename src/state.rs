//! The module's global state, created once in `init`.

use crate::config;
use crate::cursor::Registry;
use crate::hash::watch::Watches;
use crate::hash::HashCopy;
use crate::index::live::OpenRequest;
use crate::index::{Key, KeyMap, Live, Op, Snapshot, TypeNames};
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
    pub scans: AtomicU64,
    pub scans_sync: AtomicU64,
    /// Small pages answered on the main thread without a worker hand-off.
    pub scans_small: AtomicU64,
    pub snapshots_opened: AtomicU64,
    pub keys_returned: AtomicU64,
    pub entries_examined: AtomicU64,
}

pub struct Module {
    /// Live index behind its operation log (see `index::live`).
    live: Live,
    /// Databases of the server (`databases` config).
    pub databases: usize,
    /// Module type names seen so far, for TYPE filters.
    type_names: Mutex<TypeNames>,
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
    /// Records a change of the keyspace (main thread or server lock held).
    pub fn push(&self, op: Op) -> u64 {
        self.live.push(op, &|maps| self.reaper.dispose(maps))
    }

    /// Sequence number of the last recorded change.
    pub fn pushed(&self) -> u64 {
        self.live.pushed()
    }

    /// Requests a snapshot of `db` as of now (main thread, at cursor 0).
    pub fn open(&self, db: usize, at_ms: i64) -> Arc<OpenRequest> {
        self.live.open(db, at_ms)
    }

    /// [`open`](Self::open) showing only keys of `slots` (cluster mode).
    pub fn open_in(
        &self,
        db: usize,
        at_ms: i64,
        slots: Option<Arc<crate::slot::SlotSet>>,
    ) -> Arc<OpenRequest> {
        self.live.open_in(db, at_ms, slots)
    }

    /// The snapshot of a request: exactly the changes recorded before it.
    /// Runs on a worker (or inline): may apply pending changes itself.
    pub fn snapshot(&self, req: &OpenRequest) -> Arc<Snapshot> {
        self.live
            .take(req, &|maps: Vec<KeyMap>| self.reaper.dispose(maps))
    }

    /// The snapshot of a request if it can be had without waiting (see
    /// [`Live::try_take`]); main thread.
    pub fn try_snapshot(&self, req: &OpenRequest, max_apply: usize) -> Option<Arc<Snapshot>> {
        self.live.try_take(req, max_apply, &|maps: Vec<KeyMap>| {
            self.reaper.dispose(maps)
        })
    }

    /// Runs `job` on a worker thread, or right here if the pool cannot
    /// take it (the job owns its reply guard either way).
    pub fn on_worker(&self, job: crate::pool::Job) {
        if let Err(job) = self.pool.submit(job) {
            job();
        }
    }

    pub fn live(&self) -> &Live {
        &self.live
    }

    pub fn type_names(&self) -> MutexGuard<'_, TypeNames> {
        self.type_names.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Monotonic milliseconds since the module loaded (cursor idle clock).
    /// Registers the continuation of an iteration in `cursors` (its
    /// `pages`-th page was just served) and returns its cursor id; the
    /// iterations evicted to make room are freed on the reaper.
    pub fn open_cursor<T: Send + 'static>(
        &self,
        cursors: &Registry<T>,
        value: T,
        db: usize,
        pages: u64,
    ) -> u64 {
        let (id, evicted) = cursors.insert(
            value,
            db,
            pages,
            self.mono_ms(),
            config::get(&config::MAX_OPEN),
        );
        if !evicted.is_empty() {
            self.reaper.dispose(evicted);
        }
        id
    }

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
        live: Live::new(databases),
        databases: databases.max(1),
        type_names: Mutex::new(TypeNames::default()),
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

/// Applies the index's operation log on its own thread, forever.
pub fn start_indexer() {
    let _ = std::thread::Builder::new()
        .name("snapscan-indexer".into())
        .spawn(|| {
            if let Some(m) = try_get() {
                m.live
                    .run_indexer(&|maps: Vec<KeyMap>| m.reaper.dispose(maps));
            }
        });
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
