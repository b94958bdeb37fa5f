//! SNAPSHOT.HSCAN key cursor [MATCH pattern] [COUNT count] [NOVALUES]

use super::args::{parse_cursor, parse_options, Allowed, CmdError};
use crate::config;
use crate::ffi::hashcopy::{self, CopyError};
use crate::ffi::thread_ctx::Detached;
use crate::ffi::{self, blocked::BlockedReply, keys, mainloop, reply::Reply, Ctx};
use crate::glob::Pattern;
use crate::hash::{self, Builder, HashCopy, HashPage};
use crate::index::meta::HASH;
use crate::state::{self, HashCursor, Module};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

const DEFAULT_COUNT: usize = 10;
/// Sliced copies restarted because the hash changed between slices,
/// before falling back to one copy under a single hold of the lock.
const MAX_RETRIES: usize = 3;
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// Page options of one call.
struct PageSpec {
    pattern: Option<Pattern>,
    count: usize,
    budget: usize,
    novalues: bool,
}

/// A copy still being made: what the worker needs to finish it.
struct Pending {
    /// Slices stay consistent only while the clock is below this: the
    /// smallest field TTL of the hash when the copy (re)started.
    valid_until: Option<i64>,
    builder: Builder,
    cursor: Vec<u8>,
    version: u64,
    epoch: u64,
}

