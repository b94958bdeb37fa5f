//! Iterations survive write load (issue 25; README, *Memory held by old
//! versions*): an iteration kept open while writes change every key
//! completes exactly; it holds only the old values of keys it has not
//! passed yet; near the limit new iterations are refused first, and only
//! past it are open ones ended.
mod common;

use common::*;
use redis::{Connection, Value};
use rstest::rstest;
use std::collections::BTreeSet;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn settled(con: &mut Connection) {
    wait_until("the index caught up", WAIT, || {
        info_u64(con, "snapshot_index_backlog") == 0
    });
}

/// `n` changes to random keys `key:0..keys` (as DEBUG POPULATE names them):
/// a new expiry, a deletion or a re-creation without TTL, each changing the
/// index; and a few new keys.
fn churn(con: &mut Connection, rng: &mut Rng, keys: u64, n: usize) {
    let mut p = redis::pipe();
    for i in 0..n {
        let k = format!("key:{}", rng.below(keys));
        match rng.below(3) {
            0 => p.cmd("PEXPIRE").arg(&k).arg(1_000_000_000).ignore(),
            1 => p.cmd("DEL").arg(&k).ignore(),
            _ => p.cmd("SET").arg(&k).arg("v").ignore(),
        };
        if i % 10 == 0 {
            p.cmd("SET")
                .arg(format!("new:{}", rng.next()))
                .arg("v")
                .ignore();
        }
    }
    let _: () = p.query(con).unwrap();
}

/// Old values kept for open iterations: undo entries, and live entries
/// keeping a change in place (tombstones, creation stamps).
fn kept(con: &mut Connection) -> u64 {
    info_u64(con, "snapshot_history_entries") + info_u64(con, "snapshot_history_in_place")
}

/// The keys `DEBUG POPULATE n` made, as SNAPSHOT.SCAN orders them.
fn populated(n: u64) -> Vec<String> {
    let set: BTreeSet<String> = (0..n).map(|i| format!("key:{i}")).collect();
    set.into_iter().collect()
}

#[test]
fn an_iteration_open_across_writes_to_every_key_completes_exactly() {
    const N: u64 = 50_000;
    let server = Server::start_with(ServerOpts::new().quick_retry());
    let mut con = server.client();
    let _: Value = query(&mut con, &["DEBUG", "POPULATE", &N.to_string()]).unwrap();
    settled(&mut con);
    let mut rng = Rng(25);
    let mut cursor = "0".to_string();
    let mut got: Vec<String> = Vec::new();
    let mut pages = 0;
    loop {
        let (next, keys): (String, Vec<String>) =
            query(&mut con, &["SNAPSHOT.SCAN", &cursor, "COUNT", "500"])
                .unwrap_or_else(|e| panic!("page {pages}: {}", err_text(&e)));
        got.extend(keys);
        pages += 1;
        if next == "0" {
            break;
        }
        cursor = next;
        // Between two pages, 1,000 changes all over the keyspace: over the
        // iteration, about twice as many changes as keys.
        churn(&mut con, &mut rng, N, 1_000);
        assert!(pages < 1_000, "the iteration ends");
    }
    assert_eq!(
        got,
        populated(N),
        "each key of the snapshot once, in byte order"
    );
    assert_eq!(info_u64(&mut con, "snapshot_cursors_evicted_memory"), 0);
    // Ended, it holds nothing once its retry copy aged out (the retry
    // window, shortened here).
    wait_until("the old values emptied", WAIT, || kept(&mut con) == 0);
}

