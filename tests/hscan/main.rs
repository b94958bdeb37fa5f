//! SNAPSHOT.HSCAN against a real server: point-in-time copies of listpack and
//! hashtable hashes under concurrent writes, COUNT / MATCH / NOVALUES, sliced
//! copies (retries and fallback), field expiry, errors and cursor rules,
//! MULTI / Lua / functions, cursor lifetime and memory release, the memory
//! limit, copy reuse, and key specs / ACLs.
//!
//! Ground truth is always the server: `HGETALL` (and the native `HSCAN ... MATCH`)
//! taken right before cursor 0, with no write in between.
#[path = "../coll/mod.rs"]
mod coll;
#[path = "../common/mod.rs"]
mod common;

use coll::check_key_specs;
use common::*;
use redis::{Connection, RedisResult, Value};
use rstest::rstest;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

type Bytes = Vec<u8>;
type Hash = BTreeMap<Bytes, Bytes>;

const CMD: &str = "SNAPSHOT.HSCAN";
/// Upper bound on the calls of any one iteration (every loop here is bounded).
const MAX_CALLS: usize = 100_000;
const POLL: Duration = Duration::from_secs(10);
const INVALID_CURSOR: &str = "ERR invalid cursor";
const SYNTAX: &str = "ERR syntax error";
const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
const ARITY: &str = "ERR wrong number of arguments for 'snapshot.hscan' command";
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const LIMIT_HEAD: &str =
    "ERR snapscan: collection snapshots would exceed snapshot.collection-memory-limit (";
const LIMIT_TAIL: &str = "bytes held); retry later or raise the limit";

// ---------------------------------------------------------------- helpers

/// `f00042`: zero-padded, so byte order is numeric order.
fn fld(i: usize) -> String {
    format!("f{i:05}")
}

/// HSETs fields `fld(0..n)` with `value(i)`, in batches.
fn fill_hash(con: &mut Connection, key: &str, n: usize, value: impl Fn(usize) -> String) {
    populate(con, "HSET", key, n, |i| vec![fld(i), value(i)]);
}

fn hgetall(con: &mut Connection, key: &str) -> Hash {
    let flat: Vec<Bytes> = query(con, &["HGETALL", key]).expect("HGETALL");
    assert_eq!(flat.len() % 2, 0, "HGETALL reply has an odd length");
    flat.chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect()
}

fn encoding(con: &mut Connection, key: &str) -> String {
    cmd_str(con, &["OBJECT", "ENCODING", key])
}

/// Fields the native `HSCAN key ... MATCH pattern` returns (server-exact glob).
fn native_match(con: &mut Connection, key: &str, pattern: &[u8]) -> BTreeSet<Bytes> {
    let mut cursor = "0".to_string();
    let mut out = BTreeSet::new();
    for _ in 0..MAX_CALLS {
        let (next, page): (String, Vec<Bytes>) = redis::cmd("HSCAN")
            .arg(key)
            .arg(&cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1_000_000)
            .query(con)
            .expect("HSCAN");
        out.extend(page.chunks(2).map(|p| p[0].clone()));
        if next == "0" {
            return out;
        }
        cursor = next;
    }
    panic!("HSCAN did not finish within {MAX_CALLS} calls");
}

/// Options of one SNAPSHOT.HSCAN iteration.
#[derive(Clone, Debug, Default)]
struct Opts {
    count: Option<usize>,
    pattern: Option<Bytes>,
    novalues: bool,
}

impl Opts {
    fn count(n: usize) -> Self {
        Opts {
            count: Some(n),
            ..Default::default()
        }
    }
    fn pattern(mut self, p: &[u8]) -> Self {
        self.pattern = Some(p.to_vec());
        self
    }
    fn novalues(mut self) -> Self {
        self.novalues = true;
        self
    }
    fn args(&self) -> Vec<Bytes> {
        let mut a: Vec<Bytes> = Vec::new();
        if let Some(p) = &self.pattern {
            a.push(b"MATCH".to_vec());
            a.push(p.clone());
        }
        if let Some(c) = self.count {
            a.push(b"COUNT".to_vec());
            a.push(c.to_string().into_bytes());
        }
        if self.novalues {
            a.push(b"NOVALUES".to_vec());
        }
        a
    }
    /// Largest number of fields a page may carry.
    fn limit(&self) -> usize {
        self.count.unwrap_or(10)
    }
}

