//! Cursor lifetime, release.

use super::*;

#[test]
fn disconnect_mid_iteration_releases_the_copy() {
    let server = Server::start_with(ServerOpts::new().quick_retry());
    let mut con = server.client();
    fill_hash(&mut con, "h", 5_000, |i| format!("v{i}"));
    config_set(&mut con, "snapshot.cursor-idle-timeout", "1");
    let kept = {
        let mut gone = server.client();
        let (c, _) = hscan(&mut gone, "h", "0", &Opts::count(10));
        let (c, _) = hscan(&mut gone, "h", &c, &Opts::count(10));
        assert_ne!(c, "0");
        assert_eq!(info_u64(&mut con, "snapshot_hash_snapshots_open"), 1);
        assert!(info_u64(&mut con, "snapshot_hash_snapshot_bytes") >= 5_000 * 10);
        assert_eq!(info_u64(&mut con, "snapshot_hash_cursors_open"), 1);
        c
    };
    // Its copy is kept for a retry of the used cursor: released within the
    // retry window.
    wait_until(
        "the orphaned hash snapshot to be released",
        POLL + QUICK_RETRY_WINDOW,
        || {
            info_u64(&mut con, "snapshot_hash_snapshots_open") == 0
                && info_u64(&mut con, "snapshot_hash_snapshot_bytes") == 0
        },
    );
    assert_eq!(info_u64(&mut con, "snapshot_hash_cursors_open"), 0);
    assert_eq!(
        expect_err(&mut con, &[CMD, "h", &kept]),
        unknown_cursor(&kept),
        "an idled-out cursor is unknown"
    );
    // A finished iteration releases its copy once its last cursor can no
    // longer be retried: within the retry window.
    full(&mut con, "h", &Opts::count(1000));
    wait_until(
        "the finished iteration's copy to be released",
        POLL + QUICK_RETRY_WINDOW,
        || {
            info_u64(&mut con, "snapshot_hash_snapshots_open") == 0
                && info_u64(&mut con, "snapshot_hash_snapshot_bytes") == 0
        },
    );
}

/// A client that sends cursor 0 on a large hash and disconnects while the
/// copy is being made: the server stays up and nothing is left behind.
#[test]
fn disconnect_during_a_sliced_copy() {
    use std::io::Write;
    let server = Server::start();
    let mut con = server.client();
    config_set(&mut con, "snapshot.hash-copy-batch", "10");
    config_set(&mut con, "snapshot.cursor-idle-timeout", "1");
    fill_hash(&mut con, "h", 20_000, |i| format!("v{i}"));
    let made0 = info_u64(&mut con, "snapshot_hash_copies_made");
    for _ in 0..3 {
        let mut raw = std::net::TcpStream::connect(("127.0.0.1", server.port())).unwrap();
        raw.write_all(
            b"*5\r\n$14\r\nSNAPSHOT.HSCAN\r\n$1\r\nh\r\n$1\r\n0\r\n$5\r\nCOUNT\r\n$1\r\n5\r\n",
        )
        .unwrap();
        drop(raw);
    }
    wait_until("the copies to be made", POLL, || {
        info_u64(&mut con, "snapshot_hash_copies_made") > made0
    });
    assert_eq!(cmd_str(&mut con, &["PING"]), "PONG");
    wait_until("everything to be released", POLL, || {
        info_u64(&mut con, "snapshot_hash_snapshots_open") == 0
            && info_u64(&mut con, "snapshot_hash_snapshot_bytes") == 0
            && info_u64(&mut con, "snapshot_hash_cursors_open") == 0
    });
    assert_same(
        &full(&mut con, "h", &Opts::count(1000)),
        &hgetall(&mut con, "h"),
        "after",
    );
}

#[test]
fn evicted_iterations_release_their_copies() {
    let server = Server::start_with(ServerOpts::new().quick_retry());
    let mut con = server.client();
    config_set(&mut con, "snapshot.max-open-cursors", "2");
    for k in ["a", "b", "c"] {
        fill_hash(&mut con, k, 2_000, |i| format!("{k}{i}"));
    }
    let o = Opts::count(10);
    let (ca, _) = hscan(&mut con, "a", "0", &o);
    let (cb, _) = hscan(&mut con, "b", "0", &o);
    assert_eq!(info_u64(&mut con, "snapshot_hash_snapshots_open"), 2);
    let (cc, _) = hscan(&mut con, "c", "0", &o);
    assert_eq!(info_u64(&mut con, "snapshot_hash_cursors_open"), 2);
    assert_eq!(expect_err(&mut con, &[CMD, "a", &ca]), unknown_cursor(&ca));
    wait_until("the evicted copy to be released", POLL, || {
        info_u64(&mut con, "snapshot_hash_snapshots_open") == 2
    });
    for (k, c) in [("b", cb), ("c", cc)] {
        let rest = finish_from(&mut con, k, &c, &o, |_| {});
        assert_eq!(to_hash(&rest, false).len(), 1_990, "{k}");
    }
    wait_until(
        "all copies to be released",
        POLL + QUICK_RETRY_WINDOW,
        || {
            info_u64(&mut con, "snapshot_hash_snapshots_open") == 0
                && info_u64(&mut con, "snapshot_hash_snapshot_bytes") == 0
        },
    );
}
