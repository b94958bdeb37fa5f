//! Missing key, errors, cursors.

use super::*;

#[test]
fn missing_key_is_an_empty_final_page() {
    let server = Server::start();
    let mut con = server.client();
    // Whatever the options: natively the key is looked up before them.
    for opts in [
        &[][..],
        &["NOVALUES"],
        &["MATCH", "*", "COUNT", "5"],
        &["COUNT", "0"],
        &["BOGUS"],
        &["NOSCORES"],
    ] {
        let v: Value = redis::cmd(CMD)
            .arg("nosuchkey")
            .arg("0")
            .arg(opts)
            .query(&mut con)
            .unwrap();
        assert_eq!(
            v,
            Value::Array(vec![Value::BulkString(b"0".to_vec()), Value::Array(vec![])])
        );
    }
    assert_eq!(info_u64(&mut con, "snapshot_hash_cursors_open"), 0);
    assert_eq!(info_u64(&mut con, "snapshot_hash_snapshots_open"), 0);
}

#[rstest]
#[case::string(&["SET", "k", "v"])]
#[case::list(&["RPUSH", "k", "a", "b"])]
#[case::set(&["SADD", "k", "a"])]
#[case::zset(&["ZADD", "k", "1", "a"])]
#[case::stream(&["XADD", "k", "*", "a", "1"])]
fn other_types_are_wrongtype(#[case] create: &[&str]) {
    let server = Server::start();
    let mut con = server.client();
    let _: Value = query(&mut con, create).unwrap();
    assert_eq!(expect_err(&mut con, &[CMD, "k", "0"]), WRONGTYPE);
    assert_eq!(
        expect_err(&mut con, &[CMD, "k", "0", "COUNT", "5", "NOVALUES"]),
        WRONGTYPE
    );
    // Checked before the options, as natively.
    assert_eq!(
        expect_err(&mut con, &[CMD, "k", "0", "COUNT", "0", "BOGUS"]),
        WRONGTYPE
    );
    // The native HSCAN agrees.
    assert_eq!(expect_err(&mut con, &["HSCAN", "k", "0"]), WRONGTYPE);
}

#[rstest]
#[case::no_arguments(&[], ARITY)]
#[case::key_only(&["h"], ARITY)]
#[case::cursor_letters(&["h", "abc"], INVALID_CURSOR)]
#[case::cursor_negative(&["h", "-1"], INVALID_CURSOR)]
#[case::cursor_fraction(&["h", "1.5"], INVALID_CURSOR)]
#[case::cursor_over_u64(&["h", "18446744073709551616"], INVALID_CURSOR)]
#[case::cursor_leading_space(&["h", " 1"], INVALID_CURSOR)]
#[case::cursor_plus(&["h", "+1"], INVALID_CURSOR)]
#[case::cursor_empty(&["h", ""], INVALID_CURSOR)]
#[case::cursor_checked_before_options(&["h", "abc", "COUNT", "0"], INVALID_CURSOR)]
#[case::count_zero(&["h", "0", "COUNT", "0"], SYNTAX)]
#[case::count_negative(&["h", "0", "COUNT", "-1"], SYNTAX)]
#[case::count_not_integer(&["h", "0", "COUNT", "abc"], NOT_INTEGER)]
#[case::count_leading_zero(&["h", "0", "COUNT", "01"], NOT_INTEGER)]
#[case::count_over_i64(&["h", "0", "COUNT", "9223372036854775808"], NOT_INTEGER)]
#[case::count_missing(&["h", "0", "COUNT"], SYNTAX)]
#[case::match_missing(&["h", "0", "MATCH"], SYNTAX)]
#[case::type_is_not_an_option(&["h", "0", "TYPE", "hash"], SYNTAX)]
#[case::unknown_option(&["h", "0", "BOGUS", "1"], SYNTAX)]
#[case::novalues_takes_no_value(&["h", "0", "NOVALUES", "1"], SYNTAX)]
#[case::error_after_valid_options(&["h", "0", "MATCH", "*", "COUNT", "5", "EXTRA"], SYNTAX)]
#[case::options_checked_before_cursor_lookup(&["h", "5", "COUNT", "0"], SYNTAX)]
#[case::noscores_is_zscans(&["h", "0", "NOSCORES"], "ERR NOSCORES option can only be used in ZSCAN")]
#[case::u64_max_parses_then_unknown(&["h", "18446744073709551615"], "ERR cursor 18446744073709551615 is unknown, already used or expired; restart the scan from cursor 0")]
#[case::leading_zeros_parse_then_unknown(&["h", "007"], "ERR cursor 7 is unknown, already used or expired; restart the scan from cursor 0")]
#[case::never_issued(&["h", "1"], "ERR cursor 1 is unknown, already used or expired; restart the scan from cursor 0")]
fn argument_errors(#[case] args: &[&str], #[case] want: &str) {
    let server = Server::start();
    let mut con = server.client();
    for kind in ["missing", "hash", "string"] {
        let _: i64 = query(&mut con, &["DEL", "h"]).unwrap();
        match kind {
            "hash" => fill_hash(&mut con, "h", 30, |i| i.to_string()),
            "string" => {
                let _: () = query(&mut con, &["SET", "h", "v"]).unwrap();
            }
            _ => {}
        }
        let mut full_args = vec![CMD];
        full_args.extend_from_slice(args);
        // As natively, a cursor-0 call checks the key before its options: a
        // missing key answers the empty reply, another type WRONGTYPE.
        let key_first = args.len() > 2 && args[1] == "0";
        for name in [CMD, "snapshot.hscan"] {
            full_args[0] = name;
            match kind {
                "missing" if key_first => {
                    let v: Value = query(&mut con, &full_args).unwrap();
                    assert_eq!(
                        v,
                        Value::Array(vec![Value::BulkString(b"0".to_vec()), Value::Array(vec![])]),
                        "{args:?} on a missing key"
                    );
                }
                "string" if key_first => {
                    assert_eq!(expect_err(&mut con, &full_args), WRONGTYPE, "{args:?}");
                }
                _ => assert_eq!(
                    expect_err(&mut con, &full_args),
                    want,
                    "{args:?} on a {kind} key"
                ),
            }
        }
    }
    assert_eq!(info_u64(&mut con, "snapshot_hash_cursors_open"), 0);
}