/// `SNAPSHOT.HSCAN key cursor [MATCH pattern] [COUNT count] [NOVALUES]`
///
/// Cursor 0 snapshots the hash: a hash unchanged since a copy that is still
/// in use is shared in O(1); a small one (at most `snapshot.hash-copy-batch`
/// fields) is copied right here; a large one gets its first slice here and
/// the rest on the main thread, one slice per turn of the event loop, while
/// the client waits. Pages are cut on a worker.
pub fn run(ctx: Ctx, args: &[&[u8]]) -> Result<(), CmdError> {
    if args.len() < 3 {
        return Err(CmdError::WrongArity);
    }
    let key = args[1];
    let cursor = parse_cursor(args[2])?;
    let opts = parse_options(
        &args[3..],
        Allowed {
            type_filter: false,
            novalues: true,
        },
    )?;
    let m = state::try_get().ok_or_else(|| CmdError::msg("ERR snapscan is not initialised"))?;
    let spec = PageSpec {
        pattern: opts.pattern.map(Pattern::new),
        count: opts.count.unwrap_or(DEFAULT_COUNT),
        budget: config::get(&config::SCAN_BUDGET),
        novalues: opts.novalues,
    };
    let db = ffi::selected_db(ctx);
    Module::bump(&m.stats.hash_scans, 1);
    let inline = ffi::blocking_denied(ctx);

    if cursor != 0 {
        let e = m
            .hash_cursors
            .take_checked(cursor, |e| {
                if e.db != db {
                    Err(format!("belongs to database {}, not {db}", e.db))
                } else if *e.value.key != *key {
                    Err("belongs to another key".to_string())
                } else {
                    Ok(())
                }
            })
            .map_err(|why| {
                CmdError::msg(match why {
                    None => format!(
                        "ERR cursor {cursor} is unknown, already used or expired; restart the scan from cursor 0"
                    ),
                    Some(w) => format!("ERR cursor {cursor} {w}; restart the scan from cursor 0"),
                })
            })?;
        let (copy, pages) = (e.value.copy, e.pages);
        if !inline {
            if let Some((next, items)) = small_page(m, db, key, &copy, e.value.pos, pages, &spec) {
                write_page(&Reply::new(ctx), next, Some(&copy), &items, spec.novalues);
                // The last page may hold the last reference to a big copy:
                // free it on the reaper, not here.
                m.reaper.dispose(copy);
                return Ok(());
            }
        }
        respond(
            ctx,
            m,
            inline,
            db,
            key,
            move |_| copy,
            e.value.pos,
            pages,
            spec,
        );
        return Ok(());
    }

    // Cursor 0: the truth about the key, now.
    let name = ffi::OwnedString::new(ctx, key)
        .ok_or_else(|| CmdError::msg("ERR snapscan: out of memory"))?;
    match keys::probe(ctx, name.ptr()) {
        None => {
            write_page(&Reply::new(ctx), 0, None, &[], true);
            return Ok(());
        }
        Some(f) if f.kind != keys::Kind::Builtin(HASH) => return Err(CmdError::msg(WRONGTYPE)),
        Some(_) => {}
    }
    // Field TTLs matter only to share a copy or to slice one; the answer
    // can cost an INFO call (Valkey 9), so it is asked only then.
    if let Some(copy) = m.watches.reusable(db, key) {
        if reuse_is_safe(ttl_guard(ctx, &name, db)) {
            m.watches.count_reuse();
            if !inline {
                if let Some((next, items)) = small_page(m, db, key, &copy, 0, 0, &spec) {
                    write_page(&Reply::new(ctx), next, Some(&copy), &items, spec.novalues);
                    m.reaper.dispose(copy);
                    return Ok(());
                }
            }
            respond(ctx, m, inline, db, key, move |_| copy, 0, 0, spec);
            return Ok(());
        }
    }
    let batch = config::get(&config::HASH_COPY_BATCH).max(1);
    let fields = keys::value_len(ctx, name.ptr());
    let small = inline || fields <= batch;
    let (version, epoch) = m.watches.begin_copy(db, key);
    let mut builder = Builder::new(config::get(&config::HASH_MEMORY_LIMIT));
    let started = Instant::now();
    // Everything at once when small or when we cannot block; else a first
    // slice (which is everything for a listpack-encoded hash).
    let mut first = if small {
        hashcopy::hgetall(ctx, key, &mut builder).map(|_| b"0".to_vec())
    } else {
        hashcopy::hscan_slice(ctx, key, b"0", batch, &mut builder)
    };
    // More slices to come: field TTLs matter now. (Same instant as the
    // first slice: no command ran in between.)
    let mut valid_until = None;
    if matches!(&first, Ok(next) if next != b"0") {
        let (guard, until) = copy_deadline(ctx, &name, db);
        valid_until = until;
        if guard == TtlGuard::OneHold {
            builder.clear();
            first = hashcopy::hgetall(ctx, key, &mut builder).map(|_| b"0".to_vec());
        } else {
            builder.reserve_for(fields);
        }
    }
    record_hold(m, started);
    let next = match first {
        Ok(next) => next,
        Err(e) => {
            m.watches.end_copy(db, key, None);
            return match copy_error(e) {
                None => {
                    write_page(&Reply::new(ctx), 0, None, &[], true);
                    Ok(())
                }
                Some(msg) => Err(CmdError::msg(msg)),
            };
        }
    };
    if next == b"0" {
        let get_copy = finish(m, db, builder, (version, epoch));
        respond(ctx, m, inline, db, key, get_copy, 0, 0, spec);
        return Ok(());
    }
    // A large hash: finish the copy on the main thread, one slice per turn
    // of the event loop, then cut the first page on a worker.
    let Some(bc) = BlockedReply::block(ctx) else {
        m.watches.end_copy(db, key, None);
        return Err(CmdError::msg("ERR snapscan: cannot block the client"));
    };
    let Some(tctx) = Detached::new() else {
        m.watches.end_copy(db, key, None);
        drop(bc);
        return Ok(());
    };
    let mut task = CopyTask {
        m,
        db,
        key: key.into(),
        p: Pending {
            valid_until,
            builder,
            cursor: next,
            version,
            epoch,
        },
        retries: 0,
        tctx,
        reply: Some((bc, spec)),
    };
    mainloop::run_in_steps(
        ctx,
        Box::new(move |_| {
            if task.step() {
                mainloop::Next::Again
            } else {
                mainloop::Next::Done
            }
        }),
    );
    Ok(())
}

