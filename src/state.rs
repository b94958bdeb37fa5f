//! What every subsystem shares: the configs' values, the live index behind
//! its operation log, the cursor registries, the collection-copy watches,
//! the worker pool and the reaper, the figures INFO prints, and the
//! module's own threads (indexer, janitor) with their restart and what
//! they report to (`runtime::Threads`). [`Shared`] is one field of the
//! `Module` value (`module.rs`), which also owns each subsystem's state;
//! subsystems are handed `&Shared`, never the `Module`.

use crate::collections::watch::Watches;
use crate::collections::CollCopy;
use crate::config::{self, Config};
use crate::cursor::{Group, Registry};
use crate::index::live::{FilterCache, OpenRequest};
use crate::index::{Key, KeyMap, Live, Op, Snapshot, TypeNames};
use crate::runtime::{Fault, Pool, Reaper, Threads};
use crate::server::keys::NamedTypes;
use crate::server::latency::Latency;
use crate::server::locked::{LockedCell, ServerLock};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A SNAPSHOT.SCAN iteration in progress: its snapshot and where to resume.
#[derive(Clone)]
pub struct ScanCursor {
    pub snap: Arc<Snapshot>,
    pub after: Key,
    /// For an iteration opened inside a script: what is known of the
    /// server's frozen clock (see `scan::keyspace`); `None` otherwise.
    pub clock: Option<ScriptClock>,
    /// The ACL user who opened the iteration (`server::current_user`):
    /// another user's call does not continue it.
    pub user: u64,
}

/// What is known of the frozen clock `T0` (Unix ms) at which the server
/// judged expiry during the script that opened an iteration:
/// `lo <= T0 <= hi`. `hi` is the server's cached clock at the cursor-0 call
/// (the snapshot's instant), which a script running past
/// `busy-reply-threshold` lets run ahead of `T0`. The cursor-0 call,
/// inside the script, settles it for the whole snapshot by asking the
/// server about keys with a TTL (see `scan::keyspace::resolve_clock` and `server::expiry`),
/// so that later pages, wherever they are served, judge as the script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScriptClock {
    pub lo: i64,
    pub hi: i64,
}

/// What a registered iteration shares its memory with.
pub trait Grouped {
    fn group(&self) -> Group;
    /// When the iteration began (server clock, Unix ms), if it is one of
    /// those INFO's oldest iteration counts.
    fn opened_ms(&self) -> Option<i64>;
}

impl Grouped for ScanCursor {
    fn group(&self) -> Group {
        Some((self.snap.db, self.snap.version))
    }
    fn opened_ms(&self) -> Option<i64> {
        Some(self.snap.at_ms)
    }
}

impl Grouped for HashCursor {
    fn group(&self) -> Group {
        None
    }
    fn opened_ms(&self) -> Option<i64> {
        None
    }
}

/// A SNAPSHOT.HSCAN/SSCAN/ZSCAN iteration in progress: the collection
/// copy and a position.
#[derive(Clone)]
pub struct HashCursor {
    pub copy: Arc<CollCopy>,
    pub key: Box<[u8]>,
    pub pos: usize,
    /// The ACL user who opened the iteration (see [`ScanCursor::user`]).
    pub user: u64,
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
    /// Inline calls refused because the index was too far behind.
    pub scans_busy: AtomicU64,
    /// Iterations not opened because old versions were near their limit
    /// (SNAPSHOT.SCAN's `TRYAGAIN`, a served SCAN run natively).
    pub opens_refused_memory: AtomicU64,
    /// Clients blocked by the module now (a SNAPSHOT.* call or a served
    /// native command waiting for a worker or a sliced copy): a part of
    /// the server's `blocked_clients` (see `server::blocked`).
    pub blocked_clients: AtomicU64,
    /// KEYS walks stopped because their client disconnected.
    pub keys_abandoned: AtomicU64,
    /// KEYS replies cut past the client's output-buffer hard limit (the
    /// server then closes the client, as natively).
    pub keys_over_output_limit: AtomicU64,
    /// KEYS calls not served because too many walks were in flight.
    pub keys_refused_busy: AtomicU64,
}

