//! The shadow index follows every way the keyspace changes: after each case,
//! a full `SNAPSHOT.SCAN` equals a full native `SCAN` (as sets of byte
//! strings, also per `TYPE`) in every database the case touched.
//!
//! Most cases are tiny command scripts (see [`parse_script`]) run on a fresh
//! server whose databases 0 and 3 hold one background key of every type
//! (`bg0:*`, `bg3:*`); the index is compared after every command and the
//! final keyspace is checked against the case's expectation, so a case
//! cannot pass vacuously.
#[path = "../common/mod.rs"]
mod common;

use common::*;
use redis::{Connection, ConnectionLike, Value};
use rstest::rstest;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

type Keys = BTreeSet<Vec<u8>>;

const TYPES: [&str; 6] = ["string", "list", "set", "zset", "hash", "stream"];
const WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// Comparison helpers
// ---------------------------------------------------------------------------

fn show(k: &[u8]) -> String {
    format!("\"{}\"", k.escape_ascii())
}

/// At most 20 keys, then how many more.
fn show_set<'a>(keys: impl IntoIterator<Item = &'a Vec<u8>>) -> String {
    let all: Vec<&Vec<u8>> = keys.into_iter().collect();
    let v: Vec<String> = all.iter().take(20).map(|k| show(k)).collect();
    let more = all.len().saturating_sub(20);
    let tail = if more > 0 {
        format!(", ... ({more} more)")
    } else {
        String::new()
    };
    format!("{{{}{tail}}}", v.join(", "))
}

fn select(con: &mut Connection, db: u32) {
    let _: () =
        query(con, &["SELECT", &db.to_string()]).unwrap_or_else(|e| panic!("SELECT {db}: {e}"));
}

/// Every key of a full `SNAPSHOT.SCAN` (COUNT 1000) of the selected database;
/// panics if a key is returned twice (the contract promises each key once).
fn snap_keys(con: &mut Connection, extra: &[&str]) -> Keys {
    let mut args = vec!["COUNT", "1000"];
    args.extend_from_slice(extra);
    let all = full_scan(con, "SNAPSHOT.SCAN", &args);
    let n = all.len();
    let set: Keys = all.into_iter().collect();
    assert_eq!(set.len(), n, "SNAPSHOT.SCAN {extra:?} returned a key twice");
    set
}

/// Every key of a full native `SCAN` (COUNT 1000) of the selected database.
fn native_keys(con: &mut Connection, extra: &[&str]) -> Keys {
    let mut args = vec!["COUNT", "1000"];
    args.extend_from_slice(extra);
    full_scan(con, "SCAN", &args).into_iter().collect()
}

fn describe_diff(what: &str, snap: &Keys, native: &Keys) -> String {
    format!(
        "{what}: SNAPSHOT.SCAN != SCAN\n  only in SNAPSHOT.SCAN: {}\n  only in SCAN:          {}\n  ({} vs {} keys)",
        show_set(snap.difference(native)),
        show_set(native.difference(snap)),
        snap.len(),
        native.len()
    )
}

/// `None` if, in every db of `dbs`, the full SNAPSHOT.SCAN equals the full
/// SCAN and so does every TYPE-filtered pair; else the first difference.
/// Leaves `con` on db 0.
fn index_mismatch(con: &mut Connection, dbs: &[u32]) -> Option<String> {
    let mut out = None;
    'dbs: for &db in dbs {
        select(con, db);
        let snap = snap_keys(con, &[]);
        let native = native_keys(con, &[]);
        if snap != native {
            out = Some(describe_diff(&format!("db {db}"), &snap, &native));
            break;
        }
        for t in TYPES {
            let snap = snap_keys(con, &["TYPE", t]);
            let native = native_keys(con, &["TYPE", t]);
            if snap != native {
                out = Some(describe_diff(&format!("db {db} TYPE {t}"), &snap, &native));
                break 'dbs;
            }
        }
    }
    select(con, 0);
    out
}

