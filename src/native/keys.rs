//! SNAPSHOT.KEYS pattern, and the served KEYS (`snapshot.serve-native`).

use crate::args::CmdError;
use crate::glob::Pattern;
use crate::index::walk::{walk_snapshot_at, ScanSpec};
use crate::scan::keyspace::index_ready;
use crate::server::locked::ServerLock;
use crate::server::{self, blocked::BlockedReply, Ctx};
use crate::state::{self, Shared};
use std::sync::atomic::Ordering;

/// Index entries one slice of a KEYS walk examines: between two, the walk
/// stops if its client disconnected, and lets the collector free what it
/// passed.
const SLICE: usize = 65_536;

/// KEYS walks queued or running at most, per worker thread: beyond, a
/// served KEYS runs natively and SNAPSHOT.KEYS answers `TRYAGAIN`.
pub const IN_FLIGHT_PER_WORKER: usize = 4;

/// Bytes over the client's output-buffer hard limit a cut reply carries
/// at least: the server counts less than the protocol bytes it holds (its
/// first buffer of each client is not counted), so a reply cut by this
/// margin over the limit is always over it in the server's eyes too.
const CUT_MARGIN: u64 = 1 << 20;

/// `SNAPSHOT.KEYS pattern`
///
/// Every key of the selected database matching `pattern`, as KEYS answers,
/// from a point-in-time snapshot walked and written on a worker: the caller
/// waits, the main thread only cuts the snapshot and hands the finished
/// reply over. Where the client cannot be blocked (MULTI, Lua, functions)
/// KEYS itself answers.
pub fn run(lock: &ServerLock, ctx: Ctx, args: &[&[u8]]) -> Result<(), CmdError> {
    run_as(lock, ctx, args, false).map(|_| ())
}

/// [`run`] for a KEYS the filter routed (`served`): where SNAPSHOT.KEYS
/// answers an error, the native command answers instead. `Ok(true)` when
/// the native command answered.
///
/// Like the native command, the reply respects the client's output-buffer
/// hard limit (`client-output-buffer-limit normal`): a walk whose reply
/// grows past it stops, and the server closes the client on the cut reply,
/// as it does natively, instead of the whole reply being built first. A
/// walk whose client disconnects stops at its next slice.
pub fn run_as(lock: &ServerLock, ctx: Ctx, args: &[&[u8]], served: bool) -> Result<bool, CmdError> {
    let [_, pattern] = args else {
        return Err(CmdError::WrongArity);
    };
    let native = |ctx| {
        server::native::forward(ctx, c"KEYS", &[pattern])
            .map(|()| true)
            .map_err(|e| CmdError::msg(format!("ERR snapscan: cannot run keys: {e}")))
    };
    if server::blocking_denied(ctx) {
        return native(ctx);
    }
    let m =
        crate::module::try_get().ok_or_else(|| CmdError::msg("ERR snapscan is not initialised"))?;
    state::ensure_threads(m);
    let bound = IN_FLIGHT_PER_WORKER * m.pool.target().max(1);
    if m.keys_in_flight.load(Ordering::Relaxed) >= bound {
        Shared::bump(&m.stats.keys_refused_busy, 1);
        if served {
            return native(ctx);
        }
        return Err(CmdError::msg(format!(
            "TRYAGAIN snapscan: {bound} KEYS walks in flight ({IN_FLIGHT_PER_WORKER} per worker); retry later"
        )));
    }
    crate::keyspace::tracking::settle(lock, m, &m.keyspace);
    crate::keyspace::in_use(lock, ctx, m, &m.keyspace, true).map_err(CmdError::msg)?;
    index_ready(&m.keyspace.backfill)?;
    let limit = server::host::config_get(ctx, c"client-output-buffer-limit")
        .and_then(|v| normal_hard_limit(&v))
        .unwrap_or(0);
    let db = server::selected_db(ctx);
    Shared::bump(&m.stats.snapshots_opened, 1);
    Shared::bump(&m.stats.scans, 1);
    let req = m.open_in(
        db,
        server::command_time_ms(),
        m.keyspace.cluster.visible_slots(ctx, m),
    );
    let spec = ScanSpec {
        pattern: Some(Pattern::new(pattern)),
        type_filter: None,
        count: usize::MAX,
        budget: SLICE,
        expired_max: 0,
        expired_any_type: false,
    };
    let mut bc = BlockedReply::block(ctx, &m.stats.blocked_clients)
        .ok_or_else(|| CmdError::msg("ERR snapscan: cannot block the client"))?;
    let gone = bc.watch_disconnect();
    m.keys_in_flight.fetch_add(1, Ordering::Relaxed);
    m.on_worker(Box::new(move || {
        let _in_flight = InFlight(&m.keys_in_flight);
        let snap = m.snapshot(&req);
        let mut keys = Vec::new();
        let mut bytes = 0u64;
        let mut after = None;
        let cut_at = if limit == 0 {
            u64::MAX
        } else {
            limit.saturating_add(CUT_MARGIN)
        };
        loop {
            if gone.load(Ordering::Relaxed) {
                Shared::bump(&m.stats.keys_abandoned, 1);
                m.reaper.dispose(snap);
                // Nobody reads it: the client is gone.
                bc.reply(|r| r.error("ERR snapscan: the client disconnected"));
                return;
            }
            let page = walk_snapshot_at(&snap, snap.at_ms, after.as_ref(), &spec);
            Shared::bump(&m.stats.entries_examined, page.examined as u64);
            for k in page.keys {
                bytes += resp_bulk_len(k.as_bytes().len());
                keys.push(k);
            }
            if bytes >= cut_at {
                Shared::bump(&m.stats.keys_over_output_limit, 1);
                break;
            }
            match page.resume_after {
                Some(k) => {
                    snap.advance(&k);
                    after = Some(k);
                }
                None => break,
            }
        }
        Shared::bump(&m.stats.keys_returned, keys.len() as u64);
        m.reaper.dispose(snap);
        bc.reply(|r| {
            r.array(keys.len());
            for k in &keys {
                r.bulk(k.as_bytes());
            }
        });
    }));
    Ok(false)
}

