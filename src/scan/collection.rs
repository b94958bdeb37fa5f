//! The collection-snapshot machinery shared by SNAPSHOT.HSCAN,
//! SNAPSHOT.SSCAN and SNAPSHOT.ZSCAN: take (or share) a point-in-time copy
//! of the collection at cursor 0, in bounded main-thread slices when it is
//! large, then cut pages of it on workers.

use crate::args::{parse_cursor, parse_options, Allowed, CmdError};
use crate::collections::watch::Copying;
use crate::collections::{Builder, CollCopy, CopyPage, Kind};
use crate::config;
use crate::glob::Pattern;
use crate::index::meta::{TypeId, HASH, SET, ZSET};
use crate::server::blocked::{BlockedReply, Fallback};
use crate::server::collcopy::{self, CopyError, KeyCursor};
use crate::server::thread_ctx::Detached;
use crate::server::{self, keys, mainloop, reply::Reply, Ctx};
use crate::state::{HashCursor, Shared};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

const DEFAULT_COUNT: usize = 10;
/// Sliced copies restarted because the collection changed between slices,
/// before falling back to one copy under a single hold of the lock.
const MAX_RETRIES: usize = 3;
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn type_id(kind: Kind) -> TypeId {
    match kind {
        Kind::Hash => HASH,
        Kind::Set => SET,
        Kind::Zset => ZSET,
    }
}

fn noun(kind: Kind) -> &'static str {
    match kind {
        Kind::Hash => "hash",
        Kind::Set => "set",
        Kind::Zset => "sorted set",
    }
}

/// Page options of one call.
struct PageSpec {
    pattern: Option<Pattern>,
    count: usize,
    budget: usize,
    /// Reply the second string of each element (value or score).
    pairs: bool,
}

/// One call: who asks for which page of which key's copy.
struct Call {
    m: &'static Shared,
    db: usize,
    /// The ACL user running the call (see `state::ScanCursor::user`).
    user: u64,
    key: Box<[u8]>,
    kind: Kind,
    spec: PageSpec,
    /// The client cannot be blocked (MULTI, Lua, functions): all inline.
    inline: bool,
    /// Answers the client, once blocked, where it would otherwise get an
    /// error (see `run_with`); taken by the first block.
    fallback: Option<Fallback>,
}

/// Where the copy of a call comes from.
enum Source {
    /// A finished copy (a continuation, or one shared in O(1)).
    Ready(Arc<CollCopy>),
    /// A copy just made, still to be sorted and published (on a worker).
    Fresh(Builder, Copying),
}

impl Source {
    fn into_copy(self) -> Arc<CollCopy> {
        match self {
            Source::Ready(c) => c,
            Source::Fresh(b, guard) => {
                let copy = Arc::new(b.finish());
                guard.publish(&copy);
                copy
            }
        }
    }
}

/// `SNAPSHOT.HSCAN|SSCAN|ZSCAN key cursor [MATCH pattern] [COUNT count] [NOVALUES|NOSCORES]`
///
/// Cursor 0 snapshots the collection: one unchanged since a copy that is
/// still in use is shared in O(1); a small one (at most
/// `snapshot.hash-copy-batch` elements) is copied right here; a large one
/// gets its first slice here and the rest on the main thread, one slice per
/// turn of the event loop, while the client waits. Pages are cut on a
/// worker (small pages of a finished copy on the main thread).
///
/// A cursor sent again within `cursor::RETRY_MS` gets the same page (see
/// `Registry::take_retryable`).
pub fn run(ctx: Ctx, args: &[&[u8]], kind: Kind) -> Result<(), CmdError> {
    run_with(ctx, args, kind, None)
}

