//! SNAPSHOT.SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]

use super::args::{parse_cursor, parse_options, Allowed, CmdError};
use crate::backfill;
use crate::config;
use crate::ffi::expiry::Verdict;
use crate::ffi::{self, blocked::BlockedReply, reply::Reply, Ctx};
use crate::glob::Pattern;
use crate::index::live::OpenRequest;
use crate::index::walk::{walk_snapshot_at, Page, ScanSpec};
use crate::index::{Key, Snapshot};
use crate::state::{self, Module, ScanCursor};
use std::sync::Arc;
use std::time::Duration;

const DEFAULT_COUNT: usize = 10;

/// The most time a call that cannot block (MULTI, scripts, functions, no
/// worker thread) spends applying the index's backlog on the main thread
/// to cut its snapshot; past it the call answers `TRYAGAIN`.
pub const INLINE_TAKE_BUDGET: Duration = Duration::from_millis(1);

/// What is known of the frozen clock `T0` (Unix ms) at which the server
/// judged expiry during the script that opened an iteration:
/// `lo <= T0 <= hi`. `hi` is the server's cached clock at the cursor-0 call
/// (the snapshot's instant), which a script running past
/// `busy-reply-threshold` lets run ahead of `T0`. A key whose expiry lies
/// in `[lo, hi)` is judged by asking the server (see `ffi::expiry`) while
/// the call runs inline; the first such key found alive gives `T0` exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScriptClock {
    pub lo: i64,
    pub hi: i64,
}

/// Where a call starts: a new snapshot, or a position in one.
enum Start {
    /// Cursor 0: a snapshot request registered at the current end of the
    /// index's log; whoever serves it takes the snapshot cut exactly there.
    Open(Arc<OpenRequest>, Option<ScriptClock>),
    /// A snapshot in hand: after `after` (a continuation), or from the start.
    At {
        snap: Arc<Snapshot>,
        after: Option<Key>,
        pages: u64,
        clock: Option<ScriptClock>,
    },
}

/// `SNAPSHOT.SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`
///
/// On the main thread: parse, open or look up the snapshot. A small page
/// (COUNT and the entries it needs within `snapshot.inline-entries`, the
/// snapshot ready) is answered at once; any other blocks the client and
/// goes to a worker. Inside MULTI/Lua/functions (no blocking allowed) or
/// without a worker thread the walk runs inline, bounded by the work
/// budget, after at most [`INLINE_TAKE_BUDGET`] of applying the index's
/// backlog (else `TRYAGAIN`).
pub fn run(ctx: Ctx, args: &[&[u8]]) -> Result<(), CmdError> {
    run_with(ctx, args, false)
}

