//! SNAPSHOT.SCAN's command surface and lifecycle against a real server:
//! argument errors, reply shape, cursor rules, cursor lifetime (idle timeout,
//! eviction, disconnects), MULTI/Lua/functions, configs, INFO, COMMAND INFO and
//! ACL categories, MODULE UNLOAD, and a client killed mid-scan.
mod common;

use common::*;
use redis::{Connection, RedisResult, Value};
use rstest::rstest;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const UNKNOWN_TAIL: &str = "is unknown, already used or expired; restart the scan from cursor 0";
const INVALID_CURSOR: &str = "ERR invalid cursor";
const SYNTAX: &str = "ERR syntax error";
const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
const ARITY: &str = "ERR wrong number of arguments for 'snapshot.scan' command";
const POLL: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------- helpers

fn unknown_cursor(c: &str) -> String {
    format!("ERR cursor {c} {UNKNOWN_TAIL}")
}

/// One `SNAPSHOT.SCAN cursor extra...` page.
fn page(con: &mut Connection, cursor: &str, extra: &[&str]) -> (String, Vec<String>) {
    try_page(con, cursor, extra)
        .unwrap_or_else(|e| panic!("SNAPSHOT.SCAN {cursor} {extra:?}: {}", err_text(&e)))
}

fn try_page(
    con: &mut Connection,
    cursor: &str,
    extra: &[&str],
) -> RedisResult<(String, Vec<String>)> {
    redis::cmd("SNAPSHOT.SCAN")
        .arg(cursor)
        .arg(extra)
        .query(con)
}

fn info_snapshot(con: &mut Connection) -> String {
    cmd_str(con, &["INFO", "snapshot"])
}

fn info_u64(con: &mut Connection, name: &str) -> u64 {
    let info = info_snapshot(con);
    info_field(&info, name)
        .unwrap_or_else(|| panic!("no {name} in INFO snapshot:\n{info}"))
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Waits for the indexer to have applied every recorded change: INFO's
/// index figures are those of the applied position.
fn wait_applied(con: &mut Connection) {
    wait_until(
        "the index log to be applied",
        Duration::from_secs(10),
        || info_u64(con, "snapshot_index_backlog") == 0,
    );
}

fn used_memory(con: &mut Connection) -> u64 {
    let info = cmd_str(con, &["INFO", "memory"]);
    info_field(&info, "used_memory")
        .expect("used_memory")
        .parse()
        .expect("used_memory is a number")
}

/// `n` string keys `<prefix><i:06>` (zero-padded, so byte order = numeric order).
fn fill(con: &mut Connection, prefix: &str, n: usize) -> Vec<String> {
    let keys: Vec<String> = (0..n).map(|i| format!("{prefix}{i:06}")).collect();
    for chunk in keys.chunks(1000) {
        let mut c = redis::cmd("MSET");
        for k in chunk {
            c.arg(k).arg("v");
        }
        let _: () = c.query(con).expect("MSET");
    }
    keys
}

fn to_strings(v: Vec<Vec<u8>>) -> Vec<String> {
    v.into_iter()
        .map(|b| String::from_utf8(b).expect("utf-8 key"))
        .collect()
}

fn config_get(con: &mut Connection, name: &str) -> Option<String> {
    let kv: Vec<String> = query(con, &["CONFIG", "GET", name]).expect("CONFIG GET");
    kv.chunks(2).find(|p| p[0] == name).map(|p| p[1].clone())
}

fn config_set(con: &mut Connection, name: &str, value: &str) -> RedisResult<()> {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(con)
}

/// Worker threads of `pid` as (comm, nice). Linux keeps 15 bytes of a thread
/// name, so `snapscan-worker-N` shows as `snapscan-worker`.
fn worker_threads(pid: u32) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in dir.flatten() {
        let path = t.path();
        // A thread may exit between listing and reading: skip it.
        let Ok(comm) = std::fs::read_to_string(path.join("comm")) else {
            continue;
        };
        let comm = comm.trim().to_string();
        if !comm.starts_with("snapscan-worker") {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(path.join("stat")) else {
            continue;
        };
        // Fields after "(comm)" start at field 3; nice is field 19.
        let rest = &stat[stat.rfind(')').expect("stat has (comm)") + 1..];
        let nice: i64 = rest
            .split_whitespace()
            .nth(19 - 3)
            .expect("stat field 19")
            .parse()
            .expect("nice is a number");
        out.push((comm, nice));
    }
    out
}

fn assert_worker_name(comm: &str) {
    let suffix = comm.strip_prefix("snapscan-worker").expect("worker prefix");
    assert!(
        suffix.is_empty()
            || suffix
                .strip_prefix('-')
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())),
        "unexpected worker thread name {comm:?}"
    );
}

/// Whether the server has the module ACL-categories API (Redis >= 7.2, Valkey).
fn has_acl_categories(server: &Server) -> bool {
    server.is_valkey() || server.version() >= (7, 2, 0)
}

// ------------------------------------------------------ 1. argument errors