/// [`run`]; a client blocked for its page or its copy is answered by
/// `fallback` instead of an error (a copy over
/// `snapshot.collection-memory-limit`, a worker that panicked...).
pub fn run_with(
    ctx: Ctx,
    args: &[&[u8]],
    kind: Kind,
    fallback: Option<Fallback>,
) -> Result<(), CmdError> {
    if args.len() < 3 {
        return Err(CmdError::WrongArity);
    }
    let key = args[1];
    let m =
        crate::module::try_get().ok_or_else(|| CmdError::msg("ERR snapscan is not initialised"))?;
    // The native order: the cursor, then (cursor 0) the key, a missing one
    // answering the empty reply and one of another type WRONGTYPE whatever
    // the options, and only then the options. A continuation is served from
    // its copy whatever the key holds now: its options are checked before
    // its cursor is used up.
    let cursor = parse_cursor(args[2])?;
    let name = if cursor == 0 {
        let name = server::OwnedString::new(ctx, key)
            .ok_or_else(|| CmdError::msg("ERR snapscan: out of memory"))?;
        match keys::probe(ctx, name.ptr(), &m.named_types) {
            None => {
                Shared::bump(&m.stats.hash_scans, 1);
                write_empty(&Reply::new(ctx));
                return Ok(());
            }
            Some(f) if f.kind != keys::Kind::Builtin(type_id(kind)) => {
                return Err(CmdError::msg(WRONGTYPE))
            }
            Some(_) => Some(name),
        }
    } else {
        None
    };
    let opts = parse_options(
        &args[3..],
        Allowed {
            type_filter: false,
            novalues: kind == Kind::Hash,
            noscores: kind == Kind::Zset,
        },
    )?;
    let call = Call {
        m,
        db: server::selected_db(ctx),
        user: server::current_user(ctx),
        key: key.into(),
        kind,
        spec: PageSpec {
            pattern: opts.pattern.map(Pattern::new),
            count: opts.count.unwrap_or(DEFAULT_COUNT),
            budget: config::get(&m.config.scan_budget),
            pairs: kind.has_second() && !opts.novalues && !opts.noscores,
        },
        inline: server::blocking_denied(ctx),
        fallback,
    };
    Shared::bump(&m.stats.hash_scans, 1);
    let Some(name) = name else {
        let e = call.take_cursor(cursor)?;
        call.answer(ctx, Source::Ready(e.value.copy), e.value.pos, e.pages);
        return Ok(());
    };
    open(ctx, call, name)
}

/// Cursor 0 on a key of the call's type (checked by the caller, `name` its
/// name): the truth about the key, now; then a copy.
fn open(ctx: Ctx, mut call: Call, name: server::OwnedString) -> Result<(), CmdError> {
    let (m, db, kind) = (call.m, call.db, call.kind);
    let key: &[u8] = &call.key;
    // Field TTLs matter only to share a copy or to slice one; the answer
    // can cost an INFO call (Valkey 9), so it is asked only then.
    if let Some(copy) = m.watches.reusable(db, key, kind) {
        if reuse_is_safe(ttl_guard(ctx, m, &name, db, kind)) {
            m.watches.count_reuse();
            call.answer(ctx, Source::Ready(copy), 0, 0);
            return Ok(());
        }
    }
    let batch = config::get(&m.config.hash_copy_batch).max(1);
    let elements = keys::value_len(ctx, name.ptr());
    let small = call.inline || elements <= batch;
    let guard = m.watches.begin(db, key);
    let limit = config::get(&m.config.hash_memory_limit);
    let mut builder = Builder::new(kind, &m.watches.budget, limit);
    let started = Instant::now();
    // Everything at once when small or when we cannot block; else a first
    // slice (which is everything for a listpack or intset encoding) of a
    // key cursor the later slices go on with.
    let mut cursor = None;
    let mut first = if small {
        collcopy::copy_all(ctx, key, &mut builder).map(|_| false)
    } else {
        match KeyCursor::new() {
            Some(c) => cursor.insert(c).slice(ctx, key, batch, &mut builder),
            None => Err(CopyError::Failed("cannot create a key cursor".into())),
        }
    };
    // More slices to come: field TTLs matter now. (Same instant as the
    // first slice: no command ran in between.)
    let mut valid_until = None;
    if matches!(first, Ok(true)) {
        let (ttl, until) = copy_deadline(ctx, m, &name, db, kind);
        valid_until = until;
        if ttl == TtlGuard::OneHold {
            builder.clear();
            first = collcopy::copy_all(ctx, key, &mut builder).map(|_| false);
        } else {
            builder.reserve_for(elements);
        }
    }
    record_hold(m, started);
    let more = match first {
        Ok(more) => more,
        Err(e) => {
            drop(guard);
            return match copy_error(e, kind) {
                None => {
                    write_empty(&Reply::new(ctx));
                    Ok(())
                }
                Some(msg) => Err(CmdError::msg(msg)),
            };
        }
    };
    let (true, Some(cursor)) = (more, cursor) else {
        call.answer(ctx, Source::Fresh(builder, guard), 0, 0);
        return Ok(());
    };
    // A large collection: finish the copy on the main thread, one slice
    // per turn of the event loop, then cut the first page on a worker.
    let gauge = &call.m.stats.blocked_clients;
    let Some(bc) = BlockedReply::block_with(ctx, call.fallback.take(), gauge) else {
        return Err(CmdError::msg("ERR snapscan: cannot block the client"));
    };
    let Some(tctx) = Detached::new() else {
        return Ok(()); // `bc` answers an error as it drops
    };
    let mut task = CopyTask {
        call: Some((call, bc)),
        p: Some(Pending {
            valid_until,
            builder,
            cursor,
            guard,
        }),
        retries: 0,
        tctx,
    };
    mainloop::run_in_steps(
        ctx,
        Box::new(move |_, _| {
            if task.step() {
                mainloop::Next::Again
            } else {
                mainloop::Next::Done
            }
        }),
    );
    Ok(())
}

