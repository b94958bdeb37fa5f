//! Writes that cannot change the index are not even logged (README, "How the
//! index stays true"): a key that existed before the command, is now a string
//! without expiry, and is not in the filter of keys indexed as anything else.
//! Each test checks that the index still ends exactly right where that
//! shortcut must not apply: expiry removed, type changed, filter rebuilt.

mod common;
use common::*;
use std::time::{Duration, Instant};

fn snapshot_keys(con: &mut redis::Connection, extra: &[&str]) -> Vec<String> {
    let mut keys: Vec<String> = full_scan(con, "SNAPSHOT.SCAN", extra)
        .into_iter()
        .map(|k| String::from_utf8_lossy(&k).into_owned())
        .collect();
    keys.sort();
    keys
}

/// Sets `n` keys `prefix<i>` in one pipeline, with `extra` arguments.
fn set_all(con: &mut redis::Connection, prefix: &str, n: usize, extra: &[&str]) {
    let mut p = redis::pipe();
    for i in 0..n {
        p.cmd("SET")
            .arg(format!("{prefix}{i}"))
            .arg("v")
            .arg(extra)
            .ignore();
    }
    p.query::<()>(con).expect("pipeline");
}

#[test]
fn rewriting_plain_strings_logs_nothing_and_changes_nothing() {
    let s = Server::start();
    let mut con = s.client();
    set_all(&mut con, "k", 500, &[]);
    let before = info_u64(&mut con, "snapshot_events_unchanged_skipped");
    set_all(&mut con, "k", 500, &[]);
    let skipped = info_u64(&mut con, "snapshot_events_unchanged_skipped") - before;
    assert_eq!(skipped, 500, "every rewrite of a plain string is skipped");
    assert_eq!(snapshot_keys(&mut con, &["COUNT", "100"]).len(), 500);
    // A new key is always logged.
    cmd_str(&mut con, &["SET", "fresh", "v"]);
    assert!(snapshot_keys(&mut con, &["MATCH", "fresh"]) == vec!["fresh".to_string()]);
    assert_eq!(
        info_u64(&mut con, "snapshot_events_unchanged_skipped") - before,
        500,
        "the new key was logged"
    );
}

#[test]
fn a_set_that_removes_an_expiry_is_recorded() {
    let s = Server::start();
    let mut con = s.client();
    let t0 = Instant::now();
    cmd_str(&mut con, &["SET", "kept", "v", "PX", "300"]);
    cmd_str(&mut con, &["SET", "gone", "v", "PX", "300"]);
    // Plain SET clears the expiry: the key is in the filter, so it is logged.
    cmd_str(&mut con, &["SET", "kept", "v"]);
    wait_until("the old expiry to pass", Duration::from_secs(5), || {
        t0.elapsed() > Duration::from_millis(400)
    });
    assert_eq!(snapshot_keys(&mut con, &["MATCH", "*e*"]), vec!["kept"]);
}

#[test]
fn a_string_written_over_another_type_is_recorded() {
    let s = Server::start();
    let mut con = s.client();
    cmd_str(&mut con, &["HSET", "h", "f", "v"]);
    cmd_str(&mut con, &["RPUSH", "l", "a"]);
    // No "new" event: these keys existed; they are in the filter.
    cmd_str(&mut con, &["SET", "h", "v"]);
    cmd_str(&mut con, &["SET", "l", "v"]);
    assert_eq!(
        snapshot_keys(&mut con, &["TYPE", "string"]),
        vec!["h".to_string(), "l".to_string()]
    );
    assert!(snapshot_keys(&mut con, &["TYPE", "hash"]).is_empty());
    assert!(snapshot_keys(&mut con, &["TYPE", "list"]).is_empty());
}

