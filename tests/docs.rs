//! Server conventions: `COMMAND DOCS` / `COMMAND INFO` describe every command
//! fully (summary, since, complexity, arguments, tips, key specs, arity), and
//! main-thread slices that reach `latency-monitor-threshold` show up in
//! `LATENCY LATEST` / `LATENCY HISTORY` as `snapshot-*` events.

mod common;
use common::*;

use redis::{Connection, Value};
use rstest::rstest;
use std::time::Duration;

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        other => panic!("not a string: {other:?}"),
    }
}

fn items(v: &Value) -> &[Value] {
    match v {
        Value::Array(a) | Value::Set(a) => a,
        other => panic!("not an array: {other:?}"),
    }
}

/// A flat `key, value, ...` reply as pairs.
fn pairs(v: &Value) -> Vec<(String, &Value)> {
    items(v)
        .chunks(2)
        .map(|kv| (text(&kv[0]), &kv[1]))
        .collect()
}

fn field<'a>(kv: &'a [(String, &'a Value)], name: &str) -> Option<&'a Value> {
    kv.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
}

/// (name, type, token, optional)
type ArgDoc = (&'static str, &'static str, Option<&'static str>, bool);

const CURSOR: ArgDoc = ("cursor", "integer", None, false);
const MATCH: ArgDoc = ("pattern", "pattern", Some("MATCH"), true);
const COUNT: ArgDoc = ("count", "integer", Some("COUNT"), true);
const TYPE: ArgDoc = ("type", "string", Some("TYPE"), true);
const KEY: ArgDoc = ("key", "key", None, false);

#[rstest]
#[case::scan("snapshot.scan", -2, &["nondeterministic_output", "request_policy:special", "response_policy:special"], false,
    &[CURSOR, MATCH, COUNT, TYPE])]
#[case::hscan("snapshot.hscan", -3, &["nondeterministic_output"], true,
    &[KEY, CURSOR, MATCH, COUNT, ("novalues", "pure-token", Some("NOVALUES"), true)])]
#[case::sscan("snapshot.sscan", -3, &["nondeterministic_output"], true, &[KEY, CURSOR, MATCH, COUNT])]
#[case::zscan("snapshot.zscan", -3, &["nondeterministic_output"], true,
    &[KEY, CURSOR, MATCH, COUNT, ("noscores", "pure-token", Some("NOSCORES"), true)])]
#[case::unlink("snapshot.unlink", -2, &["request_policy:all_shards", "response_policy:agg_sum"], false,
    &[("pattern", "pattern", None, false), TYPE, ("dryrun", "pure-token", Some("DRYRUN"), true)])]
fn command_docs_and_info_are_complete(
    #[case] name: &str,
    #[case] arity: i64,
    #[case] tips: &[&str],
    #[case] has_key: bool,
    #[case] args: &[ArgDoc],
) {
    let server = Server::start();
    let mut con = server.client();
    let info: Value = query(&mut con, &["COMMAND", "INFO", name]).unwrap();
    let docs: Value = query(&mut con, &["COMMAND", "DOCS", name]).unwrap();
    let entry = &items(&info)[0];
    if *entry == Value::Nil {
        // Not in this build (documented ahead of the command): nothing is
        // claimed about it either.
        assert!(
            items(&docs).is_empty(),
            "docs of a missing command: {docs:?}"
        );
        return;
    }

    // COMMAND DOCS: [name, {summary, since, group, complexity, module, arguments}]
    let d = items(&docs);
    assert_eq!(text(&d[0]), name);
    let kv = pairs(&d[1]);
    let get = |k: &str| field(&kv, k).map(text).unwrap_or_default();
    assert!(get("summary").contains("point-in-time"), "{kv:?}");
    assert_eq!(get("since"), "0.1.0");
    assert_eq!(get("group"), "module");
    assert_eq!(get("module"), "snapshot");
    assert!(get("complexity").starts_with("O("), "{kv:?}");
    let arguments = field(&kv, "arguments").expect("arguments");
    assert_eq!(items(arguments).len(), args.len(), "{arguments:?}");
    for (a, want) in items(arguments).iter().zip(args) {
        let a = pairs(a);
        let get = |k: &str| field(&a, k).map(text);
        assert_eq!(get("name").as_deref(), Some(want.0), "{a:?}");
        assert_eq!(get("type").as_deref(), Some(want.1), "{a:?}");
        assert_eq!(get("token").as_deref(), want.2, "{a:?}");
        let flags: Vec<String> = field(&a, "flags")
            .map(|f| items(f).iter().map(text).collect())
            .unwrap_or_default();
        assert_eq!(flags.iter().any(|f| f == "optional"), want.3, "{a:?}");
        assert!(
            get("summary").is_some_and(|s| !s.is_empty()),
            "argument summary: {a:?}"
        );
    }

    // COMMAND INFO: [name, arity, flags, first, last, step, acl, tips, key specs, subcommands]
    let e = items(entry);
    assert_eq!(e[1], Value::Int(arity), "arity");
    let got_tips: Vec<String> = items(&e[7]).iter().map(text).collect();
    assert_eq!(got_tips, tips);
    let specs = items(&e[8]);
    assert_eq!(specs.len(), usize::from(has_key), "key specs {specs:?}");
    if has_key {
        let spec = pairs(&specs[0]);
        let flags: Vec<String> = items(field(&spec, "flags").unwrap())
            .iter()
            .map(text)
            .collect();
        assert_eq!(flags, ["RO", "access"]);
        let keys: Vec<String> = query(&mut con, &["COMMAND", "GETKEYS", name, "k1", "0"]).unwrap();
        assert_eq!(keys, ["k1"]);
    }
}