impl Call {
    /// Takes the continuation behind `cursor` if it is this call's.
    fn take_cursor(&self, cursor: u64) -> Result<crate::cursor::Entry<HashCursor>, CmdError> {
        let (db, key, kind, user) = (self.db, &self.key, self.kind, self.user);
        let check = |edb: usize, v: &HashCursor| {
            if v.user != user {
                // Another user's iteration: as unknown to this one.
                Err(None)
            } else if edb != db {
                Err(Some(format!("belongs to database {edb}, not {db}")))
            } else if v.key != *key {
                Err(Some("belongs to another key".to_string()))
            } else if v.copy.kind() != kind {
                Err(Some(format!("belongs to {}", v.copy.kind().command())))
            } else {
                Ok(())
            }
        };
        let (taken, aged) = self
            .m
            .hash_cursors
            .take_retryable(cursor, self.m.mono_ms(), check);
        if !aged.is_empty() {
            self.m.reaper.dispose(aged);
        }
        taken
            .map_err(|why| {
                CmdError::msg(match why.flatten() {
                    None => format!(
                        "ERR cursor {cursor} is unknown, already used or expired; restart the scan from cursor 0"
                    ),
                    Some(w) => format!("ERR cursor {cursor} {w}; restart the scan from cursor 0"),
                })
            })
    }

    /// Replies the page at `pos` of the copy: a small page of a finished
    /// copy at once, any other on a worker when the client can be blocked,
    /// inline otherwise (MULTI, Lua, functions).
    fn answer(mut self, ctx: Ctx, source: Source, pos: usize, pages: u64) {
        if !self.inline {
            if let Source::Ready(copy) = &source {
                if let Some((next, items)) = self.small_page(copy, pos, pages) {
                    write_page(&Reply::new(ctx), next, copy, &items, self.spec.pairs);
                    // The last page may hold the last reference to a big
                    // copy: free it on the reaper, not here.
                    self.m.reaper.dispose(source);
                    return;
                }
            }
            let gauge = &self.m.stats.blocked_clients;
            if let Some(bc) = BlockedReply::block_with(ctx, self.fallback.take(), gauge) {
                self.answer_blocked(bc, source, pos, pages);
                return;
            }
        }
        let copy = source.into_copy();
        let (next, items) = self.serve(copy.clone(), pos, pages);
        write_page(&Reply::new(ctx), next, &copy, &items, self.spec.pairs);
        self.m.reaper.dispose(copy);
    }