#[rstest]
#[case::cursor_letters(&["abc"], INVALID_CURSOR)]
#[case::cursor_negative(&["-1"], INVALID_CURSOR)]
#[case::cursor_fraction(&["1.5"], INVALID_CURSOR)]
#[case::cursor_over_u64(&["18446744073709551616"], INVALID_CURSOR)]
#[case::cursor_leading_space(&[" 1"], INVALID_CURSOR)]
#[case::cursor_plus(&["+1"], INVALID_CURSOR)]
#[case::cursor_empty(&[""], INVALID_CURSOR)]
#[case::cursor_checked_before_options(&["abc", "COUNT", "0"], INVALID_CURSOR)]
#[case::count_zero(&["0", "COUNT", "0"], SYNTAX)]
#[case::count_negative(&["0", "COUNT", "-1"], SYNTAX)]
#[case::count_not_integer(&["0", "COUNT", "abc"], NOT_INTEGER)]
#[case::count_leading_zero(&["0", "COUNT", "01"], NOT_INTEGER)]
#[case::count_over_i64(&["0", "COUNT", "9223372036854775808"], NOT_INTEGER)]
#[case::count_missing(&["0", "COUNT"], SYNTAX)]
#[case::options_checked_before_cursor_lookup(&["5", "COUNT", "0"], SYNTAX)]
#[case::unknown_option(&["0", "BOGUS", "1"], SYNTAX)]
#[case::match_missing(&["0", "MATCH"], SYNTAX)]
#[case::type_missing(&["0", "TYPE"], SYNTAX)]
#[case::novalues_not_an_option(&["0", "NOVALUES"], "ERR NOVALUES option can only be used in HSCAN")]
#[case::noscores_not_an_option(&["0", "noscores"], "ERR NOSCORES option can only be used in ZSCAN")]
#[case::first_bad_option_answers(&["0", "COUNT", "0", "NOVALUES"], SYNTAX)]
#[case::error_after_valid_options(&["0", "MATCH", "*", "COUNT", "5", "EXTRA"], SYNTAX)]
#[case::unknown_type(&["0", "TYPE", "nosuchtype"], "ERR unknown type name 'nosuchtype'")]
#[case::no_arguments(&[], ARITY)]
#[case::u64_max_parses_then_unknown(&["18446744073709551615"], "ERR cursor 18446744073709551615 is unknown, already used or expired; restart the scan from cursor 0")]
#[case::leading_zeros_parse_then_unknown(&["007"], "ERR cursor 7 is unknown, already used or expired; restart the scan from cursor 0")]
#[case::never_issued(&["1"], "ERR cursor 1 is unknown, already used or expired; restart the scan from cursor 0")]
fn argument_errors(#[case] args: &[&str], #[case] want: &str) {
    let server = Server::start();
    let mut con = server.client();
    fill(&mut con, "k", 20);
    let mut full = vec!["SNAPSHOT.SCAN"];
    full.extend_from_slice(args);
    assert_eq!(expect_err(&mut con, &full), want, "{args:?}");
    // An error leaves the connection and the module usable.
    let keys = to_strings(full_scan(&mut con, "SNAPSHOT.SCAN", &["COUNT", "7"]));
    assert_eq!(keys.len(), 20);
}

/// Where every supported server's SCAN agrees, SNAPSHOT.SCAN answers the
/// same error, word for word (the cursor first, then the first bad option).
#[rstest]
#[case::cursor_before_options(&["abc", "COUNT", "0"])]
#[case::count_zero(&["0", "COUNT", "0"])]
#[case::count_negative(&["0", "count", "-1"])]
#[case::count_not_integer(&["0", "COUNT", "abc"])]
#[case::count_missing(&["0", "COUNT"])]
#[case::match_missing(&["0", "MATCH"])]
#[case::unknown_option(&["0", "BOGUS", "1"])]
#[case::first_bad_option_answers(&["0", "COUNT", "0", "COUNT", "x"])]
#[case::after_valid_options(&["0", "MATCH", "*", "COUNT", "5", "EXTRA"])]
fn argument_errors_read_like_native_scan(#[case] args: &[&str]) {
    let server = Server::start();
    let mut con = server.client();
    fill(&mut con, "k", 3);
    let mut native = vec!["SCAN"];
    native.extend_from_slice(args);
    let want = expect_err(&mut con, &native);
    native[0] = "SNAPSHOT.SCAN";
    assert_eq!(expect_err(&mut con, &native), want, "{args:?}");
}

#[rstest]
#[case::upper(&["MATCH", "a*", "COUNT", "3", "TYPE", "string"])]
#[case::lower(&["count", "3", "type", "string", "match", "a*"])]
#[case::mixed(&["TyPe", "STRING", "mAtCh", "a*", "CoUnT", "3"])]
#[case::later_repeat_wins(&["COUNT", "1000", "MATCH", "zz*", "match", "a*", "type", "hash", "TYPE", "String", "count", "3"])]
fn options_in_any_order_and_case(#[case] opts: &[&str]) {
    let server = Server::start();
    let mut con = server.client();
    let want = fill(&mut con, "a:", 10);
    fill(&mut con, "b:", 10);
    for i in 0..5 {
        let _: () = redis::cmd("HSET")
            .arg(format!("a:h{i}"))
            .arg("f")
            .arg("v")
            .query(&mut con)
            .unwrap();
    }
    // COUNT 3 must be in effect: the first page has exactly 3 keys.
    let (_, first) = page(&mut con, "0", opts);
    assert_eq!(first, want[..3].to_vec(), "{opts:?}");
    let got = to_strings(full_scan(&mut con, "SNAPSHOT.SCAN", opts));
    assert_eq!(got, want, "{opts:?}");
    // Same answer as the server's own SCAN with the same filters.
    let scan = to_strings(full_scan(
        &mut con,
        "SCAN",
        &["MATCH", "a*", "TYPE", "string", "COUNT", "100"],
    ));
    assert_eq!(sorted(&scan), want);
}

// ---------------------------------------------------------- 2. reply shape

#[test]
fn reply_shape_empty_and_non_empty() {
    let server = Server::start();
    let mut con = server.client();
    let empty: Value = query(&mut con, &["SNAPSHOT.SCAN", "0"]).unwrap();
    assert_eq!(
        empty,
        Value::Array(vec![Value::BulkString(b"0".to_vec()), Value::Array(vec![])]),
        "empty db"
    );
    let empty_match: Value = query(&mut con, &["SNAPSHOT.SCAN", "0", "MATCH", "x*"]).unwrap();
    assert_eq!(empty_match, empty);

    let keys = fill(&mut con, "k", 25);
    let v: Value = query(&mut con, &["SNAPSHOT.SCAN", "0", "COUNT", "10"]).unwrap();
    let Value::Array(parts) = v else {
        panic!("not an array: {v:?}")
    };
    assert_eq!(parts.len(), 2, "{parts:?}");
    let Value::BulkString(cursor) = &parts[0] else {
        panic!("cursor is not a bulk string: {:?}", parts[0])
    };
    let cursor: u64 = std::str::from_utf8(cursor).unwrap().parse().unwrap();
    assert!(cursor != 0 && cursor < 1 << 63, "cursor {cursor}");
    let Value::Array(items) = &parts[1] else {
        panic!("second element is not an array: {:?}", parts[1])
    };
    let items: Vec<String> = items
        .iter()
        .map(|i| match i {
            Value::BulkString(b) => String::from_utf8(b.clone()).unwrap(),
            other => panic!("key is not a bulk string: {other:?}"),
        })
        .collect();
    assert_eq!(items, keys[..10].to_vec());
}

