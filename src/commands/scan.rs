//! SNAPSHOT.SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]

use super::args::{parse_cursor, parse_options, Allowed, CmdError};
use crate::backfill;
use crate::config;
use crate::ffi::{self, blocked::BlockedReply, reply::Reply, Ctx};
use crate::glob::Pattern;
use crate::index::live::OpenRequest;
use crate::index::walk::{walk_snapshot, Page, ScanSpec};
use crate::index::{Key, Snapshot};
use crate::state::{self, Module, ScanCursor};
use std::sync::Arc;

const DEFAULT_COUNT: usize = 10;

/// Where a call starts: a new snapshot, or a position in one.
enum Start {
    /// Cursor 0: a snapshot request registered at the current end of the
    /// index's log; whoever serves it takes the snapshot cut exactly there.
    Open(Arc<OpenRequest>),
    /// A snapshot in hand: after `after` (a continuation), or from the start.
    At {
        snap: Arc<Snapshot>,
        after: Option<Key>,
        pages: u64,
    },
}

/// `SNAPSHOT.SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`
///
/// On the main thread: parse, open or look up the snapshot. A small page
/// (COUNT and the entries it needs within `snapshot.inline-entries`, the
/// snapshot ready) is answered at once; any other blocks the client and
/// goes to a worker. Inside MULTI/Lua/functions (no blocking allowed) the
/// walk runs inline, bounded by the work budget.
pub fn run(ctx: Ctx, args: &[&[u8]]) -> Result<(), CmdError> {
    if args.len() < 2 {
        return Err(CmdError::WrongArity);
    }
    let cursor = parse_cursor(args[1])?;
    let opts = parse_options(
        &args[2..],
        Allowed {
            type_filter: true,
            novalues: false,
        },
    )?;
    let m = state::try_get().ok_or_else(|| CmdError::msg("ERR snapscan is not initialised"))?;
    crate::events::settle();
    let p = backfill::progress();
    if p.running {
        return Err(CmdError::msg(format!(
            "LOADING snapscan is building its index: {}% ({} of {} keys); retry shortly",
            backfill::percent(&p),
            p.scanned.min(p.total),
            p.total
        )));
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
        Start::Open(m.open_in(db, ffi::command_time_ms(), crate::cluster::visible_slots()))
    } else {
        match m.cursors.take_in(cursor, db) {
            Ok(e) => Start::At {
                snap: e.value.snap,
                after: Some(e.value.after),
                pages: e.pages,
            },
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
    let (blocked, start) = if ffi::blocking_denied(ctx) {
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
            let (next, keys) = serve(m, start, &spec);
            write_page(&Reply::new(ctx), next, &keys);
        }
    }
    Ok(())
}

/// Computes one page and registers the continuation. Returns the next
/// cursor (0 when done) and the keys. Runs on a worker, without the server
/// lock (or inline for MULTI/Lua).
fn serve(m: &'static Module, start: Start, spec: &ScanSpec) -> (u64, Vec<Key>) {
    let (snap, after, pages) = match start {
        Start::Open(req) => (m.snapshot(&req), None, 0),
        Start::At { snap, after, pages } => (snap, after, pages),
    };
    let page = walk_snapshot(&snap, after.as_ref(), spec);
    finish(m, snap, pages, page)
}

/// Pending index operations a small cursor-0 page may apply on the main
/// thread to cut its snapshot (under a write load, applying a few hundred
/// took milliseconds there); with more pending, the page goes to a worker.
const INLINE_APPLY_MAX: usize = 16;

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
    let (snap, after, pages) = match start {
        Start::Open(req) => match m.try_snapshot(&req, INLINE_APPLY_MAX) {
            Some(snap) => (snap, None, 0),
            None => return Err(Start::Open(req)),
        },
        Start::At { snap, after, pages } => (snap, after, pages),
    };
    let small = ScanSpec {
        budget: spec.budget.min(limit),
        ..spec.clone()
    };
    let page = walk_snapshot(&snap, after.as_ref(), &small);
    let complete = page.resume_after.is_none()
        || page.keys.len() >= spec.count
        || page.examined >= spec.budget;
    if !complete {
        return Err(Start::At { snap, after, pages });
    }
    Ok(finish(m, snap, pages, page))
}

/// Counts a page and registers its continuation: the next cursor (0 when
/// the iteration is complete) and the keys.
fn finish(m: &'static Module, snap: Arc<Snapshot>, pages: u64, page: Page) -> (u64, Vec<Key>) {
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
            m.open_cursor(&m.cursors, ScanCursor { snap, after }, db, pages + 1)
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
