//! SNAPSHOT.SSCAN against a real server and its native SSCAN: every set
//! encoding (intset, listpack, hashtable) with writes between pages, COUNT
//! honoured for every encoding, MATCH, errors, key specs and ACL categories
//! (MULTI / Lua / functions: tests/collections.rs).
//!
//! Ground truth is the native `SSCAN` iteration taken right before cursor 0,
//! with no write in between.
mod coll;
mod common;

use coll::*;
use common::*;
use rstest::rstest;

const CMD: &str = "SNAPSHOT.SSCAN";
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[derive(Debug, Clone, Copy)]
enum Enc {
    Intset,
    BigIntset,
    Listpack,
    Hashtable,
}

/// Fills `key` with `n` members of the wanted encoding.
fn fill_set(con: &mut redis::Connection, key: &str, enc: Enc) -> usize {
    let (n, ints) = match enc {
        Enc::Intset => (100, true),
        Enc::BigIntset => (3_000, true),
        Enc::Listpack => (100, false),
        Enc::Hashtable => (3_000, false),
    };
    if matches!(enc, Enc::BigIntset) {
        config_set(con, "set-max-intset-entries", "5000");
    }
    populate(con, "SADD", key, n, |i| {
        vec![if ints {
            (i as i64 * 7 - 300).to_string()
        } else {
            format!("m{i:05}")
        }]
    });
    n
}

fn wanted_encoding(server: &Server, enc: Enc) -> &'static str {
    match enc {
        Enc::Intset | Enc::BigIntset => "intset",
        // Small sets of strings are listpacks since Redis 7.2 / Valkey.
        Enc::Listpack if server.is_valkey() || server.version() >= (7, 2, 0) => "listpack",
        Enc::Listpack | Enc::Hashtable => "hashtable",
    }
}

#[rstest]
#[case::intset(Enc::Intset, 7)]
#[case::big_intset(Enc::BigIntset, 100)]
#[case::listpack(Enc::Listpack, 7)]
#[case::hashtable(Enc::Hashtable, 7)]
#[case::hashtable_big_pages(Enc::Hashtable, 1000)]
fn point_in_time_with_writes_between_pages(#[case] enc: Enc, #[case] count: usize) {
    let server = Server::start();
    let mut con = server.client();
    let n = fill_set(&mut con, "s", enc);
    assert_eq!(encoding(&mut con, "s"), wanted_encoding(&server, enc));
    let truth = native(&mut con, "SSCAN", "s", &["COUNT", "100"], 1);
    assert_eq!(truth.len(), n);
    let count_s = count.to_string();
    let opts = ["COUNT", count_s.as_str()];
    let mut w = server.client();
    let mut i = 0usize;
    let flat = finish_from(&mut con, CMD, "s", "0", &opts, 1, |_| {
        // Adds (a string member turns an intset into a hashtable), removes.
        i += 1;
        let _: i64 = query(
            &mut w,
            &[
                "SADD",
                "s",
                &format!("new{i}"),
                &(i * 1_000_003).to_string(),
            ],
        )
        .unwrap();
        let victim = truth.keys().nth(i % truth.len()).cloned().unwrap();
        let _: i64 = redis::cmd("SREM")
            .arg("s")
            .arg(victim)
            .query(&mut w)
            .unwrap();
    });
    assert!(i > 0, "more than one page");
    assert_same(&to_elems(&flat, 1), &truth, "the cursor-0 members");
    // The set did change, and a new iteration sees it as it is now.
    let now = native(&mut con, "SSCAN", "s", &["COUNT", "100"], 1);
    assert_ne!(now, truth);
    let again = finish_from(&mut con, CMD, "s", "0", &opts, 1, |_| {});
    assert_same(&to_elems(&again, 1), &now, "a new snapshot");
}

#[test]
fn count_bounds_pages_of_small_encodings_that_native_returns_whole() {
    let server = Server::start();
    let mut con = server.client();
    fill_set(&mut con, "s", Enc::Intset);
    let (next, p) = page(&mut con, "SSCAN", "s", "0", &["COUNT", "5"]);
    assert_eq!(
        (next.as_str(), p.len()),
        ("0", 100),
        "native SSCAN returns it whole"
    );
    let (next, p) = page(&mut con, CMD, "s", "0", &["COUNT", "5"]);
    assert_ne!(next, "0");
    assert_eq!(p.len(), 5);
    // Default COUNT is 10; members in byte order ("-1" < "-300"? no: bytes).
    let (_, p) = page(&mut con, CMD, "s", "0", &[]);
    assert_eq!(p.len(), 10);
    let mut sorted = p.clone();
    sorted.sort();
    assert_eq!(p, sorted);
}