/// SNAPSHOT.HSCAN, SSCAN and ZSCAN check a cursor-0 call in the native
/// order (the cursor, then the key: missing gives the empty reply, another
/// type WRONGTYPE, then the options) and answer what HSCAN, SSCAN and ZSCAN
/// answer, word for word, on a missing key, a string and a key of their type.
#[rstest]
#[case::cursor_first(&["abc", "COUNT", "0"])]
#[case::count_zero(&["0", "COUNT", "0"])]
#[case::count_negative(&["0", "count", "-1"])]
#[case::count_not_integer(&["0", "COUNT", "x"])]
#[case::count_missing(&["0", "COUNT"])]
#[case::match_missing(&["0", "MATCH"])]
#[case::unknown_option(&["0", "BOGUS"])]
#[case::type_is_not_an_option(&["0", "TYPE", "hash"])]
#[case::first_bad_option_answers(&["0", "COUNT", "0", "COUNT", "x"])]
#[case::after_valid_options(&["0", "MATCH", "*", "COUNT", "5", "EXTRA"])]
fn collection_errors_in_the_native_order(#[case] args: &[&str]) {
    let server = Server::start();
    let mut con = server.client();
    let _: () = query(&mut con, &["SET", "str", "v"]).unwrap();
    let _: i64 = query(&mut con, &["HSET", "HSCAN", "f", "v"]).unwrap();
    let _: i64 = query(&mut con, &["SADD", "SSCAN", "m"]).unwrap();
    let _: i64 = query(&mut con, &["ZADD", "ZSCAN", "1", "m"]).unwrap();
    for native in ["HSCAN", "SSCAN", "ZSCAN"] {
        // The key named after the command holds its type.
        for key in ["missing", "str", native] {
            let mut full = vec![native, key];
            full.extend_from_slice(args);
            let want = query::<Value>(&mut con, &full).map_err(|e| err_text(&e));
            let snapshot = format!("SNAPSHOT.{native}");
            full[0] = &snapshot;
            let got = query::<Value>(&mut con, &full).map_err(|e| err_text(&e));
            assert_eq!(got, want, "{full:?}");
        }
    }
    assert_eq!(info_u64(&mut con, "snapshot_hash_cursors_open"), 0);
}

