//! SNAPSHOT.ZSCAN against a real server and its native ZSCAN: listpack and
//! skiplist sorted sets with writes between pages, scores byte for byte as
//! native ZSCAN formats them, COUNT honoured for every encoding, NOSCORES
//! (also where native ZSCAN lacks it), MATCH, errors, key specs and ACL
//! categories (MULTI / Lua / functions: tests/collections.rs).
//!
//! Ground truth is the native `ZSCAN` iteration taken right before cursor 0,
//! with no write in between.
mod coll;
mod common;

use coll::*;
use common::*;
use rstest::rstest;

const CMD: &str = "SNAPSHOT.ZSCAN";
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[rstest]
#[case::listpack(100, "listpack", 7)]
#[case::skiplist(3_000, "skiplist", 7)]
#[case::skiplist_big_pages(3_000, "skiplist", 1000)]
fn point_in_time_scores_as_native_with_writes_between_pages(
    #[case] n: usize,
    #[case] enc: &str,
    #[case] count: usize,
) {
    let server = Server::start();
    let mut con = server.client();
    fill_zset(&mut con, "z", n);
    assert_eq!(encoding(&mut con, "z"), enc);
    let truth = native(&mut con, "ZSCAN", "z", &["COUNT", "100"], 2);
    assert_eq!(truth.len(), n);
    let count_s = count.to_string();
    let opts = ["COUNT", count_s.as_str()];
    let mut w = server.client();
    let mut i = 0usize;
    let flat = finish_from(&mut con, CMD, "z", "0", &opts, 2, |_| {
        i += 1;
        let _: i64 = query(&mut w, &["ZADD", "z", "0.1", &format!("new{i}")]).unwrap();
        let victim = truth.keys().nth(i % truth.len()).cloned().unwrap();
        let _: i64 = redis::cmd("ZREM")
            .arg("z")
            .arg(victim)
            .query(&mut w)
            .unwrap();
        let other = truth
            .keys()
            .nth((i * 31 + 7) % truth.len())
            .cloned()
            .unwrap();
        let _: String = redis::cmd("ZINCRBY")
            .arg("z")
            .arg(0.25)
            .arg(other)
            .query(&mut w)
            .unwrap();
    });
    assert!(i > 0, "more than one page");
    // Scores compared as bytes: exactly native ZSCAN's formatting.
    assert_same(
        &to_elems(&flat, 2),
        &truth,
        "the cursor-0 members and scores",
    );
    let now = native(&mut con, "ZSCAN", "z", &["COUNT", "100"], 2);
    assert_ne!(now, truth);
    let again = finish_from(&mut con, CMD, "z", "0", &opts, 2, |_| {});
    assert_same(&to_elems(&again, 2), &now, "a new snapshot");
}

#[rstest]
#[case::listpack(false)]
#[case::skiplist(true)]
fn every_score_format_is_natives(#[case] big: bool) {
    let server = Server::start();
    let mut con = server.client();
    let mut c = redis::cmd("ZADD");
    c.arg("z");
    for (i, s) in SCORES.iter().enumerate() {
        c.arg(*s).arg(format!("s{i:02}"));
    }
    let _: i64 = c.query(&mut con).unwrap();
    if big {
        fill_zset(&mut con, "z", 300);
    }
    assert_eq!(
        encoding(&mut con, "z"),
        if big { "skiplist" } else { "listpack" }
    );
    let truth = native(&mut con, "ZSCAN", "z", &["COUNT", "1000"], 2);
    let got = to_elems(
        &finish_from(&mut con, CMD, "z", "0", &["COUNT", "3"], 2, |_| {}),
        2,
    );
    assert_same(&got, &truth, "scores");
    // Sanity: the scores parse back to what ZSCORE holds.
    for (m, s) in got.iter().filter(|(m, _)| m.starts_with(b"s")) {
        let mine: f64 = String::from_utf8_lossy(s).parse().expect("a number");
        let theirs: String = redis::cmd("ZSCORE")
            .arg("z")
            .arg(m)
            .query(&mut con)
            .unwrap();
        assert_eq!(
            mine,
            theirs.parse::<f64>().expect("a number"),
            "{}",
            show(m)
        );
    }
}

#[test]
fn noscores_count_and_match() {
    let server = Server::start();
    let mut con = server.client();
    fill_zset(&mut con, "z", 100);
    // Native ZSCAN returns a listpack whole; COUNT bounds our pages.
    let (next, p) = page(&mut con, "ZSCAN", "z", "0", &["COUNT", "5"]);
    assert_eq!((next.as_str(), p.len()), ("0", 200));
    let (next, p) = page(&mut con, CMD, "z", "0", &["COUNT", "5"]);
    assert_ne!(next, "0");
    assert_eq!(p.len(), 10);
    let truth = native(&mut con, "ZSCAN", "z", &[], 2);
    let members: Elems = truth.keys().map(|m| (m.clone(), Vec::new())).collect();
    for opts in [&["NOSCORES", "COUNT", "9"][..], &["count", "9", "noscores"]] {
        let got = finish_from(&mut con, CMD, "z", "0", opts, 1, |_| {});
        assert_same(&to_elems(&got, 1), &members, "NOSCORES");
    }
    for p in ["m000*", "*7", "m00[1-3]?", "none*"] {
        let want = native(&mut con, "ZSCAN", "z", &["MATCH", p], 2);
        let got = finish_from(
            &mut con,
            CMD,
            "z",
            "0",
            &["MATCH", p, "COUNT", "4"],
            2,
            |_| {},
        );
        assert_same(&to_elems(&got, 2), &want, p);
    }
}

