//! Memory limit.

use super::*;

#[test]
fn memory_limit_refuses_new_copies_and_recovers() {
    const N: usize = 5_000;
    let server = Server::start_with(ServerOpts::new().quick_retry());
    let mut con = server.client();
    let value = |i: usize| format!("{i:040}");
    for k in 0..5 {
        fill_hash(&mut con, &format!("m{k}"), N, value);
    }
    // Memory-type config: units accepted, minimum 1024; the old name is
    // an alias of the new one (one value).
    config_set(&mut con, "snapshot.hash-memory-limit", "1mb");
    for name in [
        "snapshot.hash-memory-limit",
        "snapshot.collection-memory-limit",
    ] {
        let got: Vec<String> = query(&mut con, &["CONFIG", "GET", name]).unwrap();
        assert_eq!(got[1], "1048576", "{name}");
        assert!(query::<()>(&mut con, &["CONFIG", "SET", name, "1000"]).is_err());
    }
    config_set(&mut con, "snapshot.collection-memory-limit", "2mb");
    let got: Vec<String> =
        query(&mut con, &["CONFIG", "GET", "snapshot.hash-memory-limit"]).unwrap();
    assert_eq!(got[1], "2097152");

    let o = Opts::count(10);
    let (c0, p0) = hscan(&mut con, "m0", "0", &o);
    let one = info_u64(&mut con, "snapshot_hash_snapshot_bytes");
    assert!(
        one >= (N * (6 + 40)) as u64,
        "a copy holds at least its data: {one}"
    );
    let limit = one * 5 / 2;
    config_set(&mut con, "snapshot.hash-memory-limit", &limit.to_string());

    let (c1, p1) = hscan(&mut con, "m1", "0", &o);
    assert_eq!(info_u64(&mut con, "snapshot_hash_snapshot_bytes"), 2 * one);
    for k in ["m2", "m3", "m4"] {
        let e = err_text(&try_hscan(&mut con, k, "0", &o).expect_err("over the limit"));
        assert!(
            e.starts_with(LIMIT_HEAD) && e.ends_with(&format!("of {limit} {LIMIT_TAIL}")),
            "{k}: {e}"
        );
    }
    // A small (one-hold) copy is refused the same way.
    fill_hash(&mut con, "small", 200, |_| "x".repeat(1_000));
    let e = err_text(&try_hscan(&mut con, "small", "0", &o).expect_err("over the limit"));
    assert!(e.starts_with(LIMIT_HEAD), "{e}");
    // Refused copies hold nothing; the server is healthy.
    assert_eq!(info_u64(&mut con, "snapshot_hash_snapshot_bytes"), 2 * one);
    assert_eq!(info_u64(&mut con, "snapshot_hash_snapshots_open"), 2);
    assert_eq!(cmd_str(&mut con, &["PING"]), "PONG");
    assert!(cmd_str(&mut con, &["INFO", "everything"]).contains("snapshot_hash_copies_made"));

    // Finishing m0 makes room for m2 (once its last cursor is past the
    // retry window).
    let mut pages = vec![p0];
    pages.extend(finish_from(&mut con, "m0", &c0, &Opts::count(1000), |_| {}));
    assert_same(&to_hash(&pages, false), &hgetall(&mut con, "m0"), "m0");
    wait_until(
        "m0's copy to be released",
        POLL + QUICK_RETRY_WINDOW,
        || info_u64(&mut con, "snapshot_hash_snapshot_bytes") == one,
    );
    let (c2, p2) = hscan(&mut con, "m2", "0", &o);

    for (k, c, p) in [("m1", c1, p1), ("m2", c2, p2)] {
        let mut pages = vec![p];
        pages.extend(finish_from(&mut con, k, &c, &Opts::count(1000), |_| {}));
        assert_same(&to_hash(&pages, false), &hgetall(&mut con, k), k);
    }
    wait_until(
        "every copy to be released",
        POLL + QUICK_RETRY_WINDOW,
        || {
            info_u64(&mut con, "snapshot_hash_snapshot_bytes") == 0
                && info_u64(&mut con, "snapshot_hash_snapshots_open") == 0
        },
    );
    assert_same(
        &full(&mut con, "m4", &Opts::count(500)),
        &hgetall(&mut con, "m4"),
        "m4",
    );
}
