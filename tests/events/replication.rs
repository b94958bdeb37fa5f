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