/// [`run`]; with `retry`, a cursor sent again within `cursor::RETRY_MS`
/// gets the same page (see `Registry::take_retryable`).
pub fn run_with(ctx: Ctx, args: &[&[u8]], retry: bool) -> Result<(), CmdError> {
    if args.len() < 2 {
        return Err(CmdError::WrongArity);
    }
    let cursor = parse_cursor(args[1])?;
    let opts = parse_options(
        &args[2..],
        Allowed {
            type_filter: true,
            novalues: false,
            noscores: false,
        },
    )?;
    let m = state::try_get().ok_or_else(|| CmdError::msg("ERR snapscan is not initialised"))?;
    state::ensure_threads(m);
    crate::events::settle();
    // Only opening needs the index: a continuation reads its snapshot.
    crate::idle::in_use(ctx, m, cursor == 0).map_err(CmdError::msg)?;
    if cursor == 0 {
        index_ready()?;
    }
    let type_filter = match opts.type_name {
        None => None,
        Some(t) => Some(m.type_names().lookup(t).ok_or_else(|| {
            CmdError::msg(format!(
                "ERR unknown type name '{}'",
                String::from_utf8_lossy(t)
            ))
        })?),
    };
    let db = ffi::selected_db(ctx);
    let start = if cursor == 0 {
        Module::bump(&m.stats.snapshots_opened, 1);
        let at = ffi::command_time_ms();
        let clock = (ffi::in_script(ctx) && ffi::expiry::supported()).then_some(ScriptClock {
            lo: i64::MIN,
            hi: at,
        });
        Start::Open(m.open_in(db, at, crate::cluster::visible_slots(ctx)), clock)
    } else {
        let taken = if retry {
            let (taken, aged) = m.cursors.take_retryable(cursor, m.mono_ms(), |edb, _| {
                if edb == db {
                    Ok(())
                } else {
                    Err(edb)
                }
            });
            if !aged.is_empty() {
                m.reaper.dispose(aged);
            }
            taken
        } else {
            m.cursors.take_in(cursor, db)
        };
        match taken {
            Ok(e) => Start::At {
                snap: e.value.snap,
                after: Some(e.value.after),
                pages: e.pages,
                clock: e.value.clock,
            },
            Err(None) if m.cursors.ended_by_eviction(cursor) => {
                return Err(CmdError::msg(format!(
                    "ERR cursor {cursor}: snapscan: iteration ended to bound snapshot memory (snapshot.max-retained-bytes); restart the scan from cursor 0"
                )))
            }
            Err(None) => {
                return Err(CmdError::msg(format!(
                    "ERR cursor {cursor} is unknown, already used or expired; restart the scan from cursor 0"
                )))
            }
            Err(Some(other)) => {
                return Err(CmdError::msg(format!(
                    "ERR cursor {cursor} belongs to database {other}, not {db}; restart the scan from cursor 0"
                )))
            }
        }
    };
    let spec = ScanSpec {
        pattern: opts.pattern.map(Pattern::new),
        type_filter,
        count: opts.count.unwrap_or(DEFAULT_COUNT),
        budget: config::get(&config::SCAN_BUDGET),
    };
    Module::bump(&m.stats.scans, 1);
    let (blocked, start) = if ffi::blocking_denied(ctx) || m.pool.threads() == 0 {
        (None, start)
    } else {
        match small_page(m, start, &spec) {
            Ok((next, keys)) => {
                Module::bump(&m.stats.scans_small, 1);
                write_page(&Reply::new(ctx), next, &keys);
                return Ok(());
            }
            Err(start) => (BlockedReply::block(ctx), start),
        }
    };
    match blocked {
        Some(bc) => {
            let job = Box::new(move || {
                let (next, keys) = serve(m, start, &spec);
                bc.reply(|r| write_page(r, next, &keys));
            });
            m.on_worker(job);
        }
        None => {
            Module::bump(&m.stats.scans_sync, 1);
            let (next, keys) = serve_inline(ctx, m, start, &spec)?;
            write_page(&Reply::new(ctx), next, &keys);
        }
    }
    Ok(())
}

/// The `LOADING` error while the index is being built after MODULE LOAD.
pub(crate) fn index_ready() -> Result<(), CmdError> {
    let p = backfill::progress();
    if p.running {
        return Err(CmdError::msg(format!(
            "LOADING snapscan is building its index: {}% ({} of {} keys); retry shortly",
            backfill::percent(&p),
            p.scanned.min(p.total),
            p.total
        )));
    }
    Ok(())
}

/// Computes one page and registers the continuation. Returns the next
/// cursor (0 when done) and the keys. Runs on a worker, without the server
/// lock.
fn serve(m: &'static Module, start: Start, spec: &ScanSpec) -> (u64, Vec<Key>) {
    let (snap, after, pages, clock) = match start {
        Start::Open(req, clock) => (m.snapshot(&req), None, 0, clock),
        Start::At {
            snap,
            after,
            pages,
            clock,
        } => (snap, after, pages, clock),
    };
    let (page, clock) = page_of(&snap, after.as_ref(), spec, clock, None);
    finish(m, snap, pages, page, clock)
}

/// [`serve`] on the main thread, where the client cannot be blocked: the
/// snapshot is cut within [`INLINE_TAKE_BUDGET`] or the call answers
/// `TRYAGAIN`; keys of a script's iteration whose expiry the server's
/// frozen clock decides are judged by the server.
fn serve_inline(
    ctx: Ctx,
    m: &'static Module,
    start: Start,
    spec: &ScanSpec,
) -> Result<(u64, Vec<Key>), CmdError> {
    let (snap, after, pages, clock) = match start {
        Start::Open(req, clock) => match m.snapshot_within(&req, INLINE_TAKE_BUDGET) {
            Some(snap) => (snap, None, 0, clock),
            None => {
                Module::bump(&m.stats.scans_busy, 1);
                return Err(CmdError::msg(format!(
                    "TRYAGAIN snapscan: the index has {} recorded changes still to apply, more than a call that cannot block (MULTI, scripts, functions) may apply on the main thread; retry shortly",
                    m.live().backlog()
                )));
            }
        },
        Start::At {
            snap,
            after,
            pages,
            clock,
        } => (snap, after, pages, clock),
    };
    let judge = |name: &[u8], when: i64| ffi::expiry::judge(ctx, name, when);
    let (page, clock) = page_of(&snap, after.as_ref(), spec, clock, Some(&judge));
    Ok(finish(m, snap, pages, page, clock))
}

/// Asks the server about a key's expiry (main thread only).
type Judge<'a> = &'a dyn Fn(&[u8], i64) -> Verdict;