/// A sliced copy in progress, advanced one slice per turn of the event
/// loop on the main thread.
struct CopyTask {
    m: &'static Module,
    db: usize,
    key: Box<[u8]>,
    p: Pending,
    retries: usize,
    /// A context of our own to select the database on.
    tctx: Detached,
    /// The waiting client and its page options, until answered.
    reply: Option<(BlockedReply, PageSpec)>,
}

impl CopyTask {
    /// One slice of at most `snapshot.hash-copy-batch` fields. If the hash
    /// changed since the previous slice (a keyspace event, or a field TTL
    /// that passed) the copy restarts; after [`MAX_RETRIES`] restarts the
    /// rest is copied at once (documented fallback). Returns whether more
    /// slices are needed.
    fn step(&mut self) -> bool {
        let (m, db, key) = (self.m, self.db, &self.key[..]);
        let ctx = self.tctx.ctx();
        ffi::select_db(ctx, db);
        let started = Instant::now();
        let p = &mut self.p;
        let expired_meanwhile = p.valid_until.is_some_and(|t| ffi::now_ms() >= t);
        let mut fallback = false;
        if expired_meanwhile || m.watches.current(db, key) != (p.version, p.epoch) {
            Module::bump(&m.stats.hash_copy_retries, 1);
            self.retries += 1;
            p.builder.clear();
            p.cursor = b"0".to_vec();
            (p.version, p.epoch) = m.watches.current(db, key);
            let (guard, until) = match ffi::OwnedString::new(ctx, key) {
                Some(n) => copy_deadline(ctx, &n, db),
                None => (TtlGuard::OneHold, None),
            };
            p.valid_until = until;
            let stale = until.is_some_and(|t| t <= ffi::now_ms());
            fallback = self.retries > MAX_RETRIES || stale || guard == TtlGuard::OneHold;
        }
        let result = if fallback {
            Module::bump(&m.stats.hash_copy_fallbacks, 1);
            hashcopy::hgetall(ctx, key, &mut p.builder).map(|_| b"0".to_vec())
        } else {
            let batch = config::get(&config::HASH_COPY_BATCH).max(1);
            hashcopy::hscan_slice(ctx, key, &p.cursor, batch, &mut p.builder)
        };
        record_hold(m, started);
        if result.is_ok() && m.watches.current(db, key) != (p.version, p.epoch) {
            // The slice itself changed the hash (its key expired lazily):
            // the next step starts over.
            return true;
        }
        match result {
            Ok(next) if next != b"0" => {
                p.cursor = next;
                true
            }
            Ok(_) => {
                // Sorting a big copy takes milliseconds: do it on a worker.
                let builder = std::mem::replace(&mut p.builder, Builder::new(0));
                let get_copy = finish(m, db, builder, (p.version, p.epoch));
                let key = self.key.clone();
                let reply = self.reply.take();
                let job = Box::new(move || {
                    let copy = get_copy(&key);
                    if let Some((bc, spec)) = reply {
                        let (next, items) = serve(m, db, &key, copy.clone(), 0, 0, &spec);
                        bc.reply(|r| write_page(r, next, Some(&copy), &items, spec.novalues));
                    }
                });
                m.on_worker(job);
                false
            }
            Err(e) => {
                m.watches.end_copy(db, key, None);
                if let Some((bc, _)) = self.reply.take() {
                    bc.reply(|r| match copy_error(e) {
                        None => write_page(r, 0, None, &[], true),
                        Some(msg) => r.error(&msg),
                    });
                }
                false
            }
        }
    }
}

impl Drop for CopyTask {
    fn drop(&mut self) {
        // Dropped before the copy finished (the server refused a timer):
        // stop watching; the blocked client's guard answers it.
        if self.reply.is_some() {
            self.m.watches.end_copy(self.db, &self.key, None);
        }
    }
}

/// Whether hash-field expiry cannot have silently removed a field since a
/// copy was made: always on servers without field TTLs; on servers with
/// them only when the server reports the hash's smallest field TTL and it
/// lies in the future. (Fields that merely expire fire no notification.)
fn reuse_is_safe(guard: TtlGuard) -> bool {
    match guard {
        TtlGuard::Never => true,
        TtlGuard::Until(t) => t > ffi::now_ms(),
        TtlGuard::OneHold => false,
    }
}

