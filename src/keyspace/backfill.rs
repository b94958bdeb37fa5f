//! Building the index for data that existed before the module was loaded
//! (MODULE LOAD on a populated server, or after a failed load).
//!
//! The main thread walks every database with RedisModule_Scan in slices,
//! one per turn of the event loop (a 0 ms timer): each slice handles at
//! most `snapshot.backfill-batch` keys or 1 ms, whichever comes first, and
//! every client waiting meanwhile is served between two slices. Notifications keep flowing meanwhile; both paths
//! record the truth about a key at the moment they look, under the server
//! lock, so the index equals the keyspace when the walk ends. A SWAPDB or a
//! new load during the walk restarts it (upserts are idempotent).

use crate::config;
use crate::server::locked::ServerLock;
use crate::server::thread_ctx::Detached;
use crate::server::{self, api, keys, mainloop, scan, Ctx};
use crate::state::Shared;
use redis_module::raw;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The build's state (a field of `keyspace::Keyspace`): atomics, as INFO
/// and SNAPSHOT.SCAN's LOADING reply read them.
#[derive(Default)]
pub struct Backfill {
    /// A walk is under way.
    running: AtomicBool,
    /// Bumped by a SWAPDB or a load: the walk under way restarts.
    epoch: AtomicU64,
    /// Keys scanned by the walk under way, of `total`.
    scanned: AtomicU64,
    total: AtomicU64,
    /// Walks started since the module loaded.
    runs: AtomicU64,
    /// The longest slice, in microseconds.
    longest_hold_us: AtomicU64,
}

const SLICE_TIME: Duration = Duration::from_millis(1);

/// Progress figures for INFO and the LOADING error.
pub struct Progress {
    pub running: bool,
    pub scanned: u64,
    pub total: u64,
    pub runs: u64,
    pub longest_hold_us: u64,
}

impl Backfill {
    pub fn progress(&self) -> Progress {
        Progress {
            running: self.running.load(Ordering::SeqCst),
            scanned: self.scanned.load(Ordering::Relaxed),
            total: self.total.load(Ordering::Relaxed),
            runs: self.runs.load(Ordering::Relaxed),
            longest_hold_us: self.longest_hold_us.load(Ordering::Relaxed),
        }
    }

    /// Invalidates an ongoing walk (SWAPDB, a new load): it restarts.
    pub fn topology_changed(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// Starts the walk (or restarts a running one). Main thread only.
    pub fn start(&'static self, ctx: Ctx, m: &'static Shared) {
        self.topology_changed();
        if self.running.swap(true, Ordering::SeqCst) {
            return;
        }
        self.runs.fetch_add(1, Ordering::Relaxed);
        let Some(mut walk) = Walk::new(self, m) else {
            self.running.store(false, Ordering::SeqCst);
            return;
        };
        let timer_ctx = if ctx.is_null() { walk.tctx.ctx() } else { ctx };
        mainloop::run_in_steps(
            timer_ctx,
            Box::new(move |lock, _ctx| {
                // Produce no faster than the indexer applies: a log growing
                // without bound would end with someone applying it in one go.
                if m.live().backlog() > MAX_PENDING {
                    return mainloop::Next::After(1);
                }
                if walk.step(lock) {
                    mainloop::Next::Again
                } else {
                    self.running.store(false, Ordering::SeqCst);
                    mainloop::Next::Done
                }
            }),
        );
    }
}

/// Percent done, clamped (a SCAN may return a key twice).
pub fn percent(p: &Progress) -> u64 {
    (p.scanned.min(p.total) * 100)
        .checked_div(p.total)
        .unwrap_or(0)
}

/// Whether any database holds keys (checked with the server lock held).
pub fn needed(ctx: Ctx, databases: usize) -> bool {
    let orig = server::selected_db(ctx);
    let any = (0..databases).any(|db| server::select_db(ctx, db) && server::db_size(ctx) > 0);
    server::select_db(ctx, orig);
    any
}

/// Index operations that may wait for the indexer before the walk pauses
/// (about 64 batches of the indexer).
const MAX_PENDING: u64 = 1 << 16;

struct SliceState<'a> {
    lock: &'a ServerLock,
    m: &'a Shared,
    db: usize,
    seen: u64,
}

