//! SNAPSHOT.SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]

use crate::args::{parse_cursor, parse_options, Allowed, CmdError};
use crate::config;
use crate::glob::Pattern;
use crate::index::live::OpenRequest;
use crate::index::walk::{walk_snapshot_at, Entries, Page, ScanSpec};
use crate::index::{Key, Snapshot};
use crate::keyspace::backfill;
use crate::server::blocked::{BlockedReply, Fallback};
use crate::server::expiry::Verdict;
use crate::server::locked::ServerLock;
use crate::server::{self, reply::Reply, Ctx};
use crate::state::{self, ScanCursor, Shared};
use std::sync::Arc;
use std::time::Duration;

const DEFAULT_COUNT: usize = 10;

/// The most time a call that cannot block (MULTI, scripts, functions, no
/// worker thread) spends applying the index's backlog on the main thread
/// to cut its snapshot; past it the call answers `TRYAGAIN`.
pub const INLINE_TAKE_BUDGET: Duration = Duration::from_millis(1);

pub use crate::state::ScriptClock;

impl ScriptClock {
    /// Known exactly (or, for the keys of the snapshot, as good as known:
    /// none has its expiry between `lo` and `hi`).
    fn decided(self) -> bool {
        self.lo >= self.hi
    }

    /// Takes in the server's verdict on a key whose indexed expiry is
    /// `when`; returns whether that key is alive at the script's clock.
    fn learn(&mut self, when: i64, verdict: Verdict) -> bool {
        match verdict {
            // Visible with a TTL: the frozen clock is now known exactly.
            Verdict::Alive { now_ms } => {
                *self = ScriptClock {
                    lo: now_ms,
                    hi: now_ms,
                };
                when >= now_ms
            }
            Verdict::Expired => {
                if when < self.hi {
                    self.lo = self.lo.max(when.saturating_add(1)).min(self.hi);
                }
                false
            }
            Verdict::Unknown => false,
        }
    }
}

/// Most index entries, and most keys asked of the server, that the
/// cursor-0 call of an iteration opened inside a script spends deciding the
/// script's frozen clock (see [`resolve_clock`]): together about 1 ms of
/// the main thread at worst. Only a script that may have run past
/// `busy-reply-threshold` (or one whose clock has no known floor) walks at
/// all, and only the MATCH pattern's literal-prefix range; a walk stops at
/// the first key with a TTL still alive at the script's clock.
const RESOLVE_ENTRIES: usize = 100_000;
const RESOLVE_JUDGED: usize = 1_000;

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
///
/// A cursor sent again within `cursor::RETRY_MS` gets the same page (see
/// `Registry::take_retryable`).
pub fn run(lock: &ServerLock, ctx: Ctx, args: &[&[u8]]) -> Result<(), CmdError> {
    run_with(lock, ctx, args, None)
}

