//! Cursors.

use super::*;

#[test]
fn cursors_answer_a_retry_nonzero_until_the_end_and_distinct() {
    let server = Server::start();
    let mut con = server.client();
    let keys = fill(&mut con, "k", 50);
    let mut cursor = "0".to_string();
    let mut seen_cursors = Vec::new();
    let mut got = Vec::new();
    let mut pages = 0;
    // Continuations registered by the retries, never used.
    let mut abandoned = 0;
    loop {
        let (next, items) = page(&mut con, &cursor, &["COUNT", "7"]);
        pages += 1;
        assert!(pages <= 8, "more pages than ceil(50/7)");
        got.extend(items.clone());
        if cursor != "0" {
            // Sent again (a retry after a lost reply): the same page, the
            // end at the same place, any other next cursor a new number.
            let (again_next, again) = page(&mut con, &cursor, &["COUNT", "7"]);
            assert_eq!(again, items, "the same page for {cursor}");
            assert_eq!(again_next == "0", next == "0");
            if again_next != "0" {
                let n: u64 = again_next.parse().expect("cursor parses as u64");
                assert!(n != 0 && n < 1 << 63 && !seen_cursors.contains(&n));
                assert_ne!(again_next, next);
                seen_cursors.push(n);
                abandoned += 1;
            }
        }
        if next == "0" {
            assert_eq!(got.len(), 50, "ended early after {pages} pages");
            break;
        }
        assert_eq!(items.len(), 7, "a non-final page is full");
        let n: u64 = next.parse().expect("cursor parses as u64");
        assert!(n != 0 && n < 1 << 63);
        assert!(!seen_cursors.contains(&n), "cursor {n} repeated");
        seen_cursors.push(n);
        cursor = next;
    }
    assert_eq!(pages, 8);
    assert_eq!(got, keys, "exactly the keys, once, in byte order");
    // The iteration followed is closed; each retry's own continuation stays
    // open until the idle timeout.
    assert_eq!(abandoned, 6);
    assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), abandoned);
}

#[test]
fn cursor_from_another_db_is_refused_and_stays_valid() {
    let server = Server::start();
    let mut con = server.client();
    let mut other = server.client();
    let keys = fill(&mut con, "k", 30);
    let _: () = query(&mut other, &["SELECT", "2"]).unwrap();
    let _: () = query(&mut other, &["SET", "db2key", "v"]).unwrap();

    let (c1, p1) = page(&mut con, "0", &["COUNT", "10"]);
    assert_eq!(
        expect_err(&mut other, &["SNAPSHOT.SCAN", &c1, "COUNT", "10"]),
        format!("ERR cursor {c1} belongs to database 0, not 2; restart the scan from cursor 0")
    );
    // Twice: the refusal does not consume it.
    assert_eq!(
        expect_err(&mut other, &["SNAPSHOT.SCAN", &c1]),
        format!("ERR cursor {c1} belongs to database 0, not 2; restart the scan from cursor 0")
    );
    let (c2, p2) = page(&mut con, &c1, &["COUNT", "10"]);
    assert_ne!(c2, "0");
    assert_eq!(p1.into_iter().chain(p2).collect::<Vec<_>>(), keys[..20]);

    // Same for a connection that SELECTs away and back.
    let _: () = query(&mut con, &["SELECT", "2"]).unwrap();
    assert_eq!(
        expect_err(&mut con, &["SNAPSHOT.SCAN", &c2]),
        format!("ERR cursor {c2} belongs to database 0, not 2; restart the scan from cursor 0")
    );
    assert_eq!(
        to_strings(full_scan(&mut con, "SNAPSHOT.SCAN", &[])),
        vec!["db2key"]
    );
    let _: () = query(&mut con, &["SELECT", "0"]).unwrap();
    let (c3, p3) = page(&mut con, &c2, &["COUNT", "10"]);
    assert_eq!(c3, "0");
    assert_eq!(p3, keys[20..]);
}

/// A cursor sent again gets exactly its page also after later cursors of
/// its iteration went on and every key changed (README, *Cursor
/// lifetime*): what the iteration passed stays kept while its used cursors
/// may come again. Pages served on the main thread (small) and by a worker.
#[rstest]
#[case::main_thread_pages(10)]
#[case::worker_pages(2_000)]
fn an_earlier_cursor_sent_again_after_later_ones_and_writes_gets_its_page(#[case] count: usize) {
    let server = Server::start();
    let mut con = server.client();
    let keys = fill(&mut con, "k", 5 * count);
    let count = count.to_string();
    let opts = ["COUNT", count.as_str()];
    let (c1, p1) = page(&mut con, "0", &opts);
    let (c2, p2) = page(&mut con, &c1, &opts);
    let (c3, p3) = page(&mut con, &c2, &opts);
    let (c4, p4) = page(&mut con, &c3, &opts);
    // Every key deleted: only what the snapshot keeps still shows them;
    // the indexer applies the deletions and its collector runs meanwhile.
    for chunk in keys.chunks(1000) {
        let _: i64 = redis::cmd("DEL").arg(chunk).query(&mut con).unwrap();
    }
    wait_until("the deletions applied", POLL, || {
        info_u64(&mut con, "snapshot_index_keys") == 0
            && info_u64(&mut con, "snapshot_index_backlog") == 0
    });
    for (c, p) in [(&c1, &p2), (&c2, &p3), (&c3, &p4), (&c1, &p2)] {
        let again = page(&mut con, c, &opts).1;
        assert!(
            again == *p,
            "cursor {c} again: {} keys from {:?} instead of {} from {:?}",
            again.len(),
            again.first(),
            p.len(),
            p.first()
        );
    }
    let mut got: Vec<String> = [p1, p2, p3, p4].concat();
    let mut cursor = c4;
    while cursor != "0" {
        let (next, items) = page(&mut con, &cursor, &opts);
        got.extend(items);
        cursor = next;
    }
    assert_eq!(got, keys, "the snapshot's keys, once each");
}
