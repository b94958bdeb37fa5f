//! Commands that change a key in another db than the caller's.

use super::*;

fn client_db(con: &mut Connection) -> u32 {
    let info = cmd_str(con, &["CLIENT", "INFO"]);
    info.split_whitespace()
        .find_map(|f| f.strip_prefix("db="))
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("no db= in CLIENT INFO: {info}"))
}

/// A command that writes a key in another db (MOVE, COPY ... DB, a script's
/// MOVE, DEBUG RELOAD loading keys of db 3) must leave the caller's selected
/// db alone; the table cases re-SELECT after such commands so that they test
/// the index on every server.
///
/// Valkey 8.1 selects the event's db on the calling client before it calls a
/// module subscribed to keyspace events (valkey-io/valkey#4024); snapscan
/// selects the caller's db back (src/ffi/clientdb.rs).
#[rstest]
#[case::move_("SET a 1; MOVE a 3", "0: @bg0 marker; 3: @bg3 a")]
#[case::copy_db("SET a 1; COPY a a DB 3", "0: @bg0 a marker; 3: @bg3 a")]
#[case::eval_move(
    "SET a 1; EVAL \"redis.call('MOVE','a','3'); return redis.call('SET','inscript','1')\" 0",
    "0: @bg0 inscript marker; 3: @bg3 a"
)]
#[case::debug_reload(
    "SELECT 3; SET a 1; SELECT 0; DEBUG RELOAD",
    "0: @bg0 marker; 3: @bg3 a"
)]
fn client_db_survives_cross_db_notifications(#[case] script: &str, #[case] expect: &str) {
    let (_server, mut con, mut chk) = server_with_bg();
    assert!(run_script(&mut con, &mut chk, script, &[0, 3], true));
    assert_eq!(client_db(&mut con), 0, "{script}: the client left db 0");
    let _: () = query(&mut con, &["SET", "marker", "1"]).unwrap();
    assert_keyspace(&mut chk, &parse_expect(expect), script);
    assert_index_matches(&mut chk, &[0, 3]);
}

/// MOVE / COPY ... DB inside MULTI/EXEC: the index must record the key in
/// the target db.
#[rstest]
#[case::move_("SET a 1; MULTI; MOVE a 3; EXEC", "0: @bg0; 3: @bg3 a")]
#[case::copy_db("SET a 1; MULTI; COPY a b DB 3; EXEC", "0: @bg0 a; 3: @bg3 b")]
#[case::move_then_write(
    "MULTI; SET a 1; MOVE a 3; SET b 1; MOVE bg3:str 0; EXEC",
    "0: @bg0 b; 3: @bg3 a"
)]
// A transaction that SELECTs: each command runs on the database its own
// SELECT chose, whatever the cross-db commands between them notify (on
// Valkey 8.1 the COPY and MOVE left the client on their destination: `b`,
// `d` landed in db 0; issue 24, found by the fuzzer on a replica).
#[case::select_copy_move(
    "MULTI; SELECT 3; SET a 1; COPY a c DB 0; SET b 2; MOVE a 0; SET d 3; SELECT 0; SET e 1; EXEC",
    "0: @bg0 c a e; 3: @bg3 b d"
)]
#[case::select_failed_copy(
    "SELECT 3; SET x 1; SELECT 0; MULTI; COPY x y DB 0; SELECT 3; COPY x y DB 0; SET b 2; EXEC",
    "0: @bg0 y; 3: @bg3 x b"
)]
#[case::select_debug_reload(
    "MULTI; SELECT 3; SET a 1; DEBUG RELOAD; SET b 1; SELECT 0; SET c 1; EXEC",
    "0: @bg0 c; 3: @bg3 a b"
)]
// A script's MOVE inside a transaction: the script's own client goes back
// to its database (on Valkey 8.1 `inscript` landed in db 5, the MOVE's).
#[case::multi_eval_move(
    "SELECT 3; SET a 1; SELECT 0; MULTI; SELECT 3; EVAL \"redis.call('MOVE','a','5'); return redis.call('SET','inscript','1')\" 0; SET after 1; EXEC",
    "0: @bg0; 3: @bg3 inscript after; 5: a"
)]
#[case::multi_eval_move_no_select(
    "MULTI; SET a 1; EVAL \"redis.call('MOVE','a','5'); return redis.call('SET','inscript','1')\" 0; SET after 1; EXEC",
    "0: @bg0 inscript after; 5: a"
)]
// A script in the transaction before its COPY ... DB: the script's own
// commands made the module forget the EXEC's client, which stayed on the
// COPY's destination (`after` in db 3; a replica diverged: issue 24, fuzz
// valkey-8.1 replica seed 7005).
#[case::multi_eval_then_copy_db(
    "SET a 1; MULTI; EVAL \"return redis.call('INCR','n')\" 0; COPY a b DB 3 REPLACE; SET after 1; EXEC; SET later 1",
    "0: @bg0 a n after later; 3: @bg3 b"
)]
fn multi_exec_cross_db_commands(#[case] script: &str, #[case] expect: &str) {
    let expect = parse_expect(expect);
    let (_server, mut con, mut chk) = server_with_bg();
    assert!(run_script(&mut con, &mut chk, script, &[0, 3], true));
    assert_keyspace(&mut chk, &expect, script);
    assert_index_sizes(&mut chk, &[0, 3]);
}

