//! Helpers shared by the collection tests (SNAPSHOT.SSCAN, SNAPSHOT.ZSCAN, and
//! tests/collections.rs; SNAPSHOT.HSCAN uses its key-spec check): iterate a
//! snapshot command or its native counterpart, check page shapes and the
//! documented order (byte order of the member, each once).
#![allow(dead_code)]

use crate::common::*;
use redis::{Connection, RedisResult, Value};
use std::collections::BTreeMap;

pub type Bytes = Vec<u8>;
/// Member -> score bytes (empty for sets or NOSCORES).
pub type Elems = BTreeMap<Bytes, Bytes>;

/// Upper bound on the calls of any one iteration.
pub const MAX_CALLS: usize = 100_000;

/// Scores whose formatting differs between servers and encodings.
pub const SCORES: &[&str] = &[
    "0",
    "-0",
    "1",
    "-1",
    "1.5",
    "0.1",
    "0.3",
    "3.0000000000000004",
    "1e300",
    "-1e-300",
    "123456789012345678",
    "9007199254740993",
    "1.7976931348623157e308",
    "5e-324",
    "inf",
    "-inf",
    "2.5e-5",
    "100000000000000000000",
    "0.30000000000000004",
    "1234.5678",
];

/// Fills `key` with `n` members, scores cycling through [`SCORES`] plus
/// fractions.
pub fn fill_zset(con: &mut redis::Connection, key: &str, n: usize) {
    populate(con, "ZADD", key, n, |i| {
        let score = match i % 3 {
            0 => SCORES[i / 3 % SCORES.len()].to_string(),
            1 => format!("{}", i as f64 / 7.0),
            _ => i.to_string(),
        };
        vec![score, format!("m{i:05}")]
    });
}

pub fn try_page(
    con: &mut Connection,
    cmd: &str,
    key: &str,
    cursor: &str,
    opts: &[&str],
) -> RedisResult<(String, Vec<Bytes>)> {
    redis::cmd(cmd).arg(key).arg(cursor).arg(opts).query(con)
}

pub fn page(
    con: &mut Connection,
    cmd: &str,
    key: &str,
    cursor: &str,
    opts: &[&str],
) -> (String, Vec<Bytes>) {
    try_page(con, cmd, key, cursor, opts)
        .unwrap_or_else(|e| panic!("{cmd} {key} {cursor} {opts:?}: {}", err_text(&e)))
}

/// COUNT of `opts` (10 when absent).
pub fn count_of(opts: &[&str]) -> usize {
    opts.iter()
        .position(|o| o.eq_ignore_ascii_case("COUNT"))
        .map_or(10, |i| opts[i + 1].parse().expect("COUNT"))
}

/// Iterates `cmd key` from `cursor` to the end, checking that no page
/// carries more than COUNT elements (`width` strings each) and calling
/// `between(page_no)` between pages. Returns the flat elements.
pub fn finish_from(
    con: &mut Connection,
    cmd: &str,
    key: &str,
    cursor: &str,
    opts: &[&str],
    width: usize,
    mut between: impl FnMut(usize),
) -> Vec<Bytes> {
    let (mut cursor, mut out, mut pages) = (cursor.to_string(), Vec::new(), 0);
    for _ in 0..MAX_CALLS {
        let (next, p) = page(con, cmd, key, &cursor, opts);
        assert_eq!(p.len() % width, 0, "ragged page");
        assert!(
            p.len() / width <= count_of(opts),
            "{cmd}: a page carries {} elements, COUNT is {}",
            p.len() / width,
            count_of(opts)
        );
        out.extend(p);
        pages += 1;
        if next == "0" {
            return out;
        }
        between(pages);
        cursor = next;
    }
    panic!("{cmd} did not finish within {MAX_CALLS} calls");
}

/// Flat elements into a map, asserting strictly increasing member order.
pub fn to_elems(flat: &[Bytes], width: usize) -> Elems {
    let pairs: Vec<(Bytes, Bytes)> = flat
        .chunks(width)
        .map(|c| (c[0].clone(), c.get(1).cloned().unwrap_or_default()))
        .collect();
    if let Some(w) = pairs.windows(2).find(|w| w[0].0 >= w[1].0) {
        panic!(
            "members not in strictly increasing byte order: {} then {}",
            show(&w[0].0),
            show(&w[1].0)
        );
    }
    pairs.into_iter().collect()
}

/// The native command's full iteration (`SSCAN`/`ZSCAN`) as a map (native
/// order is arbitrary and may repeat: no order check).
pub fn native(con: &mut Connection, cmd: &str, key: &str, extra: &[&str], width: usize) -> Elems {
    full_hscan(con, cmd, key, extra)
        .chunks(width)
        .map(|c| (c[0].clone(), c.get(1).cloned().unwrap_or_default()))
        .collect()
}

