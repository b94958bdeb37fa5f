//! Point-in-time guarantees, COUNT / MATCH / TYPE semantics and key order of
//! SNAPSHOT.SCAN, checked against the server's own SCAN on every server build.
//!
//! Ground truth is always the server: the native `SCAN ... MATCH p TYPE t` taken
//! at the snapshot instant with no concurrent writes.
#[path = "../common/mod.rs"]
mod common;

use common::Rng;
use common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use redis::{Connection, RedisResult, Value};
use rstest::rstest;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

type Bytes = Vec<u8>;
type KeySet = BTreeSet<Bytes>;
/// A SCAN-like reply: next cursor and keys.
type ScanReply = (String, Vec<Bytes>);

/// Upper bound on calls of any one iteration (every loop here is bounded).
const MAX_CALLS: usize = 200_000;
const POLL: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------

fn show_all<'a>(keys: impl IntoIterator<Item = &'a Bytes>) -> String {
    let v: Vec<String> = keys.into_iter().take(12).map(|k| show(k)).collect();
    format!("[{}]", v.join(", "))
}

fn b(s: &str) -> Bytes {
    s.as_bytes().to_vec()
}

fn set_of<S: AsRef<[u8]>>(keys: impl IntoIterator<Item = S>) -> KeySet {
    keys.into_iter().map(|k| k.as_ref().to_vec()).collect()
}

/// One SNAPSHOT.SCAN call (panics on an error reply).
fn snap(con: &mut Connection, cursor: &str, opts: &[&[u8]]) -> ScanReply {
    redis::cmd("SNAPSHOT.SCAN")
        .arg(cursor)
        .arg(opts)
        .query(con)
        .unwrap_or_else(|e| {
            let o: Vec<String> = opts.iter().map(|o| show(o)).collect();
            panic!("SNAPSHOT.SCAN {cursor} {o:?}: {e}")
        })
}

/// A whole SNAPSHOT.SCAN iteration; returns its pages.
fn snap_pages(con: &mut Connection, opts: &[&[u8]]) -> Vec<Vec<Bytes>> {
    let mut cursor = "0".to_string();
    let mut pages = Vec::new();
    for _ in 0..MAX_CALLS {
        let (next, page) = snap(con, &cursor, opts);
        pages.push(page);
        if next == "0" {
            return pages;
        }
        cursor = next;
    }
    panic!("SNAPSHOT.SCAN did not finish within {MAX_CALLS} calls");
}

/// Keys of a whole SNAPSHOT.SCAN iteration, checked to be in strictly increasing
/// byte order (hence without duplicates).
fn snap_keys(con: &mut Connection, opts: &[&[u8]]) -> Vec<Bytes> {
    let keys: Vec<Bytes> = snap_pages(con, opts).into_iter().flatten().collect();
    assert_ordered(&keys, "SNAPSHOT.SCAN");
    keys
}

/// The native SCAN's full result with these options (as a set).
fn native(con: &mut Connection, opts: &[&[u8]]) -> KeySet {
    let mut cursor = "0".to_string();
    let mut out = KeySet::new();
    for _ in 0..MAX_CALLS {
        let (next, page): ScanReply = redis::cmd("SCAN")
            .arg(&cursor)
            .arg("COUNT")
            .arg(100_000)
            .arg(opts)
            .query(con)
            .unwrap_or_else(|e| panic!("SCAN {cursor}: {e}"));
        out.extend(page);
        if next == "0" {
            return out;
        }
        cursor = next;
    }
    panic!("SCAN did not finish within {MAX_CALLS} calls");
}

fn assert_ordered(keys: &[Bytes], what: &str) {
    if let Some(w) = keys.windows(2).find(|w| w[0] >= w[1]) {
        panic!(
            "{what}: keys not in strictly increasing byte order: {} then {}",
            show(&w[0]),
            show(&w[1])
        );
    }
}

/// Compares an iteration's result with the expected set, naming the differences.
fn assert_same(got: &[Bytes], want: &KeySet, what: &str) {
    assert_ordered(got, what);
    let got: KeySet = got.iter().cloned().collect();
    if &got != want {
        let missing: Vec<&Bytes> = want.difference(&got).collect();
        let extra: Vec<&Bytes> = got.difference(want).collect();
        panic!(
            "{what}: {} keys, want {}; missing {} {}; unexpected {} {}",
            got.len(),
            want.len(),
            missing.len(),
            show_all(missing.iter().copied()),
            extra.len(),
            show_all(extra.iter().copied())
        );
    }
}

