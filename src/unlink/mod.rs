//! SNAPSHOT.UNLINK pattern [TYPE type] [DRYRUN]
//!
//! Owns: deletions by pattern in flight (a worker walking a snapshot, the
//! main thread deleting in slices). May touch: the module state, the
//! keyspace subsystems, `scan::keyspace` (index readiness, inline budget),
//! the server layer (`deletion`: user, ACL, `UNLINK`) and the core.

use crate::args::{CmdError, SYNTAX};
use crate::collections::touched::Tracking;
use crate::glob::Pattern;
use crate::index::live::OpenRequest;
use crate::index::walk::{walk_all, ScanSpec};
use crate::index::{Key, Snapshot};
use crate::server::deletion::{self as deletion, User};
use crate::server::locked::ServerLock;
use crate::server::reply::Reply;
use crate::server::{self, blocked::BlockedReply, keys, mainloop, Ctx, OwnedString};
use crate::state::Shared;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Main-thread time one slice spends at most (checked between batches).
const SLICE_TIME: Duration = Duration::from_micros(600);
/// `snapshot.unlink-batch`: keys one slice handles at most (the slice also
/// ends after about [`SLICE_TIME`]).
/// Keys per `UNLINK` call (and between two clock checks).
const BATCH: usize = 64;
/// Keys the worker hands over at a time.
const PAGE: usize = 4096;

const IN_TRANSACTION: &str =
    "ERR SNAPSHOT.UNLINK cannot run inside MULTI, scripts or functions (it deletes in slices between other clients' commands)";

/// Keys found by the worker, waiting for the main thread: pages sent over
/// a channel, so the main thread never waits for a lock a worker (running
/// at low priority) might hold. The worker dropping its sender, however its
/// job ends (a panic included), means the search is over.
struct Found {
    /// `None`: every key is in `buf` already.
    rx: Option<Receiver<Vec<Key>>>,
    buf: VecDeque<Key>,
    over: bool,
}

impl Found {
    /// Up to `n` keys (none: the search is over); `None` when there are
    /// none now but more may come.
    fn take(&mut self, n: usize) -> Option<Vec<Key>> {
        while self.buf.len() < n && !self.over {
            let Some(rx) = &self.rx else {
                self.over = true;
                break;
            };
            match rx.try_recv() {
                Ok(page) => self.buf.extend(page),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => self.over = true,
            }
        }
        if self.buf.is_empty() && !self.over {
            return None;
        }
        let n = n.min(self.buf.len());
        Some(self.buf.drain(..n).collect())
    }
}