/// SELECTs each db of `dbs` and compares SNAPSHOT.SCAN with SCAN (all keys,
/// and per TYPE), panicking with the symmetric difference. Leaves `con` on db 0.
fn assert_index_matches(con: &mut Connection, dbs: &[u32]) {
    if let Some(d) = index_mismatch(con, dbs) {
        panic!("{d}");
    }
}

/// The index holds exactly as many keys as the server (`snapshot_index_keys_db<N>`
/// vs `DBSIZE`). Only meaningful when no key is logically expired but not yet deleted.
fn assert_index_sizes(con: &mut Connection, dbs: &[u32]) {
    // INFO reports the applied position; the indexer applies the log within
    // moments.
    wait_until(
        "the index log to be applied",
        Duration::from_secs(30),
        || info_u64(con, "snapshot_index_backlog") == 0,
    );
    for &db in dbs {
        let server = dbsize_in(con, db);
        let index = index_keys_db(con, db);
        assert_eq!(
            index, server,
            "db {db}: snapshot_index_keys_db{db}={index} but DBSIZE={server}"
        );
    }
}

/// Server clock, Unix ms.
fn has_command(con: &mut Connection, name: &str) -> bool {
    let v: Vec<Value> = query(con, &["COMMAND", "INFO", name]).expect("COMMAND INFO");
    matches!(v.first(), Some(Value::Array(a)) if !a.is_empty())
}

fn is_loading(e: &redis::RedisError) -> bool {
    e.code() == Some("LOADING")
}

/// Polls `SNAPSHOT.SCAN 0` until it stops answering LOADING (index rebuild done).
/// Returns how many LOADING errors it saw.
fn wait_not_loading(con: &mut Connection) -> usize {
    let mut loading = 0;
    wait_until("the index rebuild to finish", WAIT, || {
        match query::<Value>(con, &["SNAPSHOT.SCAN", "0", "COUNT", "1"]) {
            Ok(_) => true,
            Err(e) if is_loading(&e) => {
                assert!(
                    e.to_string().contains("snapscan is building its index"),
                    "unexpected LOADING text: {e}"
                );
                loading += 1;
                false
            }
            Err(e) => panic!("SNAPSHOT.SCAN 0 during rebuild: {e}"),
        }
    });
    loading
}

// ---------------------------------------------------------------------------
// Case scripts
// ---------------------------------------------------------------------------

/// Splits a script into commands (separated by `;` or newlines) of arguments
/// (separated by whitespace; `"double quotes"` keep spaces and `;`, `""` is
/// the empty argument). Arguments stay undecoded (see [`expand`]).
fn parse_script(s: &str) -> Vec<Vec<String>> {
    let (mut cmds, mut cur, mut tok) = (Vec::new(), Vec::new(), None::<String>);
    let mut quoted = false;
    for c in s.chars() {
        if quoted {
            if c == '"' {
                quoted = false;
            } else {
                tok.get_or_insert_with(String::new).push(c);
            }
            continue;
        }
        match c {
            '"' => {
                quoted = true;
                tok.get_or_insert_with(String::new);
            }
            ';' | '\n' => {
                cur.extend(tok.take());
                if !cur.is_empty() {
                    cmds.push(std::mem::take(&mut cur));
                }
            }
            c if c.is_whitespace() => cur.extend(tok.take()),
            c => tok.get_or_insert_with(String::new).push(c),
        }
    }
    assert!(!quoted, "unterminated quote in script {s:?}");
    cur.extend(tok.take());
    if !cur.is_empty() {
        cmds.push(cur);
    }
    cmds
}

/// `%HH` escapes to bytes (binary key names); everything else verbatim.
fn decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let (mut out, mut i) = (Vec::with_capacity(b.len()), 0);
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// Background keys: one of every type (and one with a long TTL) per db.
fn bg_keys(db: u32) -> Vec<Vec<u8>> {
    ["str", "list", "set", "zset", "hash", "stream", "ttl"]
        .iter()
        .map(|t| format!("bg{db}:{t}").into_bytes())
        .collect()
}