#[test]
fn missing_key_wrongtype_and_argument_errors() {
    let server = Server::start();
    let mut con = server.client();
    for opts in [&[][..], &["COUNT", "0"], &["NOVALUES"], &["BOGUS"]] {
        assert_eq!(
            page(&mut con, CMD, "nosuch", "0", opts),
            ("0".to_string(), vec![]),
            "{opts:?}"
        );
    }
    let _: () = query(&mut con, &["SET", "str", "x"]).unwrap();
    let _: i64 = query(&mut con, &["HSET", "h", "f", "v"]).unwrap();
    let _: i64 = query(&mut con, &["SADD", "s", "m"]).unwrap();
    for k in ["str", "h", "s"] {
        assert_eq!(expect_err(&mut con, &[CMD, k, "0"]), WRONGTYPE, "{k}");
    }
    fill_zset(&mut con, "z", 50);
    for (args, want) in [
        (
            &[CMD, "z"][..],
            "ERR wrong number of arguments for 'snapshot.zscan' command",
        ),
        (&[CMD, "z", "-1"], "ERR invalid cursor"),
        (
            &[CMD, "z", "0", "NOVALUES"],
            "ERR NOVALUES option can only be used in HSCAN",
        ),
        (&[CMD, "z", "0", "MATCH"], "ERR syntax error"),
        (&[CMD, "z", "0", "COUNT", "-2"], "ERR syntax error"),
        // The key before the options, as natively.
        (&[CMD, "h", "0", "COUNT", "-2"], WRONGTYPE),
        (&[CMD, "h", "0", "NOVALUES"], WRONGTYPE),
    ] {
        assert_eq!(expect_err(&mut con, args), want, "{args:?}");
    }
    let (c, _) = page(&mut con, CMD, "z", "0", &["COUNT", "3"]);
    assert_eq!(
        expect_err(&mut con, &["SNAPSHOT.SSCAN", "z", &c]),
        format!("ERR cursor {c} belongs to SNAPSHOT.ZSCAN; restart the scan from cursor 0")
    );
    assert_eq!(
        expect_err(&mut con, &[CMD, "other", &c]),
        format!("ERR cursor {c} belongs to another key; restart the scan from cursor 0")
    );
    let rest = finish_from(&mut con, CMD, "z", &c, &["COUNT", "3"], 2, |_| {});
    assert_eq!(rest.len(), 94);
}

#[test]
fn key_specs_and_acl_categories_like_zscan() {
    let server = Server::start();
    let mut con = server.client();
    check_key_specs(&mut con, &server, CMD, &["read", "sortedset", "slow"]);
    fill_zset(&mut con, "z", 20);
    let _: () = query(
        &mut con,
        &["ACL", "SETUSER", "r", "on", ">pw", "%R~z*", "+@all"],
    )
    .unwrap();
    let _: () = query(
        &mut con,
        &["ACL", "SETUSER", "w", "on", ">pw", "%W~z*", "+@all"],
    )
    .unwrap();
    let mut r = server.client();
    let _: () = query(&mut r, &["AUTH", "r", "pw"]).unwrap();
    assert_eq!(
        finish_from(&mut r, CMD, "z", "0", &["COUNT", "6"], 2, |_| {}).len(),
        40
    );
    let mut w = server.client();
    let _: () = query(&mut w, &["AUTH", "w", "pw"]).unwrap();
    assert!(expect_err(&mut w, &[CMD, "z", "0"]).starts_with("NOPERM"));
}

#[test]
fn sliced_copy_under_a_hammering_writer_is_one_instant() {
    let server = Server::start();
    let mut con = server.client();
    // 50 slices of 100 members for 5,000 members.
    config_set(&mut con, "snapshot.hash-copy-batch", "100");
    fill_zset(&mut con, "z", 5_000);
    let base = native(&mut con, "ZSCAN", "z", &["COUNT", "1000"], 2);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut w = server.client();
    let s = stop.clone();
    // Adds w:0, w:1, ... in order: any one instant holds a prefix of them.
    let writer = std::thread::spawn(move || {
        let mut i = 0u64;
        while !s.load(std::sync::atomic::Ordering::SeqCst) && i < 1_000_000 {
            let _: i64 = query(&mut w, &["ZADD", "z", "7.5", &format!("w:{i:07}")]).unwrap();
            i += 1;
        }
        i
    });
    wait_until(
        "the writer to start",
        std::time::Duration::from_secs(10),
        || cmd_str(&mut con, &["ZCARD", "z"]).parse::<usize>().unwrap() > 5_010,
    );
    let mut copies = Vec::new();
    for _ in 0..3 {
        copies.push(to_elems(
            &finish_from(&mut con, CMD, "z", "0", &["COUNT", "1000"], 2, |_| {}),
            2,
        ));
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let written = writer.join().unwrap();
    assert!(written > 0);
    // The writes did land between slices: copies restarted (or fell back
    // to one hold after 3 restarts).
    let info = cmd_str(&mut con, &["INFO", "snapshot"]);
    let retries: u64 = info_field(&info, "snapshot_hash_copy_retries")
        .unwrap()
        .parse()
        .unwrap();
    eprintln!("{written} members written, {retries} restarts");
    assert!(retries > 0);
    for got in copies {
        let (ws, rest): (Elems, Elems) = got.into_iter().partition(|(m, _)| m.starts_with(b"w:"));
        assert_same(&rest, &base, "the members nobody wrote");
        let n = ws.len();
        let want: Elems = (0..n)
            .map(|i| (format!("w:{i:07}").into_bytes(), b"7.5".to_vec()))
            .collect();
        assert_same(
            &ws,
            &want,
            "the written members form a prefix (one instant)",
        );
    }
}