/// `SNAPSHOT.UNLINK pattern [TYPE type] [DRYRUN]`
///
/// Snapshots the selected database at the call; a worker lists the keys of
/// the snapshot matching the pattern (and type); the main thread unlinks
/// them through the server's own UNLINK in slices of at most
/// `snapshot.unlink-batch` keys or about [`SLICE_TIME`], one per turn of the event
/// loop, skipping keys the caller may not write, keys written since the
/// call and (in cluster mode) keys of slots this node does not own. The
/// caller waits for the count.
pub fn run(lock: &ServerLock, ctx: Ctx, args: &[&[u8]]) -> Result<(), CmdError> {
    if args.len() < 2 {
        return Err(CmdError::WrongArity);
    }
    let pattern = Pattern::new(args[1]);
    let (mut type_name, mut dryrun) = (None, false);
    let mut it = args[2..].iter().copied();
    while let Some(opt) = it.next() {
        if opt.eq_ignore_ascii_case(b"TYPE") {
            type_name = Some(it.next().ok_or_else(|| CmdError::msg(SYNTAX))?);
        } else if opt.eq_ignore_ascii_case(b"DRYRUN") {
            dryrun = true;
        } else {
            return Err(CmdError::msg(SYNTAX));
        }
    }
    let m =
        crate::module::try_get().ok_or_else(|| CmdError::msg("ERR snapscan is not initialised"))?;
    if server::blocking_denied(ctx) {
        return Err(CmdError::msg(IN_TRANSACTION));
    }
    crate::keyspace::tracking::settle(lock, m, &m.keyspace);
    crate::keyspace::in_use(lock, ctx, m, &m.keyspace, true).map_err(CmdError::msg)?;
    crate::scan::keyspace::index_ready(&m.keyspace.backfill)?;
    let type_filter = match type_name {
        None => None,
        Some(t) => Some(m.type_names().lookup(t).ok_or_else(|| {
            CmdError::msg(format!(
                "ERR unknown type name '{}'",
                String::from_utf8_lossy(t)
            ))
        })?),
    };
    if !deletion::acl_checks_available() {
        return Err(CmdError::msg(
            "ERR snapscan: this server cannot check key permissions for a module; SNAPSHOT.UNLINK is unavailable",
        ));
    }
    let user = deletion::current_user_name(ctx)
        .ok_or_else(|| CmdError::msg("ERR snapscan: cannot tell the calling user"))?;
    let db = server::selected_db(ctx);
    // The instant: the snapshot and the record of later writes start here.
    let req = m.open(db, server::command_time_ms());
    let tracking = m.watches.touched.track(db, pattern.clone());
    Shared::bump(&m.watches.touched.stats.calls, 1);
    let spec = ScanSpec {
        pattern: Some(pattern),
        type_filter,
        count: PAGE,
        budget: usize::MAX,
        expired_max: 0,
        expired_any_type: false,
    };
    let mut task = Task {
        m,
        cluster: &m.keyspace.cluster,
        db,
        user,
        dryrun,
        tracking,
        found: Found {
            rx: None,
            buf: VecDeque::new(),
            over: false,
        },
        reply: None,
        outcome: None,
        count: 0,
    };
    // A small match (the snapshot ready, the pattern's range within
    // `snapshot.inline-entries` entries) is found right here, and deleted
    // here if one slice suffices: no hand-off, no wait.
    let snap = match small_match(m, &req, &spec) {
        Err(snap) => snap,
        Ok(keys) => {
            task.found.buf.extend(keys);
            task.found.over = true;
            task.slice(ctx);
            match task.outcome.take() {
                Some(Ok(n)) => {
                    Reply::new(ctx).long(n as i64);
                    return Ok(());
                }
                Some(Err(e)) => return Err(CmdError::msg(e)),
                None => None, // more than one slice: go on below
            }
        }
    };
    task.reply = Some(
        BlockedReply::block(ctx, &m.stats.blocked_clients)
            .ok_or_else(|| CmdError::msg("ERR snapscan: cannot block the client"))?,
    );
    if !task.found.over {
        let (tx, rx) = channel();
        task.found.rx = Some(rx);
        m.on_worker(Box::new(move || {
            let snap = snap.unwrap_or_else(|| m.snapshot(&req));
            let mut after: Option<Key> = None;
            loop {
                let page = walk_all(&snap, after.as_ref(), &spec);
                // A send fails only once the main thread gave up: stop then.
                let sent = page.keys.is_empty() || tx.send(page.keys).is_ok();
                match page.resume_after {
                    Some(k) if sent => {
                        snap.advance(&k);
                        after = Some(k);
                    }
                    _ => break,
                }
            }
            m.reaper.dispose(snap);
        }));
    }
    mainloop::run_in_steps(ctx, Box::new(move |_lock, tctx| task.step(tctx)));
    Ok(())
}

/// Every matching key, if the snapshot is ready without waiting and the
/// walk ends within `snapshot.inline-entries` entries. Otherwise the
/// snapshot if it was had (the worker starts from it), else `None`.
fn small_match(
    m: &'static Shared,
    req: &OpenRequest,
    spec: &ScanSpec,
) -> Result<Vec<Key>, Option<Arc<Snapshot>>> {
    let limit = crate::config::get(&m.config.inline_entries);
    if limit == 0 {
        return Err(None);
    }
    let snap = m
        .try_snapshot(req, crate::scan::keyspace::INLINE_APPLY_MAX)
        .ok_or(None)?;
    let small = ScanSpec {
        count: limit,
        budget: limit,
        ..spec.clone()
    };
    let page = walk_all(&snap, None, &small);
    if page.resume_after.is_some() {
        return Err(Some(snap));
    }
    m.reaper.dispose(snap);
    Ok(page.keys)
}

