//! What SNAPSHOT.HSCAN, SNAPSHOT.SSCAN and SNAPSHOT.ZSCAN do alike, one
//! `#[case]` a command: inside MULTI/EXEC, EVAL and FCALL / FCALL_RO (where
//! the copy is made inline, not sliced) an iteration returns what the
//! blocking path returns, cursors cross between the paths, and a cursor
//! stays single-use.
//!
//! Ground truth is the native `HSCAN` / `SSCAN` / `ZSCAN` iteration taken
//! right before cursor 0, with no write in between.
mod coll;
mod common;

use coll::*;
use common::*;
use redis::{RedisResult, Value};
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

    // Single use holds inline: EVAL with a consumed cursor.
    let e: RedisResult<Value> = redis::cmd("EVAL")
        .arg(format!("return redis.call('{cmd}', KEYS[1], ARGV[1])"))
        .arg(1)
        .arg("k")
        .arg(&c1)
        .query(&mut con);
    let e = err_text(&e.expect_err("consumed cursor in EVAL"));
    assert!(e.contains(UNKNOWN_TAIL), "{e}");
    assert_eq!(info_u64(&mut con, "snapshot_hash_cursors_open"), 0);
}