/// One key of a slice (a panic here is caught by [`scan::Cursor::scan`]).
fn on_scanned(
    st: &mut SliceState,
    ctx: Ctx,
    keyname: *mut raw::RedisModuleString,
    key: *mut raw::RedisModuleKey,
) {
    st.seen += 1;
    let found = match (key.is_null(), api!(RedisModule_KeyType)) {
        (false, Some(kt)) => keys::probe_open(ctx, keyname, key, kt, &st.m.named_types),
        _ => keys::probe(ctx, keyname, &st.m.named_types),
    };
    super::tracking::apply(st.lock, st.m, st.db, server::string_bytes(keyname), found);
}

/// The state of a walk over every database, advanced one slice per turn of
/// the event loop on the main thread.
struct Walk {
    /// Declared first: destroyed before `tctx` is freed.
    cursor: scan::Cursor,
    /// A context of our own to select databases on (main thread only).
    tctx: Detached,
    bf: &'static Backfill,
    m: &'static Shared,
    db: usize,
    epoch: u64,
    restarts: u32,
}

impl Walk {
    fn new(bf: &'static Backfill, m: &'static Shared) -> Option<Self> {
        let cursor = scan::Cursor::new()?;
        let tctx = Detached::new()?;
        let mut w = Walk {
            cursor,
            tctx,
            bf,
            m,
            db: 0,
            epoch: 0,
            restarts: 0,
        };
        w.restart();
        Some(w)
    }

    /// Starts over from database 0 (SWAPDB or a load happened).
    fn restart(&mut self) {
        self.epoch = self.bf.epoch.load(Ordering::SeqCst);
        self.db = 0;
        self.cursor.restart();
        let ctx = self.tctx.ctx();
        let databases = self.m.databases;
        let total: u64 = (0..databases)
            .map(|db| {
                server::select_db(ctx, db);
                server::db_size(ctx)
            })
            .sum();
        self.bf.total.store(total, Ordering::Relaxed);
        self.bf.scanned.store(0, Ordering::Relaxed);
    }

    /// One slice: at most `snapshot.backfill-batch` keys or 1 ms.
    /// Returns whether more slices are needed.
    fn step(&mut self, lock: &ServerLock) -> bool {
        let m = self.m;
        if !scan::available() {
            return false;
        }
        if self.bf.epoch.load(Ordering::SeqCst) != self.epoch {
            // Restart as often as needed: giving up would serve an
            // incomplete index as complete.
            self.restarts += 1;
            if self.restarts.is_multiple_of(100) {
                server::log(std::ptr::null_mut(), "warning", "snapscan: index build restarted 100 more times (SWAPDB or loads during the build)");
            }
            self.restart();
        }
        if self.db >= m.databases {
            return false;
        }
        let ctx = self.tctx.ctx();
        server::select_db(ctx, self.db);
        let started = Instant::now();
        let mut st = SliceState {
            lock,
            m,
            db: self.db,
            seen: 0,
        };
        let batch = config::get(&m.config.backfill_batch).max(1) as u64;
        let mut more = true;
        while more && st.seen < batch && started.elapsed() < SLICE_TIME {
            more = self.cursor.scan(ctx, |ctx, keyname, key| {
                on_scanned(&mut st, ctx, keyname, key)
            });
        }
        self.bf
            .longest_hold_us
            .fetch_max(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        m.latency.report(server::latency::Event::Backfill, started);
        self.bf.scanned.fetch_add(st.seen, Ordering::Relaxed);
        if !more {
            self.db += 1;
            // Restart the cursor for the next database.
            self.cursor.restart();
        }
        self.db < m.databases
    }
}