fn try_hscan(
    con: &mut Connection,
    key: &str,
    cursor: &str,
    o: &Opts,
) -> RedisResult<(String, Vec<Bytes>)> {
    redis::cmd(CMD)
        .arg(key)
        .arg(cursor)
        .arg(o.args())
        .query(con)
}

fn hscan(con: &mut Connection, key: &str, cursor: &str, o: &Opts) -> (String, Vec<Bytes>) {
    try_hscan(con, key, cursor, o)
        .unwrap_or_else(|e| panic!("{CMD} {key} {cursor} {o:?}: {}", err_text(&e)))
}

/// Checks the shape of one page: at most COUNT fields, pairs unless NOVALUES.
fn check_page(page: &[Bytes], o: &Opts) {
    let fields = if o.novalues {
        page.len()
    } else {
        assert_eq!(page.len() % 2, 0, "odd field/value list");
        page.len() / 2
    };
    assert!(
        fields <= o.limit(),
        "a page carries {fields} fields, COUNT is {}",
        o.limit()
    );
}

/// Continues an iteration from `cursor` to its end, calling `between(page_no)`
/// after every page that is not the last; returns the remaining pages.
fn finish_from(
    con: &mut Connection,
    key: &str,
    cursor: &str,
    o: &Opts,
    mut between: impl FnMut(usize),
) -> Vec<Vec<Bytes>> {
    let mut cursor = cursor.to_string();
    let mut pages = Vec::new();
    for _ in 0..MAX_CALLS {
        let (next, page) = hscan(con, key, &cursor, o);
        check_page(&page, o);
        pages.push(page);
        if next == "0" {
            return pages;
        }
        assert!(
            next.parse::<u64>().is_ok_and(|n| n != 0),
            "bad cursor {next}"
        );
        between(pages.len());
        cursor = next;
    }
    panic!("{CMD} did not finish within {MAX_CALLS} calls");
}

fn iterate(
    con: &mut Connection,
    key: &str,
    o: &Opts,
    between: impl FnMut(usize),
) -> Vec<Vec<Bytes>> {
    finish_from(con, key, "0", o, between)
}

/// Flattens pages into a map, checking that fields come in strictly
/// increasing byte order (hence each once). NOVALUES pages map to "".
fn to_hash(pages: &[Vec<Bytes>], novalues: bool) -> Hash {
    let flat: Vec<&Bytes> = pages.iter().flatten().collect();
    let pairs: Vec<(Bytes, Bytes)> = if novalues {
        flat.iter().map(|f| ((*f).clone(), Vec::new())).collect()
    } else {
        flat.chunks(2)
            .map(|p| (p[0].clone(), p[1].clone()))
            .collect()
    };
    if let Some(w) = pairs.windows(2).find(|w| w[0].0 >= w[1].0) {
        panic!(
            "fields not in strictly increasing byte order: {} then {}",
            show(&w[0].0),
            show(&w[1].0)
        );
    }
    pairs.into_iter().collect()
}

fn full(con: &mut Connection, key: &str, o: &Opts) -> Hash {
    to_hash(&iterate(con, key, o, |_| {}), o.novalues)
}

/// `want` restricted to `fields`, values blanked for NOVALUES.
fn expected(want: &Hash, fields: Option<&BTreeSet<Bytes>>, novalues: bool) -> Hash {
    want.iter()
        .filter(|(f, _)| fields.is_none_or(|s| s.contains(*f)))
        .map(|(f, v)| (f.clone(), if novalues { Vec::new() } else { v.clone() }))
        .collect()
}

/// Asserts two hashes are equal, describing the first differences.
fn assert_same(got: &Hash, want: &Hash, what: &str) {
    if got == want {
        return;
    }
    let missing: Vec<String> = want
        .keys()
        .filter(|f| !got.contains_key(*f))
        .take(8)
        .map(|f| show(f))
        .collect();
    let extra: Vec<String> = got
        .keys()
        .filter(|f| !want.contains_key(*f))
        .take(8)
        .map(|f| show(f))
        .collect();
    let changed: Vec<String> = want
        .iter()
        .filter(|(f, v)| got.get(*f).is_some_and(|g| g != *v))
        .take(8)
        .map(|(f, v)| format!("{}: want {} got {}", show(f), show(v), show(&got[f])))
        .collect();
    panic!(
        "{what}: {} fields, want {}; missing {missing:?}, extra {extra:?}, changed {changed:?}",
        got.len(),
        want.len()
    );
}