/// One page of `snap`. Expiry is judged at the snapshot's instant, except
/// for an iteration opened inside a script (`clock`): there keys whose
/// expiry lies between what is known of the script's frozen clock are
/// judged by the server when `judge` is given (inline calls), and as
/// expired otherwise (at `clock.hi`, the cached clock of the cursor-0 call).
fn page_of(
    snap: &Snapshot,
    after: Option<&Key>,
    spec: &ScanSpec,
    clock: Option<ScriptClock>,
    judge: Option<Judge>,
) -> (Page, Option<ScriptClock>) {
    let (Some(mut c), Some(judge)) = (clock, judge) else {
        let at = clock.map_or(snap.at_ms, |c| c.hi);
        return (walk_snapshot_at(snap, at, after, spec), clock);
    };
    if c.lo >= c.hi {
        return (walk_snapshot_at(snap, c.hi, after, spec), clock);
    }
    let mut page = walk_snapshot_at(snap, c.lo, after, spec);
    page.keys.retain(|k| {
        let Some(when) = snap.map.get(k.as_bytes()).and_then(|m| m.expire_at()) else {
            return true;
        };
        if when >= c.hi {
            return true;
        }
        if when < c.lo {
            return false;
        }
        match judge(k.as_bytes(), when) {
            // Only the script that opened the iteration can see a key alive
            // whose expiry lies before the cursor-0 call's clock: its frozen
            // clock is now known.
            Verdict::Alive { now_ms } => {
                c = ScriptClock {
                    lo: now_ms,
                    hi: now_ms,
                };
                true
            }
            Verdict::Expired => {
                c.lo = c.lo.max(when.saturating_add(1)).min(c.hi);
                false
            }
            Verdict::Unknown => false,
        }
    });
    (page, Some(c))
}

/// Pending index operations a small cursor-0 page may apply on the main
/// thread to cut its snapshot (under a write load, applying a few hundred
/// took milliseconds there); with more pending, the page goes to a worker.
pub(super) const INLINE_APPLY_MAX: usize = 16;

/// The page on the main thread if it is small: COUNT and the entries it
/// examines within `snapshot.inline-entries`, and the snapshot ready (at
/// most [`INLINE_APPLY_MAX`] log operations to apply, the index not busy). Otherwise
/// gives the start back for a worker; the walk done here, bounded by the
/// same limit, is then thrown away.
fn small_page(m: &'static Module, start: Start, spec: &ScanSpec) -> Result<(u64, Vec<Key>), Start> {
    let limit = config::get(&config::INLINE_ENTRIES);
    if spec.count > limit {
        return Err(start);
    }
    let (snap, after, pages, clock) = match start {
        Start::Open(req, clock) => match m.try_snapshot(&req, INLINE_APPLY_MAX) {
            Some(snap) => (snap, None, 0, clock),
            None => return Err(Start::Open(req, clock)),
        },
        Start::At {
            snap,
            after,
            pages,
            clock,
        } => (snap, after, pages, clock),
    };
    let small = ScanSpec {
        budget: spec.budget.min(limit),
        ..spec.clone()
    };
    let (page, clock) = page_of(&snap, after.as_ref(), &small, clock, None);
    let complete = page.resume_after.is_none()
        || page.keys.len() >= spec.count
        || page.examined >= spec.budget;
    if !complete {
        return Err(Start::At {
            snap,
            after,
            pages,
            clock,
        });
    }
    Ok(finish(m, snap, pages, page, clock))
}

/// Counts a page and registers its continuation: the next cursor (0 when
/// the iteration is complete) and the keys.
fn finish(
    m: &'static Module,
    snap: Arc<Snapshot>,
    pages: u64,
    page: Page,
    clock: Option<ScriptClock>,
) -> (u64, Vec<Key>) {
    Module::bump(&m.stats.entries_examined, page.examined as u64);
    Module::bump(&m.stats.keys_returned, page.keys.len() as u64);
    let next = match page.resume_after {
        None => {
            // May be the last owner of a flushed database's map: free it
            // on the reaper, never on the main thread.
            m.reaper.dispose(snap);
            0
        }
        Some(after) => {
            let db = snap.db;
            m.open_cursor(&m.cursors, ScanCursor { snap, after, clock }, db, pages + 1)
        }
    };
    (next, page.keys)
}

/// `[cursor, [key, ...]]`, the cursor as a bulk string like SCAN's.
pub fn write_page(r: &Reply, next: u64, keys: &[Key]) {
    r.array(2);
    r.bulk(next.to_string().as_bytes());
    r.array(keys.len());
    for k in keys {
        r.bulk(k.as_bytes());
    }
}