/// The main-thread half of one call.
struct Task {
    m: &'static Shared,
    /// The slots this node owns, read again every slice.
    cluster: &'static crate::keyspace::cluster::ClusterView,
    db: usize,
    user: Vec<u8>,
    dryrun: bool,
    tracking: Tracking,
    found: Found,
    /// The waiting client, until answered (dropped unanswered: an error).
    reply: Option<BlockedReply>,
    /// The result, once over, when no client waits (answered inline).
    outcome: Option<Result<u64, String>>,
    count: u64,
}

impl Task {
    fn step(&mut self, ctx: Ctx) -> mainloop::Next {
        let (started, cpu) = (Instant::now(), deletion::thread_cpu_us());
        let switches = deletion::thread_voluntary_switches();
        let next = self.slice(ctx);
        self.m
            .latency
            .report(crate::server::latency::Event::Unlink, started);
        let us = started.elapsed().as_micros() as u64;
        let stats = &self.m.watches.touched.stats;
        stats.longest_slice_us.fetch_max(us, Ordering::Relaxed);
        let cpu_us = deletion::thread_cpu_us().saturating_sub(cpu);
        stats
            .longest_slice_cpu_us
            .fetch_max(cpu_us, Ordering::Relaxed);
        Shared::bump(&stats.slices, 1);
        if deletion::thread_voluntary_switches() != switches {
            Shared::bump(&stats.slices_blocked, 1);
        }
        next
    }

    fn slice(&mut self, ctx: Ctx) -> mainloop::Next {
        let stats = &self.m.watches.touched.stats;
        if self.tracking.ended() {
            // FLUSHDB/FLUSHALL/SWAPDB/a load: the snapshot's keys are gone
            // or elsewhere; stop with what was done.
            Shared::bump(&stats.stopped, 1);
            return self.answer(Ok(()));
        }
        if !self.dryrun && deletion::read_only_replica(ctx) {
            Shared::bump(&stats.stopped, 1);
            return self.answer(Err(format!(
                "READONLY You can't write against a read only replica. ({} keys unlinked before this server became one)",
                self.count
            )));
        }
        server::select_db(ctx, self.db);
        // Looked up again every slice: the user may be changed or deleted
        // meanwhile (then nothing more is deleted).
        let user = User::by_name(ctx, &self.user);
        // Cluster mode: the slots owned now (`None`: every key is).
        let owned = self.cluster.owned_slots(ctx, self.m);
        let (started, mut handled) = (Instant::now(), 0usize);
        let slice_keys = crate::config::get(&self.m.config.unlink_batch).max(1);
        while handled < slice_keys && started.elapsed() < SLICE_TIME {
            let Some(batch) = self.found.take(BATCH.min(slice_keys - handled)) else {
                // The worker is still searching: look again in 1 ms (or on
                // the next turn if this slice did something).
                return if handled == 0 {
                    mainloop::Next::After(1)
                } else {
                    mainloop::Next::Again
                };
            };
            if batch.is_empty() {
                return self.answer(Ok(()));
            }
            handled += batch.len();
            let mut names = Vec::with_capacity(batch.len());
            for k in &batch {
                if self.tracking.written(k.as_bytes()) {
                    Shared::bump(&stats.keys_written, 1);
                    continue;
                }
                if owned.as_ref().is_some_and(|o| !o.holds_key(k.as_bytes())) {
                    Shared::bump(&stats.keys_not_owned, 1);
                    continue;
                }
                let Some(name) = OwnedString::new(ctx, k.as_bytes()) else {
                    continue;
                };
                if !user.as_ref().is_some_and(|u| u.may_unlink(&name)) {
                    Shared::bump(&stats.keys_denied, 1);
                    continue;
                }
                if !self.dryrun {
                    names.push(name);
                } else if keys::probe(ctx, name.ptr(), &self.m.named_types).is_some() {
                    self.count += 1;
                }
            }
            if names.is_empty() {
                continue;
            }
            let deleting = self.tracking.deleting();
            let r = unlink_names(ctx, names);
            drop(deleting);
            let (n, failed) = match r {
                Ok(n) => (n, None),
                Err((n, e)) => (n, Some(e)),
            };
            self.count += n;
            Shared::bump(&stats.keys_unlinked, n);
            if let Some(e) = failed {
                return self.answer(Err(format!(
                    "ERR snapscan: UNLINK failed after {} keys: {e}",
                    self.count
                )));
            }
        }
        mainloop::Next::Again
    }

