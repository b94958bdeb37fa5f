//! Whole-database operations during an open iteration.

use super::*;

/// What happens to the database between the first page and the rest.
#[derive(Debug, Clone, Copy)]
enum DbOp {
    FlushDb,
    FlushDbAsync,
    FlushAll,
    FlushAllAsync,
    SwapDb,
    SwapDbTwice,
    MoveAll,
    FlushThenRecreate,
    SwapThenFlushBoth,
    DebugReload,
    Evict,
}

fn apply_db_op(w: &mut Connection, op: DbOp, keys: &[Bytes]) {
    let mut pipe = redis::pipe();
    match op {
        DbOp::FlushDb => pipe.cmd("FLUSHDB").ignore(),
        DbOp::FlushDbAsync => pipe.cmd("FLUSHDB").arg("ASYNC").ignore(),
        DbOp::FlushAll => pipe.cmd("FLUSHALL").ignore(),
        DbOp::FlushAllAsync => pipe.cmd("FLUSHALL").arg("ASYNC").ignore(),
        DbOp::SwapDb => pipe.cmd("SWAPDB").arg(0).arg(1).ignore(),
        DbOp::SwapDbTwice => pipe
            .cmd("SWAPDB")
            .arg(0)
            .arg(1)
            .ignore()
            .cmd("DEL")
            .arg(&keys[0])
            .ignore()
            .cmd("SWAPDB")
            .arg(1)
            .arg(0)
            .ignore(),
        DbOp::MoveAll => {
            for k in keys {
                // SELECT 0: see valkey-io/valkey#4024 (Valkey 8.1).
                pipe.cmd("MOVE")
                    .arg(k)
                    .arg(1)
                    .ignore()
                    .cmd("SELECT")
                    .arg(0)
                    .ignore();
            }
            &mut pipe
        }
        DbOp::FlushThenRecreate => {
            pipe.cmd("FLUSHDB").ignore();
            // Same names, other types, plus keys the snapshot never had.
            for (i, k) in keys.iter().enumerate() {
                create(&mut pipe, k, (i + 2) % TYPES.len());
            }
            for i in 0..50 {
                pipe.cmd("SET").arg(format!("k:new{i}")).arg(1).ignore();
            }
            &mut pipe
        }
        DbOp::SwapThenFlushBoth => pipe
            .cmd("SWAPDB")
            .arg(0)
            .arg(1)
            .ignore()
            .cmd("FLUSHDB")
            .ignore()
            .cmd("SELECT")
            .arg(1)
            .ignore()
            .cmd("FLUSHDB")
            .ignore()
            .cmd("SELECT")
            .arg(0)
            .ignore(),
        DbOp::DebugReload => pipe.cmd("DEBUG").arg("RELOAD").ignore(),
        DbOp::Evict => {
            evict_some(w);
            &mut pipe
        }
    };
    let () = pipe.query(w).unwrap_or_else(|e| panic!("{op:?}: {e}"));
    // Writes after the operation must not show up in the old snapshot either.
    let mut after = redis::pipe();
    for (i, k) in keys.iter().enumerate().step_by(3) {
        after.cmd("SET").arg(k).arg("after").ignore();
        after
            .cmd("HSET")
            .arg(format!("k:after{i}"))
            .arg("f")
            .arg("v")
            .ignore();
    }
    run_ignoring_errors(w, &after);
}

/// Lowers maxmemory (allkeys-random) under a burst of large writes until the
/// server has evicted keys, then lifts the limit.
fn evict_some(w: &mut Connection) {
    let used = info_section_u64(w, "memory", "used_memory");
    let limit = (used + 2 * 1024 * 1024).to_string();
    config_set(w, "maxmemory-policy", "allkeys-random");
    config_set(w, "maxmemory", &limit);
    let big = "x".repeat(100_000);
    let mut pipe = redis::pipe();
    for i in 0..60 {
        pipe.cmd("SET").arg(format!("big:{i}")).arg(&big).ignore();
    }
    run_ignoring_errors(w, &pipe);
    config_set(w, "maxmemory", "0");
    let evicted = info_section_u64(w, "stats", "evicted_keys");
    assert!(evicted > 0, "nothing was evicted");
}

#[rstest]
#[case::flushdb(DbOp::FlushDb)]
#[case::flushdb_async(DbOp::FlushDbAsync)]
#[case::flushall(DbOp::FlushAll)]
#[case::flushall_async(DbOp::FlushAllAsync)]
#[case::swapdb(DbOp::SwapDb)]
#[case::swapdb_twice(DbOp::SwapDbTwice)]
#[case::move_all(DbOp::MoveAll)]
#[case::flush_then_recreate(DbOp::FlushThenRecreate)]
#[case::swap_then_flush_both(DbOp::SwapThenFlushBoth)]
#[case::debug_reload(DbOp::DebugReload)]
#[case::evict(DbOp::Evict)]
fn open_iterations_survive_whole_db_operations(#[case] op: DbOp) {
    let server = Server::start();
    let mut scan = server.client();
    let mut w = server.client();
    let mut rng = Rng(op as u64 + 1);
    let model = random_keys(&mut w, &mut rng, "k:", 1000, 400);
    ok(&mut w, &["SELECT", "1"]);
    let other = random_keys(&mut w, &mut rng, "k:", 1000, 150);
    ok(&mut w, &["SELECT", "0"]);

    let keys: Vec<Bytes> = model.keys().cloned().collect();
    let all = native(&mut scan, &[]);
    assert_eq!(all, set_of(&keys), "native SCAN vs model");
    let matched = native(&mut scan, &[b"MATCH", b"k:1*"]);
    let hashes = native(&mut scan, &[b"TYPE", b"hash"]);
    assert!(!matched.is_empty() && !hashes.is_empty());
    let mut its = [
        Iteration::open(&mut scan, "no filter", &[], 7, all),
        Iteration::open(
            &mut scan,
            "MATCH k:1*",
            &[b("MATCH"), b("k:1*")],
            3,
            matched,
        ),
        Iteration::open(&mut scan, "TYPE hash", &[b("TYPE"), b("hash")], 5, hashes),
    ];
    // An iteration in db 1 too: SWAPDB/FLUSHALL hit it from the other side.
    ok(&mut scan, &["SELECT", "1"]);
    let db1 = Iteration::open(&mut scan, "db 1", &[], 4, other.keys().cloned().collect());
    ok(&mut scan, &["SELECT", "0"]);
    assert!(
        its.iter().all(|it| !it.done()),
        "first pages already complete"
    );

    apply_db_op(&mut w, op, &keys);

    for it in its.iter_mut() {
        while !it.done() {
            it.step(&mut scan);
        }
        it.check();
    }
    ok(&mut scan, &["SELECT", "1"]);
    let mut db1 = db1;
    while !db1.done() {
        db1.step(&mut scan);
    }
    db1.check();
    // New snapshots see the state after the operation, in both databases.
    for db in ["1", "0"] {
        ok(&mut scan, &["SELECT", db]);
        let now = native(&mut scan, &[]);
        assert_same(
            &snap_keys(&mut scan, &[b"COUNT", b"50"]),
            &now,
            &format!("db {db} after {op:?}"),
        );
    }
}
