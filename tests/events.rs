//! The shadow index follows every way the keyspace changes: after each case,
//! a full `SNAPSHOT.SCAN` equals a full native `SCAN` (as sets of byte
//! strings, also per `TYPE`) in every database the case touched.
//!
//! Most cases are tiny command scripts (see [`parse_script`]) run on a fresh
//! server whose databases 0 and 3 hold one background key of every type
//! (`bg0:*`, `bg3:*`); the index is compared after every command and the
//! final keyspace is checked against the case's expectation, so a case
//! cannot pass vacuously.
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
fn server_ms(con: &mut Connection) -> i64 {
    let t: Vec<String> = query(con, &["TIME"]).expect("TIME");
    t[0].parse::<i64>().unwrap() * 1000 + t[1].parse::<i64>().unwrap() / 1000
}

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

// ---------------------------------------------------------------------------
// The case table: every way a command can create, retype, move or remove a key
// ---------------------------------------------------------------------------

#[rstest]
// Overwrites and deletes.
#[case::set_over_hash("HSET k f v; SET k x", "0: @bg0 k; 3: @bg3")]
#[case::set_over_stream(
    "XADD k * f v; ! SET k x GET; SET k x; SET bg0:list x; SET bg0:zset y",
    "0: @bg0 k; 3: @bg3"
)]
#[case::string_commands_create(
    "INCR n; APPEND a x; SETRANGE r 3 x; PFADD hll a; SETBIT b 7 1; GETSET g v; MSET m1 1 m2 2; =0 MSETNX m2 1 m3 1; SETNX m3 1",
    "0: @bg0 n a r hll b g m1 m2 m3; 3: @bg3"
)]
// A string SET is logged without reading the key when it created it or
// the key was a plain string; any other key is read.
#[case::string_sets(
    "SET a 1; BITOP OR b a nosuch; MSET c 1 d 2; SET a 2 KEEPTTL; SET bg0:hash x KEEPTTL; SET bg0:list x EX 100000; SET bg0:ttl x",
    "0: @bg0 a b c d; 3: @bg3"
)]
#[case::del("SET a 1; RPUSH l x; =2 DEL a l nosuch; =0 DEL a", "0: @bg0; 3: @bg3")]
#[case::del_background(
    "=3 DEL bg0:str bg0:hash bg0:stream",
    "0: @bg0 -bg0:str -bg0:hash -bg0:stream; 3: @bg3"
)]
#[case::unlink(
    "SADD s m; ZADD z 1 m; =3 UNLINK s z bg0:list",
    "0: @bg0 -bg0:list; 3: @bg3"
)]
#[case::hdel_last_field(
    "HSET h f v g w; =2 HDEL h f g; =1 HDEL bg0:hash f",
    "0: @bg0 -bg0:hash; 3: @bg3"
)]
#[case::hgetdel_last_field(
    "REQUIRE HGETDEL; HSET h f v g w; HGETDEL h FIELDS 2 f g",
    "0: @bg0; 3: @bg3"
)]
#[case::hash_creators(
    "HINCRBY h f 1; HSETNX h2 f v; HINCRBYFLOAT h3 f 1.5",
    "0: @bg0 h h2 h3; 3: @bg3"
)]
#[case::lpop_last(
    "RPUSH l a b; LPOP l; LPOP l; =nil LPOP l; LPOP bg0:list 5",
    "0: @bg0 -bg0:list; 3: @bg3"
)]
#[case::rpop_last(
    "RPUSH l a; RPOP l; RPOP bg0:list; RPOP bg0:list",
    "0: @bg0 -bg0:list; 3: @bg3"
)]
#[case::blpop_last(
    "RPUSH l a; BLPOP l 1; BRPOP bg0:list 1; BRPOP bg0:list 1",
    "0: @bg0 -bg0:list; 3: @bg3"
)]
#[case::lmpop_last("RPUSH l a; LMPOP 2 nosuch l LEFT COUNT 10", "0: @bg0; 3: @bg3")]
#[case::lrem_last(
    "RPUSH l a a; =2 LREM l 0 a; LREM bg0:list 0 a; LREM bg0:list 0 b",
    "0: @bg0 -bg0:list; 3: @bg3"
)]
#[case::ltrim_to_empty(
    "RPUSH l a b c; LTRIM l 1 0; LTRIM bg0:list 5 10",
    "0: @bg0 -bg0:list; 3: @bg3"
)]
#[case::lmove_last(
    "RPUSH l a; LMOVE l l2 LEFT RIGHT; RPOPLPUSH bg0:list l2; BLMOVE bg0:list l3 LEFT LEFT 1",
    "0: @bg0 -bg0:list l2 l3; 3: @bg3"
)]
#[case::srem_last(
    "SADD s a b; =2 SREM s a b; SREM bg0:set m",
    "0: @bg0 -bg0:set; 3: @bg3"
)]
#[case::spop_last("SADD s a b c; SPOP s 10; SPOP bg0:set", "0: @bg0 -bg0:set; 3: @bg3")]
#[case::smove_last_member(
    "SADD s1 m; =1 SMOVE s1 s2 m; =1 SMOVE bg0:set s2 m",
    "0: @bg0 -bg0:set s2; 3: @bg3"
)]
#[case::set_stores(
    "SET dst x; SADD s a; =0 SINTERSTORE dst s nosuch; =0 SDIFFSTORE d2 s s; SUNIONSTORE u s bg0:set",
    "0: @bg0 s u; 3: @bg3"
)]
#[case::zrem_last(
    "ZADD z 1 a 2 b; =2 ZREM z a b; ZREM bg0:zset m",
    "0: @bg0 -bg0:zset; 3: @bg3"
)]
#[case::zpop_last(
    "ZADD z 1 a; ZPOPMIN z; ZPOPMAX bg0:zset 5",
    "0: @bg0 -bg0:zset; 3: @bg3"
)]
#[case::bzpop_zmpop_last(
    "ZADD z 1 a; BZPOPMIN z 1; ZADD y 1 a 2 b; ZMPOP 1 y MIN COUNT 5; BZMPOP 1 1 bg0:zset MAX",
    "0: @bg0 -bg0:zset; 3: @bg3"
)]
#[case::zremrange_to_empty(
    "ZADD z 1 a 2 b; ZREMRANGEBYSCORE z -inf +inf; ZREMRANGEBYRANK bg0:zset 0 -1",
    "0: @bg0 -bg0:zset; 3: @bg3"
)]
#[case::zstores(
    "ZADD src 1 a; SET dst x; =0 ZRANGESTORE dst src 5 10; ZRANGESTORE d2 src 0 -1; SET d3 x; =0 ZINTERSTORE d3 1 nosuch; ZUNIONSTORE d4 2 src bg0:zset",
    "0: @bg0 src d2 d4; 3: @bg3"
)]
#[case::geo("GEOADD g 13.36 38.11 a; ZREM g a; GEOADD g2 13.36 38.11 b; SET dst x; =0 GEOSEARCHSTORE dst g2 FROMLONLAT 0 0 BYRADIUS 1 km", "0: @bg0 g2; 3: @bg3")]
#[case::xdel_keeps_empty_stream(
    "XADD st 1-1 f v; =1 XDEL st 1-1; =1 XDEL bg0:stream 1-1; =0 XLEN st",
    "0: @bg0 st; 3: @bg3"
)]
#[case::xtrim_keeps_empty_stream(
    "XADD st 1-1 f v; XTRIM st MAXLEN 0; XTRIM bg0:stream MAXLEN 0",
    "0: @bg0 st; 3: @bg3"
)]
#[case::xgroup_mkstream("XGROUP CREATE nst g $ MKSTREAM", "0: @bg0 nst; 3: @bg3")]
#[case::sort_store(
    "RPUSH l 3 1 2; SORT l STORE s1; SET s2 x; =0 SORT nosuch STORE s2",
    "0: @bg0 l s1; 3: @bg3"
)]
#[case::bitop_empty_deletes_dest(
    "SET d x; =0 BITOP AND d nosuch1 nosuch2; BITOP OR d2 bg0:str",
    "0: @bg0 d2; 3: @bg3"
)]
// Renames, moves, copies, DUMP/RESTORE. Commands that write a key in another
// db (MOVE, COPY ... DB, DEBUG RELOAD) are followed by SELECT 0: on valkey-8.1
// they move the caller to that db (see client_db_survives_cross_db_notifications).
#[case::rename(
    "SET a 1; RENAME a b; RENAME bg0:hash a",
    "0: @bg0 -bg0:hash a b; 3: @bg3"
)]
#[case::rename_onto_other_type(
    "HSET a f v; RPUSH b x; RENAME a b; RENAME bg0:stream bg0:str",
    "0: @bg0 -bg0:stream b; 3: @bg3"
)]
#[case::rename_to_itself("SET a 1; RENAME a a", "0: @bg0 a; 3: @bg3")]
#[case::rename_missing_source("! RENAME nosuch x; ! RENAMENX nosuch x", "0: @bg0; 3: @bg3")]
#[case::renamenx_success("SET a 1; =1 RENAMENX a b", "0: @bg0 b; 3: @bg3")]
#[case::renamenx_failure(
    "SET a 1; RPUSH b x; =0 RENAMENX a b; =0 RENAMENX bg0:set bg0:zset",
    "0: @bg0 a b; 3: @bg3"
)]
#[case::rename_keeps_ttl(
    "SET a 1 EX 100000; RENAME a b; RENAME bg0:ttl c",
    "0: @bg0 -bg0:ttl b c; 3: @bg3"
)]
#[case::move_to_other_db(
    "SET a 1; =1 MOVE a 3; SELECT 0; MOVE bg0:zset 3; SELECT 3; MOVE bg3:list 0",
    "0: @bg0 -bg0:zset bg3:list; 3: @bg3 -bg3:list a bg0:zset"
)]
#[case::move_fails_when_target_exists(
    "SET a 1; SELECT 3; SET a 2; SELECT 0; =0 MOVE a 3; ! MOVE a 0",
    "0: @bg0 a; 3: @bg3 a"
)]
#[case::move_to_db5(
    "HSET a f v; MOVE a 5; SELECT 0; MOVE bg0:ttl 5",
    "0: @bg0 -bg0:ttl; 3: @bg3; 5: a bg0:ttl"
)]
#[case::copy(
    "SET a 1; =1 COPY a b; COPY bg0:stream s2; COPY bg0:ttl t2",
    "0: @bg0 a b s2 t2; 3: @bg3"
)]
#[case::copy_to_db(
    "HSET a f v; =1 COPY a a DB 3; SELECT 0; =0 COPY bg0:set bg3:set DB 3; =1 COPY bg0:set bg3:list DB 3 REPLACE",
    "0: @bg0 a; 3: @bg3 a"
)]
#[case::copy_replace(
    "SET a 1; RPUSH b x; =0 COPY a b; =1 COPY a b REPLACE; COPY bg0:hash bg0:str REPLACE",
    "0: @bg0 a b; 3: @bg3"
)]
#[case::dump_restore(
    "SET a 1; DUMP a; =OK RESTORE b 0 @last; DUMP bg0:stream; RESTORE s2 0 @last",
    "0: @bg0 a b s2; 3: @bg3"
)]
#[case::restore_replace(
    "HSET a f v; DUMP a; ! RESTORE bg0:str 0 @last; RESTORE bg0:str 0 @last REPLACE",
    "0: @bg0 a; 3: @bg3"
)]
#[case::restore_with_ttl(
    "SET a 1; DUMP a; RESTORE b 100000000 @last; RESTORE c @ms+100000000 @last ABSTTL; RESTORE bg0:list 100000000 @last REPLACE",
    "0: @bg0 a b c; 3: @bg3"
)]
#[case::restore_with_past_ttl(
    "SET a 1; DUMP a; RESTORE bg0:str @ms-1000 @last ABSTTL REPLACE; RESTORE x @ms-1000 @last ABSTTL",
    "0: @bg0 -bg0:str a; 3: @bg3"
)]
#[case::expire_in_the_past_deletes(
    "SET a 1; EXPIRE a 0; PEXPIRE bg0:hash -5; SET b 1 EX 100000; EXPIREAT b 1; PEXPIREAT bg0:ttl 1",
    "0: @bg0 -bg0:hash -bg0:ttl; 3: @bg3"
)]
#[case::getdel_getex(
    "SET a 1; GETDEL a; GETDEL bg0:str; GETEX bg0:ttl PERSIST; ! GETEX bg0:list",
    "0: @bg0 -bg0:str; 3: @bg3"
)]
// Flushes and swaps.
#[case::flushdb("SET a 1; FLUSHDB", "0: ; 3: @bg3")]
#[case::flushdb_async("FLUSHDB ASYNC; SET a 1", "0: a; 3: @bg3")]
#[case::flushdb_other_db("SELECT 3; FLUSHDB SYNC; SET z 1", "0: @bg0; 3: z")]
#[case::flushall("SELECT 3; SET a 1; FLUSHALL; SET b 1", "0: ; 3: b")]
#[case::flushall_async(
    "SELECT 5; SET x 1; FLUSHALL ASYNC; SELECT 0; SET b 1",
    "0: b; 3: ; 5: "
)]
#[case::swapdb("SET a 1; SWAPDB 0 3", "0: @bg3; 3: @bg0 a")]
#[case::swapdb_then_write(
    "SWAPDB 0 3; SET a 1; DEL bg3:str; SELECT 3; DEL bg0:list",
    "0: @bg3 -bg3:str a; 3: @bg0 -bg0:list"
)]
#[case::swapdb_twice("SWAPDB 0 3; SWAPDB 3 0; SET a 1", "0: @bg0 a; 3: @bg3")]
// DEBUG POPULATE fires only "new"; the last key is read when the next event
// arrives: a SWAPDB or FLUSHDB in the same transaction must not misplace it.
#[case::populate_then_swap_in_multi(
    "MULTI; DEBUG POPULATE 3 pp; SWAPDB 0 3; EXEC",
    "0: @bg3; 3: @bg0 pp:0 pp:1 pp:2"
)]
#[case::populate_then_flush_in_multi("MULTI; DEBUG POPULATE 3 pp; FLUSHDB; EXEC", "0: ; 3: @bg3")]
#[case::swapdb_with_empty_db(
    "SWAPDB 0 5; SET a 1; SELECT 5; DEL bg0:str",
    "0: a; 3: @bg3; 5: @bg0 -bg0:str"
)]
// Transactions, scripts, functions.
#[case::multi_exec(
    "MULTI; SET a 1; HSET h f v; DEL bg0:str; RENAME bg0:list l2; SREM bg0:set m; =[OK,1,1,OK,1] EXEC",
    "0: @bg0 -bg0:str -bg0:list -bg0:set a h l2; 3: @bg3"
)]
#[case::multi_select(
    "MULTI; SELECT 3; SET x 1; DEL bg3:str; SELECT 0; SET y 1; EXEC; SET z 1",
    "0: @bg0 y z; 3: @bg3 -bg3:str x"
)]
#[case::multi_runtime_error("MULTI; SET a 1; LPUSH a x; SET b 2; EXEC", "0: @bg0 a b; 3: @bg3")]
#[case::multi_discard("MULTI; SET a 1; DEL bg0:str; DISCARD", "0: @bg0; 3: @bg3")]
#[case::multi_flush_swap(
    "MULTI; SET a 1; SWAPDB 0 3; SET b 1; FLUSHDB; SET c 1; EXEC",
    "0: c; 3: @bg0 a"
)]
#[case::eval_writes(
    "EVAL \"redis.call('SET',KEYS[1],ARGV[1]); redis.call('HSET',KEYS[2],'f',ARGV[1]); redis.call('DEL',KEYS[3]); return 1\" 3 a h bg0:str v",
    "0: @bg0 -bg0:str a h; 3: @bg3"
)]
#[case::eval_select_other_db(
    "EVAL \"redis.call('SELECT','3'); redis.call('SET',KEYS[1],'v'); redis.call('DEL','bg3:hash'); return 1\" 1 k; SET after 1",
    "0: @bg0 after; 3: @bg3 -bg3:hash k"
)]
#[case::eval_rename_move_expire(
    "EVAL \"redis.call('RENAME','bg0:str','r'); redis.call('MOVE','r','3'); redis.call('SELECT','0'); redis.call('SET','t','v','EX','100000'); redis.call('PEXPIRE','bg0:hash','0'); return 1\" 0",
    "0: @bg0 -bg0:str -bg0:hash t; 3: @bg3 r"
)]
#[case::fcall_writes(
    "FUNCTION LOAD REPLACE \"#!lua name=evlib%0Aredis.register_function('setf', function(keys, args) return redis.call('SET', keys[1], args[1]) end)%0Aredis.register_function('delf', function(keys, args) return redis.call('DEL', keys[1]) end)%0Aredis.register_function('hsetf', function(keys, args) return redis.call('HSET', keys[1], 'f', args[1]) end)\"; FCALL setf 1 a v; =1 FCALL delf 1 bg0:hash; FCALL setf 1 bg0:list x; FCALL hsetf 1 h v",
    "0: @bg0 -bg0:hash a h; 3: @bg3"
)]
// Binary-safe names.
#[case::binary_key_names(
    "SET %00 v; SET a%00b v; SET %FF%FE%FD v; SET %0D%0A v; SET \"%20sp ace%20\" v; SET \"\" empty; HSET %00%FF f v; RPUSH *?[ x; DEL a%00b; RENAME %0D%0A x%00y%0D%0A; MOVE %FF%FE%FD 3",
    "0: @bg0 %00 \"%20sp ace%20\" \"\" %00%FF *?[ x%00y%0D%0A; 3: @bg3 %FF%FE%FD"
)]
// Reloads.
#[case::debug_reload(
    "SET a 1 EX 100000; HSET h f v; SELECT 3; RPUSH l x; SELECT 0; DEBUG RELOAD; SELECT 0; DEL bg0:str; SET after 1",
    "0: @bg0 -bg0:str a h after; 3: @bg3 l"
)]
#[case::debug_reload_nosave_forgets_unsaved_writes(
    "SAVE; SET b 1; SELECT 3; DEL bg3:str; SELECT 0; DEBUG RELOAD NOSAVE",
    "0: @bg0; 3: @bg3"
)]
fn index_follows_keyspace(#[case] script: &str, #[case] expect: &str) {
    let expect = parse_expect(expect);
    assert!(
        expect.contains_key(&0) && expect.contains_key(&3),
        "every case states dbs 0 and 3"
    );
    let dbs = dbs_of(&expect);
    let (_server, mut con, mut chk) = server_with_bg();
    assert_index_matches(&mut chk, &dbs);
    if !run_script(&mut con, &mut chk, script, &dbs, true) {
        return;
    }
    assert_keyspace(&mut chk, &expect, script);
    assert_index_matches(&mut chk, &dbs);
    assert_index_sizes(&mut chk, &dbs);
}