#[rstest]
#[case(b"m000*" as &[u8])]
#[case(b"*9")]
#[case(b"m0[0-1]?[^5]*")]
#[case(b"nothing*")]
fn match_is_the_servers_glob(#[case] pattern: &[u8]) {
    let server = Server::start();
    let mut con = server.client();
    fill_set(&mut con, "s", Enc::Hashtable);
    let p = std::str::from_utf8(pattern).unwrap();
    let want = native(&mut con, "SSCAN", "s", &["MATCH", p, "COUNT", "1000"], 1);
    let got = finish_from(
        &mut con,
        CMD,
        "s",
        "0",
        &["match", p, "count", "50"],
        1,
        |_| {},
    );
    assert_same(&to_elems(&got, 1), &want, p);
}

#[test]
fn missing_key_wrongtype_and_argument_errors() {
    let server = Server::start();
    let mut con = server.client();
    for opts in [&[][..], &["COUNT", "0"], &["NOSCORES"], &["BOGUS"]] {
        assert_eq!(
            page(&mut con, CMD, "nosuch", "0", opts),
            ("0".to_string(), vec![]),
            "{opts:?}"
        );
    }
    let _: () = query(&mut con, &["SET", "str", "x"]).unwrap();
    let _: i64 = query(&mut con, &["HSET", "h", "f", "v"]).unwrap();
    let _: i64 = query(&mut con, &["ZADD", "z", "1", "m"]).unwrap();
    for k in ["str", "h", "z"] {
        assert_eq!(expect_err(&mut con, &[CMD, k, "0"]), WRONGTYPE, "{k}");
    }
    fill_set(&mut con, "s", Enc::Listpack);
    for (args, want) in [
        (
            &[CMD, "s"][..],
            "ERR wrong number of arguments for 'snapshot.sscan' command",
        ),
        (&[CMD, "s", "x"], "ERR invalid cursor"),
        (
            &[CMD, "s", "0", "NOVALUES"],
            "ERR NOVALUES option can only be used in HSCAN",
        ),
        (
            &[CMD, "s", "0", "NOSCORES"],
            "ERR NOSCORES option can only be used in ZSCAN",
        ),
        (&[CMD, "s", "0", "TYPE", "set"], "ERR syntax error"),
        (&[CMD, "s", "0", "COUNT", "0"], "ERR syntax error"),
        // The key before the options, as natively.
        (&[CMD, "z", "0", "COUNT", "0"], WRONGTYPE),
        (&[CMD, "str", "0", "NOSCORES"], WRONGTYPE),
        (
            &[CMD, "s", "0", "COUNT", "x"],
            "ERR value is not an integer or out of range",
        ),
    ] {
        assert_eq!(expect_err(&mut con, args), want, "{args:?}");
    }
    // A cursor of another collection command, on the same key name.
    let (c, _) = page(&mut con, CMD, "s", "0", &["COUNT", "3"]);
    let _: i64 = query(&mut con, &["DEL", "s"]).unwrap();
    let _: i64 = query(
        &mut con,
        &["HSET", "s", "a", "1", "b", "2", "c", "3", "d", "4"],
    )
    .unwrap();
    let (hc, _) = page(&mut con, "SNAPSHOT.HSCAN", "s", "0", &["COUNT", "1"]);
    assert_eq!(
        expect_err(&mut con, &[CMD, "s", &hc]),
        format!("ERR cursor {hc} belongs to SNAPSHOT.HSCAN; restart the scan from cursor 0")
    );
    // The set cursor still works (its snapshot is kept), and sent again
    // returns the same page.
    let rest = finish_from(&mut con, CMD, "s", &c, &["COUNT", "3"], 1, |_| {});
    assert_eq!(rest.len(), 97);
    let (_, again): (String, Vec<Vec<u8>>) =
        query(&mut con, &[CMD, "s", &c, "COUNT", "3"]).unwrap();
    assert_eq!(again, rest[..3]);
}

#[test]
fn key_specs_and_acl_categories_like_sscan() {
    let server = Server::start();
    let mut con = server.client();
    check_key_specs(&mut con, &server, CMD, &["read", "set", "slow"]);
    fill_set(&mut con, "s", Enc::Listpack);
    let _: () = query(
        &mut con,
        &["ACL", "SETUSER", "r", "on", ">pw", "%R~s*", "+@all"],
    )
    .unwrap();
    let _: () = query(
        &mut con,
        &["ACL", "SETUSER", "o", "on", ">pw", "~x*", "+@all"],
    )
    .unwrap();
    let mut r = server.client();
    let _: () = query(&mut r, &["AUTH", "r", "pw"]).unwrap();
    assert_eq!(
        finish_from(&mut r, CMD, "s", "0", &["COUNT", "30"], 1, |_| {}).len(),
        100
    );
    let mut o = server.client();
    let _: () = query(&mut o, &["AUTH", "o", "pw"]).unwrap();
    assert!(expect_err(&mut o, &[CMD, "s", "0"]).starts_with("NOPERM"));
}

