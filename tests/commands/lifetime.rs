//! Cursor lifetime.

use super::*;

#[test]
fn idle_cursor_expires_and_is_then_unknown() {
    let server = Server::start();
    let mut con = server.client();
    fill(&mut con, "k", 20);
    config_set(&mut con, "snapshot.cursor-idle-timeout", "1");
    let expired_before = info_u64(&mut con, "snapshot_cursors_expired");
    let (c, _) = page(&mut con, "0", &["COUNT", "5"]);
    assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), 1);
    wait_until("the idle cursor to expire", POLL, || {
        info_u64(&mut con, "snapshot_open_snapshots") == 0
    });
    assert!(info_u64(&mut con, "snapshot_cursors_expired") > expired_before);
    assert_eq!(
        expect_err(&mut con, &["SNAPSHOT.SCAN", &c, "COUNT", "5"]),
        unknown_cursor(&c)
    );
}

#[test]
fn a_cursor_in_use_outlives_the_idle_timeout() {
    let server = Server::start();
    let mut con = server.client();
    let keys = fill(&mut con, "k", 6);
    config_set(&mut con, "snapshot.cursor-idle-timeout", "1");
    // Each page restarts the idle clock: 5 continuations 400 ms apart span
    // twice the timeout. (Pacing, not synchronisation.)
    let mut cursor = "0".to_string();
    let mut got = Vec::new();
    for _ in 0..6 {
        let (next, items) = page(&mut con, &cursor, &["COUNT", "1"]);
        got.extend(items);
        cursor = next;
        if cursor == "0" {
            break;
        }
        std::thread::sleep(Duration::from_millis(400));
    }
    assert_eq!(cursor, "0");
    assert_eq!(got, keys);
    assert_eq!(info_u64(&mut con, "snapshot_cursors_expired"), 0);
}

#[test]
fn disconnect_mid_iteration_leaks_nothing() {
    let server = Server::start();
    let mut con = server.client();
    fill(&mut con, "k", 40);
    config_set(&mut con, "snapshot.cursor-idle-timeout", "1");
    {
        let mut gone = server.client();
        let (c, _) = page(&mut gone, "0", &["COUNT", "5"]);
        page(&mut gone, &c, &["COUNT", "5"]);
        // Writes after the snapshot make it a retained past version (once
        // the indexer has applied them).
        fill(&mut con, "new", 5);
        wait_applied(&mut con);
        assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), 1);
        assert_eq!(info_u64(&mut con, "snapshot_retained_versions"), 1);
    }
    wait_until("the orphaned iteration to be dropped", POLL, || {
        info_u64(&mut con, "snapshot_open_snapshots") == 0
    });
    assert_eq!(info_u64(&mut con, "snapshot_retained_versions"), 0);
    assert_eq!(info_u64(&mut con, "snapshot_cursors_expired"), 1);
}

#[test]
fn max_open_cursors_evicts_never_continued_iterations_first() {
    let server = Server::start();
    let mut con = server.client();
    let keys = fill(&mut con, "k", 20);
    config_set(&mut con, "snapshot.max-open-cursors", "5");
    assert_eq!(
        config_get(&mut con, "snapshot.max-open-cursors").as_deref(),
        Some("5")
    );
    let count = ["COUNT", "2"];

    // Four iterations continued once (their page-2 continuation is registered).
    let mut continued = Vec::new();
    for _ in 0..4 {
        let (c1, _) = page(&mut con, "0", &count);
        let (c2, p2) = page(&mut con, &c1, &count);
        assert_eq!(p2, keys[2..4]);
        continued.push(c2);
    }
    assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), 4);
    let evicted0 = info_u64(&mut con, "snapshot_cursors_evicted");

    // 200 cursor-0 calls, each registering a page-1 continuation.
    let mut last_fresh = String::new();
    for i in 0..200 {
        let (c, p) = page(&mut con, "0", &count);
        assert_eq!(p, keys[..2], "spam call {i}");
        last_fresh = c;
        if i % 20 == 0 {
            assert!(info_u64(&mut con, "snapshot_open_snapshots") <= 5);
        }
    }
    assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), 5);
    assert_eq!(
        info_u64(&mut con, "snapshot_cursors_evicted") - evicted0,
        199,
        "each spam call past the free slot evicts one never-continued iteration"
    );

    // The continued iterations survived the spam.
    let mut again = Vec::new();
    for c in &continued {
        let (next, p) = page(&mut con, c, &count);
        assert_eq!(p, keys[4..6], "continued iteration {c} after spam");
        again.push(next);
    }
    // The newest spam iteration is the one left: continuing makes all 5 slots continued.
    let (s2, p) = page(&mut con, &last_fresh, &count);
    assert_eq!(p, keys[2..4]);
    again.push(s2);
    assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), 5);

    // With every slot continued, a new iteration evicts the least recently used one.
    let evicted1 = info_u64(&mut con, "snapshot_cursors_evicted");
    page(&mut con, "0", &count);
    assert_eq!(info_u64(&mut con, "snapshot_cursors_evicted"), evicted1 + 1);
    assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), 5);
    assert_eq!(
        expect_err(&mut con, &["SNAPSHOT.SCAN", &again[0], "COUNT", "2"]),
        unknown_cursor(&again[0])
    );
    for c in &again[1..4] {
        let (_, p) = page(&mut con, c, &count);
        assert_eq!(p, keys[6..8]);
    }
}

