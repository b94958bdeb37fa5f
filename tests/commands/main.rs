//! SNAPSHOT.SCAN's command surface and lifecycle against a real server:
//! argument errors, reply shape, cursor rules, cursor lifetime (idle timeout,
//! eviction, disconnects), MULTI/Lua/functions, configs, INFO, COMMAND INFO and
//! ACL categories, MODULE UNLOAD, and a client killed mid-scan.
#[path = "../common/mod.rs"]
mod common;

use common::*;
use redis::{Connection, RedisResult, Value};
use rstest::rstest;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const INVALID_CURSOR: &str = "ERR invalid cursor";
const SYNTAX: &str = "ERR syntax error";
const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
const ARITY: &str = "ERR wrong number of arguments for 'snapshot.scan' command";
const POLL: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------- helpers

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

/// Waits for the indexer to have applied every recorded change: INFO's
/// index figures are those of the applied position.
fn wait_applied(con: &mut Connection) {
    wait_until(
        "the index log to be applied",
        Duration::from_secs(10),
        || info_u64(con, "snapshot_index_backlog") == 0,
    );
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

mod arguments;
mod client_kill;
mod command_info;
mod configs;
mod cursors;
mod info;
mod lifetime;
mod reply;
mod scripts;
mod unload;
