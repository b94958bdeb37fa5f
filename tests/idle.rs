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

/// A whole iteration in one call (a prefix no key has): it leaves no
/// iteration open, which would hold the drop off.
const PROBE: [&str; 4] = ["SNAPSHOT.SCAN", "0", "MATCH", "no-such-key:*"];

/// Polls [`PROBE`] until it stops answering `LOADING`.
fn wait_rebuilt(con: &mut Connection) {
    wait_until(
        "the index is rebuilt",
        Duration::from_secs(30),
        || match query::<Value>(con, &PROBE) {
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
fn scans_keep_the_index_and_an_open_iteration_holds_the_drop_off() {
    // A retained-memory cap far below the index: an iteration left holding
    // the whole index alone (as a drop under it would) would be ended.
    let server = Server::start_with(ServerOpts::new().module_args(&[
        "index-idle-timeout",
        "1",
        "max-retained-bytes",
        "50000",
    ]));
    let mut con = server.client();
    let _: Value = query(&mut con, &["DEBUG", "POPULATE", "20000"]).unwrap();
    wait_rebuilt(&mut con);
    let (mut cursor, first): (String, Vec<String>) =
        query(&mut con, &["SNAPSHOT.SCAN", "0", "COUNT", "10"]).unwrap();
    assert_ne!(cursor, "0");
    let drops = info_u64(&mut con, "snapshot_index_drops");
    // Calls every 200 ms for 2.4 s, then 2.4 s without any (the pace of a
    // user, not a wait for anything): never dropped, the calls keeping the
    // index in use and then the open iteration holding the drop off.
    for i in 0..24 {
        if i < 12 {
            let (c, _): (String, Vec<String>) = query(&mut con, &PROBE).unwrap();
            assert_eq!(c, "0");
        }
        assert_eq!(info_u64(&mut con, "snapshot_index_dropped"), 0, "dropped");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(info_u64(&mut con, "snapshot_index_drops"), drops);
    // The iteration goes on to its end, every key once; then the index,
    // idle and with nothing open, is dropped.
    let _: () = query(&mut con, &["SET", "later", "v"]).unwrap();
    let mut keys = first;
    while cursor != "0" {
        let (next, page): (String, Vec<String>) =
            query(&mut con, &["SNAPSHOT.SCAN", &cursor, "COUNT", "1000"]).unwrap();
        keys.extend(page);
        cursor = next;
        assert!(keys.len() <= 20_000, "a key returned twice");
    }
    let all = sorted(&keys);
    assert_eq!(all.len(), 20_000);
    assert!(all.windows(2).all(|w| w[0] != w[1]));
    assert!(!all.contains(&"later".to_string()));
    assert_eq!(info_u64(&mut con, "snapshot_cursors_evicted_memory"), 0);
    wait_dropped(&mut con);
}

/// README: with the index dropped, SNAPSHOT.HSCAN copies work as usual: a
/// write to another key does not restart a running sliced copy.
#[test]
fn with_the_index_dropped_writes_to_other_keys_do_not_restart_a_copy() {
    let server = idle_server("1");
    let mut con = server.client();
    config_set(&mut con, "snapshot.hash-copy-batch", "10");
    for start in (0..50_000).step_by(1000) {
        let mut c = redis::cmd("HSET");
        c.arg("h");
        for i in start..start + 1000 {
            c.arg(format!("f{i}")).arg("v");
        }
        let _: i64 = c.query(&mut con).unwrap();
    }
    wait_until("the index is dropped", Duration::from_secs(15), || {
        info_u64(&mut con, "snapshot_index_dropped") == 1
    });
    let mut w = server.client();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    // Bounded in count; stopped as soon as the copy is done.
    let writer = std::thread::spawn(move || {
        let mut n = 0u64;
        while !stop2.load(std::sync::atomic::Ordering::SeqCst) && n < 1_000_000 {
            let _: () = query(&mut w, &["SET", &format!("other{}", n % 100), "v"]).unwrap();
            n += 1;
        }
        n
    });
    let fallbacks = info_u64(&mut con, "snapshot_hash_copy_fallbacks");
    let retries = info_u64(&mut con, "snapshot_hash_copy_retries");
    let (_c, page): (String, Vec<Vec<u8>>) = query(
        &mut con,
        &["SNAPSHOT.HSCAN", "h", "0", "COUNT", "10", "NOVALUES"],
    )
    .unwrap();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let writes = writer.join().unwrap();
    assert!(writes > 0, "no write ran beside the copy");
    assert_eq!(page.len(), 10);
    let retries = info_u64(&mut con, "snapshot_hash_copy_retries") - retries;
    let fallbacks = info_u64(&mut con, "snapshot_hash_copy_fallbacks") - fallbacks;
    assert_eq!(info_u64(&mut con, "snapshot_index_dropped"), 1);
    assert_eq!(
        (retries, fallbacks),
        (0, 0),
        "writes to other keys restarted the copy"
    );
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
    config_set(&mut con, "snapshot.index-idle-timeout", "0");
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