fn write_bg(con: &mut Connection, db: u32) {
    select(con, db);
    let p = format!("bg{db}:");
    for cmd in [
        vec!["SET", "str", "v"],
        vec!["RPUSH", "list", "a", "b"],
        vec!["SADD", "set", "m"],
        vec!["ZADD", "zset", "1", "m"],
        vec!["HSET", "hash", "f", "v"],
        vec!["XADD", "stream", "1-1", "f", "v"],
        vec!["SET", "ttl", "v", "EX", "100000"],
    ] {
        let key = format!("{p}{}", cmd[1]);
        let mut args = cmd.clone();
        args[1] = &key;
        let _: Value = query(con, &args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    }
    select(con, 0);
}

/// Parses `"0: @bg0 k -bg0:str; 3: @bg3"` into expected key sets per db:
/// `@bgN` adds the background keys of db N, `-key` removes a key, other
/// tokens are keys (`%HH`-decoded, `""` for the empty key).
fn parse_expect(spec: &str) -> BTreeMap<u32, Keys> {
    let mut out = BTreeMap::new();
    for seg in parse_script(spec) {
        let db: u32 = seg[0]
            .strip_suffix(':')
            .and_then(|d| d.parse().ok())
            .unwrap_or_else(|| panic!("bad expectation segment {seg:?} in {spec:?}"));
        let mut keys = Keys::new();
        for t in &seg[1..] {
            if let Some(n) = t.strip_prefix("@bg") {
                keys.extend(bg_keys(n.parse().expect("@bg<db>")));
            } else if let Some(k) = t.strip_prefix('-') {
                assert!(keys.remove(&decode(k)), "{spec:?}: removing absent {k}");
            } else {
                keys.insert(decode(t));
            }
        }
        out.insert(db, keys);
    }
    out
}

/// Expands one argument: `@last` (the last bulk-string reply, e.g. of DUMP),
/// `@ms+N`/`@ms-N` (server Unix ms plus/minus N), `@s+N` (server Unix seconds
/// plus N), else `%HH`-decoded bytes.
fn expand(con: &mut Connection, arg: &str, last: &Option<Vec<u8>>) -> Vec<u8> {
    if arg == "@last" {
        return last.clone().expect("@last used before any bulk reply");
    }
    if let Some(n) = arg.strip_prefix("@ms+") {
        return (server_ms(con) + n.parse::<i64>().unwrap())
            .to_string()
            .into_bytes();
    }
    if let Some(n) = arg.strip_prefix("@ms-") {
        return (server_ms(con) - n.parse::<i64>().unwrap())
            .to_string()
            .into_bytes();
    }
    if let Some(n) = arg.strip_prefix("@s+") {
        return (server_ms(con) / 1000 + n.parse::<i64>().unwrap())
            .to_string()
            .into_bytes();
    }
    decode(arg)
}

fn render(v: &Value) -> String {
    match v {
        Value::Nil => "nil".into(),
        Value::Int(i) => i.to_string(),
        Value::Okay => "OK".into(),
        Value::SimpleString(s) => s.clone(),
        Value::BulkString(b) => b.escape_ascii().to_string(),
        Value::Array(a) | Value::Set(a) => {
            format!("[{}]", a.iter().map(render).collect::<Vec<_>>().join(","))
        }
        Value::ServerError(e) => format!("ERR({})", e.code()),
        other => format!("{other:?}"),
    }
}

/// Runs one command of a script. A leading `!` token expects an error reply,
/// a leading `=X` token expects the reply to render as X (`=0`, `=OK`, `=nil`).
/// Returns the reply.
fn run_step(con: &mut Connection, tokens: &[String], last: &mut Option<Vec<u8>>) -> Value {
    let (expect_err, expect_reply, argv) = match tokens[0].as_str() {
        "!" => (true, None, &tokens[1..]),
        t if t.starts_with('=') => (false, Some(&t[1..]), &tokens[1..]),
        _ => (false, None, tokens),
    };
    let args: Vec<Vec<u8>> = argv.iter().map(|a| expand(con, a, last)).collect();
    let mut cmd = redis::cmd(std::str::from_utf8(&args[0]).expect("command name"));
    for a in &args[1..] {
        cmd.arg(&a[..]);
    }
    let reply = con
        .req_command(&cmd)
        .unwrap_or_else(|e| panic!("{tokens:?}: {e}"));
    let is_err = matches!(reply, Value::ServerError(_));
    assert_eq!(
        is_err,
        expect_err,
        "{tokens:?}: reply {} (expected {})",
        render(&reply),
        if expect_err { "an error" } else { "success" }
    );
    if let Some(want) = expect_reply {
        assert_eq!(render(&reply), want, "{tokens:?}: unexpected reply");
    }
    if let Value::BulkString(b) = &reply {
        *last = Some(b.clone());
    }
    reply
}

/// Runs `script` on `con`, comparing the index with SCAN on `chk` (another
/// connection, so transactions and SELECTs on `con` are undisturbed) after
/// every step when `step_checks`. `REQUIRE CMD` skips the case (returns
/// false) on servers without CMD.
fn run_script(
    con: &mut Connection,
    chk: &mut Connection,
    script: &str,
    dbs: &[u32],
    step_checks: bool,
) -> bool {
    let mut last = None;
    for (i, tokens) in parse_script(script).iter().enumerate() {
        if tokens[0] == "REQUIRE" {
            if !has_command(chk, &tokens[1]) {
                eprintln!(
                    "{}: no {} command, case skipped",
                    Server::server_name(),
                    tokens[1]
                );
                return false;
            }
            continue;
        }
        run_step(con, tokens, &mut last);
        if step_checks {
            if let Some(d) = index_mismatch(chk, dbs) {
                panic!("after step {i} {tokens:?} of {script:?}:\n{d}");
            }
        }
    }
    true
}

fn dbs_of(expect: &BTreeMap<u32, Keys>) -> Vec<u32> {
    let mut dbs: BTreeSet<u32> = expect.keys().copied().collect();
    dbs.extend([0, 3]);
    dbs.into_iter().collect()
}

/// The native keyspace of each db equals the expectation.
fn assert_keyspace(con: &mut Connection, expect: &BTreeMap<u32, Keys>, context: &str) {
    for (&db, want) in expect {
        select(con, db);
        let got = native_keys(con, &[]);
        assert_eq!(
            &got,
            want,
            "{context}: db {db} holds {} but the case expects {}",
            show_set(&got),
            show_set(want)
        );
    }
    select(con, 0);
}

/// A fresh server with the module whose dbs 0 and 3 hold the background keys.
fn server_with_bg() -> (Server, Connection, Connection) {
    let server = Server::start();
    let mut con = server.client();
    write_bg(&mut con, 0);
    write_bg(&mut con, 3);
    let chk = server.client();
    (server, con, chk)
}

/// A replica of `primary` and a connection to it, once its link is up.
fn start_replica(primary: &Server) -> (Server, Connection) {
    let replica = Server::start_with(ServerOpts::new().replica_of(primary.port()));
    let mut r = replica.client();
    wait_until("the replica's link to be up", WAIT, || {
        let info = cmd_str(&mut r, &["INFO", "replication"]);
        info_field(&info, "master_link_status").as_deref() == Some("up")
    });
    (replica, r)
}

fn repl_offset(con: &mut Connection) -> u64 {
    info_section_u64(con, "replication", "master_repl_offset")
}

fn assert_replica_matches(p: &mut Connection, r: &mut Connection, dbs: &[u32], when: &str) {
    for &db in dbs {
        select(p, db);
        select(r, db);
        let ps = snap_keys(p, &[]);
        let rs = snap_keys(r, &[]);
        let rn = native_keys(r, &[]);
        assert_eq!(
            ps,
            rn,
            "{when}: db {db}: replica SCAN differs from primary SNAPSHOT.SCAN\n{}",
            describe_diff("primary index vs replica keyspace", &ps, &rn)
        );
        assert_eq!(
            rs,
            ps,
            "{when}: db {db}: replica SNAPSHOT.SCAN differs from primary's\n{}",
            describe_diff("replica vs primary", &rs, &ps)
        );
    }
    select(p, 0);
    select(r, 0);
    assert_index_matches(r, dbs);
    assert_index_matches(p, dbs);
}

mod backfill;
mod eviction;
mod expiry_exact;
mod other_db;
mod persistence;
mod replication;
mod table;
mod ttl;