// -------------------------------------------------------------- 3. cursors

#[test]
fn cursors_are_single_use_nonzero_until_the_end_and_distinct() {
    let server = Server::start();
    let mut con = server.client();
    let keys = fill(&mut con, "k", 50);
    let mut cursor = "0".to_string();
    let mut seen_cursors = Vec::new();
    let mut got = Vec::new();
    let mut pages = 0;
    loop {
        let (next, items) = page(&mut con, &cursor, &["COUNT", "7"]);
        pages += 1;
        assert!(pages <= 8, "more pages than ceil(50/7)");
        got.extend(items.clone());
        if cursor != "0" {
            // The consumed cursor is gone, whatever the options.
            assert_eq!(
                expect_err(&mut con, &["SNAPSHOT.SCAN", &cursor, "COUNT", "7"]),
                unknown_cursor(&cursor)
            );
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
    assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), 0);
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

// ------------------------------------------------------- 4. cursor lifetime

#[test]
fn idle_cursor_expires_and_is_then_unknown() {
    let server = Server::start();
    let mut con = server.client();
    fill(&mut con, "k", 20);
    config_set(&mut con, "snapshot.cursor-idle-timeout", "1").unwrap();
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
    config_set(&mut con, "snapshot.cursor-idle-timeout", "1").unwrap();
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
    config_set(&mut con, "snapshot.cursor-idle-timeout", "1").unwrap();
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
    config_set(&mut con, "snapshot.max-open-cursors", "5").unwrap();
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
    let mem_before = used_memory(&mut con);
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
    let mem_after = used_memory(&mut con);
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
    config_set(&mut con, "snapshot.max-open-cursors", "100000").unwrap();
    // No limit while the iterations are opened (the default one, relative
    // to this tiny index, would end some of them already).
    config_set(&mut con, "snapshot.max-retained-percent", "0").unwrap();
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
    config_set(&mut con, "snapshot.max-retained-bytes", "1").unwrap();
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

// --------------------------------------------- 5. MULTI/EXEC, EVAL, FCALL

const LIB: &str = "#!lua name=sslib\n\
redis.register_function('sscan', function(keys, args) return redis.call('SNAPSHOT.SCAN', args[1], 'COUNT', args[2]) end)\n\
redis.register_function{function_name='sscan_ro', callback=function(keys, args) return redis.call('SNAPSHOT.SCAN', args[1], 'COUNT', args[2]) end, flags={'no-writes'}}";

const SCRIPT: &str = "return redis.call('SNAPSHOT.SCAN', ARGV[1], 'COUNT', ARGV[2])";

#[derive(Debug, Clone, Copy)]
enum Path {
    Blocking,
    Multi,
    Eval,
    Fcall,
    FcallRo,
}

fn page_via(con: &mut Connection, path: Path, cursor: &str, count: &str) -> (String, Vec<String>) {
    let r: RedisResult<(String, Vec<String>)> = match path {
        Path::Blocking => try_page(con, cursor, &["COUNT", count]),
        Path::Multi => redis::pipe()
            .atomic()
            .cmd("SNAPSHOT.SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(count)
            .query::<((String, Vec<String>),)>(con)
            .map(|(r,)| r),
        Path::Eval => redis::cmd("EVAL")
            .arg(SCRIPT)
            .arg(0)
            .arg(cursor)
            .arg(count)
            .query(con),
        Path::Fcall | Path::FcallRo => {
            let (cmd, f) = match path {
                Path::Fcall => ("FCALL", "sscan"),
                _ => ("FCALL_RO", "sscan_ro"),
            };
            redis::cmd(cmd)
                .arg(f)
                .arg(0)
                .arg(cursor)
                .arg(count)
                .query(con)
        }
    };
    r.unwrap_or_else(|e| panic!("{path:?} {cursor}: {}", err_text(&e)))
}

/// A full iteration driven entirely through `path`; returns (keys, calls).
fn full_via(con: &mut Connection, path: Path, count: &str) -> (Vec<String>, u64) {
    let (mut cursor, mut out, mut calls) = ("0".to_string(), Vec::new(), 0);
    loop {
        let (next, items) = page_via(con, path, &cursor, count);
        calls += 1;
        out.extend(items);
        if next == "0" {
            return (out, calls);
        }
        assert!(calls < 10_000, "{path:?} does not finish");
        cursor = next;
    }
}

#[rstest]
#[case::multi(Path::Multi)]
#[case::eval(Path::Eval)]
#[case::fcall(Path::Fcall)]
#[case::fcall_ro(Path::FcallRo)]
fn inline_paths_match_the_blocking_path(#[case] path: Path) {
    let server = Server::start();
    let mut con = server.client();
    let _: String = query(&mut con, &["FUNCTION", "LOAD", LIB]).expect("FUNCTION LOAD");
    let keys = fill(&mut con, "k", 95);

    let (blocking, _) = full_via(&mut con, Path::Blocking, "7");
    assert_eq!(blocking, keys);
    let inline0 = info_u64(&mut con, "snapshot_scans_served_inline");
    let served0 = info_u64(&mut con, "snapshot_scans_served");
    let (got, calls) = full_via(&mut con, path, "7");
    assert_eq!(got, blocking, "{path:?}");
    assert_eq!(calls, 14, "ceil(95/7) calls");
    assert_eq!(
        info_u64(&mut con, "snapshot_scans_served_inline") - inline0,
        calls
    );
    assert_eq!(info_u64(&mut con, "snapshot_scans_served") - served0, calls);

    // Cursors cross paths: start blocking, continue inline, finish blocking.
    let (c1, p1) = page_via(&mut con, Path::Blocking, "0", "40");
    let (c2, p2) = page_via(&mut con, path, &c1, "40");
    let (c3, p3) = page_via(&mut con, Path::Blocking, &c2, "40");
    assert_eq!(c3, "0");
    assert_eq!([p1, p2, p3].concat(), keys);
    // Single use holds inline too.
    let err = match path {
        Path::Multi => {
            // EXEC returns the error inside its reply array.
            let v: Value = redis::pipe()
                .atomic()
                .cmd("SNAPSHOT.SCAN")
                .arg(&c1)
                .query(&mut con)
                .map(Value::Array)
                .unwrap_or_else(|e| Value::SimpleString(err_text(&e)));
            format!("{v:?}")
        }
        _ => {
            let r: RedisResult<Value> = match path {
                Path::Eval => redis::cmd("EVAL")
                    .arg(SCRIPT)
                    .arg(0)
                    .arg(&c1)
                    .arg(5)
                    .query(&mut con),
                Path::Fcall => redis::cmd("FCALL")
                    .arg("sscan")
                    .arg(0)
                    .arg(&c1)
                    .arg(5)
                    .query(&mut con),
                _ => redis::cmd("FCALL_RO")
                    .arg("sscan_ro")
                    .arg(0)
                    .arg(&c1)
                    .arg(5)
                    .query(&mut con),
            };
            err_text(&r.expect_err("reused cursor"))
        }
    };
    assert!(err.contains(UNKNOWN_TAIL), "{path:?}: {err}");

    // An empty snapshot inline: ["0", []].
    let _: () = query(&mut con, &["SELECT", "3"]).unwrap();
    assert_eq!(page_via(&mut con, path, "0", "10"), ("0".into(), vec![]));
}

// -------------------------------------------------------------- 6. configs

const DEFAULTS: &[(&str, &str)] = &[
    ("snapshot.workers", "2"),
    ("snapshot.worker-nice", "19"),
    ("snapshot.cursor-idle-timeout", "60"),
    ("snapshot.max-open-cursors", "1024"),
    ("snapshot.scan-budget", "100000"),
    ("snapshot.backfill-batch", "1000"),
    ("snapshot.inline-entries", "256"),
];

#[test]
fn configs_have_their_defaults() {
    let server = Server::start();
    let mut con = server.client();
    let all: Vec<String> = query(&mut con, &["CONFIG", "GET", "snapshot.*"]).unwrap();
    let got: Vec<(String, String)> = all
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect();
    // Every contract config is listed by the pattern, with its default (the
    // module may have more, e.g. SNAPSHOT.HSCAN's).
    for (name, value) in DEFAULTS {
        assert!(
            got.iter().any(|(k, v)| k == name && v == value),
            "{name}={value} not in CONFIG GET snapshot.*: {got:?}"
        );
        assert_eq!(
            config_get(&mut con, name).as_deref(),
            Some(*value),
            "{name}"
        );
    }
    assert!(
        got.iter().all(|(k, _)| k.starts_with("snapshot.")),
        "{got:?}"
    );
}

#[rstest]
#[case("workers", "1", true)]
#[case("workers", "64", true)]
#[case("workers", "0", false)]
#[case("workers", "65", false)]
#[case("workers", "-1", false)]
#[case("workers", "two", false)]
#[case("worker-nice", "0", true)]
#[case("worker-nice", "19", true)]
#[case("worker-nice", "20", false)]
#[case("worker-nice", "-1", false)]
#[case("cursor-idle-timeout", "1", true)]
#[case("cursor-idle-timeout", "86400", true)]
#[case("cursor-idle-timeout", "0", false)]
#[case("max-open-cursors", "1", true)]
#[case("max-open-cursors", "0", false)]
#[case("scan-budget", "100", true)]
#[case("scan-budget", "5", false)]
#[case("scan-budget", "99", false)]
#[case("backfill-batch", "1", true)]
#[case("backfill-batch", "0", false)]
#[case("inline-entries", "0", true)]
#[case("inline-entries", "100000", true)]
#[case("inline-entries", "100001", false)]
#[case("inline-entries", "-1", false)]
fn config_set_accepts_valid_and_rejects_out_of_range(
    #[case] name: &str,
    #[case] value: &str,
    #[case] ok: bool,
) {
    let server = Server::start();
    let mut con = server.client();
    let full = format!("snapshot.{name}");
    let before = config_get(&mut con, &full).expect("config exists");
    let r = config_set(&mut con, &full, value);
    let after = config_get(&mut con, &full).unwrap();
    if ok {
        r.unwrap_or_else(|e| panic!("CONFIG SET {full} {value}: {}", err_text(&e)));
        assert_eq!(after, value);
    } else {
        let e = r.expect_err("out of range accepted");
        assert!(err_text(&e).starts_with("ERR"), "{}", err_text(&e));
        assert_eq!(after, before, "a rejected value changed {full}");
    }
    // The module keeps serving either way.
    fill(&mut con, "k", 3);
    assert_eq!(full_scan(&mut con, "SNAPSHOT.SCAN", &[]).len(), 3);
}

/// Small pages are answered on the main thread, every other page by a
/// worker, and both give the same iteration.
#[rstest]
// COUNT within the limit, every page complete in few entries: all small.
#[case::small_pages(&["COUNT", "7"], "256", Some(true))]
// COUNT above the limit: all on workers.
#[case::count_above_the_limit(&["COUNT", "300"], "256", Some(false))]
// A sparse MATCH needs more entries than the limit for its COUNT: workers.
#[case::sparse_match(&["MATCH", "*7*7*", "COUNT", "5"], "16", Some(false))]
// The limit at 0 hands everything to workers.
#[case::limit_zero(&["COUNT", "7"], "0", Some(false))]
// TYPE filters count their entries too; whatever path, same keys.
#[case::type_filter(&["TYPE", "string", "COUNT", "20"], "256", None)]
fn small_pages_are_served_inline_and_match_worker_pages(
    #[case] opts: &[&str],
    #[case] limit: &str,
    #[case] all_small: Option<bool>,
) {
    let server = Server::start();
    let mut con = server.client();
    let keys = fill(&mut con, "k", 600);
    config_set(&mut con, "snapshot.inline-entries", "0").unwrap();
    let on_workers = to_strings(full_scan(&mut con, "SNAPSHOT.SCAN", opts));
    config_set(&mut con, "snapshot.inline-entries", limit).unwrap();
    let small0 = info_u64(&mut con, "snapshot_scans_served_small");
    let served0 = info_u64(&mut con, "snapshot_scans_served");
    let got = to_strings(full_scan(&mut con, "SNAPSHOT.SCAN", opts));
    assert_eq!(got, on_workers);
    if !opts.contains(&"MATCH") {
        assert_eq!(got, keys);
    }
    let small = info_u64(&mut con, "snapshot_scans_served_small") - small0;
    let served = info_u64(&mut con, "snapshot_scans_served") - served0;
    match all_small {
        // Cursor 0 may find the indexer busy and go to a worker.
        Some(true) => assert!(small + 1 >= served && small > 0, "{small} of {served}"),
        Some(false) => assert_eq!(small, 0, "{served} calls"),
        None => {}
    }
    // The inline path registers cursors like the worker path: single use.
    let (c, _) = page(&mut con, "0", &["COUNT", "3"]);
    page(&mut con, &c, &["COUNT", "3"]);
    assert!(
        try_page(&mut con, &c, &["COUNT", "3"]).is_err(),
        "cursor reused"
    );
}

#[test]
fn small_hash_pages_are_served_inline_and_match_worker_pages() {
    let server = Server::start();
    let mut con = server.client();
    let mut p = redis::pipe();
    for i in 0..3000 {
        p.cmd("HSET")
            .arg("h")
            .arg(format!("f{i:05}"))
            .arg(i)
            .ignore();
    }
    let _: () = p.query(&mut con).unwrap();
    config_set(&mut con, "snapshot.inline-entries", "0").unwrap();
    let on_workers: Vec<Vec<u8>> = full_hscan(&mut con, "SNAPSHOT.HSCAN", "h", &["COUNT", "100"]);
    config_set(&mut con, "snapshot.inline-entries", "256").unwrap();
    let small0 = info_u64(&mut con, "snapshot_scans_served_small");
    let got: Vec<Vec<u8>> = full_hscan(&mut con, "SNAPSHOT.HSCAN", "h", &["COUNT", "100"]);
    assert_eq!(got, on_workers);
    assert_eq!(got.len(), 6000, "3000 fields and their values");
    // The first page makes the copy (worker); the other 29 are small.
    let small = info_u64(&mut con, "snapshot_scans_served_small") - small0;
    assert!(small >= 29, "{small} small pages");
}

#[test]
fn loadmodule_arguments_take_effect() {
    let server = Server::start_with(ServerOpts::new().module_args(&[
        "workers",
        "3",
        "scan-budget",
        "500",
        "worker-nice",
        "15",
        "cursor-idle-timeout",
        "7",
        "max-open-cursors",
        "33",
        "backfill-batch",
        "77",
    ]));
    let mut con = server.client();
    for (name, value) in [
        ("workers", "3"),
        ("scan-budget", "500"),
        ("worker-nice", "15"),
        ("cursor-idle-timeout", "7"),
        ("max-open-cursors", "33"),
        ("backfill-batch", "77"),
    ] {
        assert_eq!(
            config_get(&mut con, &format!("snapshot.{name}")).as_deref(),
            Some(value),
            "{name}"
        );
    }
    assert_eq!(info_u64(&mut con, "snapshot_workers"), 3);
    wait_until("3 worker threads at nice 15", POLL, || {
        let t = worker_threads(server.pid());
        t.len() == 3 && t.iter().all(|(_, n)| *n == 15)
    });

    // scan-budget 500: a sparse MATCH examines 500 entries per call.
    fill(&mut con, "k", 2000);
    let examined0 = info_u64(&mut con, "snapshot_entries_examined");
    let (c, items) = page(&mut con, "0", &["MATCH", "*zzz", "COUNT", "10"]);
    assert!(items.is_empty());
    assert_ne!(c, "0", "budget exhausted: the iteration continues");
    assert_eq!(
        info_u64(&mut con, "snapshot_entries_examined") - examined0,
        500
    );
    let (mut cursor, mut calls) = (c, 1);
    while cursor != "0" {
        cursor = page(&mut con, &cursor, &["MATCH", "*zzz", "COUNT", "10"]).0;
        calls += 1;
        assert!(calls <= 4, "more calls than 2000 keys / budget 500");
    }
    assert_eq!(calls, 4, "2000 keys / budget 500");

    // max-open-cursors 33.
    for _ in 0..50 {
        page(&mut con, "0", &["COUNT", "1"]);
    }
    assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), 33);
}

#[test]
fn workers_resize_at_runtime_and_have_low_priority() {
    let server = Server::start();
    let pid = server.pid();
    let mut con = server.client();
    fill(&mut con, "k", 100);
    assert_eq!(info_u64(&mut con, "snapshot_workers"), 2);
    wait_until("2 worker threads", POLL, || worker_threads(pid).len() == 2);
    for (comm, nice) in worker_threads(pid) {
        assert_worker_name(&comm);
        assert_eq!(nice, 19, "default worker-nice for {comm}");
    }

    config_set(&mut con, "snapshot.workers", "4").unwrap();
    wait_until("INFO snapshot_workers 4", POLL, || {
        info_u64(&mut con, "snapshot_workers") == 4
    });
    wait_until("4 worker threads", POLL, || worker_threads(pid).len() == 4);
    assert_eq!(
        full_scan(&mut con, "SNAPSHOT.SCAN", &["COUNT", "9"]).len(),
        100
    );

    config_set(&mut con, "snapshot.workers", "1").unwrap();
    wait_until("INFO snapshot_workers 1", POLL, || {
        info_u64(&mut con, "snapshot_workers") == 1
    });
    wait_until("1 worker thread", POLL, || worker_threads(pid).len() == 1);
    assert_eq!(
        full_scan(&mut con, "SNAPSHOT.SCAN", &["COUNT", "9"]).len(),
        100
    );

    // worker-nice applies to running workers (at their next job) and new ones.
    config_set(&mut con, "snapshot.worker-nice", "17").unwrap();
    page(&mut con, "0", &["COUNT", "1000"]);
    wait_until("the worker at nice 17", POLL, || {
        worker_threads(pid).iter().all(|(_, n)| *n == 17)
    });
    config_set(&mut con, "snapshot.workers", "3").unwrap();
    wait_until("3 worker threads at nice 17", POLL, || {
        let t = worker_threads(pid);
        t.len() == 3 && t.iter().all(|(_, n)| *n == 17)
    });
    assert_eq!(info_u64(&mut con, "snapshot_workers"), 3);
}

/// Repro of a pool bug: `Pool::resize` names a new thread by the live count
/// (`idx = alive.fetch_add(1)`), but after a partial shrink the live indices
/// are not 0..alive (e.g. {0, 2, 3} when thread 1 retired first), so a grow
/// duplicates a live index ({0, 2, 3, 3}) and a later shrink to 3 retires both
/// index-3 threads: 2 workers while `snapshot.workers` says 3 (or 4 when the
/// duplicated index survives). Each round hits it with probability ~2/3.
#[test]
fn worker_count_converges_after_a_shrink_interrupted_by_a_grow() {
    let server = Server::start();
    let pid = server.pid();
    let mut con = server.client();
    for round in 0..5 {
        config_set(&mut con, "snapshot.workers", "4").unwrap();
        wait_until("4 workers", POLL, || {
            info_u64(&mut con, "snapshot_workers") == 4 && worker_threads(pid).len() == 4
        });
        config_set(&mut con, "snapshot.workers", "1").unwrap();
        wait_until("one worker to retire", POLL, || {
            info_u64(&mut con, "snapshot_workers") <= 3
        });
        config_set(&mut con, "snapshot.workers", "4").unwrap();
        config_set(&mut con, "snapshot.workers", "3").unwrap();
        // Retiring threads notice within (threads x 100 ms): sample until settled.
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        let mut last = (0, 0);
        while std::time::Instant::now() < deadline {
            last = (
                info_u64(&mut con, "snapshot_workers"),
                worker_threads(pid).len(),
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            last,
            (3, 3),
            "round {round}: (INFO snapshot_workers, threads) with snapshot.workers 3"
        );
    }
}

// ----------------------------------------------------------------- 7. INFO

const INFO_FIELDS: &[&str] = &[
    "snapshot_index_keys",
    "snapshot_index_memory_bytes",
    "snapshot_index_bytes_per_key",
    "snapshot_module_heap_bytes",
    "snapshot_index_backlog",
    "snapshot_open_snapshots",
    "snapshot_retained_versions",
    "snapshot_cursors_evicted",
    "snapshot_cursors_expired",
    "snapshot_events_applied",
    "snapshot_index_changes",
    "snapshot_scans_served",
    "snapshot_scans_served_inline",
    "snapshot_scans_served_small",
    "snapshot_snapshots_opened",
    "snapshot_keys_returned",
    "snapshot_entries_examined",
    "snapshot_workers",
    "snapshot_worker_queue_depth",
    "snapshot_workers_busy",
    "snapshot_backfill_in_progress",
    "snapshot_backfill_percent",
    "snapshot_backfill_keys_scanned",
    "snapshot_backfill_keys_total",
    "snapshot_backfill_runs",
    "snapshot_backfill_longest_lock_hold_us",
];

#[test]
fn info_snapshot_fields_and_counters() {
    let server = Server::start();
    let mut con = server.client();
    let info = info_snapshot(&mut con);
    assert!(info.contains("# snapshot"), "{info}");
    for f in INFO_FIELDS {
        let v = info_field(&info, f).unwrap_or_else(|| panic!("no {f} in\n{info}"));
        v.parse::<u64>()
            .unwrap_or_else(|e| panic!("{f}:{v} is not a number: {e}"));
    }
    assert_eq!(
        info_field(&info, "snapshot_index_keys").as_deref(),
        Some("0")
    );
    assert!(!info.contains("snapshot_index_keys_db"), "{info}");
    assert_eq!(
        info_field(&info, "snapshot_backfill_in_progress").as_deref(),
        Some("0")
    );
    assert_eq!(
        info_field(&info, "snapshot_backfill_percent").as_deref(),
        Some("100")
    );

    // Keys in db0 and db5.
    let keys = fill(&mut con, "k", 120);
    let _: () = query(&mut con, &["SELECT", "5"]).unwrap();
    fill(&mut con, "five", 7);
    let dbsize5: u64 = query(&mut con, &["DBSIZE"]).unwrap();
    let _: () = query(&mut con, &["SELECT", "0"]).unwrap();
    let dbsize0: u64 = query(&mut con, &["DBSIZE"]).unwrap();
    wait_applied(&mut con);
    let info = info_snapshot(&mut con);
    let get = |f: &str| -> u64 {
        info_field(&info, f)
            .unwrap_or_else(|| panic!("no {f} in\n{info}"))
            .parse()
            .unwrap()
    };
    assert_eq!(get("snapshot_index_keys"), dbsize0 + dbsize5);
    assert_eq!(get("snapshot_index_keys_db0"), 120);
    assert_eq!(get("snapshot_index_keys_db5"), 7);
    assert!(info_field(&info, "snapshot_index_keys_db1").is_none());
    assert!(get("snapshot_index_memory_bytes") > 0);
    assert!(get("snapshot_index_bytes_per_key") > 0);
    // Measured by the allocator: at least the 127 keys' slots.
    assert!(get("snapshot_module_heap_bytes") >= get("snapshot_index_memory_bytes"));
    assert!(get("snapshot_index_memory_bytes") >= 127 * 32);
    assert_eq!(get("snapshot_index_backlog"), 0);
    assert!(get("snapshot_events_applied") >= 127);

    // A known scan: 120 keys, COUNT 25 -> 5 calls, 1 snapshot, 120 keys returned.
    let served0 = get("snapshot_scans_served");
    let opened0 = get("snapshot_snapshots_opened");
    let returned0 = get("snapshot_keys_returned");
    let examined0 = get("snapshot_entries_examined");
    let inline0 = get("snapshot_scans_served_inline");
    assert_eq!(
        to_strings(full_scan(&mut con, "SNAPSHOT.SCAN", &["COUNT", "25"])),
        keys
    );
    // And one MATCH call that returns the 10 keys k000100..k000109.
    let (c, items) = page(&mut con, "0", &["MATCH", "k00010*", "COUNT", "1000"]);
    assert_eq!(c, "0");
    assert_eq!(items, keys[100..110]);
    assert_eq!(info_u64(&mut con, "snapshot_scans_served") - served0, 6);
    assert_eq!(info_u64(&mut con, "snapshot_snapshots_opened") - opened0, 2);
    assert_eq!(
        info_u64(&mut con, "snapshot_keys_returned") - returned0,
        130
    );
    // The literal prefix "k00010" limits the MATCH walk to its 10 keys.
    assert_eq!(
        info_u64(&mut con, "snapshot_entries_examined") - examined0,
        130
    );
    assert_eq!(
        info_u64(&mut con, "snapshot_scans_served_inline"),
        inline0,
        "blocking scans are not inline"
    );
    // Open cursors are counted.
    let (c, _) = page(&mut con, "0", &["COUNT", "1"]);
    let _: () = query(&mut con, &["SELECT", "5"]).unwrap();
    page(&mut con, "0", &["COUNT", "1"]);
    assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), 2);
    let _: () = query(&mut con, &["SELECT", "0"]).unwrap();
    page(&mut con, &c, &["COUNT", "1000"]);
    assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), 1);
    assert_eq!(info_u64(&mut con, "snapshot_worker_queue_depth"), 0);
}