    /// Sorts a fresh copy (if any) and cuts the page on a worker, then
    /// answers the blocked client.
    fn answer_blocked(self, bc: BlockedReply, source: Source, pos: usize, pages: u64) {
        let m = self.m;
        m.on_worker(Box::new(move || {
            let copy = source.into_copy();
            let (next, items) = self.serve(copy.clone(), pos, pages);
            bc.reply(|r| write_page(r, next, &copy, &items, self.spec.pairs));
        }));
    }

    /// Cuts one page and registers the continuation; returns the next cursor.
    fn serve(&self, copy: Arc<CollCopy>, pos: usize, pages: u64) -> (u64, Vec<usize>) {
        let s = &self.spec;
        let page = copy.page(pos, s.pattern.as_ref(), s.count, s.budget);
        self.register(copy, page, pages)
    }

    /// A page of a copy in hand, cut on the main thread if it is small:
    /// COUNT and the elements it examines within `snapshot.inline-entries`
    /// (a worker hand-off would cost the main thread more). `None`: hand it
    /// off.
    fn small_page(
        &self,
        copy: &Arc<CollCopy>,
        pos: usize,
        pages: u64,
    ) -> Option<(u64, Vec<usize>)> {
        let s = &self.spec;
        let limit = config::get(&self.m.config.inline_entries);
        if s.count > limit {
            return None;
        }
        let page = copy.page(pos, s.pattern.as_ref(), s.count, s.budget.min(limit));
        let complete =
            page.next.is_none() || page.items.len() >= s.count || page.examined >= s.budget;
        if !complete {
            return None;
        }
        Shared::bump(&self.m.stats.scans_small, 1);
        Some(self.register(copy.clone(), page, pages))
    }

    /// Registers the continuation of a page; returns the next cursor (0
    /// when the iteration is complete) and the page's elements.
    fn register(&self, copy: Arc<CollCopy>, page: CopyPage, pages: u64) -> (u64, Vec<usize>) {
        let next = match page.next {
            None => 0,
            Some(pos) => self.m.open_cursor(
                &self.m.hash_cursors,
                HashCursor {
                    copy,
                    key: self.key.clone(),
                    pos,
                    user: self.user,
                },
                self.db,
                pages + 1,
            ),
        };
        (next, page.items)
    }
}

/// A copy still being made: what the next slice needs.
struct Pending {
    /// Slices stay consistent only while the clock is below this: the
    /// smallest field TTL of the hash (or the key's expiry) when the copy
    /// (re)started.
    valid_until: Option<i64>,
    builder: Builder,
    /// Where the next slice starts.
    cursor: KeyCursor,
    guard: Copying,
}

/// A sliced copy in progress, advanced one slice per turn of the event
/// loop on the main thread. Dropped unfinished (the server refused a
/// timer), its guard ends the watch and its blocked client gets an error.
struct CopyTask {
    /// The call and its waiting client, until answered.
    call: Option<(Call, BlockedReply)>,
    p: Option<Pending>,
    retries: usize,
    /// A context of our own to select the database on. (Its client has
    /// none of the caller's READONLY/ASKING flags: nothing here may go
    /// through `RedisModule_Call`'s cluster check, hence the key cursor.)
    tctx: Detached,
}

