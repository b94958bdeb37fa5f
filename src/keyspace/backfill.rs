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
use crate::state::{self, Module};
use redis_module::raw;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

static RUNNING: AtomicBool = AtomicBool::new(false);
static EPOCH: AtomicU64 = AtomicU64::new(0);
static SCANNED: AtomicU64 = AtomicU64::new(0);
static TOTAL: AtomicU64 = AtomicU64::new(0);
static RUNS: AtomicU64 = AtomicU64::new(0);
static LONGEST_HOLD_US: AtomicU64 = AtomicU64::new(0);

const SLICE_TIME: Duration = Duration::from_millis(1);

/// Progress figures for INFO and the LOADING error.
pub struct Progress {
    pub running: bool,
    pub scanned: u64,
    pub total: u64,
    pub runs: u64,
    pub longest_hold_us: u64,
}

pub fn progress() -> Progress {
    Progress {
        running: RUNNING.load(Ordering::SeqCst),
        scanned: SCANNED.load(Ordering::Relaxed),
        total: TOTAL.load(Ordering::Relaxed),
        runs: RUNS.load(Ordering::Relaxed),
        longest_hold_us: LONGEST_HOLD_US.load(Ordering::Relaxed),
    }
}

/// Percent done, clamped (a SCAN may return a key twice).
pub fn percent(p: &Progress) -> u64 {
    (p.scanned.min(p.total) * 100)
        .checked_div(p.total)
        .unwrap_or(0)
}

/// Invalidates an ongoing walk (SWAPDB, a new load): it restarts.
pub fn topology_changed() {
    EPOCH.fetch_add(1, Ordering::SeqCst);
}

/// Whether any database holds keys (checked with the server lock held).
pub fn needed(ctx: Ctx, databases: usize) -> bool {
    let orig = server::selected_db(ctx);
    let any = (0..databases).any(|db| server::select_db(ctx, db) && server::db_size(ctx) > 0);
    server::select_db(ctx, orig);
    any
}

/// Starts the walk (or restarts a running one). Main thread only.
pub fn start(ctx: Ctx) {
    topology_changed();
    if RUNNING.swap(true, Ordering::SeqCst) {
        return;
    }
    RUNS.fetch_add(1, Ordering::Relaxed);
    let Some(mut walk) = Walk::new() else {
        RUNNING.store(false, Ordering::SeqCst);
        return;
    };
    let timer_ctx = if ctx.is_null() { walk.tctx.ctx() } else { ctx };
    mainloop::run_in_steps(
        timer_ctx,
        Box::new(move |lock, _ctx| {
            // Produce no faster than the indexer applies: a log growing
            // without bound would end with someone applying it in one go.
            if state::try_get().is_some_and(|m| m.live().backlog() > MAX_PENDING) {
                return mainloop::Next::After(1);
            }
            if walk.step(lock) {
                mainloop::Next::Again
            } else {
                RUNNING.store(false, Ordering::SeqCst);
                mainloop::Next::Done
            }
        }),
    );
}

/// Index operations that may wait for the indexer before the walk pauses
/// (about 64 batches of the indexer).
const MAX_PENDING: u64 = 1 << 16;

struct SliceState<'a> {
    lock: &'a ServerLock,
    m: &'a Module,
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
        (false, Some(kt)) => keys::probe_open(ctx, keyname, key, kt),
        _ => keys::probe(ctx, keyname),
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
    db: usize,
    epoch: u64,
    restarts: u32,
}

impl Walk {
    fn new() -> Option<Self> {
        let cursor = scan::Cursor::new()?;
        let tctx = Detached::new()?;
        let mut w = Walk {
            cursor,
            tctx,
            db: 0,
            epoch: 0,
            restarts: 0,
        };
        w.restart();
        Some(w)
    }

    /// Starts over from database 0 (SWAPDB or a load happened).
    fn restart(&mut self) {
        self.epoch = EPOCH.load(Ordering::SeqCst);
        self.db = 0;
        self.cursor.restart();
        let ctx = self.tctx.ctx();
        let databases = state::try_get().map_or(1, |m| m.databases);
        let total: u64 = (0..databases)
            .map(|db| {
                server::select_db(ctx, db);
                server::db_size(ctx)
            })
            .sum();
        TOTAL.store(total, Ordering::Relaxed);
        SCANNED.store(0, Ordering::Relaxed);
    }

    /// One slice: at most `snapshot.backfill-batch` keys or 1 ms.
    /// Returns whether more slices are needed.
    fn step(&mut self, lock: &ServerLock) -> bool {
        let (Some(m), true) = (state::try_get(), scan::available()) else {
            return false;
        };
        if EPOCH.load(Ordering::SeqCst) != self.epoch {
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
        let batch = config::get(&config::BACKFILL_BATCH).max(1) as u64;
        let mut more = true;
        while more && st.seen < batch && started.elapsed() < SLICE_TIME {
            more = self.cursor.scan(ctx, |ctx, keyname, key| {
                on_scanned(&mut st, ctx, keyname, key)
            });
        }
        LONGEST_HOLD_US.fetch_max(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        server::latency::report(server::latency::Event::Backfill, started);
        SCANNED.fetch_add(st.seen, Ordering::Relaxed);
        if !more {
            self.db += 1;
            // Restart the cursor for the next database.
            self.cursor.restart();
        }
        self.db < m.databases
    }
}