/// README: a non-zero cursor's options are checked before the cursor, so a
/// malformed call does not use it up (whatever the key holds now).
#[rstest]
#[case::hscan("SNAPSHOT.HSCAN", &["HSET", "c", "a", "1", "b", "2", "c", "3"], 2)]
#[case::sscan("SNAPSHOT.SSCAN", &["SADD", "c", "a", "b", "c"], 1)]
#[case::zscan("SNAPSHOT.ZSCAN", &["ZADD", "c", "1", "a", "2", "b", "3", "c"], 2)]
fn a_malformed_continuation_keeps_its_cursor(
    #[case] cmd: &str,
    #[case] create: &[&str],
    #[case] width: usize,
) {
    let server = Server::start();
    let mut con = server.client();
    let _: i64 = query(&mut con, create).unwrap();
    let (cursor, first): (String, Vec<Bytes>) =
        query(&mut con, &[cmd, "c", "0", "COUNT", "1"]).unwrap();
    assert_eq!(first.len(), width);
    // The key is gone: the continuation does not look at it.
    let _: i64 = query(&mut con, &["DEL", "c"]).unwrap();
    for bad in [
        &["COUNT", "0"][..],
        &["BOGUS"],
        &["COUNT"],
        &["NOVALUES", "NOSCORES"],
    ] {
        let mut args = vec![cmd, "c", &cursor];
        args.extend_from_slice(bad);
        let e = expect_err(&mut con, &args);
        assert!(!e.contains("unknown, already used"), "{args:?}: {e}");
    }
    let (next, second): (String, Vec<Bytes>) =
        query(&mut con, &[cmd, "c", &cursor, "COUNT", "2"]).unwrap();
    assert_eq!((next.as_str(), second.len()), ("0", 2 * width));
    // Used now: sent again, the same page (a retry), still not malformed.
    let again: (String, Vec<Bytes>) = query(&mut con, &[cmd, "c", &cursor, "COUNT", "2"]).unwrap();
    assert_eq!(again, (next, second));
    let e = expect_err(&mut con, &[cmd, "c", &cursor, "COUNT", "0"]);
    assert!(!e.contains("unknown, already used"), "{e}");
}

#[test]
fn reply_shape_and_retryable_cursors() {
    let server = Server::start();
    let mut con = server.client();
    fill_hash(&mut con, "h", 23, |i| format!("v{i}"));
    let v: Value = query(&mut con, &[CMD, "h", "0", "COUNT", "5"]).unwrap();
    let Value::Array(parts) = v else {
        panic!("not an array: {v:?}")
    };
    assert_eq!(parts.len(), 2);
    let Value::BulkString(c) = &parts[0] else {
        panic!("cursor is not a bulk string: {:?}", parts[0])
    };
    let first: u64 = std::str::from_utf8(c).unwrap().parse().unwrap();
    assert!(first != 0 && first < 1 << 63);
    let Value::Array(items) = &parts[1] else {
        panic!("items: {:?}", parts[1])
    };
    assert_eq!(items.len(), 10);
    assert!(items.iter().all(|i| matches!(i, Value::BulkString(_))));

    let o = Opts::count(5);
    let mut cursor = first.to_string();
    let mut seen = vec![cursor.clone()];
    let mut abandoned = 0;
    for _ in 0..10 {
        let (next, page) = hscan(&mut con, "h", &cursor, &o);
        // A used cursor sent again: the same page; its next cursor, a new
        // one, is left open.
        let (again_next, again) = hscan(&mut con, "h", &cursor, &o);
        assert_eq!(again, page, "the same page for {cursor}");
        assert_eq!(again_next == "0", next == "0");
        if again_next != "0" {
            assert!(again_next != next && !seen.contains(&again_next));
            seen.push(again_next);
            abandoned += 1;
        }
        if next == "0" {
            assert_eq!(page.len(), 6, "3 fields left");
            break;
        }
        assert_eq!(page.len(), 10, "a non-final page is full");
        assert!(!seen.contains(&next), "cursor {next} repeated");
        seen.push(next.clone());
        cursor = next;
    }
    assert_eq!(seen.len() - abandoned, 4, "ceil(23/5) pages");
    assert_eq!(abandoned, 3);
    assert_eq!(
        info_u64(&mut con, "snapshot_hash_cursors_open"),
        abandoned as u64
    );
}