impl CopyTask {
    /// One slice of at most `snapshot.hash-copy-batch` elements. If the
    /// collection changed since the previous slice (a keyspace event, or a
    /// field TTL that passed) the copy restarts; after [`MAX_RETRIES`]
    /// restarts the rest is copied at once (documented fallback). Returns
    /// whether more slices are needed.
    fn step(&mut self) -> bool {
        let (Some((call, _)), Some(p)) = (&self.call, &mut self.p) else {
            return false;
        };
        let (m, db, key, kind) = (call.m, call.db, &call.key[..], call.kind);
        let ctx = self.tctx.ctx();
        server::select_db(ctx, db);
        let started = Instant::now();
        let expired_meanwhile = p.valid_until.is_some_and(|t| server::now_ms() >= t);
        let mut fallback = false;
        if expired_meanwhile || p.guard.changed() {
            Shared::bump(&m.stats.hash_copy_retries, 1);
            self.retries += 1;
            p.builder.clear();
            p.cursor.restart();
            p.guard.restart();
            let (ttl, until) = match server::OwnedString::new(ctx, key) {
                Some(n) => copy_deadline(ctx, m, &n, db, kind),
                None => (TtlGuard::OneHold, None),
            };
            p.valid_until = until;
            let stale = until.is_some_and(|t| t <= server::now_ms());
            fallback = self.retries > MAX_RETRIES || stale || ttl == TtlGuard::OneHold;
        }
        let result = if fallback {
            Shared::bump(&m.stats.hash_copy_fallbacks, 1);
            p.cursor.to_end(ctx, key, &mut p.builder).map(|_| false)
        } else {
            let batch = config::get(&m.config.hash_copy_batch).max(1);
            p.cursor.slice(ctx, key, batch, &mut p.builder)
        };
        record_hold(m, started);
        if result.is_ok() && p.guard.changed() {
            // The slice itself changed the collection (its key expired
            // lazily: servers without OPEN_KEY_NOEXPIRE): the next step
            // starts over.
            return true;
        }
        match result {
            Ok(true) => true,
            Ok(false) => {
                if let (Some((call, bc)), Some(p)) = (self.call.take(), self.p.take()) {
                    // Sorting a big copy takes milliseconds: on a worker.
                    call.answer_blocked(bc, Source::Fresh(p.builder, p.guard), 0, 0);
                }
                false
            }
            Err(e) => {
                self.p = None;
                if let Some((call, bc)) = self.call.take() {
                    bc.fail(|r| match copy_error(e, call.kind) {
                        None => write_empty(r),
                        Some(msg) => r.error(&msg),
                    });
                }
                false
            }
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
        TtlGuard::Until(t) => t > server::now_ms(),
        TtlGuard::OneHold => false,
    }
}

/// How field TTLs constrain a copy of one hash (fields that expire fire no
/// notification until they are reclaimed, so slices cannot see them go).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TtlGuard {
    /// No element of this collection can expire on its own.
    Never,
    /// The first field TTL; slices are consistent while the clock is below.
    Until(i64),
    /// The server cannot tell (Valkey 9 with field TTLs in this database):
    /// copy in one hold, never share.
    OneHold,
}

/// What bounds a sliced copy of the collection at `name`: its field-TTL
/// guard, and the time past which slices are no longer consistent (the
/// first field TTL or the key's own expiry, whichever comes first).
fn copy_deadline(
    ctx: Ctx,
    m: &Shared,
    name: &server::OwnedString,
    db: usize,
    kind: Kind,
) -> (TtlGuard, Option<i64>) {
    let guard = ttl_guard(ctx, m, name, db, kind);
    let key_expire = keys::probe(ctx, name.ptr(), &m.named_types).and_then(|f| f.expire);
    (guard, first_deadline(guard, key_expire))
}

