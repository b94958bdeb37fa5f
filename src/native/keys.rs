//! SNAPSHOT.KEYS pattern

use crate::args::CmdError;
use crate::glob::Pattern;
use crate::index::walk::{walk_snapshot_at, ScanSpec};
use crate::scan::keyspace::index_ready;
use crate::server::locked::ServerLock;
use crate::server::{self, blocked::BlockedReply, Ctx};
use crate::state::{self, Shared};

/// `SNAPSHOT.KEYS pattern`
///
/// Every key of the selected database matching `pattern`, as KEYS answers,
/// from a point-in-time snapshot walked and written on a worker: the caller
/// waits, the main thread only cuts the snapshot and hands the finished
/// reply over. Where the client cannot be blocked (MULTI, Lua, functions)
/// KEYS itself answers.
pub fn run(lock: &ServerLock, ctx: Ctx, args: &[&[u8]]) -> Result<(), CmdError> {
    let [_, pattern] = args else {
        return Err(CmdError::WrongArity);
    };
    if server::blocking_denied(ctx) {
        return server::native::forward(ctx, c"KEYS", &[pattern])
            .map_err(|e| CmdError::msg(format!("ERR snapscan: cannot run keys: {e}")));
    }
    let m =
        crate::module::try_get().ok_or_else(|| CmdError::msg("ERR snapscan is not initialised"))?;
    state::ensure_threads(m);
    crate::keyspace::tracking::settle(lock, m, &m.keyspace);
    crate::keyspace::in_use(lock, ctx, m, &m.keyspace, true).map_err(CmdError::msg)?;
    index_ready(&m.keyspace.backfill)?;
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
        budget: usize::MAX,
    };
    let bc = BlockedReply::block(ctx, &m.stats.blocked_clients)
        .ok_or_else(|| CmdError::msg("ERR snapscan: cannot block the client"))?;
    m.on_worker(Box::new(move || {
        let snap = m.snapshot(&req);
        let page = walk_snapshot_at(&snap, snap.at_ms, None, &spec);
        Shared::bump(&m.stats.entries_examined, page.examined as u64);
        Shared::bump(&m.stats.keys_returned, page.keys.len() as u64);
        m.reaper.dispose(snap);
        bc.reply(|r| {
            r.array(page.keys.len());
            for k in &page.keys {
                r.bulk(k.as_bytes());
            }
        });
    }));
    Ok(())
}
