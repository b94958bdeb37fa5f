//! The default limit on memory held by old versions follows the index:
//! `snapshot.max-retained-percent` (100% of the live index, at least 4 MiB)
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
fn the_default_limit_follows_the_index_and_refuses_new_iterations_first() {
    let server = Server::start();
    let mut con = server.client();
    for (name, default) in [("max-retained-bytes", "0"), ("max-retained-percent", "100")] {
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
    // without a limit they would hold several times the index. Near the
    // limit new iterations are refused first; the open ones go on.
    let cursors = pin_versions(&mut con, 200_000, 80, 3000, 11);
    // Within the limit plus one indexer batch (1,024 changes, each an undo
    // entry and a copied path of at most 4 nodes of 2 KiB).
    let batch = 1024 * 4 * 2048;
    wait_until(
        "retained bytes within the default limit",
        Duration::from_secs(30),
        || {
            info_u64(&mut con, "snapshot_index_backlog") == 0
                && info_u64(&mut con, "snapshot_retained_bytes") <= FLOOR + batch
        },
    );
    assert!(info_u64(&mut con, "snapshot_opens_refused_memory") > 0);
    assert!(cursors.len() < 80, "{} iterations opened", cursors.len());
    let evicted = info_u64(&mut con, "snapshot_cursors_evicted_memory");
    assert_eq!(
        info_u64(&mut con, "snapshot_open_snapshots") + evicted,
        cursors.len() as u64
    );
    let newest = cursors.last().expect("cursors");
    let (_, page): (String, Vec<String>) =
        query(&mut con, &["SNAPSHOT.SCAN", newest, "COUNT", "3"]).unwrap();
    assert_eq!(page.len(), 3, "the newest iteration goes on");
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
    // Twice the keys, a larger limit: less than twice, as most of the
    // first 200,000 keys now carry an expiry (12 bytes more each).
    let growth = l2 as f64 / l1 as f64;
    assert!(
        (1.4..2.3).contains(&growth),
        "{l1} -> {l2}: twice the keys, a larger limit"
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

/// Keys whose index costs enough (random 32-hex-digit names, about 35
/// bytes each) that old versions holding what a scan deleted pass the
/// 4 MiB floor: about 7 MB for 200,000.
fn load_wide_keys(con: &mut Connection, n: u64) {
    let mix = |mut x: u64| {
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d049bb133111eb);
        x ^ (x >> 31)
    };
    let _: () = query(con, &["FLUSHALL"]).unwrap();
    for start in (0..n).step_by(10_000) {
        let mut p = redis::pipe();
        for i in start..(start + 10_000).min(n) {
            p.cmd("SET")
                .arg(format!("{:016x}{:016x}", mix(i), mix(i + n)))
                .arg("v")
                .ignore();
        }
        let _: () = p.query(con).unwrap();
    }
    indexed(con, n);
    let info = cmd_str(con, &["INFO", "snapshot"]);
    let bytes: u64 = info_field(&info, "snapshot_retained_index_peak_bytes")
        .expect("snapshot_retained_index_peak_bytes in INFO")
        .parse()
        .unwrap();
    assert!(bytes > FLOOR + FLOOR / 2, "index of {bytes} bytes");
}

/// Deleting what an open iteration read moves the index's bytes from the
/// live version to the old one, never beyond what the index held: the
/// iteration is not ended (it was, at the 4 MiB floor, once the live index
/// had shrunk).
#[test]
fn scan_and_delete_runs_to_the_end() {
    let server = Server::start();
    let mut con = server.client();
    const N: u64 = 200_000;
    load_wide_keys(&mut con, N);
    let mut cursor = "0".to_string();
    let mut deleted = 0u64;
    loop {
        let (next, keys): (String, Vec<String>) =
            query(&mut con, &["SNAPSHOT.SCAN", &cursor, "COUNT", "1000"])
                .unwrap_or_else(|e| panic!("after {deleted} keys deleted: {}", err_text(&e)));
        if !keys.is_empty() {
            let mut del = vec!["DEL"];
            del.extend(keys.iter().map(String::as_str));
            let n: u64 = query(&mut con, &del).unwrap();
            deleted += n;
        }
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(deleted, N);
    assert_eq!(info_u64(&mut con, "snapshot_cursors_evicted_memory"), 0);
}

/// FLUSHDB while an iteration is open: the iteration goes on over the
/// keys of its snapshot.
#[test]
fn an_iteration_outlives_flushdb() {
    let server = Server::start();
    let mut con = server.client();
    const N: u64 = 200_000;
    load_wide_keys(&mut con, N);
    let (mut cursor, first): (String, Vec<String>) =
        query(&mut con, &["SNAPSHOT.SCAN", "0", "COUNT", "100"]).unwrap();
    let _: () = query(&mut con, &["FLUSHDB"]).unwrap();
    indexed(&mut con, 0);
    // The flushed map, once the reaper let go of it, is held by the
    // iteration alone: still within the limit.
    wait_until(
        "the flushed map counted as retained",
        Duration::from_secs(30),
        || info_u64(&mut con, "snapshot_retained_bytes") > FLOOR,
    );
    let (limit, source) = limit(&mut con);
    assert_eq!(source, "max-retained-percent");
    assert!(limit > info_u64(&mut con, "snapshot_retained_bytes"));
    let mut seen = first.len() as u64;
    while cursor != "0" {
        let (next, keys): (String, Vec<String>) =
            query(&mut con, &["SNAPSHOT.SCAN", &cursor, "COUNT", "5000"])
                .unwrap_or_else(|e| panic!("after {seen} keys: {}", err_text(&e)));
        seen += keys.len() as u64;
        cursor = next;
    }
    assert_eq!(seen, N);
    assert_eq!(info_u64(&mut con, "snapshot_cursors_evicted_memory"), 0);
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

/// README, INFO snapshot: the oldest open iteration's age and pages. A
/// newer iteration does not replace it; continuing it counts its pages;
/// ending it leaves the next oldest; none open reads 0 and 0.
#[test]
fn info_names_the_oldest_open_iteration() {
    let server = Server::start();
    let mut con = server.client();
    let _: () = query(&mut con, &["DEBUG", "POPULATE", "5000"]).unwrap();
    indexed(&mut con, 5000);
    let oldest = |con: &mut Connection| {
        (
            info_u64(con, "snapshot_oldest_iteration_age_ms"),
            info_u64(con, "snapshot_oldest_iteration_pages"),
        )
    };
    assert_eq!(oldest(&mut con), (0, 0), "no iteration open");
    let page = |con: &mut Connection, cursor: &str| -> String {
        let (next, _): (String, Vec<Vec<u8>>) =
            query(con, &["SNAPSHOT.SCAN", cursor, "COUNT", "100"]).unwrap();
        next
    };
    let first = page(&mut con, "0");
    // After the cursor-0 call: it began no later.
    let started = server_ms(&mut con);
    wait_until("the first iteration to age", POLL, || {
        server_ms(&mut con) >= started + 60
    });
    let second = page(&mut con, "0");
    let (age, pages) = oldest(&mut con);
    assert!(age >= 50, "the first iteration's age: {age} ms");
    assert_eq!(pages, 1);
    // Continued twice: the same iteration, three pages.
    let first = page(&mut con, &first);
    let first = page(&mut con, &first);
    let (age2, pages) = oldest(&mut con);
    assert!(age2 >= age, "{age2} ms after {age} ms");
    assert_eq!(pages, 3);
    // Ended (run to its end): the second is the oldest, one page.
    let mut c = first;
    while c != "0" {
        c = page(&mut con, &c);
    }
    assert_eq!(oldest(&mut con).1, 1);
    let mut c = second;
    while c != "0" {
        c = page(&mut con, &c);
    }
    assert_eq!(oldest(&mut con), (0, 0), "every iteration ended");
}

/// README, INFO snapshot_iterations: the open iterations, oldest first,
/// each with the bytes of old values only it still reads. Keys deleted
/// ahead of the first iteration alone count for it (and for
/// `snapshot_oldest_iteration_alone_bytes`); keys deleted once both are
/// open count for neither; ending the first leaves the second, which now
/// alone reads them all.
#[test]
fn info_lists_the_open_iterations_and_what_each_alone_holds() {
    // A used cursor's copy, kept for a retry, holds its snapshot that long.
    let server = Server::start_with(ServerOpts::new().quick_retry());
    let mut con = server.client();
    let _: () = query(&mut con, &["DEBUG", "POPULATE", "5000"]).unwrap();
    indexed(&mut con, 5000);
    let page = |con: &mut Connection, cursor: &str| -> String {
        let (next, _): (String, Vec<Vec<u8>>) =
            query(con, &["SNAPSHOT.SCAN", cursor, "COUNT", "10"]).unwrap();
        next
    };
    let delete = |con: &mut Connection, from: u32| {
        let mut p = redis::pipe();
        for i in (from..5000).step_by(50) {
            p.cmd("DEL").arg(format!("key:{i}")).ignore();
        }
        let _: () = p.query(con).unwrap();
    };
    // `iteration<N>` fields: (db, pages, alone_bytes).
    let listed = |con: &mut Connection| -> Vec<(u64, u64, u64)> {
        let info: String = query(con, &["INFO", "snapshot_iterations"]).unwrap();
        let n = info_field(&info, "snapshot_iterations_listed")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or_else(|| panic!("no snapshot_iterations_listed in {info}"));
        (0..n)
            .map(|i| {
                let v = info_field(&info, &format!("snapshot_iteration{i}"))
                    .unwrap_or_else(|| panic!("no snapshot_iteration{i} in {info}"));
                let get = |name: &str| -> u64 {
                    v.split(',')
                        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                        .and_then(|x| x.parse().ok())
                        .unwrap_or_else(|| panic!("no {name} in {v}"))
                };
                (get("db"), get("pages"), get("alone_bytes"))
            })
            .collect()
    };
    assert!(listed(&mut con).is_empty(), "no iteration open");
    let first = page(&mut con, "0");
    // 100 keys: old values only `first` reads.
    delete(&mut con, 1);
    // Iterations are ordered by the millisecond they began in.
    let t = server_ms(&mut con);
    wait_until("the clock to move on", POLL, || server_ms(&mut con) > t + 1);
    let second = page(&mut con, "0");
    // 100 more: old values both read.
    delete(&mut con, 2);
    let first = page(&mut con, &first);
    // Passes run at every poll of the indexer; one that began before the
    // second iteration or before the deletions were applied counts less.
    let mut last = Vec::new();
    wait_until("a collector pass to count them", POLL, || {
        last = listed(&mut con);
        let history = info_u64(&mut con, "snapshot_history_bytes");
        last.len() == 2 && last[0].2 > 0 && last[1].2 == 0 && last[0].2 < history
    });
    let l = last;
    assert_eq!((l[0].0, l[0].1), (0, 2), "the first: db 0, two pages");
    assert_eq!((l[1].0, l[1].1), (0, 1), "the second: db 0, one page");
    let snapshot: String = query(&mut con, &["INFO", "snapshot"]).unwrap();
    assert!(
        snapshot.contains("snapshot_iterations_listed:2"),
        "INFO snapshot returns the section too: {snapshot}"
    );
    let plain: String = query(&mut con, &["INFO"]).unwrap();
    assert!(
        !plain.contains("snapshot_iteration"),
        "a plain INFO leaves it out"
    );
    wait_until("the oldest's figure to agree", POLL, || {
        let alone = info_u64(&mut con, "snapshot_oldest_iteration_alone_bytes");
        listed(&mut con)
            .first()
            .is_some_and(|it| it.2 == alone && alone > 0)
    });
    // The first ends (and its retry window passes): its old values are
    // collected, the second reads the rest alone.
    let mut c = first;
    while c != "0" {
        c = page(&mut con, &c);
    }
    wait_until("the second to hold the rest alone", POLL, || {
        let l = listed(&mut con);
        l.len() == 1 && l[0].2 > 0 && l[0].2 == info_u64(&mut con, "snapshot_history_bytes")
    });
    let mut c = second;
    while c != "0" {
        c = page(&mut con, &c);
    }
    assert!(listed(&mut con).is_empty(), "every iteration ended");
}