#[test]
fn scan_and_hscan_cursors_do_not_mix() {
    let server = Server::start();
    let mut con = server.client();
    fill_hash(&mut con, "h", 50, |i| i.to_string());
    for i in 0..30 {
        let _: () = query(&mut con, &["SET", &format!("k{i:02}"), "v"]).unwrap();
    }
    let (sc, sp): (String, Vec<String>) =
        query(&mut con, &["SNAPSHOT.SCAN", "0", "COUNT", "10"]).unwrap();
    assert_ne!(sc, "0");
    let (hc, hp) = hscan(&mut con, "h", "0", &Opts::count(10));
    assert_ne!(hc, "0");
    // Each is unknown to the other command, and survives the attempt.
    assert_eq!(expect_err(&mut con, &[CMD, "h", &sc]), unknown_cursor(&sc));
    assert_eq!(
        expect_err(&mut con, &["SNAPSHOT.SCAN", &hc]),
        unknown_cursor(&hc)
    );
    let mut keys = sp;
    let rest: Vec<Bytes> = {
        let mut cursor = sc;
        let mut out = Vec::new();
        for _ in 0..100 {
            let (n, p): (String, Vec<Bytes>) =
                query(&mut con, &["SNAPSHOT.SCAN", &cursor, "COUNT", "10"]).unwrap();
            out.extend(p);
            cursor = n;
            if cursor == "0" {
                break;
            }
        }
        out
    };
    keys.extend(rest.into_iter().map(|k| String::from_utf8(k).unwrap()));
    assert_eq!(keys.len(), 31, "30 strings and h");
    let mut pages = vec![hp];
    pages.extend(finish_from(&mut con, "h", &hc, &Opts::count(10), |_| {}));
    assert_same(&to_hash(&pages, false), &hgetall(&mut con, "h"), "h");
}

#[test]
fn cursor_of_another_key_is_refused_and_stays_valid() {
    let server = Server::start();
    let mut con = server.client();
    fill_hash(&mut con, "h1", 30, |i| format!("one{i}"));
    fill_hash(&mut con, "h2", 30, |i| format!("two{i}"));
    let o = Opts::count(10);
    let (c, p) = hscan(&mut con, "h1", "0", &o);
    let want = format!("ERR cursor {c} belongs to another key; restart the scan from cursor 0");
    assert_eq!(expect_err(&mut con, &[CMD, "h2", &c]), want);
    assert_eq!(
        expect_err(&mut con, &[CMD, "missing", &c, "COUNT", "10"]),
        want
    );
    // Key names are binary-safe: "h1\0x" is another key.
    fill_hash(&mut con, "h1\0x", 30, |i| format!("nul{i}"));
    assert_eq!(expect_err(&mut con, &[CMD, "h1\0x", &c]), want);
    assert_eq!(expect_err(&mut con, &[CMD, "h1\0", &c]), want);
    let (c2, _) = hscan(&mut con, "h1\0x", "0", &o);
    let want2 = format!("ERR cursor {c2} belongs to another key; restart the scan from cursor 0");
    assert_eq!(expect_err(&mut con, &[CMD, "h1", &c2]), want2);
    assert_eq!(
        finish_from(&mut con, "h1\0x", &c2, &o, |_| {}).concat()[..2],
        [b"f00010".to_vec(), b"nul10".to_vec()]
    );
    let mut pages = vec![p];
    pages.extend(finish_from(&mut con, "h1", &c, &o, |_| {}));
    assert_same(&to_hash(&pages, false), &hgetall(&mut con, "h1"), "h1");
}

#[test]
fn cursor_of_another_db_is_refused_and_stays_valid() {
    let server = Server::start();
    let mut con = server.client();
    let mut other = server.client();
    fill_hash(&mut con, "h", 30, |i| i.to_string());
    let _: () = query(&mut other, &["SELECT", "3"]).unwrap();
    // Larger than hash-copy-batch: the worker copies it in db 3.
    fill_hash(&mut other, "h", 3_000, |i| format!("db3-{i}"));
    let o = Opts::count(10);
    let (c, p) = hscan(&mut con, "h", "0", &o);
    let want =
        format!("ERR cursor {c} belongs to database 0, not 3; restart the scan from cursor 0");
    assert_eq!(expect_err(&mut other, &[CMD, "h", &c]), want);
    assert_eq!(expect_err(&mut other, &[CMD, "h", &c, "COUNT", "10"]), want);
    // db 3 has its own h.
    assert_same(
        &full(&mut other, "h", &o),
        &hgetall(&mut other, "h"),
        "db 3",
    );
    let mut pages = vec![p];
    pages.extend(finish_from(&mut con, "h", &c, &o, |_| {}));
    assert_same(&to_hash(&pages, false), &hgetall(&mut con, "h"), "db 0");
}
