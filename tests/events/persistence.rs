//! Persistence: restart from RDB.

use super::*;

#[test]
fn restart_from_rdb_rebuilds_index() {
    let mut server = Server::start();
    let mut con = server.client();
    write_bg(&mut con, 0);
    write_bg(&mut con, 3);
    let script =
        "SET %00bin%FF v; HSET h f v; SET t v EX 100000; SELECT 7; SADD s m; SELECT 0; DEL bg0:str";
    let mut chk = server.client();
    assert!(run_script(&mut con, &mut chk, script, &[0, 3, 7], false));
    let expect = parse_expect("0: @bg0 -bg0:str %00bin%FF h t; 3: @bg3; 7: s");
    assert_index_matches(&mut chk, &[0, 3, 7]);
    drop((con, chk));

    server.restart();
    let mut con = server.client();
    let mut chk = server.client();
    assert_keyspace(&mut chk, &expect, "after restart");
    assert_index_matches(&mut chk, &[0, 3, 7]);
    assert_index_sizes(&mut chk, &[0, 3, 7]);
    let pttl: i64 = query(&mut chk, &["PTTL", "t"]).unwrap();
    assert!(pttl > 60_000, "TTL lost over the restart: {pttl}");

    // Writes after the restart keep flowing into the rebuilt index.
    let script = "DEL h; SET new 1; SELECT 7; RENAME s s2; MOVE s2 3";
    assert!(run_script(&mut con, &mut chk, script, &[0, 3, 7], true));
    assert_keyspace(
        &mut chk,
        &parse_expect("0: @bg0 -bg0:str %00bin%FF t new; 3: @bg3 s2; 7: "),
        "writes after restart",
    );
    assert_index_sizes(&mut chk, &[0, 3, 7]);
}
