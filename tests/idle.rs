//! `snapshot.index-idle-timeout`: the index is dropped while nobody scans
//! and rebuilt at the next SNAPSHOT.SCAN or SNAPSHOT.UNLINK (README,
//! "Dropping the index while nobody scans").

mod common;

use common::*;
use redis::{Connection, Value};
use std::time::{Duration, Instant};

fn idle_server(timeout: &str) -> Server {
    Server::start_with(ServerOpts::new().module_args(&["index-idle-timeout", timeout]))
}

fn wait_dropped(con: &mut Connection) {
    wait_until("the index is dropped", Duration::from_secs(15), || {
        info_u64(con, "snapshot_index_dropped") == 1
            && info_u64(con, "snapshot_index_backlog") == 0
            && info_u64(con, "snapshot_index_keys") == 0
    });
}

/// Polls `SNAPSHOT.SCAN 0 COUNT 1` until it stops answering `LOADING`.
fn wait_rebuilt(con: &mut Connection) {
    wait_until(
        "the index is rebuilt",
        Duration::from_secs(30),
        || match query::<Value>(con, &["SNAPSHOT.SCAN", "0", "COUNT", "1"]) {
            Ok(_) => true,
            Err(e) => {
                assert!(err_text(&e).starts_with("LOADING "), "{}", err_text(&e));
                false
            }
        },
    );
}

#[test]
fn an_idle_index_is_dropped_and_the_next_scan_rebuilds_it_exactly() {
    let server = idle_server("1");
    let mut con = server.client();
    let _: Value = query(&mut con, &["DEBUG", "POPULATE", "5000"]).unwrap();
    wait_dropped(&mut con);
    assert_eq!(info_u64(&mut con, "snapshot_index_drops"), 1);
    // Writes while dropped: deletions, new keys, a type change, an expiry.
    let events = info_u64(&mut con, "snapshot_events_applied");
    let mut p = redis::pipe();
    for i in 0..100 {
        p.cmd("DEL").arg(format!("key:{i}")).ignore();
        p.cmd("SET").arg(format!("new:{i}")).arg("v").ignore();
    }
    p.cmd("DEL").arg("key:100").ignore();
    p.cmd("HSET").arg("key:100").arg("f").arg("v").ignore();
    p.cmd("PEXPIRE").arg("key:200").arg(1).ignore();
    let _: () = p.query(&mut con).unwrap();
    // A notification of a dropped index is not handled at all.
    assert_eq!(info_u64(&mut con, "snapshot_events_applied"), events);
    // SNAPSHOT.HSCAN copies collections, not the index: served, and the
    // index stays dropped.
    let fields = full_hscan(&mut con, "SNAPSHOT.HSCAN", "key:100", &[]);
    assert_eq!(fields, vec![b"f".to_vec(), b"v".to_vec()]);
    assert_eq!(info_u64(&mut con, "snapshot_index_dropped"), 1);
    // The next scan starts the rebuild and says so, as after MODULE LOAD.
    let err = expect_err(&mut con, &["SNAPSHOT.SCAN", "0"]);
    assert!(
        err.starts_with("LOADING snapscan is building its index"),
        "{err}"
    );
    assert_eq!(info_u64(&mut con, "snapshot_index_dropped"), 0);
    wait_rebuilt(&mut con);
    let wait_expired = Instant::now() + Duration::from_secs(5);
    while query::<i64>(&mut con, &["EXISTS", "key:200"]).unwrap() == 1 {
        assert!(Instant::now() < wait_expired, "key:200 never expired");
    }
    let got = sorted(&full_scan(&mut con, "SNAPSHOT.SCAN", &["COUNT", "500"]));
    let want = sorted(&full_scan(&mut con, "SCAN", &["COUNT", "500"]));
    assert_eq!(got.len(), 5000 - 100 + 100 - 1);
    assert_eq!(got, want);
    let hashes = full_scan(&mut con, "SNAPSHOT.SCAN", &["TYPE", "hash"]);
    assert_eq!(hashes, vec![b"key:100".to_vec()]);
}

#[test]
fn scans_keep_the_index_and_an_open_iteration_outlives_a_drop() {
    let server = idle_server("1");
    let mut con = server.client();
    let _: Value = query(&mut con, &["DEBUG", "POPULATE", "1000"]).unwrap();
    wait_rebuilt(&mut con);
    let (mut cursor, first): (String, Vec<String>) =
        query(&mut con, &["SNAPSHOT.SCAN", "0", "COUNT", "10"]).unwrap();
    let drops = info_u64(&mut con, "snapshot_index_drops");
    // A call every 200 ms for 2.4 s (the pace of a user, not a wait for
    // anything): never idle for a second, never dropped.
    for _ in 0..12 {
        let _: Value = query(&mut con, &["SNAPSHOT.SCAN", "0", "COUNT", "1"]).unwrap();
        assert_eq!(info_u64(&mut con, "snapshot_index_dropped"), 0);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(info_u64(&mut con, "snapshot_index_drops"), drops);
    // Idle: dropped. The open iteration reads its own snapshot and ends
    // with every key once.
    let _: () = query(&mut con, &["SET", "later", "v"]).unwrap();
    wait_dropped(&mut con);
    let mut keys = first;
    while cursor != "0" {
        let (next, page): (String, Vec<String>) =
            query(&mut con, &["SNAPSHOT.SCAN", &cursor, "COUNT", "100"]).unwrap();
        keys.extend(page);
        cursor = next;
        assert!(keys.len() <= 1000, "a key returned twice");
    }
    let all = sorted(&keys);
    assert_eq!(all.len(), 1000);
    assert!(all.windows(2).all(|w| w[0] != w[1]));
    assert!(!all.contains(&"later".to_string()));
}

#[test]
fn setting_the_timeout_to_zero_rebuilds_a_dropped_index_at_once() {
    let server = idle_server("1");
    let mut con = server.client();
    let _: Value = query(&mut con, &["DEBUG", "POPULATE", "300"]).unwrap();
    wait_dropped(&mut con);
    let got: Vec<String> =
        query(&mut con, &["CONFIG", "GET", "snapshot.index-idle-timeout"]).unwrap();
    assert_eq!(got[1], "1");
    let _: () = query(
        &mut con,
        &["CONFIG", "SET", "snapshot.index-idle-timeout", "0"],
    )
    .unwrap();
    wait_until("rebuilt without a scan", Duration::from_secs(15), || {
        info_u64(&mut con, "snapshot_index_dropped") == 0
            && info_u64(&mut con, "snapshot_backfill_in_progress") == 0
            && info_u64(&mut con, "snapshot_index_backlog") == 0
            && info_u64(&mut con, "snapshot_index_keys") == 300
    });
}

#[test]
fn by_default_the_index_is_never_dropped() {
    let server = Server::start();
    let mut con = server.client();
    let _: Value = query(&mut con, &["DEBUG", "POPULATE", "100"]).unwrap();
    let got: Vec<String> =
        query(&mut con, &["CONFIG", "GET", "snapshot.index-idle-timeout"]).unwrap();
    assert_eq!(got[1], "0");
    assert_eq!(info_u64(&mut con, "snapshot_index_dropped"), 0);
    assert_eq!(info_u64(&mut con, "snapshot_index_drops"), 0);
}