#[test]
fn cursor_zero_spam_is_bounded_in_cursors_and_memory() {
    let server = Server::start();
    let mut con = server.client();
    let keys = fill(&mut con, "key:", 20_000);
    let max_open: u64 = config_get(&mut con, "snapshot.max-open-cursors")
        .unwrap()
        .parse()
        .unwrap();
    let mem_before = info_section_u64(&mut con, "memory", "used_memory");
    let evicted_before = info_u64(&mut con, "snapshot_cursors_evicted");
    for batch in 0..10 {
        let mut p = redis::pipe();
        for _ in 0..200 {
            p.cmd("SNAPSHOT.SCAN").arg("0").arg("COUNT").arg("10");
        }
        let replies: Vec<(String, Vec<String>)> = p
            .query(&mut con)
            .unwrap_or_else(|e| panic!("spam batch {batch}: {}", err_text(&e)));
        assert_eq!(replies.len(), 200);
        for (c, items) in &replies {
            assert_ne!(c, "0");
            assert_eq!(items[..], keys[..10]);
        }
        assert!(info_u64(&mut con, "snapshot_open_snapshots") <= max_open);
    }
    assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), max_open);
    assert_eq!(
        info_u64(&mut con, "snapshot_cursors_evicted") - evicted_before,
        2000 - max_open
    );
    let mem_after = info_section_u64(&mut con, "memory", "used_memory");
    assert!(
        mem_after < mem_before + 20 * 1024 * 1024,
        "used_memory grew from {mem_before} to {mem_after}"
    );
    // A real iteration still works among the spam.
    assert_eq!(
        to_strings(full_scan(&mut con, "SNAPSHOT.SCAN", &["COUNT", "5000"])),
        keys
    );
}

/// README: "The last 65,536 cursors ended this way are remembered for this
/// message; older ones get the generic one." 65,538 iterations, each pinning
/// a version of its own (a key of a 3-key index toggled in between), are
/// ended by `snapshot.max-retained-bytes 1`, oldest first: the first one
/// ended gets the generic error, later ones the memory message. (A few
/// seconds and about 35 MB of module heap.)
#[test]
fn only_the_last_65536_memory_ended_cursors_say_so() {
    const N: usize = 65_536 + 2;
    let server = Server::start();
    let mut con = server.client();
    config_set(&mut con, "snapshot.max-open-cursors", "100000");
    fill(&mut con, "b", 2);
    let mut cursors: Vec<String> = Vec::with_capacity(N);
    for start in (0..N).step_by(2000) {
        let mut p = redis::pipe();
        for i in start..N.min(start + 2000) {
            if i % 2 == 0 {
                p.cmd("SET").arg("x").arg("v").ignore();
            } else {
                p.cmd("DEL").arg("x").ignore();
            }
            p.cmd("SNAPSHOT.SCAN").arg("0").arg("COUNT").arg("1");
        }
        let replies: Vec<(String, Vec<String>)> = p
            .query(&mut con)
            .unwrap_or_else(|e| panic!("batch at {start}: {}", err_text(&e)));
        cursors.extend(replies.into_iter().map(|(c, _)| c));
    }
    assert_eq!(cursors.len(), N);
    assert!(cursors.iter().all(|c| c != "0"));
    assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), N as u64);
    let before = info_u64(&mut con, "snapshot_cursors_evicted_memory");
    config_set(&mut con, "snapshot.max-retained-bytes", "1");
    // All but the newest, which pins the live version (no bytes retained),
    // and possibly that one too: so at least 65,537 and at most 65,538.
    wait_until("the iterations to be ended", POLL, || {
        info_u64(&mut con, "snapshot_cursors_evicted_memory") - before >= N as u64 - 1
    });
    let memory = |c: &str| {
        format!("ERR cursor {c}: snapscan: iteration ended to bound snapshot memory (snapshot.max-retained-bytes); restart the scan from cursor 0")
    };
    assert_eq!(
        expect_err(&mut con, &["SNAPSHOT.SCAN", &cursors[0]]),
        unknown_cursor(&cursors[0]),
        "ended before the last 65,536"
    );
    for c in [&cursors[2], &cursors[N / 2], &cursors[N - 2]] {
        assert_eq!(expect_err(&mut con, &["SNAPSHOT.SCAN", c]), memory(c));
    }
}