/// Whether the server has hash-field expiry (HEXPIRE).
fn has_field_ttl(con: &mut Connection) -> bool {
    let v: Vec<Value> = query(con, &["COMMAND", "INFO", "hexpire"]).expect("COMMAND INFO");
    v.first().is_some_and(|v| *v != Value::Nil)
}

/// Valkey, and Redis before 8.0 (7.4 has field TTLs but no
/// `RedisModule_HashFieldMinExpire`): no module API to read a hash's field TTLs.
fn no_field_ttl_api(server: &Server) -> bool {
    server.is_valkey() || server.version() < (8, 0, 0)
}

/// Whether an unchanged hash's copy is reused (INFO snapshot_hash_copies_reused
/// can move): everywhere but on Valkey with field TTLs (9.x) and Redis 7.4 when
/// db 0 holds keys with field TTLs (`keys_with_volatile_items` / `subexpiry` in
/// INFO keyspace), since they have no module API to see one hash's field TTLs.
fn reuse_expected(server: &Server, con: &mut Connection) -> bool {
    if !(no_field_ttl_api(server) && has_field_ttl(con)) {
        return true;
    }
    let keyspace: String = query(con, &["INFO", "keyspace"]).expect("INFO keyspace");
    let volatile = info_field(&keyspace, "db0").and_then(|db0| {
        db0.split(',').find_map(|kv| {
            kv.strip_prefix("keys_with_volatile_items=")
                .or_else(|| kv.strip_prefix("subexpiry="))
                .map(str::to_string)
        })
    });
    volatile.is_none_or(|n| n == "0")
}

/// One write from another connection, chosen by `op`; errors (e.g. RENAME of
/// a key that is gone) are ignored. Returns whether it succeeded.
fn mutate(w: &mut Connection, rng: &mut Rng, op: usize, n: usize) -> bool {
    let f = fld(rng.below(n as u64) as usize);
    let g = fld(rng.below(n as u64) as usize);
    let tag = format!("w{op}");
    let args: Vec<String> = match op {
        25 => vec!["DEL".into(), "h".into()],
        33 => vec!["PEXPIRE".into(), "h".into(), "1".into()],
        _ => match op % 13 {
            0 => vec!["HSET".into(), "h".into(), f, tag],
            1 => vec!["HSET".into(), "h".into(), format!("{f}x"), tag],
            2 => vec!["HDEL".into(), "h".into(), f],
            3 => vec!["HINCRBY".into(), "h".into(), f, "7".into()],
            4 => vec!["HINCRBYFLOAT".into(), "h".into(), f, "1.5".into()],
            5 => vec!["RENAME".into(), "h".into(), "h:moved".into()],
            6 => vec!["HSET".into(), "h:moved".into(), f, tag],
            7 => vec!["RENAME".into(), "h:moved".into(), "h".into()],
            8 => vec![
                "HSET".into(),
                "h".into(),
                f,
                tag.clone(),
                format!("{g}x"),
                tag,
            ],
            9 => vec!["HDEL".into(), "h".into(), f, g],
            10 => vec!["EXPIRE".into(), "h".into(), "1000".into()],
            11 => vec!["PERSIST".into(), "h".into()],
            _ => vec!["HSETNX".into(), "h".into(), format!("{f}y"), tag],
        },
    };
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    query::<Value>(w, &args).is_ok()
}

/// HPEXPIREs `fields` of `key` by `ms`, asserting each got its TTL.
fn hpexpire(con: &mut Connection, key: &str, ms: u64, fields: &[String]) {
    for chunk in fields.chunks(100) {
        let ms = ms.to_string();
        let n = chunk.len().to_string();
        let mut args = vec!["HPEXPIRE", key, &ms, "FIELDS", &n];
        args.extend(chunk.iter().map(String::as_str));
        let set: Vec<i64> = query(con, &args).expect("HPEXPIRE");
        assert!(set.iter().all(|&r| r == 1), "HPEXPIRE: {set:?}");
    }
}

mod acl;
mod errors;
mod field_expiry;
mod lifetime;
mod matching;
mod memory_limit;
mod pages;
mod reuse;
mod scripts;
mod sliced;
