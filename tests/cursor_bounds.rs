//! The cursor registry's bulk removals against a real server: lowering
//! `snapshot.max-open-cursors` far below the open iterations, and a short
//! `snapshot.cursor-idle-timeout` with many open, end the surplus (the idle
//! ones) within a few janitor ticks, in bounded chunks, never-continued
//! iterations first. (The chunking itself is unit-tested in src/cursor.rs.)
mod common;

use common::*;
use redis::Connection;
use std::time::Duration;

/// Iterations opened by each test: a few thousand (cheap), more than two
/// chunks of 1,024.
const OPEN: usize = 3_000;
const POLL: Duration = Duration::from_secs(30);

fn page(con: &mut Connection, cursor: &str) -> (String, Vec<String>) {
    redis::cmd("SNAPSHOT.SCAN")
        .arg(cursor)
        .arg("COUNT")
        .arg("1")
        .query(con)
        .unwrap_or_else(|e| panic!("SNAPSHOT.SCAN {cursor}: {}", err_text(&e)))
}

/// A server with a few keys, one continued iteration (its cursor returned)
/// and `OPEN` never-continued ones.
fn with_open_cursors(server: &Server) -> (Connection, String) {
    let mut con = server.client();
    let _: () = query(&mut con, &["MSET", "a", "1", "b", "2", "c", "3"]).unwrap();
    let (c1, _) = page(&mut con, "0");
    let (continued, p) = page(&mut con, &c1);
    assert_eq!(p, ["b"]);
    let mut p = redis::pipe();
    for _ in 0..OPEN {
        p.cmd("SNAPSHOT.SCAN").arg("0").arg("COUNT").arg("1");
    }
    let replies: Vec<(String, Vec<String>)> = p.query(&mut con).expect("pipelined cursor-0 calls");
    assert!(replies.iter().all(|(c, k)| c != "0" && k == &["a"]));
    assert_eq!(
        info_u64(&mut con, "snapshot_open_snapshots"),
        OPEN as u64 + 1
    );
    (con, continued)
}

#[test]
fn a_lowered_max_open_cursors_is_reached_within_a_few_janitor_ticks() {
    let server = Server::start_with(ServerOpts::new().module_args(&["max-open-cursors", "10000"]));
    let (mut con, continued) = with_open_cursors(&server);
    let evicted = info_u64(&mut con, "snapshot_cursors_evicted");
    config_set(&mut con, "snapshot.max-open-cursors", "10");
    wait_until("the open iterations down to the new limit", POLL, || {
        info_u64(&mut con, "snapshot_open_snapshots") <= 10
    });
    assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), 10);
    assert_eq!(
        info_u64(&mut con, "snapshot_cursors_evicted") - evicted,
        OPEN as u64 + 1 - 10
    );
    // Never-continued iterations went first: the continued one survives.
    let (_, p) = page(&mut con, &continued);
    assert_eq!(p, ["c"]);
    // And new iterations keep the limit.
    page(&mut con, "0");
    assert!(info_u64(&mut con, "snapshot_open_snapshots") <= 10);
}

#[test]
fn many_idle_cursors_expire_in_chunks() {
    let server = Server::start_with(ServerOpts::new().module_args(&["max-open-cursors", "10000"]));
    let (mut con, _) = with_open_cursors(&server);
    let expired = info_u64(&mut con, "snapshot_cursors_expired");
    config_set(&mut con, "snapshot.cursor-idle-timeout", "1");
    wait_until("every idle iteration expired", POLL, || {
        info_u64(&mut con, "snapshot_open_snapshots") == 0
    });
    assert_eq!(
        info_u64(&mut con, "snapshot_cursors_expired") - expired,
        OPEN as u64 + 1
    );
    assert_eq!(info_u64(&mut con, "snapshot_cursors_evicted"), 0);
}