/// Served by a worker (large pages), on the main thread (small pages), or
/// as a client's native `SCAN` (`snapshot.serve-native all`, small pages):
/// each way, the pages tell the snapshot what the iteration has passed.
#[rstest]
#[case::worker_pages("SNAPSHOT.SCAN", 5000)]
#[case::main_thread_pages("SNAPSHOT.SCAN", 10)]
#[case::served_native_scan("SCAN", 10)]
fn an_iteration_holds_only_what_it_has_not_passed(#[case] cmd: &str, #[case] count: usize) {
    const N: u64 = 50_000;
    let server = Server::start();
    let mut con = server.client();
    let _: Value = query(&mut con, &["DEBUG", "POPULATE", &N.to_string()]).unwrap();
    settled(&mut con);
    if cmd == "SCAN" {
        config_set(&mut con, "snapshot.serve-native", "all");
    }
    let count = count.to_string();
    // Nine tenths of the keyspace read.
    let mut cursor = "0".to_string();
    let mut seen = 0usize;
    let mut pages = 0;
    while seen < 45_000 {
        let (next, keys): (String, Vec<String>) =
            query(&mut con, &[cmd, &cursor, "COUNT", &count]).unwrap();
        seen += keys.len();
        cursor = next;
        pages += 1;
        assert!(pages < 20_000, "the iteration reads nine tenths");
    }
    // The next page marks the keys before it passed (a retry resends only
    // the last page).
    let (next, keys): (String, Vec<String>) =
        query(&mut con, &[cmd, &cursor, "COUNT", "1"]).unwrap();
    seen += keys.len();
    cursor = next;
    let mut rng = Rng(7);
    for _ in 0..20 {
        churn(&mut con, &mut rng, N, 1_000);
    }
    settled(&mut con);
    // 20,000 changes over the whole keyspace and 2,000 new keys (`new:*`,
    // after `key:*`): about 2,000 changes are to keys ahead of the
    // iteration, and the new keys are. The collector runs after every
    // batch; without it, 22,000 kept.
    wait_until("only the keys ahead kept", WAIT, || {
        let n = kept(&mut con);
        n > 0 && n <= 6_000
    });
    // And the iteration still reads its snapshot.
    let mut rest = Vec::new();
    let mut pages = 0;
    loop {
        let (next, keys): (String, Vec<String>) =
            query(&mut con, &[cmd, &cursor, "COUNT", &count]).unwrap();
        rest.extend(keys);
        if next == "0" {
            break;
        }
        cursor = next;
        pages += 1;
        assert!(pages < 20_000, "the iteration ends");
    }
    let all = populated(N);
    assert_eq!(rest, all[seen..].to_vec());
}

#[test]
fn near_the_limit_new_iterations_are_refused_first_then_old_ones_ended() {
    const N: u64 = 200_000;
    let server = Server::start();
    let mut con = server.client();
    let _: Value = query(&mut con, &["DEBUG", "POPULATE", &N.to_string()]).unwrap();
    settled(&mut con);
    config_set(&mut con, "snapshot.max-retained-bytes", "1mb");
    config_set(&mut con, "snapshot.serve-native", "all");
    let (open, _): (String, Vec<String>) =
        query(&mut con, &["SNAPSHOT.SCAN", "0", "COUNT", "1"]).unwrap();
    // Changes until old versions hold three quarters of the limit.
    let mut rng = Rng(3);
    let mut rounds = 0;
    loop {
        churn(&mut con, &mut rng, N, 2_000);
        settled(&mut con);
        if info_u64(&mut con, "snapshot_retained_bytes") >= 768 << 10 {
            break;
        }
        rounds += 1;
        assert!(rounds < 200, "old versions grow with the changes");
    }
    let refused = info_u64(&mut con, "snapshot_opens_refused_memory");
    let e = expect_err(&mut con, &["SNAPSHOT.SCAN", "0"]);
    assert!(
        e.starts_with("TRYAGAIN snapscan: old versions hold ")
            && e.contains("near their limit (snapshot.max-retained-bytes)"),
        "{e}"
    );
    // A served SCAN 0 runs natively: a native cursor (below 2^32 here).
    let (c, _): (String, Vec<String>) = query(&mut con, &["SCAN", "0"]).unwrap();
    assert!(c.parse::<u64>().unwrap() < 1 << 32, "native cursor {c}");
    assert_eq!(
        info_u64(&mut con, "snapshot_opens_refused_memory"),
        refused + 2
    );
    // The open iteration goes on...
    let (open, _): (String, Vec<String>) =
        query(&mut con, &["SNAPSHOT.SCAN", &open, "COUNT", "1"]).unwrap();
    assert_eq!(info_u64(&mut con, "snapshot_cursors_evicted_memory"), 0);
    // ...until old versions pass the limit itself.
    let mut rounds = 0;
    while info_u64(&mut con, "snapshot_cursors_evicted_memory") == 0 {
        churn(&mut con, &mut rng, N, 2_000);
        settled(&mut con);
        rounds += 1;
        assert!(rounds < 200, "the iteration is ended past the limit");
    }
    assert_eq!(
        expect_err(&mut con, &["SNAPSHOT.SCAN", &open]),
        ended_for_memory(&open, "snapshot.max-retained-bytes")
    );
    // What it alone held is gone: a new iteration opens.
    wait_until("old versions freed", WAIT, || kept(&mut con) == 0);
    let _: (String, Vec<String>) = query(&mut con, &["SNAPSHOT.SCAN", "0"]).unwrap();
}