#[test]
fn the_collection_memory_limit_covers_sets() {
    let server = Server::start();
    let mut con = server.client();
    fill_set(&mut con, "s", Enc::Hashtable);
    config_set(&mut con, "snapshot.collection-memory-limit", "4096");
    let e = expect_err(&mut con, &[CMD, "s", "0"]);
    assert!(
        e.starts_with(
            "ERR snapscan: collection snapshots would exceed snapshot.collection-memory-limit ("
        ) && e.ends_with("of 4096 bytes held); retry later or raise the limit"),
        "{e}"
    );
    let info = cmd_str(&mut con, &["INFO", "snapshot"]);
    assert_eq!(
        info_field(&info, "snapshot_hash_snapshot_bytes").as_deref(),
        Some("0")
    );
    config_set(&mut con, "snapshot.hash-memory-limit", "1mb");
    let truth = native(&mut con, "SSCAN", "s", &["COUNT", "100"], 1);
    let got = finish_from(&mut con, CMD, "s", "0", &["COUNT", "500"], 1, |_| {});
    assert_same(&to_elems(&got, 1), &truth, "under the raised limit");
}

/// One `SNAPSHOT.SCAN cursor COUNT 1` page: its next cursor.
fn scan_next(con: &mut redis::Connection, cursor: &str) -> String {
    let (next, _): (String, Vec<Bytes>) = redis::cmd("SNAPSHOT.SCAN")
        .arg(cursor)
        .arg("COUNT")
        .arg(1)
        .query(con)
        .unwrap_or_else(|e| panic!("SNAPSHOT.SCAN {cursor}: {}", err_text(&e)));
    next
}

/// README: open iterations of SNAPSHOT.HSCAN, SSCAN and ZSCAN share one pool
/// of `snapshot.max-open-cursors`, separate from SNAPSHOT.SCAN's. At a limit
/// of 2, a third collection iteration ends the oldest collection one, and
/// neither kind of iteration ends the other's.
#[test]
fn the_collection_commands_share_one_cursor_pool_apart_from_scan() {
    let server = Server::start();
    let mut con = server.client();
    config_set(&mut con, "snapshot.max-open-cursors", "2");
    let _: i64 = query(&mut con, &["HSET", "h", "a", "1", "b", "2", "c", "3"]).unwrap();
    let _: i64 = query(&mut con, &["SADD", "s", "a", "b", "c"]).unwrap();
    let _: i64 = query(&mut con, &["ZADD", "z", "1", "a", "2", "b", "3", "c"]).unwrap();
    // SNAPSHOT.SCAN's pool full.
    let k1 = scan_next(&mut con, "0");
    let k2 = scan_next(&mut con, "0");
    // Three collection iterations, one per command: the first one ends.
    let (hc, _) = page(&mut con, "SNAPSHOT.HSCAN", "h", "0", &["COUNT", "1"]);
    let (sc, _) = page(&mut con, CMD, "s", "0", &["COUNT", "1"]);
    let (zc, _) = page(&mut con, "SNAPSHOT.ZSCAN", "z", "0", &["COUNT", "1"]);
    assert!(![&k1, &k2, &hc, &sc, &zc].contains(&&"0".to_string()));
    assert_eq!(info_u64(&mut con, "snapshot_hash_cursors_open"), 2);
    assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), 2);
    assert_eq!(
        expect_err(&mut con, &["SNAPSHOT.HSCAN", "h", &hc]),
        unknown_cursor(&hc)
    );
    // The collection iterations ended no SNAPSHOT.SCAN one...
    let k1 = scan_next(&mut con, &k1);
    let k2 = scan_next(&mut con, &k2);
    assert!(k1 != "0" && k2 != "0");
    // ...and three more SNAPSHOT.SCAN iterations end no collection one.
    for _ in 0..3 {
        scan_next(&mut con, "0");
    }
    assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), 2);
    let rest = finish_from(&mut con, CMD, "s", &sc, &["COUNT", "1"], 1, |_| {});
    assert_eq!(rest.len(), 2, "the rest of the set");
    let rest = finish_from(
        &mut con,
        "SNAPSHOT.ZSCAN",
        "z",
        &zc,
        &["COUNT", "1"],
        2,
        |_| {},
    );
    assert_eq!(rest.len(), 4, "the rest of the sorted set, with scores");
}