#[test]
fn the_filter_rebuilt_from_the_index_stays_exact() {
    let s = Server::start();
    let mut con = s.client();
    let n = 20_000;
    let bytes_before = info_u64(&mut con, "snapshot_filter_bytes");
    // More keys with an expiry than the first filter is sized for: the
    // indexer rebuilds it (bigger) while these keep coming.
    set_all(&mut con, "t", n, &["PX", "1500"]);
    // Every key was set by now: all of them expire 1500 ms from here or sooner.
    let t0 = Instant::now();
    // Expiries cleared on half of them: each must reach the index.
    let mut p = redis::pipe();
    for i in (0..n).step_by(2) {
        p.cmd("SET").arg(format!("t{i}")).arg("v").ignore();
    }
    p.query::<()>(&mut con).expect("pipeline");
    wait_until("a bigger filter", Duration::from_secs(10), || {
        info_u64(&mut con, "snapshot_filter_bytes") > bytes_before
    });
    wait_until("the expiries to pass", Duration::from_secs(10), || {
        t0.elapsed() > Duration::from_millis(1700)
    });
    let keys = snapshot_keys(&mut con, &["MATCH", "t*", "COUNT", "1000"]);
    let mut want: Vec<String> = (0..n).step_by(2).map(|i| format!("t{i}")).collect();
    want.sort();
    assert_eq!(keys.len(), want.len());
    assert!(keys == want, "exactly the keys whose expiry was cleared");
}

/// A write to an existing collection whose type and expiry stay as last
/// logged (HSET, SADD, ZADD on a key already indexed so) is not logged
/// again; every write that does change them still reaches the index.
#[test]
fn rewriting_collections_logs_once_and_stays_exact() {
    let s = Server::start();
    let mut con = s.client();
    let before = info_u64(&mut con, "snapshot_events_unchanged_skipped");
    let mut p = redis::pipe();
    for i in 0..200 {
        p.cmd("HSET")
            .arg("h")
            .arg(format!("f{i}"))
            .arg("v")
            .ignore();
        p.cmd("SADD").arg("s").arg(i).ignore();
        p.cmd("ZADD").arg("z").arg(i).arg(format!("m{i}")).ignore();
    }
    p.query::<()>(&mut con).expect("pipeline");
    let skipped = info_u64(&mut con, "snapshot_events_unchanged_skipped") - before;
    assert_eq!(skipped, 3 * 199, "all but each key's first write skipped");
    for (ty, key) in [("hash", "h"), ("set", "s"), ("zset", "z")] {
        assert_eq!(
            snapshot_keys(&mut con, &["TYPE", ty]),
            vec![key.to_string()]
        );
    }
    // Expiry set, then the same writes again (skipped: nothing changes),
    // then expiry removed on one of them (logged): after the old expiry
    // has passed, only that one is left.
    let t0 = Instant::now();
    cmd_str(&mut con, &["PEXPIRE", "h", "300"]);
    cmd_str(&mut con, &["PEXPIRE", "s", "300"]);
    cmd_str(&mut con, &["HSET", "h", "again", "v"]);
    cmd_str(&mut con, &["SADD", "s", "again"]);
    cmd_str(&mut con, &["PERSIST", "s"]);
    cmd_str(&mut con, &["SADD", "s", "once more"]);
    // Deleted and created again: logged each time.
    cmd_str(&mut con, &["DEL", "z"]);
    assert!(snapshot_keys(&mut con, &["TYPE", "zset"]).is_empty());
    cmd_str(&mut con, &["ZADD", "z", "1", "m"]);
    // A flush forgets what was logged; the same write after it is logged.
    cmd_str(&mut con, &["SELECT", "1"]);
    cmd_str(&mut con, &["HSET", "h1", "f", "v"]);
    cmd_str(&mut con, &["FLUSHDB"]);
    cmd_str(&mut con, &["HSET", "h1", "f", "v"]);
    assert_eq!(snapshot_keys(&mut con, &[]), vec!["h1".to_string()]);
    cmd_str(&mut con, &["SELECT", "0"]);
    wait_until("the expiry to pass", Duration::from_secs(5), || {
        t0.elapsed() > Duration::from_millis(400)
    });
    assert_eq!(
        snapshot_keys(&mut con, &[]),
        vec!["s".to_string(), "z".to_string()]
    );
}