/// A replica applies MOVE / COPY ... DB from the replication stream; its
/// keyspace and index must equal the primary's.
#[test]
fn replica_follows_cross_db_commands() {
    let (primary, mut p, mut pchk) = server_with_bg();
    let (_replica, mut r) = start_replica(&primary);
    let dbs = [0, 3, 5];
    let script =
        "SET x 1; MOVE x 5; SELECT 0; SET y 1; COPY y z DB 3; SELECT 0; SET w 1; DEL bg0:str";
    assert!(run_script(&mut p, &mut pchk, script, &dbs, true));
    let expect = parse_expect("0: @bg0 -bg0:str y w; 3: @bg3 z; 5: x");
    assert_keyspace(&mut pchk, &expect, "primary");
    wait_until("the replica to catch up", WAIT, || {
        repl_offset(&mut r) == repl_offset(&mut pchk)
    });
    assert_keyspace(&mut r, &expect, "replica");
    assert_replica_matches(&mut pchk, &mut r, &dbs, "after cross-db writes");
}

/// A replica applies a transaction that SELECTs around cross-db commands
/// (as a primary propagates a script's or a client's): the commands after
/// it land where the primary's did (on Valkey 8.1 the replica's link was
/// left on the COPY's destination and the replica diverged: issue 24).
#[test]
fn replica_follows_a_transaction_that_selects() {
    let (primary, mut p, mut pchk) = server_with_bg();
    let (_replica, mut r) = start_replica(&primary);
    let dbs = [0, 3, 5];
    let script = "SELECT 5; MULTI; SELECT 3; SET a 1; COPY a c DB 0; SET b 2; MOVE a 0; SET d 3; EXEC; SET f 1; SELECT 5; SET g 1; \
                  MULTI; EVAL \"return redis.call('INCR','n')\" 0; COPY g h DB 3; SET i 1; EXEC; SET j 1";
    assert!(run_script(&mut p, &mut pchk, script, &dbs, true));
    let expect = parse_expect("0: @bg0 c a; 3: @bg3 b d f h; 5: g n i j");
    assert_keyspace(&mut pchk, &expect, "primary");
    wait_until("the replica to catch up", WAIT, || {
        repl_offset(&mut r) == repl_offset(&mut pchk)
    });
    assert_keyspace(&mut r, &expect, "replica");
    assert_replica_matches(&mut pchk, &mut r, &dbs, "after a transaction that selects");
}
