//! Building the index for data that existed before the module was loaded
//! (MODULE LOAD on a populated server, or after a failed load).
//!
//! A background thread walks every database with RedisModule_Scan in
//! slices: each slice holds the server lock for at most
//! `snapshot.backfill-batch` keys or 1 ms, whichever comes first, then lets
//! the main thread run. Notifications keep flowing meanwhile; both paths
//! record the truth about a key at the moment they look, under the server
//! lock, so the index equals the keyspace when the walk ends. A SWAPDB or a
//! new load during the walk restarts it (upserts are idempotent).

use crate::config;
use crate::ffi::thread_ctx::Detached;
use crate::ffi::{self, api, keys, Ctx};
use crate::state::{self, Module};
use redis_module::raw;
use std::os::raw::c_void;
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
    let orig = ffi::selected_db(ctx);
    let any = (0..databases).any(|db| ffi::select_db(ctx, db) && ffi::db_size(ctx) > 0);
    ffi::select_db(ctx, orig);
    any
}

/// Starts the background walk (or restarts a running one).
pub fn start(_ctx: Ctx) {
    topology_changed();
    if RUNNING.swap(true, Ordering::SeqCst) {
        return;
    }
    RUNS.fetch_add(1, Ordering::Relaxed);
    let spawned = std::thread::Builder::new()
        .name("snapscan-backfill".into())
        .spawn(|| {
            let _ = std::panic::catch_unwind(run);
            RUNNING.store(false, Ordering::SeqCst);
        });
    if spawned.is_err() {
        RUNNING.store(false, Ordering::SeqCst);
    }
}

struct SliceState<'a> {
    m: &'a Module,
    db: usize,
    seen: u64,
}

extern "C" fn on_scanned(
    ctx: *mut raw::RedisModuleCtx,
    keyname: *mut raw::RedisModuleString,
    key: *mut raw::RedisModuleKey,
    privdata: *mut c_void,
) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: privdata is the &mut SliceState passed to RedisModule_Scan
        // by `walk_db` on this very thread, alive for the whole call.
        let st = unsafe { &mut *privdata.cast::<SliceState>() };
        st.seen += 1;
        let found = match (key.is_null(), api!(RedisModule_KeyType)) {
            (false, Some(kt)) => keys::probe_open(ctx, keyname, key, kt),
            _ => keys::probe(ctx, keyname),
        };
        crate::events::apply(st.m, st.db, ffi::string_bytes(keyname), found);
    }));
}

/// Walks one database; `false` if the topology changed (restart needed).
fn walk_db(m: &Module, tctx: &Detached, db: usize, epoch: u64) -> bool {
    let (Some(create), Some(scan), Some(destroy)) = (
        api!(RedisModule_ScanCursorCreate),
        api!(RedisModule_Scan),
        api!(RedisModule_ScanCursorDestroy),
    ) else {
        return true;
    };
    // SAFETY: creates a cursor we destroy below.
    let cursor = unsafe { create() };
    let mut ok = true;
    loop {
        let guard = tctx.lock();
        if EPOCH.load(Ordering::SeqCst) != epoch {
            ok = false;
            break;
        }
        ffi::select_db(guard.ctx(), db);
        let started = Instant::now();
        let mut st = SliceState { m, db, seen: 0 };
        let batch = config::get(&config::BACKFILL_BATCH).max(1) as u64;
        let mut more = true;
        while more && st.seen < batch && started.elapsed() < SLICE_TIME {
            // SAFETY: the server lock is held; cursor and ctx are live; the
            // callback only uses `st` during this call.
            more = unsafe {
                scan(
                    guard.ctx(),
                    cursor,
                    Some(on_scanned),
                    (&mut st as *mut SliceState).cast(),
                )
            } != 0;
        }
        drop(guard);
        let held = started.elapsed().as_micros() as u64;
        LONGEST_HOLD_US.fetch_max(held, Ordering::Relaxed);
        SCANNED.fetch_add(st.seen, Ordering::Relaxed);
        if !more {
            break;
        }
    }
    // SAFETY: destroys the cursor created above, once.
    unsafe { destroy(cursor) };
    ok
}

fn run() {
    let Some(m) = state::try_get() else { return };
    let Some(tctx) = Detached::new() else { return };
    let databases = m.databases;
    'restart: for _ in 0..1000 {
        let epoch = EPOCH.load(Ordering::SeqCst);
        {
            let g = tctx.lock();
            let total: u64 = (0..databases)
                .map(|db| {
                    ffi::select_db(g.ctx(), db);
                    ffi::db_size(g.ctx())
                })
                .sum();
            TOTAL.store(total, Ordering::Relaxed);
            SCANNED.store(0, Ordering::Relaxed);
        }
        for db in 0..databases {
            if !walk_db(m, &tctx, db, epoch) {
                continue 'restart;
            }
        }
        return;
    }
}