pub struct Shared {
    /// The value of every `snapshot.*` config (registered with the server
    /// at OnLoad, right after the `Module` is made).
    pub config: Config,
    /// Live index behind its operation log (see `index::live`).
    live: Live,
    /// Whole-database operations recorded so far (flushes, swaps, slot
    /// purges): they change keys without an event about each key.
    bulk_ops: AtomicU64,
    /// The index's filter as its one writer, the server-lock holder,
    /// last loaded it (see [`FilterCache`]).
    filter_cache: LockedCell<FilterCache>,
    /// Databases of the server (`databases` config).
    pub databases: usize,
    /// Module type names seen so far, for TYPE filters.
    type_names: Mutex<TypeNames>,
    pub cursors: Registry<ScanCursor>,
    pub hash_cursors: Registry<HashCursor>,
    pub watches: Watches,
    pub pool: Pool,
    pub reaper: Reaper,
    /// What the module's threads report to (panics, failed spawns, the
    /// log) and the test faults. `&'static`: the pool's and the reaper's
    /// threads hold it, and they are made with `Shared`, before it has an
    /// address (see `Threads::leak`).
    pub threads: &'static Threads,
    pub stats: Stats,
    /// Calls of the native commands routed by `snapshot.serve-native`.
    pub native: NativeServing,
    started: Instant,
    indexer_alive: AtomicBool,
    janitor_alive: AtomicBool,
    /// Monotonic ms of the last attempt to restart missing threads.
    last_respawn_ms: AtomicU64,
    /// Test-only: the indexer applies nothing while set.
    pub pause_indexer: AtomicBool,
    /// One bound_retained pass at a time.
    bounding: Mutex<()>,
    /// KEYS walks queued or running (see `native::keys`).
    pub keys_in_flight: AtomicUsize,
    /// Bytes of the maps handed to the reaper and not yet dropped.
    reaping: Arc<AtomicUsize>,
    /// Whether this server has hash-field expiry (HEXPIRE), set at load.
    pub hash_field_ttl: AtomicBool,
    /// Whether this server's SCAN lazily expires the keys matching MATCH
    /// whatever their type (Redis) or only those its TYPE filter keeps
    /// (Valkey); set at load (see `index::walk::ScanSpec::expired_any_type`).
    pub scan_expires_any_type: AtomicBool,
    /// The names the server gave non-builtin key types (see
    /// `server::keys::probe`).
    pub named_types: NamedTypes,
    /// The server's `latency-monitor-threshold`, which main-thread slices
    /// are reported against.
    pub latency: Latency,
    /// The largest live index (node bytes) since the oldest open iteration
    /// began: the base of `snapshot.max-retained-percent` (see
    /// [`index_peak`]).
    index_peak: AtomicUsize,
}

/// The state of serving the native commands (`native` owns it): per
/// native command (`native::mode::Native::index`), calls served from a
/// snapshot, calls run by the native command, iterations restarted
/// natively; and whether `snapshot.serve-native` was ever on (from then on
/// the filter routes continuations of the iterations it served whatever
/// the mode).
///
/// Locking: atomics only, relaxed (figures and a one-way flag).
#[derive(Default)]
pub struct NativeServing {
    pub ever_on: AtomicBool,
    /// Whether the command filter is registered (main thread only: OnLoad
    /// and config changes).
    pub filter_registered: AtomicBool,
    /// The routed commands the server has under their own names (bits of
    /// `native::mode::Native`), read when the filter is registered: a
    /// command renamed or removed by `rename-command` is never routed.
    pub present: std::sync::atomic::AtomicI64,
    /// The options the server's own commands take (bits of
    /// `native::plan::Options`), read when the filter is registered: an
    /// option the server lacks gets its native error, whatever the size.
    pub options: std::sync::atomic::AtomicU8,
    pub served: [AtomicU64; 5],
    pub native: [AtomicU64; 5],
    pub restarted: [AtomicU64; 5],
}