/// How field TTLs constrain a copy of one hash (fields that expire fire no
/// notification until they are reclaimed, so slices cannot see them go).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TtlGuard {
    /// No field of this hash can expire.
    Never,
    /// The first field TTL; slices are consistent while the clock is below.
    Until(i64),
    /// The server cannot tell (Valkey 9 with field TTLs in this database):
    /// copy in one hold, never share.
    OneHold,
}

/// What bounds a sliced copy of the hash at `name`: its field-TTL guard,
/// and the time past which slices are no longer consistent (the first
/// field TTL or the key's own expiry, whichever comes first).
fn copy_deadline(ctx: Ctx, name: &ffi::OwnedString, db: usize) -> (TtlGuard, Option<i64>) {
    let guard = ttl_guard(ctx, name, db);
    let key_expire = keys::probe(ctx, name.ptr()).and_then(|f| f.expire);
    let field = match guard {
        TtlGuard::Until(t) => Some(t),
        _ => None,
    };
    let until = match (field, key_expire) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    (guard, until)
}

fn ttl_guard(ctx: Ctx, name: &ffi::OwnedString, db: usize) -> TtlGuard {
    if !HASH_FIELD_TTL.load(Ordering::Relaxed) {
        return TtlGuard::Never;
    }
    match keys::hash_min_field_expire(ctx, name.ptr()) {
        Some(None) => TtlGuard::Never,
        // A field past its TTL but not yet reclaimed: which other fields
        // expire during a sliced copy cannot be told, so copy in one hold.
        Some(Some(t)) if t <= ffi::now_ms() => TtlGuard::OneHold,
        Some(Some(t)) => TtlGuard::Until(t),
        None if !keys::db_may_have_field_ttls(ctx, db) => TtlGuard::Never,
        None => TtlGuard::OneHold,
    }
}

/// Whether this server has hash-field expiry (HEXPIRE), set at load.
pub static HASH_FIELD_TTL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

fn record_hold(m: &Module, started: Instant) {
    ffi::latency::report(ffi::latency::Event::Copy, started);
    let us = started.elapsed().as_micros() as u64;
    m.stats
        .hash_longest_hold_us
        .fetch_max(us, Ordering::Relaxed);
}

/// The error reply for a failed copy; `None` when the key vanished or
/// changed type while being copied (answered like a missing key).
fn copy_error(e: CopyError) -> Option<String> {
    match e {
        CopyError::OverLimit(o) => Some(format!(
            "ERR snapscan: hash snapshots would exceed snapshot.hash-memory-limit ({} of {} bytes held); retry later or raise the limit",
            o.held, o.limit
        )),
        CopyError::Gone => None,
        CopyError::Failed(s) => Some(format!("ERR snapscan: cannot copy the hash: {s}")),
    }
}

/// Replies one page of the copy `get_copy` yields: on a worker when the
/// client can be blocked, inline otherwise (MULTI, Lua, functions).
/// `get_copy` runs where the page is cut, so finishing a fresh copy (a
/// sort) happens on the worker too.
#[allow(clippy::too_many_arguments)]
fn respond(
    ctx: Ctx,
    m: &'static Module,
    inline: bool,
    db: usize,
    key: &[u8],
    get_copy: impl FnOnce(&[u8]) -> Arc<HashCopy> + Send + 'static,
    pos: usize,
    pages: u64,
    spec: PageSpec,
) {
    let page = move |key: &[u8], reply: &Reply| {
        let copy = get_copy(key);
        let (next, items) = serve(m, db, key, copy.clone(), pos, pages, &spec);
        write_page(reply, next, Some(&copy), &items, spec.novalues);
    };
    match (!inline).then(|| BlockedReply::block(ctx)).flatten() {
        None => page(key, &Reply::new(ctx)),
        Some(bc) => {
            let key: Box<[u8]> = key.into();
            m.on_worker(Box::new(move || bc.reply(|r| page(&key, r))));
        }
    }
}