    fn answer(&mut self, outcome: Result<(), String>) -> mainloop::Next {
        let outcome = outcome.map(|()| self.count);
        match self.reply.take() {
            Some(bc) => bc.reply(|r| match &outcome {
                Ok(n) => r.long(*n as i64),
                Err(e) => r.error(e),
            }),
            None => self.outcome = Some(outcome),
        }
        mainloop::Next::Done
    }
}

/// `UNLINK`s `names` through the server. In cluster mode one call per
/// hash slot: the server refuses a multi-key call across slots (CROSSSLOT).
/// A failed call stops there: `Err((keys unlinked before it, the server's
/// error))`.
fn unlink_names(ctx: Ctx, names: Vec<OwnedString>) -> Result<u64, (u64, String)> {
    if !server::host::cluster_mode(ctx) {
        return deletion::unlink(ctx, &names).map_err(|e| (0, e));
    }
    let mut by_slot: Vec<(u16, OwnedString)> = names
        .into_iter()
        .map(|n| (crate::slot::key_slot(server::string_bytes(n.ptr())), n))
        .collect();
    by_slot.sort_by_key(|(slot, _)| *slot);
    sum_runs(by_slot.chunk_by(|a, b| a.0 == b.0), |run| {
        let run: Vec<&OwnedString> = run.iter().map(|(_, n)| n).collect();
        deletion::unlink_refs(ctx, &run)
    })
}

/// Calls `call` on each run in turn and adds up what each unlinked; the
/// first failure stops there: `Err((the total before it, its error))`.
fn sum_runs<R>(
    runs: impl IntoIterator<Item = R>,
    mut call: impl FnMut(R) -> Result<u64, String>,
) -> Result<u64, (u64, String)> {
    let mut total = 0;
    for run in runs {
        total += call(run).map_err(|e| (total, e))?;
    }
    Ok(total)
}

/// SNAPSHOT.UNLINK figures for INFO.
pub fn info_figures(m: &Shared) -> [(&'static str, u64); 10] {
    let s = &m.watches.touched.stats;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    [
        ("unlink_calls", get(&s.calls)),
        ("unlink_keys_unlinked", get(&s.keys_unlinked)),
        ("unlink_keys_denied", get(&s.keys_denied)),
        ("unlink_keys_written_since", get(&s.keys_written)),
        ("unlink_keys_not_owned", get(&s.keys_not_owned)),
        ("unlink_stopped_early", get(&s.stopped)),
        ("unlink_longest_slice_us", get(&s.longest_slice_us)),
        ("unlink_longest_slice_cpu_us", get(&s.longest_slice_cpu_us)),
        ("unlink_slices", get(&s.slices)),
        ("unlink_slices_blocked", get(&s.slices_blocked)),
    ]
}

#[cfg(test)]
mod tests {
    use super::sum_runs;
    use rstest::rstest;

    #[rstest]
    #[case::all_succeed(vec![Ok(2), Ok(0), Ok(3)], Ok(5), 3)]
    #[case::first_fails(vec![Err("E1"), Ok(2)], Err((0, "E1")), 1)]
    #[case::a_later_one_fails(vec![Ok(2), Ok(1), Err("E2"), Ok(4)], Err((3, "E2")), 3)]
    #[case::none(vec![], Ok(0), 0)]
    fn a_failed_run_keeps_the_total_before_it_and_stops(
        #[case] results: Vec<Result<u64, &str>>,
        #[case] want: Result<u64, (u64, &str)>,
        #[case] calls: usize,
    ) {
        let mut made = 0;
        let got = sum_runs(results, |r| {
            made += 1;
            r.map_err(str::to_string)
        });
        assert_eq!(got, want.map_err(|(n, e)| (n, e.to_string())));
        assert_eq!(made, calls, "no call after the failed one");
    }
}