pub fn encoding(con: &mut Connection, key: &str) -> String {
    cmd_str(con, &["OBJECT", "ENCODING", key])
}

pub fn assert_same(got: &Elems, want: &Elems, what: &str) {
    if got == want {
        return;
    }
    let missing: Vec<String> = want
        .iter()
        .filter(|(k, v)| got.get(*k) != Some(*v))
        .take(5)
        .map(|(k, v)| format!("{}={}", show(k), show(v)))
        .collect();
    let extra: Vec<String> = got
        .iter()
        .filter(|(k, v)| want.get(*k) != Some(*v))
        .take(5)
        .map(|(k, v)| format!("{}={}", show(k), show(v)))
        .collect();
    panic!(
        "{what}: {} elements, want {}; missing/different {missing:?}; extra/different {extra:?}",
        got.len(),
        want.len()
    );
}

/// Asserts COMMAND GETKEYS, key-spec flags, arity and ACL categories.
pub fn check_key_specs(con: &mut Connection, server: &Server, cmd: &str, cats: &[&str]) {
    assert_eq!(
        cmd_strs(con, &["COMMAND", "GETKEYS", cmd, "k", "0", "COUNT", "5"]),
        vec!["k"]
    );
    let v: Value = query(con, &["COMMAND", "GETKEYSANDFLAGS", cmd, "k", "0"]).unwrap();
    let text = format!("{v:?}");
    assert!(
        text.contains("RO") && text.contains("access") && !text.contains("RW"),
        "{text}"
    );
    let info: Vec<Value> = query(con, &["COMMAND", "INFO", cmd]).unwrap();
    let Some(Value::Array(entry)) = info.first() else {
        panic!("COMMAND INFO: {info:?}")
    };
    assert_eq!(entry[1], Value::Int(-3), "arity");
    assert_eq!(
        &entry[3..6],
        &[Value::Int(1), Value::Int(1), Value::Int(1)],
        "first/last/step"
    );
    // Redis 7.2-7.4 leave module commands out of `ACL CAT <category>` (redis#13489, 8.0).
    if server.is_valkey() || server.version() >= (8, 0, 0) {
        for cat in cats {
            let cmds: Vec<String> = query(con, &["ACL", "CAT", cat]).unwrap();
            // Listed in lower case, as the server registers it.
            assert!(
                cmds.contains(&cmd.to_ascii_lowercase()),
                "ACL CAT {cat} lacks {cmd}"
            );
        }
    }
}

/// A Lua loop over a whole iteration (EVAL KEYS[1] ARGV[1]=COUNT).
pub fn lua_loop(cmd: &str) -> String {
    format!(
        "local out, cursor, n = {{}}, '0', 0
repeat
  local r = redis.call('{cmd}', KEYS[1], cursor, 'COUNT', ARGV[1])
  cursor = r[1]
  for _, v in ipairs(r[2]) do out[#out + 1] = v end
  n = n + 1
until cursor == '0' or n > 100000
return out"
    )
}

/// One page sent as a MULTI/EXEC transaction.
pub fn multi_page(
    con: &mut Connection,
    cmd: &str,
    key: &str,
    cursor: &str,
    count: usize,
) -> (String, Vec<Bytes>) {
    let ((next, p),): ((String, Vec<Bytes>),) = redis::pipe()
        .atomic()
        .cmd(cmd)
        .arg(key)
        .arg(cursor)
        .arg("COUNT")
        .arg(count)
        .query(con)
        .unwrap_or_else(|e| panic!("MULTI/EXEC {cmd} {key} {cursor}: {}", err_text(&e)));
    (next, p)
}

/// The whole iteration in pages sent as MULTI/EXEC transactions, checking
/// that no page carries more than `count` elements (`width` strings each).
pub fn multi_loop(
    con: &mut Connection,
    cmd: &str,
    key: &str,
    count: usize,
    width: usize,
) -> Vec<Bytes> {
    let (mut cursor, mut out) = ("0".to_string(), Vec::new());
    for _ in 0..MAX_CALLS {
        let (next, p) = multi_page(con, cmd, key, &cursor, count);
        assert_eq!(p.len() % width, 0, "ragged page");
        assert!(
            p.len() / width <= count,
            "MULTI {cmd}: a page carries {} elements, COUNT is {count}",
            p.len() / width
        );
        out.extend(p);
        cursor = next;
        if cursor == "0" {
            return out;
        }
    }
    panic!("MULTI loop did not finish");
}
