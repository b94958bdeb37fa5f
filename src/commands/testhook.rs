//! SNAPSHOT.TESTHOOK: fault injection for the integration tests
//! (tests/robust.rs). **Test-only**: registered only when the environment
//! variable `SNAPSCAN_TEST_HOOKS=1` is set when the module loads; a
//! production server never has it.

use crate::args::CmdError;
use crate::runtime::Fault;
use crate::server::locked::ServerLock;
use crate::server::{reply::Reply, Ctx};
use crate::state::Shared;
use std::sync::atomic::Ordering;

/// Whether the test hooks are enabled (read once, at load).
pub fn enabled() -> bool {
    std::env::var("SNAPSCAN_TEST_HOOKS").is_ok_and(|v| v == "1")
}

/// Applies `SNAPSCAN_TEST_FAIL_SPAWNS=<n>` (the next n thread spawns fail)
/// before the module starts its threads, and `SNAPSCAN_TEST_RETRY_MS=<ms>`
/// (used cursors stay answerable that long instead of `cursor::RETRY_MS`,
/// so that tests of what ends after the window need not wait 10 s);
/// test-only like the command.
pub fn at_load(m: &Shared) {
    if !enabled() {
        return;
    }
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = var("SNAPSCAN_TEST_FAIL_SPAWNS") {
        m.threads.faults.fail_next_spawns(n as usize);
    }
    if let Some(ms) = var("SNAPSCAN_TEST_RETRY_MS") {
        m.cursors.set_retry_ms(ms);
        m.hash_cursors.set_retry_ms(ms);
        m.live()
            .set_retry_hold(std::time::Duration::from_millis(ms));
    }
}

/// `SNAPSHOT.TESTHOOK PANIC indexer|janitor|reaper|worker | PAUSE-INDEXER 0|1 | FAIL-SPAWNS <n> | META <key> | MISSING 0`
///
/// `META key`: what the index holds for `key` in the selected database,
/// everything logged so far applied: `[type id, expiry in Unix ms or -1]`,
/// or -2 when it does not hold the key (as `PEXPIRETIME` answers).
pub fn run(lock: &ServerLock, ctx: Ctx, args: &[&[u8]]) -> Result<(), CmdError> {
    let m =
        crate::module::try_get().ok_or_else(|| CmdError::msg("ERR snapscan is not initialised"))?;
    let (Some(what), Some(arg)) = (args.get(1), args.get(2)) else {
        return Err(CmdError::WrongArity);
    };
    let is = |a: &[u8], s: &str| a.eq_ignore_ascii_case(s.as_bytes());
    if is(what, "panic") {
        if is(arg, "indexer") {
            m.threads.faults.inject(Fault::Indexer);
        } else if is(arg, "janitor") {
            m.threads.faults.inject(Fault::Janitor);
        } else if is(arg, "reaper") {
            m.threads.faults.inject(Fault::Reaper);
            m.reaper.dispose(()); // wakes it
        } else if is(arg, "worker") {
            let _ = m
                .pool
                .submit(Box::new(|| panic!("injected fault (test hook)")));
        } else {
            return Err(CmdError::msg("ERR syntax error"));
        }
    } else if is(what, "meta") {
        crate::keyspace::tracking::settle(lock, m, &m.keyspace);
        let db = crate::server::selected_db(ctx);
        let snap = m.snapshot(&m.open(db, 0));
        let r = Reply::new(ctx);
        match snap.get(arg) {
            None => r.long(-2),
            Some(meta) => {
                r.array(2);
                r.long(i64::from(meta.type_id()));
                r.long(meta.expire_at().unwrap_or(-1));
            }
        }
        return Ok(());
    } else if is(what, "missing") {
        // Keys the server holds (RedisModule_Scan: logically expired ones
        // too) that the index does not, in the selected database.
        crate::keyspace::tracking::settle(lock, m, &m.keyspace);
        let db = crate::server::selected_db(ctx);
        let snap = m.snapshot(&m.open(db, 0));
        let mut missing: Vec<Vec<u8>> = vec![];
        if let Some(mut cur) = crate::server::scan::Cursor::new() {
            while cur.scan(ctx, |_, name, key| {
                let b = crate::server::string_bytes(name);
                if snap.get(b).is_none() {
                    let mut line = b.to_vec();
                    if !key.is_null() {
                        let at = crate::server::keys::expire_of(key).unwrap_or(-1);
                        line.extend_from_slice(format!(" (expires at {at})").as_bytes());
                    }
                    missing.push(line);
                }
            }) {}
        }
        let r = Reply::new(ctx);
        r.array(missing.len());
        for k in &missing {
            r.bulk(k);
        }
        return Ok(());
    } else if is(what, "pause-indexer") {
        m.pause_indexer.store(is(arg, "1"), Ordering::SeqCst);
    } else if is(what, "fail-spawns") {
        let n = std::str::from_utf8(arg)
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
            .ok_or_else(|| CmdError::msg("ERR value is not an integer or out of range"))?;
        m.threads.faults.fail_next_spawns(n);
    } else {
        return Err(CmdError::msg("ERR syntax error"));
    }
    let r = Reply::new(ctx);
    r.bulk(b"OK");
    Ok(())
}