impl Shared {
    /// Records a change of the keyspace (main thread or server lock held).
    pub fn push(&self, op: Op) -> u64 {
        if !matches!(op, Op::Set(..)) {
            self.bulk_ops.fetch_add(1, Ordering::Relaxed);
        }
        self.live.push(op, &|maps| self.dispose_maps(maps))
    }

    /// How many whole-database operations (flush, swap, slot purge) were
    /// recorded so far: a truth known without a read holds only while this
    /// has not moved.
    pub fn bulk_ops(&self) -> u64 {
        self.bulk_ops.load(Ordering::Relaxed)
    }

    /// Prefetches what recording the truth of a key reads (see
    /// [`Live::prefetch`]).
    #[inline]
    pub fn prefetch_truth(&self, db: usize, key: &[u8]) -> u64 {
        self.live.prefetch(db, key)
    }

    /// Records the truth about a key whose hash is `hash` (main thread),
    /// unless it cannot change the index (see [`Live::push_truth`]).
    #[inline(always)]
    pub fn push_truth(
        &self,
        lock: &ServerLock,
        db: usize,
        key: (&[u8], Option<crate::index::Key>),
        hash: u64,
        truth: Option<crate::index::Meta>,
        existed: bool,
    ) -> bool {
        let mut cache = self.filter_cache.replace(lock, FilterCache::default());
        let logged = self.live.push_truth(
            &mut cache,
            db,
            (key.0, key.1, hash),
            truth,
            existed,
            &|maps| self.dispose_maps(maps),
        );
        self.filter_cache.replace(lock, cache);
        logged
    }

    /// [`push_truth`](Self::push_truth) for a key only its copy names.
    pub fn push_owned_truth(
        &self,
        lock: &ServerLock,
        db: usize,
        key: (crate::index::Key, u64),
        truth: Option<crate::index::Meta>,
        existed: bool,
    ) -> bool {
        let mut cache = self.filter_cache.replace(lock, FilterCache::default());
        let logged = self
            .live
            .push_owned_truth(&mut cache, db, key, truth, existed, &|maps| {
                self.dispose_maps(maps)
            });
        self.filter_cache.replace(lock, cache);
        logged
    }

    /// Skips the truth of a key that existed and is now a plain string when
    /// the index already says so (see [`Live::skip_if_plain_h`]); `h` is the
    /// hash [`prefetch_truth`](Self::prefetch_truth) returned.
    #[inline(always)]
    pub fn skip_if_plain_h(&self, lock: &ServerLock, h: u64) -> bool {
        let mut cache = self.filter_cache.replace(lock, FilterCache::default());
        let skip = self.live.skip_if_plain_h(&mut cache, h);
        self.filter_cache.replace(lock, cache);
        skip
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
            .take(req, &|maps: Vec<KeyMap>| self.dispose_maps(maps))
    }

    /// The snapshot of a request within `budget` of this thread's time
    /// (the main thread: MULTI, scripts, no worker); `None` when the index
    /// is too far behind, the request then withdrawn.
    pub fn snapshot_within(
        &self,
        req: &Arc<OpenRequest>,
        budget: Duration,
    ) -> Option<Arc<Snapshot>> {
        let got = self
            .live
            .take_within(req, budget, &|maps: Vec<KeyMap>| self.dispose_maps(maps));
        if got.is_none() {
            if let Some(s) = self.live.cancel(req) {
                self.reaper.dispose(s);
            }
        }
        got
    }

    /// The snapshot of a request if it can be had without waiting (see
    /// [`Live::try_take`]); main thread.
    pub fn try_snapshot(&self, req: &OpenRequest, max_apply: usize) -> Option<Arc<Snapshot>> {
        self.live
            .try_take(req, max_apply, &|maps: Vec<KeyMap>| self.dispose_maps(maps))
    }

    /// Hands maps replaced by a flush or a load to the reaper; their bytes
    /// count as being freed (not as held by old versions) until it has
    /// dropped them.
    pub fn dispose_maps(&self, maps: Vec<KeyMap>) {
        let bytes = maps.iter().map(KeyMap::live_bytes).sum();
        self.reaping.fetch_add(bytes, Ordering::Relaxed);
        self.reaper.dispose(Reaping {
            maps,
            bytes,
            reaping: self.reaping.clone(),
        });
    }