/// A `get_copy` for [`respond`] that finishes a copy made in one go:
/// sorts it and publishes it for sharing.
fn finish(
    m: &'static Module,
    db: usize,
    builder: Builder,
    (version, epoch): (u64, u64),
) -> impl FnOnce(&[u8]) -> Arc<HashCopy> + Send + 'static {
    move |key: &[u8]| {
        let copy = Arc::new(builder.finish());
        m.watches.end_copy(db, key, Some((&copy, version, epoch)));
        copy
    }
}

/// Cuts one page and registers the continuation; returns the next cursor.
fn serve(
    m: &Module,
    db: usize,
    key: &[u8],
    copy: Arc<HashCopy>,
    pos: usize,
    pages: u64,
    spec: &PageSpec,
) -> (u64, Vec<usize>) {
    let page = copy.page(pos, spec.pattern.as_ref(), spec.count, spec.budget);
    register(m, db, key, copy, page, pages)
}

/// A page of a copy in hand, cut on the main thread if it is small: COUNT
/// and the fields it examines within `snapshot.inline-entries` (a worker
/// hand-off would cost the main thread more). `None`: hand it off.
fn small_page(
    m: &Module,
    db: usize,
    key: &[u8],
    copy: &Arc<HashCopy>,
    pos: usize,
    pages: u64,
    spec: &PageSpec,
) -> Option<(u64, Vec<usize>)> {
    let limit = config::get(&config::INLINE_ENTRIES);
    if spec.count > limit {
        return None;
    }
    let page = copy.page(
        pos,
        spec.pattern.as_ref(),
        spec.count,
        spec.budget.min(limit),
    );
    let complete =
        page.next.is_none() || page.items.len() >= spec.count || page.examined >= spec.budget;
    if !complete {
        return None;
    }
    Module::bump(&m.stats.scans_small, 1);
    Some(register(m, db, key, copy.clone(), page, pages))
}

/// Registers the continuation of a page; returns the next cursor (0 when
/// the iteration is complete) and the page's fields.
fn register(
    m: &Module,
    db: usize,
    key: &[u8],
    copy: Arc<HashCopy>,
    page: HashPage,
    pages: u64,
) -> (u64, Vec<usize>) {
    let next = match page.next {
        None => 0,
        Some(pos) => m.open_cursor(
            &m.hash_cursors,
            HashCursor {
                copy,
                key: key.into(),
                pos,
            },
            db,
            pages + 1,
        ),
    };
    (next, page.items)
}

/// `[cursor, [field, value, ...]]` (fields only with NOVALUES).
fn write_page(r: &Reply, next: u64, copy: Option<&HashCopy>, items: &[usize], novalues: bool) {
    r.array(2);
    r.bulk(next.to_string().as_bytes());
    let Some(copy) = copy else {
        r.array(0);
        return;
    };
    r.array(if novalues {
        items.len()
    } else {
        items.len() * 2
    });
    for &i in items {
        r.bulk(copy.field(i));
        if !novalues {
            r.bulk(copy.value(i));
        }
    }
}

/// Hash snapshot figures for INFO.
pub fn info_figures(m: &Module) -> [(&'static str, u64); 8] {
    [
        ("hash_snapshots_open", hash::copies_open() as u64),
        ("hash_snapshot_bytes", hash::bytes_held() as u64),
        ("hash_copies_made", hash::copies_made()),
        ("hash_copies_reused", m.watches.reused()),
        (
            "hash_copy_retries",
            m.stats.hash_copy_retries.load(Ordering::Relaxed),
        ),
        (
            "hash_copy_fallbacks",
            m.stats.hash_copy_fallbacks.load(Ordering::Relaxed),
        ),
        (
            "hash_longest_lock_hold_us",
            m.stats.hash_longest_hold_us.load(Ordering::Relaxed),
        ),
        ("hash_cursors_open", m.hash_cursors.stats().open as u64),
    ]
}