// ---------------------------------------------- 8. COMMAND INFO and ACLs

/// INFO does not apply the log on the main thread: after a bulk write its
/// figures are those of the applied position, the backlog says how far
/// behind, and both converge once the indexer has applied the log.
#[test]
fn info_after_a_bulk_write_reports_the_backlog_and_converges() {
    let server = Server::start();
    let mut con = server.client();
    let n = 300_000u64;
    cmd_str(
        &mut con,
        &["DEBUG", "POPULATE", &n.to_string(), "bulk", "8"],
    );
    let info = cmd_str(&mut con, &["INFO", "snapshot"]);
    let num = |f: &str| -> u64 {
        info_field(&info, f)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{f} in {info}"))
    };
    let (keys, backlog) = (num("snapshot_index_keys"), num("snapshot_index_backlog"));
    // The figures are of the applied position: every key not yet in them is
    // still in the backlog.
    assert!(
        keys <= n && keys + backlog >= n,
        "index_keys {keys}, backlog {backlog}"
    );
    wait_until("the index to catch up", Duration::from_secs(60), || {
        info_u64(&mut con, "snapshot_index_backlog") == 0
    });
    assert_eq!(info_u64(&mut con, "snapshot_index_keys"), n);
}

#[test]
fn command_info_flags_keys_and_acl_categories() {
    let server = Server::start();
    let mut con = server.client();
    let info: Vec<Value> = query(&mut con, &["COMMAND", "INFO", "snapshot.scan"]).unwrap();
    let Some(Value::Array(entry)) = info.first() else {
        panic!("COMMAND INFO: {info:?}")
    };
    let as_str = |v: &Value| -> String {
        match v {
            Value::BulkString(b) => String::from_utf8(b.clone()).unwrap(),
            Value::SimpleString(s) => s.clone(),
            other => panic!("not a string: {other:?}"),
        }
    };
    let strs = |v: &Value| -> Vec<String> {
        match v {
            Value::Array(a) | Value::Set(a) => a.iter().map(as_str).collect(),
            other => panic!("not an array: {other:?}"),
        }
    };
    assert_eq!(as_str(&entry[0]), "snapshot.scan");
    let flags = strs(&entry[2]);
    assert!(flags.iter().any(|f| f == "readonly"), "flags {flags:?}");
    assert!(!flags.iter().any(|f| f == "write"), "flags {flags:?}");
    assert_eq!(
        (&entry[3], &entry[4], &entry[5]),
        (&Value::Int(0), &Value::Int(0), &Value::Int(0)),
        "first/last/step key"
    );
    let cats = strs(&entry[6]);
    let cat_lists: Vec<String> = query(&mut con, &["ACL", "CAT", "keyspace"]).unwrap();
    let in_keyspace = cat_lists.iter().any(|c| c == "snapshot.scan");

    let _: () = query(
        &mut con,
        &[
            "ACL",
            "SETUSER",
            "nokeyspace",
            "on",
            "nopass",
            "allkeys",
            "+@all",
            "-@keyspace",
        ],
    )
    .unwrap();
    let _: () = query(
        &mut con,
        &[
            "ACL",
            "SETUSER",
            "readonly",
            "on",
            "nopass",
            "allkeys",
            "+@read",
            "+@keyspace",
            "-@write",
        ],
    )
    .unwrap();
    let mut limited = server.client();
    let _: () = query(&mut limited, &["AUTH", "nokeyspace", "x"]).unwrap();
    let limited_result = query::<Value>(&mut limited, &["SNAPSHOT.SCAN", "0"]);
    let mut reader = server.client();
    let _: () = query(&mut reader, &["AUTH", "readonly", "x"]).unwrap();
    let reader_result = query::<Value>(&mut reader, &["SNAPSHOT.SCAN", "0"]);

    if has_acl_categories(&server) {
        for c in ["@keyspace", "@read", "@slow"] {
            assert!(cats.iter().any(|x| x == c), "{c} not in {cats:?}");
        }
        assert!(!cats.iter().any(|x| x == "@write"), "{cats:?}");
        // Redis 7.2-7.4 leave module commands out of `ACL CAT <category>` (redis#13489, 8.0).
        if server.is_valkey() || server.version() >= (8, 0, 0) {
            assert!(in_keyspace, "ACL CAT keyspace lacks snapshot.scan");
        } else {
            assert!(
                !in_keyspace,
                "ACL CAT lists module commands on Redis 7.x now"
            );
        }
        let e = err_text(&limited_result.expect_err("-@keyspace user ran SNAPSHOT.SCAN"));
        assert!(
            e.starts_with("NOPERM") && e.to_lowercase().contains("snapshot.scan"),
            "{e}"
        );
        reader_result.unwrap_or_else(|e| panic!("+@read +@keyspace user: {}", err_text(&e)));
    } else {
        assert!(
            !cats.iter().any(|x| x == "@keyspace"),
            "Redis 7.0 has no API to set categories: {cats:?}"
        );
        assert!(!in_keyspace);
        // No categories: -@keyspace does not take away what +@all granted.
        limited_result.unwrap_or_else(|e| panic!("{}", err_text(&e)));
    }
}