/// Lowers the count of KEYS walks in flight when the walk ends (also on a
/// panic).
struct InFlight(&'static std::sync::atomic::AtomicUsize);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Protocol bytes of a bulk string of `len` bytes (`$<len>\r\n...\r\n`).
fn resp_bulk_len(len: usize) -> u64 {
    let digits = len.checked_ilog10().unwrap_or(0) as u64 + 1;
    len as u64 + digits + 5
}

/// The hard limit (bytes; 0: none) of the `normal` class in a
/// `client-output-buffer-limit` value as CONFIG GET gives it
/// (`normal 0 0 0 replica 268435456 67108864 60 pubsub ...`).
fn normal_hard_limit(v: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(v).ok()?;
    let mut words = text.split_ascii_whitespace();
    while let Some(w) = words.next() {
        if w.eq_ignore_ascii_case("normal") {
            return words.next()?.parse().ok();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(
        b"normal 0 0 0 replica 268435456 67108864 60 pubsub 33554432 8388608 60",
        Some(0)
    )]
    #[case(
        b"normal 1048576 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60",
        Some(1_048_576)
    )]
    #[case(b"replica 1 2 3 normal 42 0 0", Some(42))]
    #[case(b"NORMAL 7 0 0", Some(7))]
    #[case(b"normal", None)]
    #[case(b"normal x 0 0", None)]
    #[case(b"", None)]
    fn reads_the_normal_hard_limit(#[case] v: &[u8], #[case] want: Option<u64>) {
        assert_eq!(normal_hard_limit(v), want);
    }

    #[rstest]
    #[case(0, 6)]
    #[case(1, 7)]
    #[case(9, 15)]
    #[case(10, 17)]
    #[case(12, 19)]
    #[case(100, 108)]
    fn counts_a_bulk_string_s_protocol_bytes(#[case] len: usize, #[case] want: u64) {
        assert_eq!(resp_bulk_len(len), want);
    }
}