// ---------------------------------------------------------------------------
// TTLs: the index must carry each key's final expiry
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Expiry {
    /// The server deletes the key itself (active expire cycle).
    Active,
    /// `DEBUG SET-ACTIVE-EXPIRE 0`: the key stays in memory after its TTL
    /// until something touches it; SNAPSHOT.SCAN must hide it meanwhile.
    Lazy,
}

#[rstest]
#[case::pexpire("SET k v; PEXPIRE k 500", "0: k", "")]
#[case::expire_then_shorter_pexpire("SET k v EX 1000; PEXPIRE k 500", "0: k", "")]
#[case::expireat(
    "SET k v; EXPIREAT k @s+1; SET p v; EXPIREAT p @s+100000",
    "0: k",
    "0: p"
)]
#[case::pexpireat("HSET k f v; PEXPIREAT k @ms+500", "0: k", "")]
#[case::persist(
    "SET p v; PEXPIRE p 500; =1 PERSIST p; RPUSH q a; PEXPIRE q 500; PERSIST q",
    "",
    "0: p q"
)]
#[case::getex_px_and_ex("SET k v; GETEX k PX 500; SET j v; GETEX j EX 1", "0: k j", "")]
#[case::getex_persist("SET p v PX 500; GETEX p PERSIST", "", "0: p")]
#[case::set_px_ex("SET k v PX 500; SET p v EX 100000", "0: k", "0: p")]
#[case::set_clears_ttl("SET p v PX 500; SET p v2", "", "0: p")]
#[case::set_keepttl("SET k v PX 500; SET k v2 KEEPTTL", "0: k", "")]
#[case::setex_psetex("SETEX p 100000 v; PSETEX k 500 v", "0: k", "0: p")]
#[case::set_keepttl_plain_and_over_other_types(
    "SET p v; SET p v2 KEEPTTL; SET n v KEEPTTL; HSET k f v; PEXPIRE k 500; SET k v KEEPTTL; SET j v; PEXPIRE j 500; SET j v2",
    "0: k",
    "0: p n j"
)]
#[case::getdel_removes("SET g v PX 500; GETDEL g; SET p v EX 100000", "", "0: p")]
#[case::expire_options(
    "SET k v; PEXPIRE k 100000; PEXPIRE k 500 LT; SET p v; PEXPIRE p 500; PEXPIRE p 100000 GT; SET n v; =0 PEXPIRE n 500 XX; EXPIRE n 100000 NX",
    "0: k",
    "0: p n"
)]
#[case::rename_carries_ttl("SET a v PX 500; RENAME a k", "0: k", "")]
#[case::move_carries_ttl("SET k v PX 500; MOVE k 3", "3: k", "")]
#[case::copy_carries_ttl("SET a v PX 500; COPY a k DB 3", "0: a; 3: k", "")]
#[case::restore_ttl(
    "SET s v; DUMP s; RESTORE k 500 @last; RESTORE j @ms+500 @last ABSTTL",
    "0: k j",
    "0: s"
)]
#[case::restore_replace_drops_ttl(
    "SET s v; SET p x PX 500; DUMP s; RESTORE p 0 @last REPLACE",
    "",
    "0: s p"
)]
#[case::swapdb_carries_ttl(
    "SELECT 5; SET k v PX 500; SELECT 6; SET j v PX 500; SWAPDB 5 6",
    "5: j; 6: k",
    ""
)]
#[case::aggregate_recreated_without_ttl(
    "RPUSH k a; PEXPIRE k 500; RPUSH p a; PEXPIRE p 500; RPOP p; RPUSH p b",
    "0: k",
    "0: p"
)]
#[case::ttl_in_multi(
    "MULTI; SET k v; PEXPIRE k 500; SET p v PX 500; PERSIST p; EXEC",
    "0: k",
    "0: p"
)]
#[case::ttl_in_lua(
    "EVAL \"redis.call('SET',KEYS[1],'v','PX','500'); redis.call('SET',KEYS[2],'v','PX','500'); redis.call('PERSIST',KEYS[2]); return 1\" 2 k p",
    "0: k",
    "0: p"
)]
fn index_follows_ttl(
    #[case] script: &str,
    #[case] expiring: &str,
    #[case] surviving: &str,
    #[values(Expiry::Active, Expiry::Lazy)] mode: Expiry,
) {
    let expiring = parse_expect(expiring);
    let surviving = parse_expect(surviving);
    let dbs: Vec<u32> = {
        let mut s: BTreeSet<u32> = expiring.keys().chain(surviving.keys()).copied().collect();
        s.extend([0, 3]);
        s.into_iter().collect()
    };
    let (_server, mut con, mut chk) = server_with_bg();
    if let Expiry::Lazy = mode {
        cmd_str(&mut chk, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    }
    assert!(run_script(&mut con, &mut chk, script, &dbs, false));

    // Right after the commands: every key is alive and must be in the
    // snapshot. A short-TTL key is checked only if it provably was still
    // alive after the scan (PEXPIRETIME in the future).
    let mut deadline = 0;
    let mut gone_early: BTreeMap<u32, u64> = BTreeMap::new();
    for &db in &dbs {
        select(&mut chk, db);
        let snap = snap_keys(&mut chk, &[]);
        for k in expiring.get(&db).into_iter().flatten() {
            let at: i64 = redis::cmd("PEXPIRETIME")
                .arg(&k[..])
                .query(&mut chk)
                .unwrap();
            let now = server_ms(&mut chk);
            match at {
                -2 => *gone_early.entry(db).or_default() += 1,
                -1 => panic!(
                    "db {db}: {} has no TTL; the case expects it to expire",
                    show(k)
                ),
                at => {
                    assert!(
                        at <= now + 3000,
                        "db {db}: {} expires at {at}, not within 3 s of {now}",
                        show(k)
                    );
                    assert!(
                        snap.contains(k),
                        "db {db}: {} (alive until {at}) missing from SNAPSHOT.SCAN",
                        show(k)
                    );
                    deadline = deadline.max(at);
                }
            }
        }
        for k in surviving.get(&db).into_iter().flatten() {
            let pttl: i64 = redis::cmd("PTTL").arg(&k[..]).query(&mut chk).unwrap();
            assert!(
                pttl == -1 || pttl > 60_000,
                "db {db}: {} has PTTL {pttl}; the case expects it to survive",
                show(k)
            );
            assert!(
                snap.contains(k),
                "db {db}: {} missing from SNAPSHOT.SCAN",
                show(k)
            );
        }
    }
    select(&mut chk, 0);
    if !gone_early.is_empty() {
        eprintln!("machine too slow: keys expired before they were inspected: {gone_early:?}");
    }
    wait_until("the server clock to pass the last expiry", WAIT, || {
        server_ms(&mut chk) > deadline
    });

    // What every db must hold once the short TTLs passed.
    let alive: BTreeMap<u32, Keys> = dbs
        .iter()
        .map(|&db| {
            let mut k: Keys = surviving.get(&db).cloned().unwrap_or_default();
            if db == 0 || db == 3 {
                k.extend(bg_keys(db));
            }
            (db, k)
        })
        .collect();
    let pending = |db: u32| -> u64 {
        expiring.get(&db).map_or(0, |s| s.len() as u64) - gone_early.get(&db).copied().unwrap_or(0)
    };

    match mode {
        Expiry::Lazy => {
            for &db in &dbs {
                // SNAPSHOT.SCAN first: nothing has touched the expired keys.
                select(&mut chk, db);
                let snap = snap_keys(&mut chk, &[]);
                assert_eq!(
                    snap,
                    alive[&db],
                    "db {db}: SNAPSHOT.SCAN after the TTLs passed (before any deletion)\n{}",
                    describe_diff("vs expectation", &snap, &alive[&db])
                );
                let size = dbsize_in(&mut chk, db);
                assert_eq!(
                    size,
                    alive[&db].len() as u64 + pending(db),
                    "db {db}: the server should still hold the logically expired keys"
                );
            }
            assert_index_matches(&mut chk, &dbs);
            // Touch the keys: lazy expiry deletes them and notifies.
            for (&db, keys) in &expiring {
                select(&mut chk, db);
                for k in keys {
                    let n: i64 = redis::cmd("EXISTS").arg(&k[..]).query(&mut chk).unwrap();
                    assert_eq!(n, 0, "db {db}: {} should be expired", show(k));
                }
            }
            select(&mut chk, 0);
        }
        Expiry::Active => {
            for &db in &dbs {
                let want = alive[&db].len() as u64;
                wait_until(&format!("active expiry in db {db}"), WAIT, || {
                    dbsize_in(&mut chk, db) == want
                });
            }
        }
    }
    assert_keyspace(&mut chk, &alive, script);
    assert_index_matches(&mut chk, &dbs);
    assert_index_sizes(&mut chk, &dbs);
}

/// Runs `script` (hash field TTLs of 100 ms) on a server with hash field
/// expiry (Redis >= 7.4, Valkey >= 9.0), waits until active expiry leaves
/// the dbs with the expected sizes, then compares. False if unsupported.
fn hash_field_expiry_case(script: &str, expect: &str, fields: &[(u32, &str, u64)]) -> bool {
    let (_server, mut con, mut chk) = server_with_bg();
    if !has_command(&mut con, "HPEXPIRE") {
        eprintln!("{}: no hash field expiry, skipped", Server::server_name());
        return false;
    }
    // No step checks: a field may expire between the two scans.
    assert!(run_script(&mut con, &mut chk, script, &[0, 3], false));
    let expect = parse_expect(expect);
    let (n0, n3) = (expect[&0].len() as u64, expect[&3].len() as u64);
    // Waits for the expiry itself: DBSIZE (keys) and HLEN (fields) do not
    // expire anything lazily.
    wait_until("active field expiry", WAIT, || {
        dbsize_in(&mut chk, 0) == n0
            && dbsize_in(&mut chk, 3) == n3
            && fields.iter().all(|&(db, key, n)| {
                select(&mut chk, db);
                let len: u64 = query(&mut chk, &["HLEN", key]).unwrap();
                select(&mut chk, 0);
                len == n
            })
    });
    assert_keyspace(&mut chk, &expect, script);
    assert_index_matches(&mut chk, &[0, 3]);
    assert_index_sizes(&mut chk, &[0, 3]);
    true
}

/// When the last field of a hash expires the server deletes the key: the
/// index must drop it.
#[test]
fn hash_field_expiry_of_last_field_deletes_key() {
    hash_field_expiry_case(
        "HSET h f v g w; HPEXPIRE h 100 FIELDS 2 f g; SELECT 3; HSET h3 f v; HPEXPIRE h3 100 FIELDS 1 f; \
         SELECT 0; HSET h2 f v g w",
        "0: @bg0 h2; 3: @bg3",
        &[],
    );
}

/// When some fields of a hash expire the key stays: so must its index entry.
#[test]
fn hash_field_expiry_of_some_fields_keeps_key() {
    hash_field_expiry_case(
        "HSET h2 f v g w; HPEXPIRE h2 100 FIELDS 1 f; SELECT 3; HSET h3 f v g w; HPEXPIRE h3 100 FIELDS 1 g",
        "0: @bg0 h2; 3: @bg3 h3",
        &[(0, "h2", 1), (3, "h3", 1)],
    );
}

// ---------------------------------------------------------------------------
// Eviction, blocking commands, MIGRATE
// ---------------------------------------------------------------------------

#[test]
fn eviction_removes_keys_from_index() {
    let server = Server::start_with(ServerOpts::new().config("maxmemory-policy", "allkeys-random"));
    let mut con = server.client();
    let used = info_section_u64(&mut con, "memory", "used_memory");
    let limit = used + 3 * 1024 * 1024;
    config_set(&mut con, "maxmemory", &limit.to_string());
    let value = "x".repeat(1000);
    let (mut written, mut after_first) = (0u64, 0);
    for batch in 0..400u32 {
        let db = if batch % 2 == 0 { 0 } else { 3 };
        let mut pipe = redis::pipe();
        pipe.cmd("SELECT").arg(db).ignore();
        for i in 0..100 {
            let k = format!("ev:{batch}:{i}");
            match i % 10 {
                0 => pipe.cmd("HSET").arg(&k).arg("f").arg(&value).ignore(),
                1 => pipe.cmd("RPUSH").arg(&k).arg(&value).ignore(),
                _ => pipe.cmd("SET").arg(&k).arg(&value).ignore(),
            };
            written += 1;
        }
        pipe.cmd("SELECT").arg(0).ignore();
        let _: () = pipe
            .query(&mut con)
            .unwrap_or_else(|e| panic!("batch {batch}: {e}"));
        if info_section_u64(&mut con, "stats", "evicted_keys") > 0 {
            after_first += 1;
            if after_first > 10 {
                break;
            }
        }
    }
    // No more evictions (the server may keep evicting in a timer while over the limit).
    config_set(&mut con, "maxmemory", "0");
    let evicted = info_section_u64(&mut con, "stats", "evicted_keys");
    assert!(evicted > 0, "no eviction after {written} writes");
    let held = dbsize_in(&mut con, 0) + dbsize_in(&mut con, 3);
    assert!(
        held < written,
        "{held} keys held of {written} written, but {evicted} evicted"
    );
    assert_index_matches(&mut con, &[0, 3]);
    assert_index_sizes(&mut con, &[0, 3]);
}

#[test]
fn blocked_pop_served_by_push_in_other_db() {
    let (server, mut con, mut chk) = server_with_bg();
    let mut blocked = server.client();
    select(&mut blocked, 3);
    let waiter = std::thread::spawn(move || {
        let got: Option<String> = query(
            &mut blocked,
            &["BLMOVE", "src", "dst", "LEFT", "RIGHT", "5"],
        )
        .expect("BLMOVE");
        let got2: Option<Vec<String>> =
            query(&mut blocked, &["BZPOPMIN", "z", "5"]).expect("BZPOPMIN");
        (got, got2)
    });
    wait_until("the client to block", WAIT, || {
        info_section_u64(&mut chk, "clients", "blocked_clients") == 1
    });
    select(&mut con, 3);
    let _: i64 = query(&mut con, &["RPUSH", "src", "x"]).unwrap();
    wait_until("the second block", WAIT, || {
        info_section_u64(&mut chk, "clients", "blocked_clients") == 1 && dbsize_in(&mut chk, 3) == 8
    });
    let _: i64 = query(&mut con, &["ZADD", "z", "1", "m"]).unwrap();
    let (got, got2) = waiter.join().unwrap();
    assert_eq!(got.as_deref(), Some("x"));
    assert_eq!(got2.map(|v| v[1].clone()).as_deref(), Some("m"));
    assert_keyspace(
        &mut chk,
        &parse_expect("0: @bg0; 3: @bg3 dst"),
        "blocked pops",
    );
    assert_index_matches(&mut chk, &[0, 3]);
    assert_index_sizes(&mut chk, &[0, 3]);
}

#[test]
fn migrate_moves_keys_between_servers() {
    let (src, mut s, _) = server_with_bg();
    let (dst, mut d, _) = server_with_bg();
    let port = dst.port().to_string();
    let p = port.as_str();
    let script = format!(
        "SET a 1; HSET h f v; RPUSH l x; SET t v EX 100000; \
         MIGRATE 127.0.0.1 {p} a 0 5000; \
         MIGRATE 127.0.0.1 {p} \"\" 3 5000 KEYS h l; \
         MIGRATE 127.0.0.1 {p} t 0 5000 COPY; \
         MIGRATE 127.0.0.1 {p} \"\" 3 5000 COPY REPLACE KEYS bg0:zset bg0:str; \
         ! MIGRATE 127.0.0.1 {p} bg0:list 0 5000 COPY; \
         MIGRATE 127.0.0.1 {p} bg0:list 0 5000 REPLACE"
    );
    let mut chk = src.client();
    assert!(run_script(&mut s, &mut chk, &script, &[0, 3], true));

    assert_keyspace(
        &mut chk,
        &parse_expect("0: @bg0 -bg0:list t; 3: @bg3"),
        "MIGRATE source",
    );
    assert_index_matches(&mut chk, &[0, 3]);
    assert_index_sizes(&mut chk, &[0, 3]);
    assert_keyspace(
        &mut d,
        &parse_expect("0: @bg0 a t; 3: @bg3 h l bg0:zset bg0:str"),
        "MIGRATE destination",
    );
    assert_index_matches(&mut d, &[0, 3]);
    assert_index_sizes(&mut d, &[0, 3]);
}

// ---------------------------------------------------------------------------
// Persistence: restart from RDB
// ---------------------------------------------------------------------------

#[test]
fn restart_from_rdb_rebuilds_index() {
    let mut server = Server::start();
    let mut con = server.client();
    write_bg(&mut con, 0);
    write_bg(&mut con, 3);
    let script =
        "SET %00bin%FF v; HSET h f v; SET t v EX 100000; SELECT 7; SADD s m; SELECT 0; DEL bg0:str";
    let mut chk = server.client();
    assert!(run_script(&mut con, &mut chk, script, &[0, 3, 7], false));
    let expect = parse_expect("0: @bg0 -bg0:str %00bin%FF h t; 3: @bg3; 7: s");
    assert_index_matches(&mut chk, &[0, 3, 7]);
    drop((con, chk));

    server.restart();
    let mut con = server.client();
    let mut chk = server.client();
    assert_keyspace(&mut chk, &expect, "after restart");
    assert_index_matches(&mut chk, &[0, 3, 7]);
    assert_index_sizes(&mut chk, &[0, 3, 7]);
    let pttl: i64 = query(&mut chk, &["PTTL", "t"]).unwrap();
    assert!(pttl > 60_000, "TTL lost over the restart: {pttl}");

    // Writes after the restart keep flowing into the rebuilt index.
    let script = "DEL h; SET new 1; SELECT 7; RENAME s s2; MOVE s2 3";
    assert!(run_script(&mut con, &mut chk, script, &[0, 3, 7], true));
    assert_keyspace(
        &mut chk,
        &parse_expect("0: @bg0 -bg0:str %00bin%FF t new; 3: @bg3 s2; 7: "),
        "writes after restart",
    );
    assert_index_sizes(&mut chk, &[0, 3, 7]);
}

// ---------------------------------------------------------------------------
// Keys created without notifications: MODULE LOAD on data, DEBUG POPULATE
// ---------------------------------------------------------------------------

fn backfill_state(con: &mut Connection) -> (bool, u64) {
    let info = cmd_str(con, &["INFO", "snapshot"]);
    let running = info_num(&info, "snapshot_backfill_in_progress") == 1;
    (running, info_num(&info, "snapshot_backfill_runs"))
}

#[test]
fn module_load_backfills_while_writes_continue() {
    let server = Server::start_with(ServerOpts::without_module());
    let mut con = server.client();
    cmd_str(&mut con, &["DEBUG", "POPULATE", "30000", "key", "8"]);
    write_bg(&mut con, 0);
    select(&mut con, 3);
    cmd_str(&mut con, &["DEBUG", "POPULATE", "10000", "k3", "8"]);
    write_bg(&mut con, 3);

    server
        .module_load(&["backfill-batch", "100"])
        .expect("MODULE LOAD");
    let mut w0 = server.client();
    let mut w3 = server.client();
    select(&mut w3, 3);
    let (mut loading_seen, mut writes_during, mut swapped) = (0, 0, false);
    for i in 0..100_000u32 {
        let before = backfill_state(&mut w0);
        if !before.0 {
            break;
        }
        let _: () = query(&mut w0, &["SET", &format!("new:{i}"), "v"]).unwrap();
        let _: i64 = query(&mut w0, &["DEL", &format!("key:{}", i * 7)]).unwrap();
        let _: i64 = query(&mut w3, &["HSET", &format!("h3:{i}"), "f", "v"]).unwrap();
        let _: i64 = query(&mut w3, &["UNLINK", &format!("k3:{}", i * 3)]).unwrap();
        // Fails with "no such key" once SWAPDB moved the key:* names to db 3.
        let _ = query::<Value>(
            &mut w0,
            &["RENAME", &format!("key:{}", i * 7 + 1), &format!("ren:{i}")],
        );
        if i == 2 && !swapped {
            cmd_str(&mut w0, &["SWAPDB", "0", "3"]);
            swapped = true;
        }
        writes_during += 1;
        // Pacing, not synchronisation: on a 2-core machine a tight client
        // loop preempts the backfill thread while it holds the server lock,
        // and the lock-hold figure would measure the scheduler.
        std::thread::sleep(Duration::from_millis(1));
        let reply = query::<Value>(&mut w0, &["SNAPSHOT.SCAN", "0", "COUNT", "1"]);
        let after = backfill_state(&mut w0);
        match &reply {
            Err(e) if is_loading(e) => {
                assert!(
                    e.to_string().contains("snapscan is building its index"),
                    "LOADING text: {e}"
                );
                loading_seen += 1;
            }
            Err(e) => panic!("SNAPSHOT.SCAN during backfill: {e}"),
            Ok(v) => assert!(
                !(before.0 && after.0 && before.1 == after.1),
                "SNAPSHOT.SCAN answered {v:?} while backfill run {} was in progress",
                before.1
            ),
        }
    }
    wait_until("the backfill to finish", WAIT, || {
        !backfill_state(&mut w0).0
    });
    let runs = info_u64(&mut con, "snapshot_backfill_runs");
    let hold = info_u64(&mut con, "snapshot_backfill_longest_lock_hold_us");
    eprintln!(
        "{}: {writes_during} write rounds during the backfill, LOADING seen {loading_seen} times, \
         {runs} runs, longest lock hold {hold} us",
        Server::server_name()
    );
    assert!(runs >= 1, "snapshot_backfill_runs={runs}");
    assert!(hold < 50_000, "backfill held the server lock for {hold} us");
    assert_index_matches(&mut con, &[0, 3]);
    assert_index_sizes(&mut con, &[0, 3]);
    // And the rebuilt index keeps following writes.
    let script = "DEL key:100 key:101; SET fresh 1; SELECT 3; FLUSHDB; SET z 1";
    assert!(run_script(&mut w0, &mut con, script, &[0, 3], true));
    assert_index_sizes(&mut con, &[0, 3]);
}

#[test]
fn debug_populate_triggers_rebuild() {
    let (_server, mut con, mut chk) = server_with_bg();
    cmd_str(&mut con, &["DEBUG", "POPULATE", "20000", "pop", "8"]);
    let loading = wait_not_loading(&mut chk);
    assert_index_matches(&mut chk, &[0, 3]);
    assert_index_sizes(&mut chk, &[0, 3]);
    select(&mut con, 3);
    // The second one restarts the running rebuild; it skips the 5000 names
    // that exist and adds 3000.
    cmd_str(&mut con, &["DEBUG", "POPULATE", "5000", "p3", "8"]);
    cmd_str(&mut con, &["DEBUG", "POPULATE", "8000", "p3", "8"]);
    let loading2 = wait_not_loading(&mut chk);
    eprintln!(
        "{}: LOADING seen {loading} + {loading2} times",
        Server::server_name()
    );
    assert_eq!(dbsize_in(&mut chk, 0), 20_007);
    assert_eq!(dbsize_in(&mut chk, 3), 8_007);
    assert_index_matches(&mut chk, &[0, 3]);
    assert_index_sizes(&mut chk, &[0, 3]);
}

/// BUG: a DEBUG POPULATE queued in MULTI triggers the rebuild when it is
/// queued (the command filter sees it then), the rebuild finishes before
/// EXEC, and the keys EXEC creates never reach the index.
#[test]
fn debug_populate_inside_multi() {
    let (_server, mut con, mut chk) = server_with_bg();
    cmd_str(&mut con, &["MULTI"]);
    cmd_str(&mut con, &["DEBUG", "POPULATE", "100", "pm", "8"]);
    wait_until("the queued-time rebuild to end", WAIT, || {
        !backfill_state(&mut chk).0
    });
    let _: Value = query(&mut con, &["EXEC"]).unwrap();
    wait_not_loading(&mut chk);
    assert_eq!(dbsize_in(&mut chk, 0), 107);
    assert_index_matches(&mut chk, &[0, 3]);
    assert_index_sizes(&mut chk, &[0, 3]);
}

/// BUG: `DEBUG RELOAD NOSAVE NOFLUSH MERGE` loads the RDB over the live
/// dataset; the loading-start event empties the index, but keys written
/// after the last SAVE stay in the server and never come back.
#[test]
fn debug_reload_noflush_merge() {
    let (_server, mut con, mut chk) = server_with_bg();
    let script = "SAVE; SET unsaved 1; SELECT 3; SET unsaved3 1; SELECT 0; DEBUG RELOAD NOSAVE NOFLUSH MERGE";
    assert!(run_script(&mut con, &mut chk, script, &[0, 3], false));
    assert_keyspace(
        &mut chk,
        &parse_expect("0: @bg0 unsaved; 3: @bg3 unsaved3"),
        script,
    );
    assert_index_matches(&mut chk, &[0, 3]);
    assert_index_sizes(&mut chk, &[0, 3]);
}

// ---------------------------------------------------------------------------
// Replication
// ---------------------------------------------------------------------------

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

#[test]
fn replica_index_follows_primary() {
    let (primary, mut p, mut pchk) = server_with_bg();
    let script = "SET a 1 EX 100000; HSET h f v; SELECT 3; RPUSH l x; SET %00%FF v";
    assert!(run_script(&mut p, &mut pchk, script, &[0, 3], false));
    let replica = Server::start_with(ServerOpts::new().replica_of(primary.port()));
    let mut r = replica.client();
    let dbs = [0, 3, 5];
    wait_until("the replica to sync", WAIT, || {
        let info = cmd_str(&mut r, &["INFO", "replication"]);
        info_field(&info, "master_link_status").as_deref() == Some("up")
            && dbs
                .iter()
                .all(|&db| dbsize_in(&mut r, db) == dbsize_in(&mut pchk, db))
    });
    let _ = wait_not_loading(&mut r);
    assert_replica_matches(&mut pchk, &mut r, &dbs, "after full sync");
    assert_index_sizes(&mut r, &dbs);

    // More changes on the primary, streamed to the replica.
    select(&mut p, 0);
    let script = "DEL h; SET b 2; RENAME a a2; \
                  SET short v PX 100; HSET short2 f v; PEXPIRE short2 100; \
                  SWAPDB 0 3; SELECT 3; UNLINK bg0:list; SELECT 5; SET bg5 v EX 100000; HSET c f v; \
                  MULTI; SET m 1; DEL c; SET m2 1; EXEC; \
                  EVAL \"redis.call('SET',KEYS[1],'v'); redis.call('DEL',KEYS[2]); return 1\" 2 lua m2";
    // No step checks: the 100 ms keys may expire between the two scans.
    assert!(run_script(&mut p, &mut pchk, script, &dbs, false));
    // The short TTLs pass and the primary's active expiry deletes the keys
    // (replicated as DEL).
    wait_until("active expiry on the primary", WAIT, || {
        dbsize_in(&mut pchk, 3) == 8
    });
    wait_until("the replica to catch up", WAIT, || {
        repl_offset(&mut r) == repl_offset(&mut pchk)
            && dbs
                .iter()
                .all(|&db| dbsize_in(&mut r, db) == dbsize_in(&mut pchk, db))
    });
    assert_keyspace(
        &mut r,
        &parse_expect("0: @bg3 l %00%FF; 3: @bg0 -bg0:list a2 b; 5: bg5 m lua"),
        "replica after changes",
    );
    assert_replica_matches(&mut pchk, &mut r, &dbs, "after more writes");
    assert_index_sizes(&mut r, &dbs);
}

// ---------------------------------------------------------------------------
// Commands that change a key in another db than the caller's
// ---------------------------------------------------------------------------

fn client_db(con: &mut Connection) -> u32 {
    let info = cmd_str(con, &["CLIENT", "INFO"]);
    info.split_whitespace()
        .find_map(|f| f.strip_prefix("db="))
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("no db= in CLIENT INFO: {info}"))
}