/// The earlier of the first field TTL (`guard`) and the key's own expiry.
fn first_deadline(guard: TtlGuard, key_expire: Option<i64>) -> Option<i64> {
    let field = match guard {
        TtlGuard::Until(t) => Some(t),
        _ => None,
    };
    match (field, key_expire) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn ttl_guard(ctx: Ctx, m: &Shared, name: &server::OwnedString, db: usize, kind: Kind) -> TtlGuard {
    if kind != Kind::Hash || !m.hash_field_ttl.load(Ordering::Relaxed) {
        return TtlGuard::Never;
    }
    match keys::hash_min_field_expire(ctx, name.ptr()) {
        Some(None) => TtlGuard::Never,
        // A field past its TTL but not yet reclaimed: which other fields
        // expire during a sliced copy cannot be told, so copy in one hold.
        Some(Some(t)) if t <= server::now_ms() => TtlGuard::OneHold,
        Some(Some(t)) => TtlGuard::Until(t),
        None if !keys::db_may_have_field_ttls(ctx, db) => TtlGuard::Never,
        None => TtlGuard::OneHold,
    }
}

fn record_hold(m: &Shared, started: Instant) {
    m.latency.report(server::latency::Event::Copy, started);
    let us = started.elapsed().as_micros() as u64;
    m.stats
        .hash_longest_hold_us
        .fetch_max(us, Ordering::Relaxed);
}

/// The error reply for a failed copy; `None` when the key vanished or
/// changed type while being copied (answered like a missing key).
fn copy_error(e: CopyError, kind: Kind) -> Option<String> {
    match e {
        CopyError::OverLimit(o) => Some(format!(
            "ERR snapscan: collection snapshots would exceed snapshot.collection-memory-limit ({} of {} bytes held); retry later or raise the limit",
            o.held, o.limit
        )),
        CopyError::Gone => None,
        CopyError::Failed(s) => Some(format!("ERR snapscan: cannot copy the {}: {s}", noun(kind))),
    }
}

/// `["0", []]`: a missing key.
fn write_empty(r: &Reply) {
    r.array(2);
    r.bulk(b"0");
    r.array(0);
}

/// `[cursor, [name, second, ...]]` (names only without `pairs`).
fn write_page(r: &Reply, next: u64, copy: &CollCopy, items: &[usize], pairs: bool) {
    r.array(2);
    r.bulk(next.to_string().as_bytes());
    r.array(if pairs { items.len() * 2 } else { items.len() });
    for &i in items {
        r.bulk(copy.name(i));
        if pairs {
            r.bulk(copy.second(i));
        }
    }
}

/// Collection snapshot figures for INFO (all three commands; the names
/// predate sets and sorted sets).
pub fn info_figures(m: &Shared) -> [(&'static str, u64); 8] {
    [
        ("hash_snapshots_open", m.watches.budget.copies_open() as u64),
        ("hash_snapshot_bytes", m.watches.budget.bytes_held() as u64),
        ("hash_copies_made", m.watches.budget.copies_made()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collections::OverLimit;
    use rstest::rstest;

    #[rstest]
    #[case(Kind::Hash, HASH, "hash")]
    #[case(Kind::Set, SET, "set")]
    #[case(Kind::Zset, ZSET, "sorted set")]
    fn each_kind_has_its_type_and_noun(
        #[case] kind: Kind,
        #[case] ty: TypeId,
        #[case] noun_is: &str,
    ) {
        assert_eq!(type_id(kind), ty);
        assert_eq!(noun(kind), noun_is);
    }

    #[rstest]
    #[case::none(TtlGuard::Never, None, None)]
    #[case::key_only(TtlGuard::OneHold, Some(5), Some(5))]
    #[case::field_only(TtlGuard::Until(7), None, Some(7))]
    #[case::field_first(TtlGuard::Until(7), Some(9), Some(7))]
    #[case::key_first(TtlGuard::Until(9), Some(7), Some(7))]
    fn a_sliced_copy_ends_at_the_first_deadline(
        #[case] guard: TtlGuard,
        #[case] key_expire: Option<i64>,
        #[case] want: Option<i64>,
    ) {
        assert_eq!(first_deadline(guard, key_expire), want);
    }

    #[rstest]
    #[case::no_field_ttl(TtlGuard::Never, true)]
    #[case::unknown(TtlGuard::OneHold, false)]
    #[case::ttl_ahead(TtlGuard::Until(i64::MAX), true)]
    #[case::ttl_passed(TtlGuard::Until(0), false)]
    fn a_copy_is_shared_only_while_no_field_can_have_expired(
        #[case] guard: TtlGuard,
        #[case] safe: bool,
    ) {
        assert_eq!(reuse_is_safe(guard), safe);
    }

    #[test]
    fn copy_errors_are_worded_for_the_kind_and_a_vanished_key_is_not_one() {
        let over = CopyError::OverLimit(OverLimit { held: 10, limit: 8 });
        assert_eq!(
            copy_error(over, Kind::Hash).as_deref(),
            Some("ERR snapscan: collection snapshots would exceed snapshot.collection-memory-limit (10 of 8 bytes held); retry later or raise the limit")
        );
        assert_eq!(
            copy_error(CopyError::Failed("boom".into()), Kind::Zset).as_deref(),
            Some("ERR snapscan: cannot copy the sorted set: boom")
        );
        assert_eq!(copy_error(CopyError::Gone, Kind::Set), None);
    }
}