// ------------------------------------------------------- 9. MODULE UNLOAD

#[test]
fn module_unload_is_refused_and_the_module_keeps_working() {
    let server = Server::start();
    let mut con = server.client();
    let keys = fill(&mut con, "k", 30);
    let (c, p1) = page(&mut con, "0", &["COUNT", "10"]);
    let e = expect_err(&mut con, &["MODULE", "UNLOAD", "snapshot"]);
    assert!(e.starts_with("ERR"), "{e}");
    assert!(module_names(&mut con).iter().any(|m| m == "snapshot"));
    // The open iteration continues; new ones work; writes are still indexed.
    let mut got = p1;
    let mut cursor = c;
    while cursor != "0" {
        let (next, items) = page(&mut con, &cursor, &["COUNT", "10"]);
        got.extend(items);
        cursor = next;
    }
    assert_eq!(got, keys);
    let _: () = query(&mut con, &["SET", "zzz", "v"]).unwrap();
    assert_eq!(
        full_scan(&mut con, "SNAPSHOT.SCAN", &["COUNT", "100"]).len(),
        31
    );
    assert_eq!(
        expect_err(&mut con, &["MODULE", "UNLOAD", "snapshot"]),
        e,
        "refused again, same way"
    );
}

// --------------------------------------------- 10. client killed mid-scan

fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend(format!("${}\r\n{a}\r\n", a.len()).into_bytes());
    }
    out
}

#[test]
fn client_killed_while_its_scan_is_in_flight() {
    let server = Server::start();
    let mut con = server.client();
    let keys = fill(&mut con, "key:", 50_000);
    let mut caught_blocked = 0;
    for round in 0..3 {
        let mut raw = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
        raw.set_read_timeout(Some(CLIENT_TIMEOUT)).unwrap();
        raw.write_all(&resp(&["CLIENT", "ID"])).unwrap();
        let mut buf = [0u8; 64];
        let n = raw.read(&mut buf).unwrap();
        let line = std::str::from_utf8(&buf[..n]).unwrap();
        let id: u64 = line
            .trim()
            .strip_prefix(':')
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("CLIENT ID reply {line:?}"));
        // Pipelined full-database scans, never read: the client stays blocked
        // on one of them while the rest wait in its query buffer.
        let mut burst = Vec::new();
        for _ in 0..20 {
            burst.extend(resp(&["SNAPSHOT.SCAN", "0", "COUNT", "100000"]));
        }
        raw.write_all(&burst).unwrap();
        let id_s = id.to_string();
        // Kill it while blocked if we catch it so (bounded polling), else anyway.
        for _ in 0..2000 {
            let list: String = query(&mut con, &["CLIENT", "LIST", "ID", &id_s]).unwrap();
            let blocked = list
                .split_whitespace()
                .find_map(|f| f.strip_prefix("flags="))
                .is_some_and(|f| f.contains('b'));
            if blocked {
                caught_blocked += 1;
                break;
            }
        }
        let killed: i64 = query(&mut con, &["CLIENT", "KILL", "ID", &id_s]).unwrap();
        assert_eq!(
            killed, 1,
            "round {round}: client {id} was not there to kill"
        );
        drop(raw);
        let pong: String = query(&mut con, &["PING"]).unwrap();
        assert_eq!(pong, "PONG");
    }
    eprintln!("killed while blocked in {caught_blocked} of 3 rounds");
    wait_until("no busy workers", POLL, || {
        info_u64(&mut con, "snapshot_workers_busy") == 0
            && info_u64(&mut con, "snapshot_worker_queue_depth") == 0
    });
    let pong: String = query(&mut con, &["PING"]).unwrap();
    assert_eq!(pong, "PONG");
    assert_eq!(
        to_strings(full_scan(&mut con, "SNAPSHOT.SCAN", &["COUNT", "100000"])),
        keys
    );
    assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), 0);
}