/// A command that writes a key in another db (MOVE, COPY ... DB, a script's
/// MOVE, DEBUG RELOAD loading keys of db 3) must leave the caller's selected
/// db alone; the table cases re-SELECT after such commands so that they test
/// the index on every server.
///
/// Valkey 8.1 selects the event's db on the calling client before it calls a
/// module subscribed to keyspace events (valkey-io/valkey#4024); snapscan
/// selects the caller's db back (src/ffi/clientdb.rs).
#[rstest]
#[case::move_("SET a 1; MOVE a 3", "0: @bg0 marker; 3: @bg3 a")]
#[case::copy_db("SET a 1; COPY a a DB 3", "0: @bg0 a marker; 3: @bg3 a")]
#[case::eval_move(
    "SET a 1; EVAL \"redis.call('MOVE','a','3'); return redis.call('SET','inscript','1')\" 0",
    "0: @bg0 inscript marker; 3: @bg3 a"
)]
#[case::debug_reload(
    "SELECT 3; SET a 1; SELECT 0; DEBUG RELOAD",
    "0: @bg0 marker; 3: @bg3 a"
)]
fn client_db_survives_cross_db_notifications(#[case] script: &str, #[case] expect: &str) {
    let (_server, mut con, mut chk) = server_with_bg();
    assert!(run_script(&mut con, &mut chk, script, &[0, 3], true));
    assert_eq!(client_db(&mut con), 0, "{script}: the client left db 0");
    let _: () = query(&mut con, &["SET", "marker", "1"]).unwrap();
    assert_keyspace(&mut chk, &parse_expect(expect), script);
    assert_index_matches(&mut chk, &[0, 3]);
}

