//! What SNAPSHOT.HSCAN, SNAPSHOT.SSCAN and SNAPSHOT.ZSCAN do alike, one
//! `#[case]` a command: inside MULTI/EXEC, EVAL and FCALL / FCALL_RO (where
//! the copy is made inline, not sliced) an iteration returns what the
//! blocking path returns, cursors cross between the paths, and a cursor
//! sent again returns the same page.
//!
//! Ground truth is the native `HSCAN` / `SSCAN` / `ZSCAN` iteration taken
//! right before cursor 0, with no write in between.
mod coll;
mod common;

use coll::*;
use common::*;
use rstest::rstest;

/// One collection command and how to fill a collection for it.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Hash,
    Set,
    Zset,
}

impl Kind {
    fn cmd(self) -> &'static str {
        match self {
            Kind::Hash => "SNAPSHOT.HSCAN",
            Kind::Set => "SNAPSHOT.SSCAN",
            Kind::Zset => "SNAPSHOT.ZSCAN",
        }
    }
    fn native(self) -> &'static str {
        match self {
            Kind::Hash => "HSCAN",
            Kind::Set => "SSCAN",
            Kind::Zset => "ZSCAN",
        }
    }
    /// Strings per element: field and value, member, member and score.
    fn width(self) -> usize {
        match self {
            Kind::Set => 1,
            Kind::Hash | Kind::Zset => 2,
        }
    }
    /// `n` elements in `key`: fields `f00000..` with values `v0..`, members
    /// `m00000..`, members `m00000..` with the scores of [`fill_zset`].
    fn fill(self, con: &mut redis::Connection, key: &str, n: usize) {
        match self {
            Kind::Hash => populate(con, "HSET", key, n, |i| {
                vec![format!("f{i:05}"), format!("v{i}")]
            }),
            Kind::Set => populate(con, "SADD", key, n, |i| vec![format!("m{i:05}")]),
            Kind::Zset => fill_zset(con, key, n),
        }
    }
}

