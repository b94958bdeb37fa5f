//! Replication.

use super::*;

#[test]
fn replica_index_follows_primary() {
    let (primary, mut p, mut pchk) = server_with_bg();
    let script = "SET a 1 EX 100000; HSET h f v; SELECT 3; RPUSH l x; SET %00%FF v";
    assert!(run_script(&mut p, &mut pchk, script, &[0, 3], false));
    let (_replica, mut r) = start_replica(&primary);
    let dbs = [0, 3, 5];
    wait_until("the replica to sync", WAIT, || {
        dbs.iter()
            .all(|&db| dbsize_in(&mut r, db) == dbsize_in(&mut pchk, db))
    });
    let _ = wait_not_loading(&mut r);
    assert_replica_matches(&mut pchk, &mut r, &dbs, "after full sync");
    assert_index_sizes(&mut r, &dbs);

    // More changes on the primary, streamed to the replica.
    select(&mut p, 0);
    let script = "DEL h; SET b 2; RENAME a a2; \
                  SET short v PX 100; HSET short2 f v; PEXPIRE short2 100; \
                  SWAPDB 0 3; SELECT 3; UNLINK bg0:list; SELECT 5; SET bg5 v EX 100000; HSET c f v; \
                  MULTI; SET m 1; DEL c; SET m2 1; EXEC; \
                  EVAL \"redis.call('SET',KEYS[1],'v'); redis.call('DEL',KEYS[2]); return 1\" 2 lua m2";
    // No step checks: the 100 ms keys may expire between the two scans.
    assert!(run_script(&mut p, &mut pchk, script, &dbs, false));
    // The short TTLs pass and the primary's active expiry deletes the keys
    // (replicated as DEL).
    wait_until("active expiry on the primary", WAIT, || {
        dbsize_in(&mut pchk, 3) == 8
    });
    wait_until("the replica to catch up", WAIT, || {
        repl_offset(&mut r) == repl_offset(&mut pchk)
            && dbs
                .iter()
                .all(|&db| dbsize_in(&mut r, db) == dbsize_in(&mut pchk, db))
    });
    assert_keyspace(
        &mut r,
        &parse_expect("0: @bg3 l %00%FF; 3: @bg0 -bg0:list a2 b; 5: bg5 m lua"),
        "replica after changes",
    );
    assert_replica_matches(&mut pchk, &mut r, &dbs, "after more writes");
    assert_index_sizes(&mut r, &dbs);
}

/// A key written with an expiry already passed (`SET ... PXAT <past>`,
/// which some servers keep until they expire it) is gone on the replica
/// too once the primary expires it. On Redis 7.0 the module's own read of
/// the key in the command's "expire" event deleted it and propagated the
/// DEL ahead of the SET: the replica kept the key for good (DBSIZE 1
/// against 0; issue 24, fuzz redis-7.0 replica seed 400000).
#[rstest]
#[case::set("SET k v PXAT {past}")]
#[case::set_exat("SET k v EXAT {past_s}")]
#[case::set_over_a_key("SET k old; SET k v PXAT {past}")]
#[case::set_get("SET k old; SET k v PXAT {past} GET")]
#[case::multi("MULTI; SET k v PXAT {past}; SET x 1; EXEC")]
#[case::multi_fuzz(
    "MULTI; RPUSH l 230 v1; SET k 306 PXAT {past}; ZREM z m2; SET l v2 PXAT {past} GET; HSETNX h m10 135; EXEC; SETBIT b 38 1"
)]
#[case::script(
    "EVAL \"redis.call('SET','k','v','PXAT',ARGV[1]); return redis.call('SET','x','1')\" 0 {past}"
)]
fn replica_drops_a_key_written_with_a_past_expiry(#[case] script: &str) {
    let (primary, mut p, mut pchk) = server_with_bg();
    let (_replica, mut r) = start_replica(&primary);
    let past = now_ms() - 10_000;
    let script = script
        .replace("{past_s}", &(past / 1000).to_string())
        .replace("{past}", &past.to_string());
    assert!(run_script(&mut p, &mut pchk, &script, &[0], false));
    // The primary expires `k` (a lookup, where the active cycle has not yet).
    let exists: i64 = query(&mut pchk, &["EXISTS", "k"]).unwrap();
    assert_eq!(
        exists, 0,
        "{script}: `k` outlived its expiry on the primary"
    );
    wait_until("the replica to catch up", WAIT, || {
        repl_offset(&mut r) == repl_offset(&mut pchk)
    });
    let (pn, rn) = (dbsize_in(&mut pchk, 0), dbsize_in(&mut r, 0));
    assert_eq!(
        pn, rn,
        "{script}: DBSIZE of the primary {pn}, of the replica {rn}"
    );
    assert_replica_matches(&mut pchk, &mut r, &[0], &script);
    assert_index_sizes(&mut pchk, &[0]);
    assert_index_sizes(&mut r, &[0]);
}

/// A key whose TTL passes while the module still has to read it (the
/// key of an `expire` event is read after its command on Redis 7.0), then a
/// `SWAPDB` or `FLUSHDB` of another database: the replica ends with the
/// primary's keyspace. The module read it during the `SWAPDB` in every
/// database, which on Redis 7.0 deleted it and put the `DEL` ahead of the
/// swap: the replica applied it to the database before the swap and kept
/// the key for good (issue 24, fuzz redis-7.0 replica seed 300004).
#[rstest]
#[case::swapdb("SWAPDB 0 1", 1)]
#[case::swapdb_other_way("SWAPDB 1 0", 1)]
#[case::flushdb_other("SELECT 2; FLUSHDB; SELECT 0", 0)]
fn replica_follows_a_bulk_change_after_a_ttl_passed(#[case] bulk: &str, #[case] db: u32) {
    let (primary, mut p, mut pchk) = server_with_bg();
    let (_replica, mut r) = start_replica(&primary);
    let _: () = query(&mut p, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]).unwrap();
    let _: () = query(&mut p, &["SET", "k", "v", "PX", "50"]).unwrap();
    let set_at = server_ms(&mut pchk);
    wait_until("the TTL to pass", WAIT, || {
        server_ms(&mut pchk) > set_at + 60
    });
    assert!(run_script(&mut p, &mut pchk, bulk, &[0, 1, 2], false));
    // The primary expires `k` where it now is, and says so to the replica.
    select(&mut pchk, db);
    let exists: i64 = query(&mut pchk, &["EXISTS", "k"]).unwrap();
    assert_eq!(exists, 0, "{bulk}: `k` outlived its TTL");
    wait_until("the replica to catch up", WAIT, || {
        repl_offset(&mut r) == repl_offset(&mut pchk)
    });
    for d in [0, 1, 2] {
        let (pn, rn) = (dbsize_in(&mut pchk, d), dbsize_in(&mut r, d));
        assert_eq!(
            pn, rn,
            "{bulk}: db {d}: DBSIZE of the primary {pn}, of the replica {rn}"
        );
    }
    assert_replica_matches(&mut pchk, &mut r, &[0, 1, 2], bulk);
    assert_index_sizes(&mut pchk, &[0, 1, 2]);
}

/// The wall clock, Unix ms.
fn now_ms() -> i64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970");
    d.as_millis() as i64
}
