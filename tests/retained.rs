//! The default limit on memory held by old versions follows the index:
//! `snapshot.max-retained-percent` (50% of the live index, at least 4 MiB)
//! and `snapshot.max-retained-bytes` (absolute, off by default), the smaller
//! applying; INFO shows the effective limit and which setting decides it.
mod common;

use common::*;
use redis::{Connection, Value};
use std::time::Duration;

const FLOOR: u64 = 4 << 20;
const POLL: Duration = Duration::from_secs(10);

fn limit(con: &mut Connection) -> (u64, String) {
    let info = cmd_str(con, &["INFO", "snapshot"]);
    let bytes = info_field(&info, "snapshot_retained_limit_bytes")
        .expect("snapshot_retained_limit_bytes in INFO")
        .parse()
        .unwrap();
    let source = info_field(&info, "snapshot_retained_limit_source")
        .expect("snapshot_retained_limit_source in INFO");
    (bytes, source)
}

fn indexed(con: &mut Connection, keys: u64) {
    wait_until("the index caught up", Duration::from_secs(30), || {
        info_u64(con, "snapshot_index_keys") == keys && info_u64(con, "snapshot_index_backlog") == 0
    });
}

#[test]
fn the_default_limit_follows_the_index_and_ends_the_oldest_iterations() {
    let server = Server::start();
    let mut con = server.client();
    for (name, default) in [("max-retained-bytes", "0"), ("max-retained-percent", "50")] {
        let v: Vec<String> =
            query(&mut con, &["CONFIG", "GET", &format!("snapshot.{name}")]).unwrap();
        assert_eq!(v[1], default, "default of {name}");
    }
    // A small index: the floor.
    assert_eq!(
        limit(&mut con),
        (FLOOR, "max-retained-percent-floor".into())
    );
    let _: Value = query(&mut con, &["DEBUG", "POPULATE", "200000"]).unwrap();
    indexed(&mut con, 200_000);
    assert_eq!(
        limit(&mut con),
        (FLOOR, "max-retained-percent-floor".into())
    );

    // Versions pinned under index-changing writes all over the keyspace:
    // without a limit they would hold several times the index.
    let cursors = pin_versions(&mut con, 200_000, 30, 3000, 11);
    // Within the limit plus one indexer batch (1,024 writes, each copying
    // a path of at most 4 nodes of 2 KiB).
    let batch = 1024 * 4 * 2048;
    wait_until(
        "retained bytes within the default limit",
        Duration::from_secs(30),
        || {
            info_u64(&mut con, "snapshot_index_backlog") == 0
                && info_u64(&mut con, "snapshot_retained_bytes") <= FLOOR + batch
        },
    );
    assert!(info_u64(&mut con, "snapshot_cursors_evicted_memory") > 0);
    assert_oldest_ended_newest_goes_on(&mut con, &cursors);
    drop(cursors);

    // Past the floor the limit is the share of the live index: it grows
    // with the index.
    config_set(&mut con, "snapshot.max-retained-percent", "1000");
    let (l1, source) = limit(&mut con);
    assert_eq!(source, "max-retained-percent");
    assert!(l1 > FLOOR, "{l1}");
    let _: Value = query(&mut con, &["DEBUG", "POPULATE", "400000"]).unwrap();
    indexed(&mut con, 400_000);
    let (l2, _) = limit(&mut con);
    let growth = l2 as f64 / l1 as f64;
    assert!(
        (1.7..2.3).contains(&growth),
        "{l1} -> {l2}: twice the keys, about twice the limit"
    );

    // An absolute setting below the relative one applies; with neither,
    // no limit.
    config_set(&mut con, "snapshot.max-retained-bytes", "1mb");
    assert_eq!(limit(&mut con), (1 << 20, "max-retained-bytes".into()));
    config_set(&mut con, "snapshot.max-retained-percent", "0");
    assert_eq!(limit(&mut con), (1 << 20, "max-retained-bytes".into()));
    config_set(&mut con, "snapshot.max-retained-bytes", "0");
    assert_eq!(limit(&mut con), (0, "none".into()));
}

/// README, Cursor lifetime: the copy kept for a retry of a used cursor
/// holds its snapshot and counts in `snapshot_retained_bytes`; at the
/// limit it is dropped first, ending no iteration.
#[test]
fn a_retry_copy_is_dropped_first_at_the_limit() {
    let server = Server::start();
    let mut con = server.client();
    config_set(&mut con, "snapshot.max-retained-percent", "0");
    let _: Value = query(&mut con, &["DEBUG", "POPULATE", "300000"]).unwrap();
    indexed(&mut con, 300_000);
    // An iteration run to its end: only its last cursor, kept for a retry,
    // holds its snapshot.
    let (mut cursor, mut last) = ("0".to_string(), None);
    let used = loop {
        let (next, keys): (String, Vec<Vec<u8>>) =
            query(&mut con, &["SNAPSHOT.SCAN", &cursor, "COUNT", "100000"]).unwrap();
        if cursor != "0" {
            last = Some((cursor.clone(), keys));
        }
        if next == "0" {
            break std::time::Instant::now();
        }
        cursor = next;
    };
    let (last, last_keys) = last.expect("more than one page");
    let again: (String, Vec<Vec<u8>>) =
        query(&mut con, &["SNAPSHOT.SCAN", &last, "COUNT", "100000"]).unwrap();
    assert_eq!(again, ("0".to_string(), last_keys), "the last page again");
    assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), 0);
    // FLUSHALL: the live index is empty, the retry copy holds all of it.
    let _: () = query(&mut con, &["FLUSHALL"]).unwrap();
    indexed(&mut con, 0);
    wait_until("the retry copy to show as retained", POLL, || {
        info_u64(&mut con, "snapshot_retained_bytes") > 1 << 20
    });
    // An iteration opened now pins only the live version.
    for i in 0..10 {
        let _: () = query(&mut con, &["SET", &format!("n{i}"), "v"]).unwrap();
    }
    let (open, _): (String, Vec<Vec<u8>>) =
        query(&mut con, &["SNAPSHOT.SCAN", "0", "COUNT", "3"]).unwrap();
    assert_ne!(open, "0");
    let evicted0 = info_u64(&mut con, "snapshot_cursors_evicted_memory");
    config_set(&mut con, "snapshot.max-retained-bytes", "1048576");
    wait_until("the retry copy to be dropped", POLL, || {
        info_u64(&mut con, "snapshot_retained_bytes") <= 1 << 20
    });
    assert!(
        used.elapsed() < RETRY_WINDOW,
        "dropped by the limit, not by age ({:?})",
        used.elapsed()
    );
    assert_eq!(
        info_u64(&mut con, "snapshot_cursors_evicted_memory"),
        evicted0,
        "no iteration ended"
    );
    assert_eq!(
        expect_err(&mut con, &["SNAPSHOT.SCAN", &last, "COUNT", "100000"]),
        unknown_cursor(&last)
    );
    let (_, keys): (String, Vec<Vec<u8>>) =
        query(&mut con, &["SNAPSHOT.SCAN", &open, "COUNT", "3"]).unwrap();
    assert_eq!(keys.len(), 3, "the open iteration goes on");
}