/// MOVE / COPY ... DB inside MULTI/EXEC: the index must record the key in
/// the target db.
#[rstest]
#[case::move_("SET a 1; MULTI; MOVE a 3; EXEC", "0: @bg0; 3: @bg3 a")]
#[case::copy_db("SET a 1; MULTI; COPY a b DB 3; EXEC", "0: @bg0 a; 3: @bg3 b")]
#[case::move_then_write(
    "MULTI; SET a 1; MOVE a 3; SET b 1; MOVE bg3:str 0; EXEC",
    "0: @bg0 b; 3: @bg3 a"
)]
fn multi_exec_cross_db_commands(#[case] script: &str, #[case] expect: &str) {
    let expect = parse_expect(expect);
    let (_server, mut con, mut chk) = server_with_bg();
    assert!(run_script(&mut con, &mut chk, script, &[0, 3], true));
    assert_keyspace(&mut chk, &expect, script);
    assert_index_sizes(&mut chk, &[0, 3]);
}

/// A replica applies MOVE / COPY ... DB from the replication stream; its
/// keyspace and index must equal the primary's.
#[test]
fn replica_follows_cross_db_commands() {
    let (primary, mut p, mut pchk) = server_with_bg();
    let replica = Server::start_with(ServerOpts::new().replica_of(primary.port()));
    let mut r = replica.client();
    let dbs = [0, 3, 5];
    wait_until("the replica to sync", WAIT, || {
        let info = cmd_str(&mut r, &["INFO", "replication"]);
        info_field(&info, "master_link_status").as_deref() == Some("up")
    });
    let script =
        "SET x 1; MOVE x 5; SELECT 0; SET y 1; COPY y z DB 3; SELECT 0; SET w 1; DEL bg0:str";
    assert!(run_script(&mut p, &mut pchk, script, &dbs, true));
    let expect = parse_expect("0: @bg0 -bg0:str y w; 3: @bg3 z; 5: x");
    assert_keyspace(&mut pchk, &expect, "primary");
    wait_until("the replica to catch up", WAIT, || {
        repl_offset(&mut r) == repl_offset(&mut pchk)
    });
    assert_keyspace(&mut r, &expect, "replica");
    assert_replica_matches(&mut pchk, &mut r, &dbs, "after cross-db writes");
}