/// [`run`]; a client blocked for its page is answered by `fallback`
/// instead of an error (see `BlockedReply::block_with`).
pub fn run_with(
    lock: &ServerLock,
    ctx: Ctx,
    args: &[&[u8]],
    fallback: Option<Fallback>,
) -> Result<(), CmdError> {
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
    let served = fallback.is_some();
    let m =
        crate::module::try_get().ok_or_else(|| CmdError::msg("ERR snapscan is not initialised"))?;
    state::ensure_threads(m);
    crate::keyspace::tracking::settle(lock, m, &m.keyspace);
    // Only opening needs the index: a continuation reads its snapshot.
    crate::keyspace::in_use(lock, ctx, m, &m.keyspace, cursor == 0).map_err(CmdError::msg)?;
    if cursor == 0 {
        index_ready(&m.keyspace.backfill)?;
        if let Some((retained, why)) = state::refuse_opening(m) {
            return Err(CmdError::msg(format!(
                "TRYAGAIN snapscan: old versions hold {retained} bytes, near their limit ({}); open iterations go on, a new one can open once they end; retry shortly",
                why.setting()
            )));
        }
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
    let db = server::selected_db(ctx);
    let user = server::current_user(ctx);
    let start = if cursor == 0 {
        Shared::bump(&m.stats.snapshots_opened, 1);
        let at = server::command_time_ms();
        let clock = (server::in_script(ctx) && server::expiry::supported()).then(|| {
            m.keyspace.subscriptions.follow_loop_turns(ctx);
            ScriptClock {
                lo: m
                    .loop_turns
                    .script_clock_floor_ms(lock)
                    .filter(|lo| *lo <= at)
                    .unwrap_or(i64::MIN),
                hi: at,
            }
        });
        Start::Open(
            m.open_in(db, at, m.keyspace.cluster.visible_slots(ctx, m)),
            clock,
        )
    } else {
        let (taken, aged) = m.cursors.take_retryable(cursor, m.mono_ms(), |edb, v| {
            if v.user != user {
                // Another user's iteration: as unknown to this one.
                Err(None)
            } else if edb == db {
                Ok(())
            } else {
                Err(Some(edb))
            }
        });
        if !aged.is_empty() {
            m.reaper.dispose(aged);
        }
        match taken {
            // A cursor of this iteration sent again after a later one went
            // on: what the snapshot kept of the page's keys may be freed.
            Ok(e) if e.value.snap.passed(Some(&e.value.after)) => {
                m.reaper.dispose(vec![e.value]);
                return Err(CmdError::msg(passed_error(cursor)));
            }
            Ok(e) => Start::At {
                snap: e.value.snap,
                after: Some(e.value.after),
                pages: e.pages,
                clock: e.value.clock,
            },
            Err(None | Some(None)) => {
                if let Some(why) = m.cursors.ended_by_eviction(cursor) {
                    return Err(CmdError::msg(ended_for_memory(
                        cursor,
                        config::RetainedSource::from_tag(why),
                    )));
                }
                return Err(CmdError::msg(format!(
                    "ERR cursor {cursor} is unknown, already used or expired; restart the scan from cursor 0"
                )));
            }
            Err(Some(Some(other))) => {
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
        budget: config::get(&m.config.scan_budget),
        // A served SCAN has the server expire the expired keys it passed
        // over, as native SCAN does (README, Serving the native commands).
        expired_max: if served {
            opts.count.unwrap_or(DEFAULT_COUNT)
        } else {
            0
        },
        expired_any_type: m
            .scan_expires_any_type
            .load(std::sync::atomic::Ordering::Relaxed),
    };
    Shared::bump(&m.stats.scans, 1);
    let (blocked, start) = if server::blocking_denied(ctx) || m.pool.threads() == 0 {
        (None, start)
    } else {
        match small_page(m, start, &spec, user, cursor) {
            // An error, which a served native call answers natively.
            Ok(Served {
                passed: Some(c), ..
            }) => return Err(CmdError::msg(passed_error(c))),
            Ok(page) => {
                Shared::bump(&m.stats.scans_small, 1);
                page.write(&Reply::new(ctx));
                expire_visited(ctx, &page.expired);
                return Ok(());
            }
            Err(start) => (
                BlockedReply::block_with(ctx, fallback, &m.stats.blocked_clients),
                start,
            ),
        }
    };
    match blocked {
        Some(bc) => {
            let job = Box::new(move || {
                let mut page = serve(m, start, &spec, user, cursor);
                if page.passed.is_some() {
                    // The fallback of a served native call, else the error.
                    bc.fail(|r| page.write(r));
                    return;
                }
                let expired = std::mem::take(&mut page.expired);
                if expired.is_empty() {
                    bc.reply(|r| page.write(r));
                } else {
                    bc.reply_then(
                        |r| page.write(r),
                        Box::new(move |_lock, ctx| expire_visited(ctx, &expired)),
                    );
                }
            });
            m.on_worker(job);
        }
        None => {
            Shared::bump(&m.stats.scans_sync, 1);
            let page = serve_inline(ctx, m, start, &spec, user, cursor)?;
            page.write(&Reply::new(ctx));
        }
    }
    Ok(())
}

/// The error of a cursor sent again after a later cursor of its iteration
/// was continued (README, *Cursors*: only the latest one can be resent).
fn passed_error(cursor: u64) -> String {
    format!(
        "ERR cursor {cursor} was already continued by a later cursor of its iteration, which freed what its page read; restart the scan from cursor 0"
    )
}

/// The error of an iteration ended to keep old versions within their
/// limit, naming the setting that decided it.
fn ended_for_memory(cursor: u64, why: config::RetainedSource) -> String {
    format!(
        "ERR cursor {cursor}: snapscan: iteration ended to bound snapshot memory ({}); restart the scan from cursor 0",
        why.setting()
    )
}

/// The `LOADING` error while the index is being built after MODULE LOAD.
pub(crate) fn index_ready(bf: &backfill::Backfill) -> Result<(), CmdError> {
    let p = bf.progress();
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
fn serve(m: &'static Shared, start: Start, spec: &ScanSpec, user: u64, cursor: u64) -> Served {
    let (snap, after, pages, clock) = match start {
        Start::Open(req, clock) => (m.snapshot(&req), None, 0, clock),
        Start::At {
            snap,
            after,
            pages,
            clock,
        } => (snap, after, pages, clock),
    };
    if let Some(a) = &after {
        snap.advance(a);
    }
    let (page, clock) = page_of(&snap, after.as_ref(), spec, clock, None);
    if snap.passed(after.as_ref()) {
        m.reaper.dispose(snap);
        return Served::passed(cursor);
    }
    finish(m, snap, pages, page, clock, user)
}

/// [`serve`] on the main thread, where the client cannot be blocked: the
/// snapshot is cut within [`INLINE_TAKE_BUDGET`] or the call answers
/// `TRYAGAIN`; keys of a script's iteration whose expiry the server's
/// frozen clock decides are judged by the server.
fn serve_inline(
    ctx: Ctx,
    m: &'static Shared,
    start: Start,
    spec: &ScanSpec,
    user: u64,
    cursor: u64,
) -> Result<Served, CmdError> {
    let (snap, after, pages, clock) = match start {
        Start::Open(req, clock) => match m.snapshot_within(&req, INLINE_TAKE_BUDGET) {
            Some(snap) => (snap, None, 0, clock),
            None => {
                Shared::bump(&m.stats.scans_busy, 1);
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
    if let Some(a) = &after {
        snap.advance(a);
    }
    let judge = |name: &[u8]| server::expiry::judge(ctx, name);
    // The opening call is the only one that runs in the script whose clock
    // decides: settle it now for the whole snapshot, so pages served later
    // (by a worker, or in another script or transaction) judge expiry as
    // the script did.
    let clock = match clock {
        Some(c) if pages == 0 && after.is_none() => Some(settle(ctx, &snap, spec, c, &judge)),
        c => c,
    };
    let (page, clock) = page_of(&snap, after.as_ref(), spec, clock, Some(&judge));
    if snap.passed(after.as_ref()) {
        m.reaper.dispose(snap);
        return Err(CmdError::msg(passed_error(cursor)));
    }
    Ok(finish(m, snap, pages, page, clock, user))
}

/// Settles the clock of an iteration opened inside a script (its cursor-0
/// call, in that script): exact at once when the database has no key with a
/// TTL, or when the script cannot have run past `busy-reply-threshold` (then
/// the server's cached clock has not moved since the script began: it *is*
/// the frozen clock); else by [`resolve_clock`] over the keys the pattern
/// can match.
fn settle(ctx: Ctx, snap: &Snapshot, spec: &ScanSpec, c: ScriptClock, judge: Judge) -> ScriptClock {
    let exact = ScriptClock { lo: c.hi, hi: c.hi };
    if server::expiry::db_has_ttls(ctx, snap.db) == Some(false) {
        return exact;
    }
    if server::expiry::busy_threshold_ms(ctx).is_some_and(|t| ran_short(c, t)) {
        return exact;
    }
    let prefix = spec.pattern.as_ref().map_or(&[][..], |p| p.prefix());
    let r = snap.read();
    resolve_clock(
        r.range_from(std::ops::Bound::Included(prefix)),
        prefix,
        c,
        judge,
    )
    .0
}

/// Whether a script known to have begun at or after `c.lo` cannot have
/// run past a `busy-reply-threshold` of `threshold_ms` by `c.hi`, the
/// server's cached clock: the server processes events (which moves that
/// clock) only once the script has run that long by its monotonic clock,
/// and `c.lo` allows for the wall clock falling behind it.
fn ran_short(c: ScriptClock, threshold_ms: i64) -> bool {
    c.lo > i64::MIN && c.hi.saturating_sub(c.lo) < threshold_ms
}

/// Asks the server about a key's expiry (main thread only).
type Judge<'a> = &'a dyn Fn(&[u8]) -> Verdict;

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
        let Some(when) = snap.get(k.as_bytes()).and_then(|m| m.expire_at()) else {
            return true;
        };
        if c.decided() {
            return when >= c.hi;
        }
        if when >= c.hi {
            return true;
        }
        if when < c.lo {
            return false;
        }
        c.learn(when, judge(k.as_bytes()))
    });
    (page, Some(c))
}

/// `k.starts_with(prefix)` without a call to `memcmp` per key (which cost
/// the walk ten times its own time for short prefixes).
#[inline]
fn has_prefix(k: &[u8], prefix: &[u8]) -> bool {
    k.len() >= prefix.len() && k.iter().zip(prefix).all(|(a, b)| a == b)
}

/// What [`resolve_clock`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Settling {
    /// Index entries walked.
    entries: usize,
    /// Keys asked of the server.
    judged: usize,
    /// Whether every key of the range is decided (the walk reached the
    /// range's end, or found the clock exactly).
    complete: bool,
}

/// Decides the frozen clock of the script that opens an iteration of
/// `map` over keys starting with `prefix` (the MATCH pattern's literal
/// prefix: no page of the iteration returns any other key), by asking the
/// server (`judge`) about keys of that range whose expiry is at least `lo`,
/// in key order (keys whose expiry is before `lo` are expired at the
/// script's clock whatever it is). The first key visible with a TTL gives
/// the clock exactly (its expiry less its remaining TTL); a key found
/// expired raises `lo` past its expiry. A walk to the range's end that met
/// no key it could not judge leaves no key of the range with its expiry in
/// `[lo, hi)`: judging at `hi` is then exactly the script's verdict for
/// every key the iteration can return (for the whole map without a prefix,
/// the clock is then set to `hi`).
///
/// Stops after [`RESOLVE_ENTRIES`] entries or [`RESOLVE_JUDGED`] keys
/// asked: keys not yet walked whose expiry lies in the final `[lo, hi)`
/// (and keys the server could not judge) stay undecided, judged by the
/// server in pages computed inside the script, and at `hi` elsewhere.
fn resolve_clock(
    mut iter: impl Entries,
    prefix: &[u8],
    mut c: ScriptClock,
    judge: Judge,
) -> (ScriptClock, Settling) {
    let mut done = Settling {
        entries: 0,
        judged: 0,
        complete: false,
    };
    let mut unknown = false;
    while !c.decided() {
        let entry = iter.next_entry().filter(|(k, _)| has_prefix(k, prefix));
        let Some((k, m)) = entry else {
            done.complete = !unknown;
            if done.complete && prefix.is_empty() {
                c.lo = c.hi;
            }
            return (c, done);
        };
        if done.entries >= RESOLVE_ENTRIES || done.judged >= RESOLVE_JUDGED {
            return (c, done);
        }
        done.entries += 1;
        let Some(when) = m.expire_at() else {
            continue;
        };
        if when < c.lo {
            continue;
        }
        done.judged += 1;
        let verdict = judge(k);
        unknown |= verdict == Verdict::Unknown && when < c.hi;
        c.learn(when, verdict);
    }
    done.complete = true;
    (c, done)
}

/// Pending index operations a small cursor-0 page may apply on the main
/// thread to cut its snapshot (under a write load, applying a few hundred
/// took milliseconds there); with more pending, the page goes to a worker.
pub(crate) const INLINE_APPLY_MAX: usize = 16;

/// The page on the main thread if it is small: COUNT and the entries it
/// examines within `snapshot.inline-entries`, and the snapshot ready (at
/// most [`INLINE_APPLY_MAX`] log operations to apply, the index not busy). Otherwise
/// gives the start back for a worker; the walk done here, bounded by the
/// same limit, is then thrown away.
fn small_page(
    m: &'static Shared,
    start: Start,
    spec: &ScanSpec,
    user: u64,
    cursor: u64,
) -> Result<Served, Start> {
    let limit = config::get(&m.config.inline_entries);
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
    // The iteration never reads `after` or a key before it again: what
    // is kept of them can go (also if a worker serves this page after all).
    if let Some(a) = &after {
        snap.advance(a);
    }
    let small = ScanSpec {
        budget: spec.budget.min(limit),
        ..spec.clone()
    };
    let (page, clock) = page_of(&snap, after.as_ref(), &small, clock, None);
    if snap.passed(after.as_ref()) {
        m.reaper.dispose(snap);
        return Ok(Served::passed(cursor));
    }
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
    Ok(finish(m, snap, pages, page, clock, user))
}

/// Counts a page and registers its continuation: the next cursor (0 when
/// the iteration is complete) and the keys.
fn finish(
    m: &'static Shared,
    snap: Arc<Snapshot>,
    pages: u64,
    page: Page,
    clock: Option<ScriptClock>,
    user: u64,
) -> Served {
    Shared::bump(&m.stats.entries_examined, page.examined as u64);
    Shared::bump(&m.stats.keys_returned, page.keys.len() as u64);
    let next = match page.resume_after {
        None => {
            // May be the last owner of a flushed database's map: free it
            // on the reaper, never on the main thread.
            m.reaper.dispose(snap);
            0
        }
        Some(after) => {
            let db = snap.db;
            let size = snap.index_bytes;
            let next = m.open_cursor(
                &m.cursors,
                ScanCursor {
                    snap,
                    after,
                    clock,
                    user,
                },
                db,
                pages + 1,
            );
            // Registered first: from now on the peak is never reset.
            state::note_iteration(m, size);
            next
        }
    };
    Served {
        next,
        keys: page.keys,
        expired: page.expired,
        passed: None,
    }
}

/// One page served: the next cursor (0 when the iteration is complete),
/// the keys, and the keys passed over because they had expired (see
/// `ScanSpec::expired_max`).
struct Served {
    next: u64,
    keys: Vec<Key>,
    expired: Vec<Key>,
    /// The page was computed, but a later cursor of the iteration went on
    /// meanwhile and what it read may have been freed: answered with
    /// [`passed_error`] for this cursor instead.
    passed: Option<u64>,
}

impl Served {
    fn passed(cursor: u64) -> Served {
        Served {
            next: 0,
            keys: Vec::new(),
            expired: Vec::new(),
            passed: Some(cursor),
        }
    }

    /// Writes the page, or the error that replaces it.
    fn write(&self, r: &Reply) {
        match self.passed {
            Some(c) => r.error(&passed_error(c)),
            None => write_page(r, self.next, &self.keys),
        }
    }
}

/// Has the server expire the keys a served SCAN's page passed over because
/// they had expired (at most its COUNT, as native SCAN expires at most the
/// keys of the buckets one call visits): main thread, `ctx` the client's.
fn expire_visited(ctx: Ctx, expired: &[Key]) {
    server::expiry::expire_if_needed(ctx, expired.iter().map(Key::as_bytes));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::meta::{Meta, STRING};
    use crate::index::tree::KeyMap;
    use proptest::prelude::*;
    use rstest::rstest;
    use std::cell::Cell;

    /// The server inside a script frozen at `t0`: a key is visible iff its
    /// expiry is at or after `t0` (no TTL: visible, tells nothing).
    fn server<'a>(
        map: &'a KeyMap,
        t0: i64,
        asked: &'a Cell<usize>,
    ) -> impl Fn(&[u8]) -> Verdict + 'a {
        move |k| {
            asked.set(asked.get() + 1);
            match map.get(k).map(|m| m.expire_at()) {
                None => Verdict::Expired,
                Some(None) => Verdict::Unknown,
                Some(Some(at)) if at >= t0 => Verdict::Alive { now_ms: t0 },
                Some(Some(_)) => Verdict::Expired,
            }
        }
    }

    fn map_of(entries: &[(&str, Option<i64>)]) -> KeyMap {
        let mut m = KeyMap::new();
        for (k, e) in entries {
            m.insert(k.as_bytes(), Meta::new(STRING, *e));
        }
        m
    }

    const HI: i64 = 2_000;

    /// Settles a clock known only to be at most `HI`.
    fn resolve_from_nothing(map: &KeyMap, judge: Judge) -> ScriptClock {
        resolve_in(map, b"", judge).0
    }

    fn resolve_in(map: &KeyMap, prefix: &[u8], judge: Judge) -> (ScriptClock, Settling) {
        resolve_clock(
            map.range_from(std::ops::Bound::Included(prefix)),
            prefix,
            ScriptClock {
                lo: i64::MIN,
                hi: HI,
            },
            judge,
        )
    }

    #[rstest]
    // A key alive at the frozen clock with a TTL: the clock exactly.
    #[case::spinning_key_alive(&[("a", None), ("b", Some(1_500))], 1_000, (1_000, 1_000), 1)]
    #[case::long_ttl_key(&[("a", Some(9_000)), ("b", Some(1_500))], 1_000, (1_000, 1_000), 1)]
    // Every key with a TTL expired at the frozen clock: decided at `hi`.
    #[case::all_expired(&[("a", Some(500)), ("b", Some(900)), ("c", None)], 1_000, (HI, HI), 2)]
    // Ascending expiries in key order: each expired key raises `lo`, the
    // next alive one decides.
    #[case::after_expired_ones(&[("a", Some(10)), ("b", Some(20)), ("c", Some(1_200))], 1_000, (1_000, 1_000), 3)]
    // Keys below a raised `lo` are not asked about.
    #[case::skips_below_lo(&[("a", Some(900)), ("b", Some(10)), ("c", Some(20))], 1_000, (HI, HI), 1)]
    #[case::no_ttl_at_all(&[("a", None), ("b", None)], 1_000, (HI, HI), 0)]
    fn resolve_decides_the_script_clock(
        #[case] entries: &[(&str, Option<i64>)],
        #[case] t0: i64,
        #[case] expect: (i64, i64),
        #[case] asks: usize,
    ) {
        let map = map_of(entries);
        let asked = Cell::new(0);
        let judge = server(&map, t0, &asked);
        let c = resolve_from_nothing(&map, &judge);
        assert_eq!((c.lo, c.hi), expect);
        assert_eq!(asked.get(), asks);
    }

    #[test]
    fn a_key_the_server_cannot_judge_leaves_the_clock_undecided() {
        let map = map_of(&[("a", Some(1_500))]);
        let judge = |_: &[u8]| Verdict::Unknown;
        let (c, done) = resolve_clock(map.iter(), b"", ScriptClock { lo: 0, hi: HI }, &judge);
        assert!(!c.decided());
        assert!(!done.complete);
    }

    #[rstest]
    // Begun within the threshold of the cached clock: it cannot have let
    // the server process events, the cached clock is the frozen one.
    #[case::short(ScriptClock { lo: 1_000, hi: 1_049 }, 50, true)]
    #[case::at_the_threshold(ScriptClock { lo: 1_000, hi: 1_050 }, 50, false)]
    #[case::long(ScriptClock { lo: 1_000, hi: 5_000 }, 50, false)]
    // busy-reply-threshold 0: every script may process events at once.
    #[case::threshold_zero(ScriptClock { lo: 1_000, hi: 1_000 }, 0, false)]
    // No floor known (before the first turn of the event loop seen).
    #[case::no_floor(ScriptClock { lo: i64::MIN, hi: 1_000 }, 5_000, false)]
    fn a_script_that_ran_short_has_the_cached_clock(
        #[case] c: ScriptClock,
        #[case] threshold: i64,
        #[case] short: bool,
    ) {
        assert_eq!(ran_short(c, threshold), short);
    }

    /// The walk covers only the pattern's prefix range: a key with a TTL
    /// elsewhere (here sorting last) is neither walked to nor asked about.
    #[test]
    fn settling_walks_only_the_prefix_range() {
        let mut entries: Vec<(String, Option<i64>)> =
            (0..1000).map(|i| (format!("a:{i}"), None)).collect();
        entries.push(("zzz".into(), Some(1_500)));
        let refs: Vec<(&str, Option<i64>)> =
            entries.iter().map(|(k, e)| (k.as_str(), *e)).collect();
        let map = map_of(&refs);
        let asked = Cell::new(0);
        let judge = server(&map, 1_000, &asked);
        let (c, done) = resolve_in(&map, b"a:1", &judge);
        // a:1, a:10-a:19, a:100-a:199.
        assert_eq!(
            done,
            Settling {
                entries: 111,
                judged: 0,
                complete: true
            }
        );
        assert_eq!(asked.get(), 0);
        // Not collapsed to `hi`: a key outside the range may lie in between.
        assert_eq!((c.lo, c.hi), (i64::MIN, HI));
        // A key of the range alive with a TTL decides it exactly.
        drop(judge);
        let mut map = map;
        map.insert(b"a:150", Meta::new(STRING, Some(9_000)));
        let judge = server(&map, 1_000, &asked);
        let (c, done) = resolve_in(&map, b"a:1", &judge);
        assert_eq!((c.lo, c.hi), (1_000, 1_000));
        assert!(done.complete);
        assert_eq!(asked.get(), 1);
    }

    /// The walk's bounds: at most [`RESOLVE_ENTRIES`] entries and
    /// [`RESOLVE_JUDGED`] keys asked; past them the clock is left as far
    /// as it got (undecided).
    #[test]
    fn settling_stops_at_its_bounds() {
        let mut map = KeyMap::new();
        for i in 0..RESOLVE_ENTRIES + 10 {
            map.insert(format!("key:{i:07}").as_bytes(), Meta::plain(STRING));
        }
        map.insert(b"zzz", Meta::new(STRING, Some(1_500)));
        let asked = Cell::new(0);
        let judge = server(&map, 1_000, &asked);
        let (c, done) = resolve_in(&map, b"", &judge);
        assert_eq!(
            done,
            Settling {
                entries: RESOLVE_ENTRIES,
                judged: 0,
                complete: false
            }
        );
        assert_eq!((c.lo, c.hi), (i64::MIN, HI));

        // Keys expired at the frozen clock, each in the undecided window.
        let mut map = KeyMap::new();
        for i in 0..RESOLVE_JUDGED + 10 {
            map.insert(
                format!("key:{i:07}").as_bytes(),
                Meta::new(STRING, Some(i as i64)),
            );
        }
        let judge = server(&map, 2_000 - 1, &asked);
        asked.set(0);
        let (c, done) = resolve_in(&map, b"", &judge);
        assert_eq!(done.judged, RESOLVE_JUDGED);
        assert_eq!(asked.get(), RESOLVE_JUDGED);
        assert!(!done.complete);
        // `lo` raised past the last expired key asked about.
        assert_eq!(c.lo, RESOLVE_JUDGED as i64);
    }

    /// The most the walk costs (without the server's key opens, measured
    /// in the server): [`RESOLVE_ENTRIES`] entries of a 1M-key map whose
    /// only key with a TTL sorts last (`cargo test --release --lib speed
    /// -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn speed_of_the_longest_settling() {
        let mut map = KeyMap::new();
        for i in 0..1_000_000 {
            map.insert(format!("key:{i:012}").as_bytes(), Meta::plain(STRING));
        }
        map.insert(b"zzz", Meta::new(STRING, Some(1_500)));
        let asked = Cell::new(0);
        let judge = server(&map, 1_000, &asked);
        // The median of many: the machine running it may be shared.
        let mut times: Vec<_> = (0..101)
            .map(|_| {
                let t = std::time::Instant::now();
                std::hint::black_box(resolve_in(&map, b"key:", &judge));
                t.elapsed()
            })
            .collect();
        times.sort();
        let (c, done) = resolve_in(&map, b"key:", &judge);
        println!("settling: {:?} (median of 101; {c:?}, {done:?})", times[50]);
        assert_eq!(done.entries, RESOLVE_ENTRIES);
    }

    proptest! {
        /// After the opening call, every key of the snapshot is judged at
        /// the resolved clock exactly as the script's frozen clock judges it.
        #[test]
        fn resolved_clock_judges_every_key_as_the_script(
            expiries in proptest::collection::vec(proptest::option::of(0i64..3_000), 0..60),
            t0 in 0i64..=HI,
            prefix in prop_oneof![Just(""), Just("k0"), Just("k02"), Just("k1")],
        ) {
            let names: Vec<String> = (0..expiries.len()).map(|i| format!("k{i:03}")).collect();
            let entries: Vec<(&str, Option<i64>)> =
                names.iter().map(String::as_str).zip(expiries.iter().copied()).collect();
            let map = map_of(&entries);
            let asked = Cell::new(0);
            let judge = server(&map, t0, &asked);
            let (c, done) = resolve_in(&map, prefix.as_bytes(), &judge);
            prop_assert!(done.complete);
            prop_assert!(prefix.is_empty() <= c.decided());
            // Every key of the range is judged as the script judges it,
            // both where the server is asked (inline: undecided keys) and
            // where it is not (workers: at `hi`).
            for (k, e) in &entries {
                if let (true, Some(e)) = (k.starts_with(prefix), e) {
                    prop_assert!(!(c.lo..c.hi).contains(e));
                    prop_assert_eq!(*e >= c.hi, *e >= t0);
                }
            }
        }
    }
}