/// Runs a pipeline whose replies (errors included) do not matter.
fn run_ignoring_errors(con: &mut Connection, pipe: &redis::Pipeline) {
    // redis-rs reads every reply before reporting the first error, so the
    // connection stays in sync either way.
    let _: RedisResult<Value> = pipe.query(con);
}

/// An open SNAPSHOT.SCAN iteration advanced one page at a time.
struct Iteration {
    label: String,
    opts: Vec<Bytes>,
    count: usize,
    cursor: Option<String>,
    pages: Vec<Vec<Bytes>>,
    want: KeySet,
}

impl Iteration {
    /// Sends cursor 0 with `COUNT count` plus `filters`.
    fn open(
        con: &mut Connection,
        label: &str,
        filters: &[Bytes],
        count: usize,
        want: KeySet,
    ) -> Self {
        let mut opts = filters.to_vec();
        opts.push(b("COUNT"));
        opts.push(count.to_string().into_bytes());
        let mut it = Iteration {
            label: label.to_string(),
            opts,
            count,
            cursor: Some("0".into()),
            pages: Vec::new(),
            want,
        };
        it.step(con);
        it
    }

    fn done(&self) -> bool {
        self.cursor.is_none()
    }

    fn step(&mut self, con: &mut Connection) {
        let Some(cursor) = self.cursor.take() else {
            return;
        };
        assert!(
            self.pages.len() < MAX_CALLS,
            "{}: no end after {MAX_CALLS} calls",
            self.label
        );
        let opts: Vec<&[u8]> = self.opts.iter().map(Vec::as_slice).collect();
        let (next, page) = snap(con, &cursor, &opts);
        assert!(
            page.len() <= self.count,
            "{}: page of {} keys with COUNT {}",
            self.label,
            page.len(),
            self.count
        );
        self.pages.push(page);
        if next != "0" {
            assert_ne!(next, cursor, "{}: cursor reused", self.label);
            self.cursor = Some(next);
        }
    }

    fn check(&self) {
        let keys: Vec<Bytes> = self.pages.iter().flatten().cloned().collect();
        assert_same(&keys, &self.want, &self.label);
    }
}

// Data types used to populate databases.
const TYPES: [&str; 5] = ["string", "hash", "list", "set", "zset"];

/// Appends the commands creating `key` of type `TYPES[ty]` (hashes get fields f1, f2).
fn create(pipe: &mut redis::Pipeline, key: &[u8], ty: usize) {
    match ty {
        0 => pipe.cmd("SET").arg(key).arg("v"),
        1 => pipe
            .cmd("HSET")
            .arg(key)
            .arg("f1")
            .arg("1")
            .arg("f2")
            .arg("2"),
        2 => pipe.cmd("RPUSH").arg(key).arg("a").arg("b"),
        3 => pipe.cmd("SADD").arg(key).arg("a").arg("b"),
        _ => pipe.cmd("ZADD").arg(key).arg(1).arg("a").arg(2).arg("b"),
    }
    .ignore();
}

/// Creates keys `prefix<n>` of random types until there are `n` of them.
/// Every 10th key gets a long TTL. Returns key -> type index.
fn random_keys(
    con: &mut Connection,
    rng: &mut Rng,
    prefix: &str,
    space: u64,
    n: usize,
) -> BTreeMap<Bytes, usize> {
    let mut model = BTreeMap::new();
    let mut pipe = redis::pipe();
    while model.len() < n {
        let key = format!("{prefix}{}", rng.below(space)).into_bytes();
        if model.contains_key(&key) {
            continue;
        }
        let ty = rng.below(TYPES.len() as u64) as usize;
        create(&mut pipe, &key, ty);
        if rng.chance(1, 10) {
            pipe.cmd("EXPIRE").arg(&key).arg(100_000).ignore();
        }
        model.insert(key, ty);
    }
    let () = pipe.query(con).expect("populate");
    model
}

/// Up to `max_len` bytes drawn from `alphabet`.
fn random_bytes(rng: &mut Rng, alphabet: &[u8], max_len: u64) -> Bytes {
    (0..rng.below(max_len + 1))
        .map(|_| *rng.pick(alphabet))
        .collect()
}

mod byte_order;
mod count_budget;
mod expiry;
mod matching;
mod point_in_time;
mod read_your_writes;
mod whole_db;