    /// Runs `job` on a worker thread, or right here if the pool cannot
    /// take it (the job owns its reply guard either way).
    pub fn on_worker(&self, job: crate::runtime::Job) {
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
    pub fn open_cursor<T: Grouped + Send + 'static>(
        &self,
        cursors: &Registry<T>,
        value: T,
        db: usize,
        pages: u64,
    ) -> u64 {
        let at = crate::cursor::Placement {
            group: value.group(),
            db,
            pages,
            opened_ms: value.opened_ms(),
        };
        let (id, evicted) = cursors.insert_in(
            value,
            at,
            self.mono_ms(),
            config::get(&self.config.max_open),
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

impl Shared {
    /// The shared state of a module serving `databases` databases; `seed`
    /// randomises cursor ids. The configs are at their defaults and no
    /// thread is started: OnLoad registers the configs (the server applies
    /// the config file to them), then [`start_runtime`](Self::start_runtime)
    /// starts the pool and the reaper with the values loaded.
    pub fn new(databases: usize, seed: u64) -> Shared {
        let threads = Threads::leak(log_line);
        Shared {
            config: Config::default(),
            live: {
                let live = Live::new(databases);
                // What an iteration passed stays kept while a used cursor
                // of it may be sent again (README, Cursor lifetime).
                live.set_retry_hold(std::time::Duration::from_millis(crate::cursor::RETRY_MS));
                live
            },
            filter_cache: LockedCell::new(FilterCache::default()),
            databases: databases.max(1),
            type_names: Mutex::new(TypeNames::default()),
            cursors: Registry::new(seed),
            hash_cursors: Registry::new(seed.rotate_left(17) ^ 0x5eed),
            watches: Watches::new(),
            pool: Pool::new("snapscan-worker", threads, 0),
            reaper: Reaper::new(threads),
            threads,
            stats: Stats::default(),
            native: NativeServing::default(),
            started: Instant::now(),
            indexer_alive: AtomicBool::new(false),
            janitor_alive: AtomicBool::new(false),
            last_respawn_ms: AtomicU64::new(0),
            pause_indexer: AtomicBool::new(false),
            bounding: Mutex::new(()),
            keys_in_flight: AtomicUsize::new(0),
            reaping: Arc::new(AtomicUsize::new(0)),
            hash_field_ttl: AtomicBool::new(true),
            scan_expires_any_type: AtomicBool::new(true),
            named_types: NamedTypes::default(),
            latency: Latency::default(),
            index_peak: AtomicUsize::new(0),
            bulk_ops: AtomicU64::new(0),
        }
    }

    /// Starts the worker pool (`snapshot.workers` threads at
    /// `snapshot.worker-nice`) and the reaper; OnLoad, once the configs
    /// are loaded. A thread that cannot be started is retried by
    /// [`ensure_threads`].
    pub fn start_runtime(&self) {
        self.pool.set_nice(config::get(&self.config.worker_nice));
        self.pool.resize(config::get(&self.config.workers));
        self.reaper.ensure_running();
    }

    /// After a config changed at runtime (main thread): what acts on it.
    pub fn on_config_changed(&self, spec: &'static config::Spec, v: i64) {
        let c = &self.config;
        if c.is(spec, &c.workers) {
            self.pool.resize(v.max(0) as usize);
        } else if c.is(spec, &c.worker_nice) {
            self.pool.set_nice(v.max(0) as usize);
        }
    }
}

/// Maps on their way to the reaper (see [`Shared::dispose_maps`]).
struct Reaping {
    maps: Vec<KeyMap>,
    bytes: usize,
    /// [`Shared::reaping`]'s counter (shared with the reaper's thread,
    /// once per flushed or loaded dataset: not on a notification's path).
    reaping: Arc<AtomicUsize>,
}

impl Drop for Reaping {
    fn drop(&mut self) {
        drop(std::mem::take(&mut self.maps));
        self.reaping.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// Bytes of tree nodes held only by old versions (open iterations,
/// snapshots being served or waiting for the reaper), not counting the
/// maps of flushed databases being freed.
pub fn retained_bytes(m: &Shared) -> usize {
    crate::index::tree::all_node_bytes()
        .saturating_sub(m.live.live_node_bytes())
        .saturating_sub(m.reaping.load(Ordering::Relaxed))
}

/// The largest live index (node bytes) since the oldest open iteration
/// began: sampled here (after every indexer batch, by the janitor, by
/// INFO), raised by each iteration's snapshot as it registers
/// ([`note_iteration`]), and reset to the live index whenever no iteration
/// is open and no copy kept for a retry is left. A page being served keeps
/// its cursor's retry copy in the registry from the moment it is taken,
/// so an iteration between two pages never lets the peak fall to a live
/// index its own deletions shrank.
pub fn index_peak(m: &Shared) -> usize {
    let live = m.live.live_node_bytes();
    // The reset runs under the registry's lock: an iteration registers
    // either before (no reset) or after it (and then raises the peak).
    let reset = m
        .cursors
        .when_empty(|| m.index_peak.store(live, Ordering::Relaxed));
    match reset {
        Some(()) => live,
        None => m.index_peak.fetch_max(live, Ordering::Relaxed).max(live),
    }
}

/// An iteration registered its continuation over a snapshot whose index
/// held `bytes` of nodes: the index was that big when it began.
pub fn note_iteration(m: &Shared, bytes: usize) {
    m.index_peak.fetch_max(bytes, Ordering::Relaxed);
}

/// The limit on bytes held by old versions now (0: none) and what decides
/// it (see [`config::retained_limit`]).
pub fn retained_limit(m: &Shared) -> (usize, config::RetainedSource) {
    let peak = index_peak(m);
    m.config.retained_limit(m.live.live_node_bytes(), peak)
}

/// Whether a new iteration must not open because old versions hold three
/// quarters of their limit or more (see [`bound_retained`]): what gives
/// first at the limit is a new iteration, not one half done. Returns the
/// retained bytes and the limit's source when refused.
pub fn refuse_opening(m: &Shared) -> Option<(usize, config::RetainedSource)> {
    let (cap, why) = retained_limit(m);
    let retained = retained_bytes(m);
    (cap > 0 && retained as u128 * 4 >= cap as u128 * 3).then(|| {
        Shared::bump(&m.stats.opens_refused_memory, 1);
        (retained, why)
    })
}

/// Keeps the bytes held by old versions within [`retained_limit`]
/// (`snapshot.max-retained-bytes`, `snapshot.max-retained-percent` of the
/// index's peak): first by dropping the copies kept for retries, then by
/// ending the least recently used SNAPSHOT.SCAN iterations. Runs on the indexer after each batch (and each 2 ms poll)
/// and on the janitor, never on the main thread. The snapshots of the
/// iterations it ends are dropped right here, so that the next measurement
/// sees the memory returned: handing them to the reaper would make the
/// bound wait on its queue (a flushed database's map can take it seconds).
pub fn bound_retained(m: &Shared) {
    let (cap, why) = retained_limit(m);
    if cap == 0 || retained_bytes(m) <= cap {
        return;
    }
    let Ok(_one) = m.bounding.try_lock() else {
        return;
    };
    for _ in 0..64 {
        let retained = retained_bytes(m);
        if retained <= cap {
            return;
        }
        // Copies kept for retries go first: dropping them ends no
        // iteration (a retry of their cursors then restarts from 0).
        let spent = m.cursors.drop_spent();
        if !spent.is_empty() {
            drop(spent);
            m.live
                .collect_history(&|maps: Vec<KeyMap>| m.dispose_maps(maps));
            continue;
        }
        let open = m.cursors.stats().open;
        if open == 0 {
            return;
        }
        // Older versions pin more: the share of iterations to end is at
        // most the share of bytes over the cap, and at least one.
        let n = (open as u128 * (retained - cap) as u128 / retained.max(1) as u128) as usize;
        let ended = m.cursors.evict_lru(n.max(1), why.tag());
        if ended.is_empty() {
            return;
        }
        drop(ended);
        // What only they needed of the undo logs goes now, before the
        // next measurement (else more iterations would be ended for
        // memory the collector was about to free).
        m.live
            .collect_history(&|maps: Vec<KeyMap>| m.dispose_maps(maps));
    }
}

fn log_line(msg: &str) {
    crate::server::log(std::ptr::null_mut(), "warning", msg);
}

/// Applies the index's operation log on its own thread, forever; a panic
/// restarts the loop (see `runtime::Threads::run_supervised`).
pub fn start_indexer(m: &'static Shared) {
    m.indexer_alive.store(true, Ordering::SeqCst);
    let ok = m.threads.spawn_named("snapscan-indexer".into(), move || {
        m.threads.run_supervised("snapscan-indexer", &|| {
            m.live
                .run_indexer(&|maps: Vec<KeyMap>| m.dispose_maps(maps), &|_| {
                    indexer_tick(m)
                })
        });
        m.indexer_alive.store(false, Ordering::SeqCst);
    });
    if !ok {
        m.indexer_alive.store(false, Ordering::SeqCst);
    }
}

fn indexer_tick(m: &Shared) {
    if m.threads.faults.take(Fault::Indexer) {
        panic!("injected fault (test hook)");
    }
    // Test hook: hold the indexer (bounded, re-checked every millisecond).
    while m.pause_indexer.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(1));
    }
    bound_retained(m);
}

/// Drops idle cursors (and those over a lowered limit) every 250 ms,
/// forever, on its own thread. It touches only the cursor registry, never
/// server state. It also bounds retained
/// snapshot memory and restarts missing threads.
pub fn start_janitor(m: &'static Shared) {
    m.janitor_alive.store(true, Ordering::SeqCst);
    let ok = m.threads.spawn_named("snapscan-janitor".into(), move || {
        {
            m.threads.run_supervised("snapscan-janitor", &|| loop {
                std::thread::sleep(Duration::from_millis(250));
                if m.threads.faults.take(Fault::Janitor) {
                    panic!("injected fault (test hook)");
                }
                let idle_ms = config::get(&m.config.idle_timeout) as u64 * 1000;
                m.cursors.expire_idle(m.mono_ms(), idle_ms, drop);
                m.hash_cursors.expire_idle(m.mono_ms(), idle_ms, drop);
                // The surplus over a lowered snapshot.max-open-cursors
                // (insertions evict only a few at a time).
                let max_open = config::get(&m.config.max_open);
                m.cursors.trim(max_open, drop);
                m.hash_cursors.trim(max_open, drop);
                m.watches.sweep();
                bound_retained(m);
                ensure_threads(m);
            });
            m.janitor_alive.store(false, Ordering::SeqCst);
        }
    });
    if !ok {
        m.janitor_alive.store(false, Ordering::SeqCst);
    }
}

/// Threads of the module that are not running right now (indexer,
/// janitor, reaper, and missing workers).
pub fn threads_down(m: &Shared) -> u64 {
    let missing_workers = m.pool.target().saturating_sub(m.pool.threads());
    u64::from(!m.indexer_alive.load(Ordering::SeqCst))
        + u64::from(!m.janitor_alive.load(Ordering::SeqCst))
        + u64::from(!m.reaper.is_running())
        + missing_workers as u64
}

/// Restarts any module thread that could not be started (at most one
/// attempt per second; cheap otherwise). Called by the janitor and, in case
/// the janitor itself is missing, by SNAPSHOT.SCAN and INFO.
pub fn ensure_threads(m: &'static Shared) {
    if threads_down(m) == 0 {
        return;
    }
    let now = m.mono_ms();
    let last = m.last_respawn_ms.load(Ordering::SeqCst);
    if now.saturating_sub(last) < 1000
        || m.last_respawn_ms
            .compare_exchange(last, now, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
    {
        return;
    }
    if !m.reaper.is_running() {
        m.reaper.ensure_running();
    }
    if m.pool.threads() < m.pool.target() {
        m.pool.resize(m.pool.target());
    }
    if !m.indexer_alive.load(Ordering::SeqCst) {
        start_indexer(m);
    }
    if !m.janitor_alive.load(Ordering::SeqCst) {
        start_janitor(m);
    }
}