#[rstest]
#[case::hash(Kind::Hash)]
#[case::set(Kind::Set)]
#[case::zset(Kind::Zset)]
fn multi_lua_and_functions_match_the_blocking_path(#[case] kind: Kind) {
    let (cmd, width) = (kind.cmd(), kind.width());
    let server = Server::start();
    let mut con = server.client();
    // Larger than hash-copy-batch: blocking takes the sliced path, inline the whole.
    kind.fill(&mut con, "k", 3_000);
    let truth = native(&mut con, kind.native(), "k", &["COUNT", "100"], width);
    assert_eq!(truth.len(), 3_000, "native {}", kind.native());
    let blocking = to_elems(
        &finish_from(&mut con, cmd, "k", "0", &["COUNT", "7"], width, |_| {}),
        width,
    );
    assert_same(&blocking, &truth, "blocking");

    // MULTI/EXEC, page by page.
    assert_same(
        &to_elems(&multi_loop(&mut con, cmd, "k", 7, width), width),
        &truth,
        "MULTI/EXEC",
    );

    // EVAL and FCALL / FCALL_RO: the whole iteration inside one script.
    let flat: Vec<Bytes> = redis::cmd("EVAL")
        .arg(lua_loop(cmd))
        .arg(1)
        .arg("k")
        .arg(7)
        .query(&mut con)
        .unwrap_or_else(|e| panic!("EVAL: {}", err_text(&e)));
    assert_same(&to_elems(&flat, width), &truth, "EVAL");
    let lib = format!(
        "#!lua name=scanlib\nlocal function all(KEYS, ARGV)\n{}\nend\nredis.register_function{{function_name='scan_all', callback=all, flags={{'no-writes'}}}}",
        lua_loop(cmd)
    );
    let _: String = query(&mut con, &["FUNCTION", "LOAD", &lib]).expect("FUNCTION LOAD");
    for fcall in ["FCALL", "FCALL_RO"] {
        let flat: Vec<Bytes> = redis::cmd(fcall)
            .arg("scan_all")
            .arg(1)
            .arg("k")
            .arg(7)
            .query(&mut con)
            .unwrap_or_else(|e| panic!("{fcall}: {}", err_text(&e)));
        assert_same(&to_elems(&flat, width), &truth, fcall);
    }

    // Cursors cross paths: blocking page 1, MULTI page 2, blocking rest.
    let (c1, mut flat) = page(&mut con, cmd, "k", "0", &["COUNT", "1000"]);
    let (c2, p2) = multi_page(&mut con, cmd, "k", &c1, 1000);
    assert_ne!(c2, "0", "3,000 elements in pages of 1,000 end on page 3");
    flat.extend(p2);
    flat.extend(finish_from(
        &mut con,
        cmd,
        "k",
        &c2,
        &["COUNT", "1000"],
        width,
        |_| {},
    ));
    assert_same(&to_elems(&flat, width), &truth, "mixed paths");

    // A cursor sent again gets the same page inline too: EVAL with the
    // cursor MULTI used, then the same in MULTI.
    let (c2b, p2b): (String, Vec<Bytes>) = redis::cmd("EVAL")
        .arg(format!(
            "return redis.call('{cmd}', KEYS[1], ARGV[1], 'COUNT', 1000)"
        ))
        .arg(1)
        .arg("k")
        .arg(&c1)
        .query(&mut con)
        .unwrap_or_else(|e| panic!("a used cursor in EVAL: {}", err_text(&e)));
    let (c2c, p2c) = multi_page(&mut con, cmd, "k", &c1, 1000);
    assert_eq!(
        to_elems(&p2b, width),
        to_elems(&flat[1000 * width..2000 * width], width)
    );
    assert_eq!(p2b, p2c, "the same page in EVAL and MULTI");
    assert!(c2b != "0" && c2c != "0");
    // An iteration never continued is not left open by the retries.
    assert_eq!(info_u64(&mut con, "snapshot_hash_cursors_open"), 2);
}

/// README, Cursor lifetime: a cursor sent again returns the same page, and
/// either next cursor finishes the iteration with exactly the elements of
/// the snapshot.
#[rstest]
#[case::hash(Kind::Hash)]
#[case::set(Kind::Set)]
#[case::zset(Kind::Zset)]
fn a_cursor_sent_again_returns_the_same_page(#[case] kind: Kind) {
    let (cmd, width) = (kind.cmd(), kind.width());
    let server = Server::start();
    let mut con = server.client();
    kind.fill(&mut con, "k", 3_000);
    let truth = native(&mut con, kind.native(), "k", &["COUNT", "100"], width);
    let opts = ["COUNT", "700"];
    let (c1, first) = page(&mut con, cmd, "k", "0", &opts);
    let (n1, p1) = page(&mut con, cmd, "k", &c1, &opts);
    let (n2, p2) = page(&mut con, cmd, "k", &c1, &opts);
    assert_eq!(p1, p2, "the same page again");
    assert_eq!(p1.len(), 700 * width);
    assert!(n1 != "0" && n2 != "0" && n1 != n2, "{n1} {n2}");
    for next in [&n1, &n2] {
        let mut flat = first.clone();
        flat.extend(p1.clone());
        flat.extend(finish_from(&mut con, cmd, "k", next, &opts, width, |_| {}));
        assert_same(&to_elems(&flat, width), &truth, "after a retry");
    }
    // The last cursor too: its page again and the end again.
    let (mut cursor, mut last) = (c1, (String::new(), Vec::new()));
    while cursor != "0" {
        let (n, p) = page(&mut con, cmd, "k", &cursor, &opts);
        last = (cursor, p);
        cursor = n;
    }
    assert_eq!(
        page(&mut con, cmd, "k", &last.0, &opts),
        ("0".to_string(), last.1)
    );
}