// ------------------------------------------------------------------ LATENCY

/// Names of the events in LATENCY LATEST.
fn latency_events(con: &mut Connection) -> Vec<String> {
    let v: Value = query(con, &["LATENCY", "LATEST"]).unwrap();
    items(&v).iter().map(|e| text(&items(e)[0])).collect()
}

fn snapshot_events(con: &mut Connection) -> Vec<String> {
    let mut v: Vec<String> = latency_events(con)
        .into_iter()
        .filter(|e| e.starts_with("snapshot-"))
        .collect();
    v.sort();
    v
}

/// The index build after MODULE LOAD on a populated server runs in slices of
/// about 1 ms: with a threshold of 1 ms they are reported.
#[test]
fn index_build_slices_are_latency_events() {
    let server = Server::start_with(ServerOpts::without_module());
    let mut con = server.client();
    config_set(&mut con, "latency-monitor-threshold", "1");
    cmd_str(&mut con, &["DEBUG", "POPULATE", "200000", "k", "8"]);
    server.module_load(&["backfill-batch", "1000000"]).unwrap();
    wait_until("the index build", Duration::from_secs(60), || {
        let info = cmd_str(&mut con, &["INFO", "snapshot"]);
        info_field(&info, "snapshot_backfill_in_progress").as_deref() == Some("0")
    });
    assert!(
        snapshot_events(&mut con).contains(&"snapshot-backfill".to_string()),
        "LATENCY LATEST: {:?}",
        latency_events(&mut con)
    );
    let history: Vec<Vec<i64>> =
        query(&mut con, &["LATENCY", "HISTORY", "snapshot-backfill"]).unwrap();
    assert!(
        !history.is_empty() && history.iter().all(|s| s[1] >= 1),
        "{history:?}"
    );
}

/// Nothing is reported while the monitor is off (threshold 0, the default);
/// a CONFIG SET of the threshold takes effect at once: an inline walk (in
/// MULTI) and a hash copied in one go are then reported.
#[test]
fn inline_walks_and_copies_follow_the_threshold() {
    let server = Server::start();
    let mut con = server.client();
    cmd_str(&mut con, &["DEBUG", "POPULATE", "100000", "k", "8"]);
    let _: Value = query(
        &mut con,
        &[
            "EVAL",
            "for i = 1, 100000 do redis.call('HSET', KEYS[1], 'field:' .. i, i) end",
            "1",
            "big",
        ],
    )
    .unwrap();
    let run = |con: &mut Connection| {
        // A changed hash is copied again (an unchanged one is shared).
        let _: i64 = query(con, &["HINCRBY", "big", "changes", "1"]).unwrap();
        let mut p = redis::pipe();
        p.atomic()
            .cmd("SNAPSHOT.SCAN")
            .arg("0")
            .arg("COUNT")
            .arg("100000")
            .cmd("SNAPSHOT.HSCAN")
            .arg("big")
            .arg("0");
        let replies: Vec<Value> = p.query(con).unwrap();
        assert_eq!(replies.len(), 2);
    };
    run(&mut con);
    assert_eq!(snapshot_events(&mut con), Vec::<String>::new());
    config_set(&mut con, "latency-monitor-threshold", "1");
    run(&mut con);
    assert_eq!(
        snapshot_events(&mut con),
        ["snapshot-copy", "snapshot-inline"]
    );
    // And back off.
    cmd_str(&mut con, &["LATENCY", "RESET"]);
    config_set(&mut con, "latency-monitor-threshold", "0");
    run(&mut con);
    assert_eq!(snapshot_events(&mut con), Vec::<String>::new());
}
