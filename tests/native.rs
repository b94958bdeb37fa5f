//! `snapshot.serve-native`: SCAN, KEYS, HSCAN, SSCAN, ZSCAN answered from
//! snapshots through the module's command filter, one test per sentence of
//! the README's "Serving the native commands" contract.
//!
//! Ground truth is the native command on the same quiet database, with the
//! mode off (`CONFIG SET snapshot.serve-native none`).
mod common;

use common::cluster::{node_opts, Cluster};
use common::*;
use redis::Connection;
use rstest::rstest;
use std::collections::BTreeSet;

const ISSUED: u64 = 1 << 52;

fn server_with(mode: &str) -> Server {
    Server::start_with(ServerOpts::new().module_args(&["serve-native", mode]))
}

fn set_mode(con: &mut Connection, mode: &str) {
    let _: () = query(con, &["CONFIG", "SET", "snapshot.serve-native", mode]).unwrap();
}

fn mode(con: &mut Connection) -> String {
    let v: Vec<String> = query(con, &["CONFIG", "GET", "snapshot.serve-native"]).unwrap();
    v.get(1).cloned().unwrap_or_default()
}

fn fill(con: &mut Connection, prefix: &str, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut c = redis::cmd("MSET");
        for i in chunk {
            c.arg(format!("{prefix}{i:06}")).arg(i);
        }
        let _: () = c.query(con).unwrap();
    }
}

/// `SCAN` from 0 to the end; the keys (set) and the number of calls.
fn scan_all(con: &mut Connection, extra: &[&str]) -> (BTreeSet<Vec<u8>>, usize, Vec<u64>) {
    let (mut cursor, mut keys, mut calls, mut cursors) =
        ("0".to_string(), BTreeSet::new(), 0, vec![]);
    loop {
        let (next, page): (String, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(&cursor)
            .arg(extra)
            .query(con)
            .unwrap_or_else(|e| panic!("SCAN {cursor} {extra:?}: {e}"));
        calls += 1;
        keys.extend(page);
        let n: u64 = next.parse().expect("decimal cursor");
        assert!(n < 1 << 63, "cursor {n} at or above 2^63");
        cursors.push(n);
        if next == "0" {
            return (keys, calls, cursors);
        }
        assert!(calls < 1_000_000, "SCAN did not end");
        cursor = next;
    }
}

/// Goes on with `SCAN cursor COUNT 100` to cursor 0 (bounded): the keys
/// returned.
fn scan_from(con: &mut Connection, cursor: String) -> BTreeSet<Vec<u8>> {
    let (mut cursor, mut keys, mut calls) = (cursor, BTreeSet::new(), 0);
    while cursor != "0" {
        let (n, p): (String, Vec<Vec<u8>>) =
            query(con, &["SCAN", &cursor, "COUNT", "100"]).unwrap();
        keys.extend(p);
        cursor = n;
        calls += 1;
        assert!(calls < 10_000, "the iteration does not end");
    }
    keys
}

fn served(con: &mut Connection, cmd: &str) -> u64 {
    info_u64(con, &format!("snapshot_native_{cmd}_served"))
}

fn natively(con: &mut Connection, cmd: &str) -> u64 {
    info_u64(con, &format!("snapshot_native_{cmd}_native"))
}

#[rstest]
#[case::none("none", "none")]
#[case::all("all", "all")]
#[case::one("scan", "scan")]
#[case::several("keys scan", "scan keys")]
#[case::any_case("HSCAN zscan", "hscan zscan")]
fn the_mode_is_set_at_load(#[case] given: &str, #[case] shown: &str) {
    let s = server_with(given);
    let mut c = s.client();
    assert_eq!(mode(&mut c), shown);
}

#[test]
fn the_mode_is_off_by_default_and_set_by_config_file_and_config_set() {
    let s = Server::start();
    let mut c = s.client();
    assert_eq!(mode(&mut c), "none");
    set_mode(&mut c, "scan sscan");
    assert_eq!(mode(&mut c), "scan sscan");
    set_mode(&mut c, "all");
    assert_eq!(mode(&mut c), "all");
    let e = query::<()>(&mut c, &["CONFIG", "SET", "snapshot.serve-native", "bogus"])
        .expect_err("refused");
    assert!(err_text(&e).contains("snapshot.serve-native"), "{e}");
    assert_eq!(mode(&mut c), "all");
    set_mode(&mut c, "none");
    assert_eq!(mode(&mut c), "none");
    drop(c);
    let f = Server::start_with(ServerOpts::new().config("snapshot.serve-native", "keys hscan"));
    let mut c = f.client();
    assert_eq!(mode(&mut c), "keys hscan");
    // Served from the start (the command filter registered at load).
    fill(&mut c, "k:", 10);
    let keys: Vec<String> = query(&mut c, &["KEYS", "k:*"]).unwrap();
    assert_eq!(keys.len(), 10);
    assert_eq!(served(&mut c, "keys"), 1);
}

#[test]
fn a_bad_load_argument_refuses_the_load() {
    let s = Server::start_with(ServerOpts::without_module());
    let e = s
        .module_load(&["serve-native", "scan,keys"])
        .expect_err("refused");
    assert!(!err_text(&e).is_empty());
    assert!(
        s.log_tail(50).contains("serve-native"),
        "{}",
        s.log_tail(50)
    );
}

#[test]
fn scan_is_served_from_snapshots_with_the_native_key_set() {
    let s = Server::start();
    let mut c = s.client();
    fill(&mut c, "k:", 3000);
    fill(&mut c, "other:", 500);
    let (native, _, native_cursors) = scan_all(&mut c, &["COUNT", "10"]);
    assert!(native_cursors.iter().all(|&n| n < ISSUED));
    let (native_m, _, _) = scan_all(&mut c, &["MATCH", "k:*1*", "COUNT", "10"]);
    let before = info_u64(&mut c, "snapshot_scans_served");
    set_mode(&mut c, "scan");
    let (got, calls, cursors) = scan_all(&mut c, &["COUNT", "10"]);
    assert_eq!(got, native);
    // Bigger pages than COUNT: fewer round trips than the native loop.
    assert!(calls <= 3500 / 100 + 1, "{calls} calls");
    assert!(cursors[..cursors.len() - 1].iter().all(|&n| n >= ISSUED));
    let (got_m, _, _) = scan_all(&mut c, &["MATCH", "k:*1*", "COUNT", "10"]);
    assert_eq!(got_m, native_m);
    assert!(served(&mut c, "scan") >= calls as u64);
    assert!(info_u64(&mut c, "snapshot_scans_served") >= before + calls as u64);
}

/// Item 2: a cursor sent again returns the same page, and either next
/// cursor goes on to the end.
#[test]
fn a_cursor_sent_again_returns_the_same_page() {
    let s = server_with("scan");
    let mut c = s.client();
    fill(&mut c, "k:", 1000);
    let (all, _, _) = scan_all(&mut c, &[]);
    let (c1, first): (String, Vec<Vec<u8>>) = query(&mut c, &["SCAN", "0", "COUNT", "10"]).unwrap();
    let (n1, p1): (String, Vec<Vec<u8>>) = query(&mut c, &["SCAN", &c1, "COUNT", "10"]).unwrap();
    let (n2, p2): (String, Vec<Vec<u8>>) = query(&mut c, &["SCAN", &c1, "COUNT", "10"]).unwrap();
    assert_eq!(p1, p2, "the same page again");
    assert!(!p1.is_empty());
    for next in [n1, n2] {
        let mut keys: BTreeSet<Vec<u8>> = first.iter().chain(&p1).cloned().collect();
        let mut cursor = next;
        while cursor != "0" {
            let (n, p): (String, Vec<Vec<u8>>) = query(&mut c, &["SCAN", &cursor]).unwrap();
            keys.extend(p);
            cursor = n;
        }
        assert_eq!(keys, all);
    }
}

/// Item 3: a cursor snapscan did not issue continues natively.
#[test]
fn a_native_cursor_continues_natively() {
    let s = Server::start();
    let mut c = s.client();
    fill(&mut c, "k:", 2000);
    let (all, _, _) = scan_all(&mut c, &[]);
    let (c1, first): (String, Vec<Vec<u8>>) = query(&mut c, &["SCAN", "0", "COUNT", "10"]).unwrap();
    assert_ne!(c1, "0");
    set_mode(&mut c, "all");
    let before = natively(&mut c, "scan");
    let mut keys: BTreeSet<Vec<u8>> = first.into_iter().collect();
    let mut cursor = c1;
    let mut calls = 0;
    while cursor != "0" {
        let (n, p): (String, Vec<Vec<u8>>) =
            query(&mut c, &["SCAN", &cursor, "COUNT", "10"]).unwrap();
        let v: u64 = n.parse().unwrap();
        assert!(v < ISSUED, "a native iteration stays native: {v}");
        keys.extend(p);
        cursor = n;
        calls += 1;
    }
    assert_eq!(keys, all);
    assert_eq!(natively(&mut c, "scan"), before + calls);
}

/// Item 3: an issued cursor whose iteration is gone (here: never known to
/// this server, as after a restart or a failover; and expired for a client
/// slow on every call) restarts natively at 0: every key comes back, the
/// loop ends, nothing is an error.
#[rstest]
#[case::never_known(false)]
#[case::expired(true)]
fn a_lost_iteration_restarts_natively_and_ends(#[case] expire: bool) {
    let s = server_with("scan");
    let mut c = s.client();
    fill(&mut c, "k:", 1500);
    let (all, _, _) = scan_all(&mut c, &[]);
    let cursor = if expire {
        let _: () = query(
            &mut c,
            &["CONFIG", "SET", "snapshot.cursor-idle-timeout", "1"],
        )
        .unwrap();
        let (c1, _): (String, Vec<Vec<u8>>) = query(&mut c, &["SCAN", "0"]).unwrap();
        let before = info_u64(&mut c, "snapshot_cursors_expired");
        wait_until(
            "the cursor to expire",
            std::time::Duration::from_secs(10),
            || info_u64(&mut c, "snapshot_cursors_expired") > before,
        );
        c1
    } else {
        (ISSUED + 12345).to_string()
    };
    let before = info_u64(&mut c, "snapshot_native_scan_restarted");
    let keys = scan_from(&mut c, cursor);
    assert_eq!(keys, all, "every key that existed throughout");
    assert_eq!(
        info_u64(&mut c, "snapshot_native_scan_restarted"),
        before + 1
    );
}

/// Item 4: inside MULTI/EXEC, Lua and functions the commands behave as
/// native: the same replies as with the mode off, native cursors.
#[test]
fn multi_scripts_and_functions_behave_as_native() {
    let s = Server::start();
    let mut c = s.client();
    fill(&mut c, "k:", 300);
    let _: () = query(&mut c, &["HSET", "h", "f1", "v1", "f2", "v2"]).unwrap();
    let _: () = query(&mut c, &["SADD", "s", "a", "b"]).unwrap();
    let _: () = query(&mut c, &["ZADD", "z", "1", "a"]).unwrap();
    let lib = "#!lua name=nlib\nredis.register_function{function_name='nscan', callback=function(keys, args) return redis.call('SCAN', args[1], 'COUNT', '5') end, flags={'no-writes'}}";
    let _: String = query(&mut c, &["FUNCTION", "LOAD", lib]).unwrap();
    let run = |c: &mut Connection| -> Vec<redis::Value> {
        let mut out = Vec::new();
        let mut p = redis::pipe();
        p.atomic()
            .cmd("SCAN")
            .arg("0")
            .arg("COUNT")
            .arg("5")
            .cmd("KEYS")
            .arg("k:00001*")
            .cmd("HSCAN")
            .arg("h")
            .arg("0")
            .cmd("SSCAN")
            .arg("s")
            .arg("0")
            .cmd("ZSCAN")
            .arg("z")
            .arg("0");
        let v: Vec<redis::Value> = p.query(c).unwrap();
        out.extend(v);
        let e: redis::Value = query(
            c,
            &[
                "EVAL",
                "return redis.call('SCAN', ARGV[1], 'COUNT', '5')",
                "0",
                "0",
            ],
        )
        .unwrap();
        out.push(e);
        let e: redis::Value =
            query(c, &["EVAL", "return redis.call('KEYS', 'k:00002*')", "0"]).unwrap();
        out.push(e);
        let f: redis::Value = query(c, &["FCALL", "nscan", "0", "0"]).unwrap();
        out.push(f);
        out
    };
    // The same replies; the order inside a page may differ between two
    // native calls (bucket chains), so pages compare as sets.
    fn norm(v: &redis::Value) -> redis::Value {
        match v {
            redis::Value::Array(a) if a.len() == 2 && matches!(a[1], redis::Value::Array(_)) => {
                redis::Value::Array(vec![a[0].clone(), norm(&a[1])])
            }
            redis::Value::Array(a) => {
                let mut a = a.clone();
                a.sort_by_key(|x| format!("{x:?}"));
                redis::Value::Array(a)
            }
            other => other.clone(),
        }
    }
    let native: Vec<redis::Value> = run(&mut c).iter().map(norm).collect();
    set_mode(&mut c, "all");
    let got: Vec<redis::Value> = run(&mut c).iter().map(norm).collect();
    assert_eq!(got, native);
    for v in &got {
        if let redis::Value::Array(a) = v {
            if let Some(redis::Value::BulkString(cur)) = a.first() {
                let n: u64 = String::from_utf8_lossy(cur).parse().unwrap_or(0);
                assert!(n < ISSUED, "a native cursor: {n}");
            }
        }
    }
}

/// Where the filter knows the client (Redis 7.2+, Valkey), a script's,
/// a function's and a MULTI's SCAN are left alone by it, also after a
/// served SCAN blocked the client: Valkey 9 runs scripts on pooled
/// temporary clients, one of which then keeps the caller's id, so the
/// filter once took a script's call for its caller's and routed it (the
/// module command ran SCAN natively: right reply, but counted in
/// `snapshot_native_scan_native` and `cmdstat_snapshot.native-scan`).
#[test]
fn scripts_and_multi_after_a_served_call_are_left_alone() {
    let s = Server::start();
    if !filter_knows_the_client(&s) {
        return;
    }
    let mut c = s.client();
    let mut other = s.client();
    fill(&mut c, "k:", 1000);
    let lib = "#!lua name=nlib\nredis.register_function{function_name='nscan', callback=function(keys, args) return redis.call('SCAN', args[1], 'COUNT', '5') end, flags={'no-writes'}}";
    let _: String = query(&mut c, &["FUNCTION", "LOAD", lib]).unwrap();
    // Every served page blocks its client (no page is small enough to be
    // answered inline).
    let _: () = query(&mut c, &["CONFIG", "SET", "snapshot.inline-entries", "0"]).unwrap();
    set_mode(&mut c, "all");
    fn routed_calls(c: &mut Connection) -> u64 {
        let stats = cmd_str(c, &["INFO", "commandstats"]);
        info_field(&stats, "cmdstat_snapshot.native-scan")
            .and_then(|v| v.strip_prefix("calls=")?.split(',').next()?.parse().ok())
            .unwrap_or(0)
    }
    type Call = fn(&mut Connection) -> redis::Value;
    let calls: [(&str, Call); 3] = [
        ("EVAL", |c| {
            query(
                c,
                &["EVAL", "return redis.call('SCAN', '0', 'COUNT', '5')", "0"],
            )
            .unwrap()
        }),
        ("FCALL", |c| {
            query(c, &["FCALL", "nscan", "0", "0"]).unwrap()
        }),
        ("MULTI", |c| {
            let mut p = redis::pipe();
            p.atomic().cmd("SCAN").arg("0").arg("COUNT").arg("5");
            p.query(c).unwrap()
        }),
    ];
    for (what, call) in calls {
        for on_other in [false, true] {
            let before = served(&mut c, "scan");
            let _: (String, Vec<String>) = query(&mut c, &["SCAN", "0", "COUNT", "5"]).unwrap();
            assert_eq!(served(&mut c, "scan"), before + 1, "the SCAN before {what}");
            let (served0, native0, routed0) = (
                served(&mut c, "scan"),
                natively(&mut c, "scan"),
                routed_calls(&mut c),
            );
            let con = if on_other { &mut other } else { &mut c };
            let v = call(con);
            assert!(matches!(v, redis::Value::Array(_)), "{what}: {v:?}");
            assert_eq!(
                served(&mut c, "scan"),
                served0,
                "{what} (other: {on_other})"
            );
            assert_eq!(
                natively(&mut c, "scan"),
                native0,
                "{what} routed (other client: {on_other})"
            );
            assert_eq!(
                routed_calls(&mut c),
                routed0,
                "{what} routed (other client: {on_other})"
            );
        }
    }
}

/// Whether the server tells a command filter which client runs the
/// command (Redis 7.2+, Valkey): ACL decisions are then taken per user.
fn filter_knows_the_client(s: &Server) -> bool {
    s.is_valkey() || s.version() >= (7, 2, 0)
}

fn login(s: &Server, user: &str) -> Connection {
    let mut c = s.client();
    let _: () = query(&mut c, &["AUTH", user, "pw"]).unwrap();
    c
}

/// Item 5: ACL. A user who may run the native command gets it, served
/// from a snapshot when its categories allow the module command (which has
/// the native command's), natively otherwise; a user who may not gets the
/// native NOPERM; key permissions apply as natively.
#[test]
fn acl_permissions_are_the_native_commands() {
    let s = server_with("all");
    let mut c = s.client();
    fill(&mut c, "k:", 200);
    let _: () = query(&mut c, &["HSET", "secret:h", "f", "v"]).unwrap();
    for (user, rules) in [
        ("cat", &["+@keyspace", "+@read", "~*"][..]),
        ("only", &["+scan", "+keys", "+hscan", "~*"][..]),
        ("none", &["+get", "~*"][..]),
        ("keyed", &["+@read", "+@keyspace", "%R~k:*"][..]),
    ] {
        let mut args = vec!["ACL", "SETUSER", user, "on", ">pw", "+info", "+config|set"];
        args.extend_from_slice(rules);
        let _: () = query(&mut c, &args).unwrap();
    }
    let (all, _, _) = scan_all(&mut c, &[]);
    let knows = filter_knows_the_client(&s);

    // Served from a snapshot, without any SNAPSHOT.* permission.
    let mut cat = login(&s, "cat");
    if knows {
        let before = served(&mut c, "scan");
        assert_eq!(scan_all(&mut cat, &[]).0, all);
        assert!(served(&mut c, "scan") > before);
        let _: Vec<String> = query(&mut cat, &["KEYS", "k:*"]).unwrap();
    } else {
        // Redis 7.0: module commands have no ACL categories and the filter
        // cannot tell the user: the module command's own NOPERM.
        let e = expect_err(&mut cat, &["SCAN", "0"]);
        assert!(
            e.contains("NOPERM") && e.contains("snapshot.native-scan"),
            "{e}"
        );
    }

    // Allowed the native commands by name only: native behaviour (the
    // filter leaves the call alone), never an error.
    let mut only = login(&s, "only");
    if knows {
        let before = natively(&mut c, "scan") + served(&mut c, "scan");
        assert_eq!(scan_all(&mut only, &[]).0, all);
        assert_eq!(
            natively(&mut c, "scan") + served(&mut c, "scan"),
            before,
            "left to SCAN itself"
        );
        let mut keys: Vec<String> = query(&mut only, &["KEYS", "k:00000*"]).unwrap();
        keys.sort();
        assert_eq!(keys.len(), 10);
    }

    // Not allowed: the native NOPERM, naming the native command.
    let mut none = login(&s, "none");
    for (args, name) in [
        (&["SCAN", "0"][..], "scan"),
        (&["KEYS", "*"][..], "keys"),
        (&["HSCAN", "secret:h", "0"][..], "hscan"),
    ] {
        let e = expect_err(&mut none, args);
        assert!(e.starts_with("NOPERM"), "{args:?}: {e}");
        if knows {
            assert!(e.to_lowercase().contains(name), "{args:?}: {e}");
            assert!(!e.contains("snapshot."), "{args:?}: {e}");
        }
    }

    // Key permissions: as natively.
    if knows {
        let mut keyed = login(&s, "keyed");
        let e = expect_err(&mut keyed, &["HSCAN", "secret:h", "0"]);
        set_mode(&mut c, "none");
        let native_e = expect_err(&mut keyed, &["HSCAN", "secret:h", "0"]);
        assert_eq!(e, native_e);
        assert!(e.starts_with("NOPERM"), "{e}");
    }
}

/// The ACL LOG entries about `object` (the command or key refused), newest
/// first: their `reason` fields.
fn acl_log_reasons(con: &mut Connection, object: &str) -> Vec<String> {
    let entries: Vec<redis::Value> = query(con, &["ACL", "LOG"]).unwrap();
    entries
        .into_iter()
        .map(common::cluster::reply_fields)
        .filter(|m| m.get("object").map(String::as_str) == Some(object))
        .filter_map(|m| m.get("reason").cloned())
        .collect()
}

/// The ACL LOG's entries, the fields a refusal decides (not its time, id
/// or client description).
fn acl_log_entries(con: &mut Connection) -> Vec<Vec<(String, String)>> {
    let entries: Vec<redis::Value> = query(con, &["ACL", "LOG"]).unwrap();
    entries
        .into_iter()
        .map(common::cluster::reply_fields)
        .map(|m| {
            ["count", "reason", "context", "object", "username"]
                .iter()
                .filter_map(|f| m.get(*f).map(|v| (f.to_string(), v.clone())))
                .collect()
        })
        .collect()
}

/// Issue 26, item 1: a user allowed everything but the native command
/// (`+@all -keys -scan -hscan`, a common hardening rule) is refused it
/// exactly as natively, mode on or off: the same NOPERM, and an ACL LOG
/// entry naming the native command. Nothing is served.
#[test]
fn a_user_denied_the_native_command_gets_its_noperm_and_acl_log_entry() {
    let s = server_with("all");
    let mut c = s.client();
    fill(&mut c, "k:", 50);
    let _: () = query(&mut c, &["HSET", "h", "f", "v"]).unwrap();
    let rules = [
        "ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all", "-keys", "-scan", "-hscan",
    ];
    let _: () = query(&mut c, &rules).unwrap();
    let calls: [(&[&str], &str); 3] = [
        (&["KEYS", "*"], "keys"),
        (&["SCAN", "0"], "scan"),
        (&["HSCAN", "h", "0"], "hscan"),
    ];
    let mut served_errors = vec![];
    for (args, name) in calls {
        let _: () = query(&mut c, &["ACL", "LOG", "RESET"]).unwrap();
        let before = served(&mut c, name);
        let e = expect_err(&mut login(&s, "app"), args);
        assert!(e.starts_with("NOPERM"), "{args:?}: {e}");
        assert!(e.to_lowercase().contains(name), "{args:?}: {e}");
        assert!(!e.contains("snapshot."), "{args:?}: {e}");
        assert_eq!(served(&mut c, name), before, "{args:?}: nothing served");
        let reasons = acl_log_reasons(&mut c, name);
        assert_eq!(reasons, ["command"], "{args:?}: the ACL LOG entry");
        served_errors.push((e, acl_log_entries(&mut c)));
    }
    set_mode(&mut c, "none");
    for ((args, _), (e, log)) in calls.iter().zip(&served_errors) {
        let _: () = query(&mut c, &["ACL", "LOG", "RESET"]).unwrap();
        assert_eq!(
            &expect_err(&mut login(&s, "app"), args),
            e,
            "{args:?}: as natively"
        );
        // (Redis 7.0: the module logs it, context `module`, README.)
        let strip = |l: &[Vec<(String, String)>]| -> Vec<Vec<(String, String)>> {
            l.iter()
                .map(|e| {
                    e.iter()
                        .filter(|(f, _)| filter_knows_the_client(&s) || f != "context")
                        .cloned()
                        .collect()
                })
                .collect()
        };
        assert_eq!(
            strip(&acl_log_entries(&mut c)),
            strip(log),
            "{args:?}: the ACL LOG entry as natively"
        );
    }
}

/// Issue 26, item 2: a command renamed or removed by `rename-command` is
/// never served: its old name stays unknown, its new name runs natively.
#[test]
fn renamed_commands_are_never_routed() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("renames.conf");
    std::fs::write(
        &conf,
        "rename-command KEYS \"\"\nrename-command SCAN myscan\n",
    )
    .unwrap();
    let s = Server::start_with(
        ServerOpts::new()
            .module_args(&["serve-native", "all"])
            .config_file(&conf),
    );
    let mut c = s.client();
    fill(&mut c, "k:", 300);
    let e = expect_err(&mut c, &["KEYS", "*"]);
    assert!(e.contains("unknown command"), "{e}");
    let e = expect_err(&mut c, &["SCAN", "0"]);
    assert!(e.contains("unknown command"), "{e}");
    // The new name is the native command: native cursors, nothing served.
    let before = served(&mut c, "scan") + natively(&mut c, "scan");
    let mut cursor = "0".to_string();
    let mut keys = BTreeSet::new();
    loop {
        let (next, page): (String, Vec<Vec<u8>>) =
            query(&mut c, &["MYSCAN", &cursor, "COUNT", "50"]).unwrap();
        assert!(
            next.parse::<u64>().unwrap() < ISSUED,
            "a native cursor: {next}"
        );
        keys.extend(page);
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(keys.len(), 300);
    assert_eq!(
        served(&mut c, "scan") + natively(&mut c, "scan"),
        before,
        "never routed"
    );
    // HSCAN, not renamed, is still served.
    let _: () = query(&mut c, &["HSET", "h", "f", "v"]).unwrap();
    let _: (String, Vec<String>) = query(&mut c, &["HSCAN", "h", "0"]).unwrap();
}

/// Issue 26, item 7: an option the server's own command lacks (no Redis
/// has `ZSCAN ... NOSCORES`, Redis 7.0 no `HSCAN ... NOVALUES`) gets the
/// native error whatever the collection's size; where the server has it,
/// both sizes are answered, as natively.
#[test]
fn options_the_server_lacks_get_the_native_error_at_every_size() {
    let s = server_with("all");
    let mut c = s.client();
    for (key, n) in [("big", 300), ("small", 5)] {
        populate(&mut c, "ZADD", &format!("z:{key}"), n, |i| {
            vec![i.to_string(), format!("m{i}")]
        });
        populate(&mut c, "HSET", &format!("h:{key}"), n, |i| {
            vec![format!("f{i}"), "v".to_string()]
        });
    }
    let outcome = |c: &mut Connection, args: &[&str]| -> Result<usize, String> {
        query::<(String, Vec<String>)>(c, args)
            .map(|(_, items)| items.len().min(1))
            .map_err(|e| err_text(&e))
    };
    let calls: Vec<Vec<String>> = ["big", "small"]
        .iter()
        .flat_map(|k| {
            [
                vec![
                    "ZSCAN".to_string(),
                    format!("z:{k}"),
                    "0".into(),
                    "NOSCORES".into(),
                ],
                vec![
                    "HSCAN".to_string(),
                    format!("h:{k}"),
                    "0".into(),
                    "NOVALUES".into(),
                ],
            ]
        })
        .collect();
    let with_mode: Vec<_> = calls
        .iter()
        .map(|a| outcome(&mut c, &a.iter().map(String::as_str).collect::<Vec<_>>()))
        .collect();
    set_mode(&mut c, "none");
    for (a, got) in calls.iter().zip(with_mode) {
        let args: Vec<&str> = a.iter().map(String::as_str).collect();
        let native = outcome(&mut c, &args);
        assert_eq!(
            got, native,
            "{args:?}: served (left) against native (right)"
        );
    }
    // Where the server has NOSCORES (Valkey), a big ZSCAN ... NOSCORES is served.
    if s.is_valkey() {
        set_mode(&mut c, "all");
        let before = served(&mut c, "zscan");
        let _: (String, Vec<String>) = query(&mut c, &["ZSCAN", "z:big", "0", "NOSCORES"]).unwrap();
        assert!(served(&mut c, "zscan") > before);
    }
}

/// Issue 26, item 9: "answered natively when it comes back whole in one
/// call" follows the server's own limits: raised, a 2,000-field listpack
/// hash (or intset, listpack zset) is answered by the native command in one
/// call; lowered, a 300-field hash table is served from a snapshot (at most
/// 128 elements are answered natively whatever the encoding).
#[test]
fn compact_collections_follow_the_servers_limits() {
    let s = server_with("all");
    let mut c = s.client();
    for (name, v) in [
        ("hash-max-listpack-entries", "4096"),
        ("set-max-intset-entries", "4096"),
        ("zset-max-listpack-entries", "4096"),
    ] {
        config_set(&mut c, name, v);
    }
    populate(&mut c, "HSET", "h", 2000, |i| {
        vec![format!("f{i}"), "v".into()]
    });
    populate(&mut c, "SADD", "s", 2000, |i| vec![i.to_string()]);
    populate(&mut c, "ZADD", "z", 2000, |i| {
        vec![i.to_string(), format!("m{i}")]
    });
    for (cmd, key, per) in [("HSCAN", "h", 2), ("SSCAN", "s", 1), ("ZSCAN", "z", 2)] {
        let name = cmd.to_lowercase();
        let (n0, s0) = (natively(&mut c, &name), served(&mut c, &name));
        let (cursor, items): (String, Vec<Vec<u8>>) = query(&mut c, &[cmd, key, "0"]).unwrap();
        assert_eq!(
            (cursor.as_str(), items.len()),
            ("0", 2000 * per),
            "{cmd}: whole in one call"
        );
        assert_eq!(natively(&mut c, &name), n0 + 1, "{cmd}: answered natively");
        assert_eq!(served(&mut c, &name), s0, "{cmd}: not served");
    }
    config_set(&mut c, "hash-max-listpack-entries", "16");
    populate(&mut c, "HSET", "big", 300, |i| {
        vec![format!("f{i}"), "v".into()]
    });
    let before = served(&mut c, "hscan");
    let (cursor, items): (String, Vec<Vec<u8>>) = query(&mut c, &["HSCAN", "big", "0"]).unwrap();
    assert_eq!((cursor.as_str(), items.len()), ("0", 600));
    assert_eq!(
        served(&mut c, "hscan"),
        before + 1,
        "a 300-field hash table is served"
    );
}

/// KEYS is served from a snapshot: the native reply's key set.
#[test]
fn keys_is_served_from_a_snapshot() {
    let s = Server::start();
    let mut c = s.client();
    fill(&mut c, "k:", 5000);
    fill(&mut c, "x:", 100);
    let mut native: Vec<Vec<u8>> = query(&mut c, &["KEYS", "k:*1*"]).unwrap();
    native.sort();
    let mut direct: Vec<Vec<u8>> = query(&mut c, &["SNAPSHOT.KEYS", "k:*1*"]).unwrap();
    direct.sort();
    assert_eq!(direct, native);
    set_mode(&mut c, "keys");
    let before = served(&mut c, "keys");
    let mut got: Vec<Vec<u8>> = query(&mut c, &["KEYS", "k:*1*"]).unwrap();
    got.sort();
    assert_eq!(got, native);
    let mut every: Vec<Vec<u8>> = query(&mut c, &["KEYS", "*"]).unwrap();
    every.sort();
    assert_eq!(every.len(), 5100);
    assert_eq!(served(&mut c, "keys"), before + 2);
    // Arity errors are the native command's.
    let e = expect_err(&mut c, &["KEYS"]);
    assert!(e.contains("'keys'"), "{e}");
    let e = expect_err(&mut c, &["KEYS", "a", "b"]);
    assert!(e.contains("'keys'"), "{e}");
}

fn coll_all(con: &mut Connection, cmd: &str, key: &str, extra: &[&str]) -> (Vec<Vec<u8>>, usize) {
    let (mut cursor, mut out, mut calls) = ("0".to_string(), Vec::new(), 0);
    loop {
        let (next, page): (String, Vec<Vec<u8>>) = redis::cmd(cmd)
            .arg(key)
            .arg(&cursor)
            .arg(extra)
            .query(con)
            .unwrap_or_else(|e| panic!("{cmd} {key} {cursor}: {e}"));
        calls += 1;
        out.extend(page);
        assert!(next.parse::<u64>().unwrap() < 1 << 63);
        if next == "0" {
            return (out, calls);
        }
        assert!(calls < 100_000);
        cursor = next;
    }
}

/// Pairs (or single elements) of a collection reply, sorted.
fn elements(flat: &[Vec<u8>], pairs: bool) -> Vec<Vec<Vec<u8>>> {
    let step = if pairs { 2 } else { 1 };
    let mut v: Vec<Vec<Vec<u8>>> = flat.chunks(step).map(<[Vec<u8>]>::to_vec).collect();
    v.sort();
    v.dedup();
    v
}

/// HSCAN, SSCAN, ZSCAN: a large collection is served from a snapshot with
/// the native elements, in fewer calls than natively; a small one comes
/// back whole at cursor 0, natively; a cursor sent again gets its page.
#[rstest]
#[case::hscan("hscan", &[][..], true)]
#[case::hscan_novalues("hscan", &["NOVALUES"][..], false)]
#[case::sscan("sscan", &[][..], false)]
#[case::zscan("zscan", &[][..], true)]
fn collections_are_served_from_snapshots(
    #[case] cmd: &str,
    #[case] extra: &[&str],
    #[case] pairs: bool,
) {
    let s = Server::start();
    let mut c = s.client();
    if extra.contains(&"NOVALUES") && !s.is_valkey() && s.version() < (7, 4, 0) {
        return; // HSCAN NOVALUES came with Redis 7.4 / Valkey 8.
    }
    for (key, n) in [("big", 3000), ("small", 50)] {
        for i in 0..n {
            let m = format!("m{i:05}");
            let _: () = match cmd {
                "hscan" => query(&mut c, &["HSET", key, &m, "v"]),
                "sscan" => query(&mut c, &["SADD", key, &m]),
                _ => query(&mut c, &["ZADD", key, &i.to_string(), &m]),
            }
            .unwrap();
        }
    }
    let mut extra10 = extra.to_vec();
    extra10.extend(["COUNT", "10"]);
    let (native_big, native_calls) = coll_all(&mut c, cmd, "big", &extra10);
    let (native_small, native_small_calls) = coll_all(&mut c, cmd, "small", &extra10);
    set_mode(&mut c, "all");
    let before = served(&mut c, cmd);
    let scans_before = info_u64(&mut c, "snapshot_scans_served");
    let (big, calls) = coll_all(&mut c, cmd, "big", &extra10);
    assert_eq!(elements(&big, pairs), elements(&native_big, pairs));
    assert_eq!(elements(&big, pairs).len(), 3000);
    assert!(
        calls < native_calls,
        "{calls} calls, natively {native_calls}"
    );
    assert!(served(&mut c, cmd) >= before + calls as u64);
    assert!(info_u64(&mut c, "snapshot_scans_served") >= scans_before + calls as u64);
    let nat_before = natively(&mut c, cmd);
    let (small, calls) = coll_all(&mut c, cmd, "small", &extra10);
    assert_eq!(small, native_small);
    // Whole at cursor 0 where the native command answers so (listpack,
    // intset): never more round trips than natively.
    assert_eq!(calls, native_small_calls);
    // Cursor 0 and any native continuation (a hashtable-encoded small set
    // on Redis 7.0) go to the native command.
    assert_eq!(natively(&mut c, cmd), nat_before + calls as u64);
    // Retry.
    let (c1, _): (String, Vec<Vec<u8>>) = redis::cmd(cmd)
        .arg("big")
        .arg("0")
        .arg(extra)
        .query(&mut c)
        .unwrap();
    assert!(c1.parse::<u64>().unwrap() >= ISSUED);
    let a: (String, Vec<Vec<u8>>) = redis::cmd(cmd)
        .arg("big")
        .arg(&c1)
        .arg(extra)
        .query(&mut c)
        .unwrap();
    let b: (String, Vec<Vec<u8>>) = redis::cmd(cmd)
        .arg("big")
        .arg(&c1)
        .arg(extra)
        .query(&mut c)
        .unwrap();
    assert_eq!(a.1, b.1);
    assert!(!a.1.is_empty());
    // Errors are the native ones.
    let _: () = query(&mut c, &["SET", "str", "x"]).unwrap();
    let e = expect_err(&mut c, &[cmd, "str", "0"]);
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    let e = expect_err(&mut c, &[cmd, "big"]);
    assert!(e.contains(&format!("'{cmd}'")), "{e}");
}

/// Item 7: switching the mode at runtime never breaks an iteration in
/// flight: one begun from snapshots goes on from them after the mode is
/// switched off; one begun natively stays native after it is switched on
/// (see `a_native_cursor_continues_natively`).
#[test]
fn switching_the_mode_off_mid_iteration_breaks_nothing() {
    let s = server_with("all");
    let mut c = s.client();
    fill(&mut c, "k:", 2000);
    for i in 0..1000 {
        let _: () = query(&mut c, &["HSET", "h", &format!("f{i}"), "v"]).unwrap();
    }
    let (all, _, _) = scan_all(&mut c, &[]);
    let (c1, first): (String, Vec<Vec<u8>>) = query(&mut c, &["SCAN", "0"]).unwrap();
    let (h1, hfirst): (String, Vec<Vec<u8>>) = query(&mut c, &["HSCAN", "h", "0"]).unwrap();
    assert!(c1.parse::<u64>().unwrap() >= ISSUED);
    assert!(h1.parse::<u64>().unwrap() >= ISSUED);
    set_mode(&mut c, "none");
    let mut keys: BTreeSet<Vec<u8>> = first.into_iter().collect();
    let mut cursor = c1;
    while cursor != "0" {
        let (n, p): (String, Vec<Vec<u8>>) = query(&mut c, &["SCAN", &cursor]).unwrap();
        keys.extend(p);
        cursor = n;
    }
    assert_eq!(keys, all);
    let mut fields: BTreeSet<Vec<u8>> = hfirst.chunks(2).map(|p| p[0].clone()).collect();
    let mut cursor = h1;
    while cursor != "0" {
        let (n, p): (String, Vec<Vec<u8>>) = query(&mut c, &["HSCAN", "h", &cursor]).unwrap();
        fields.extend(p.chunks(2).map(|p| p[0].clone()));
        cursor = n;
    }
    assert_eq!(fields.len(), 1000);
    // With the mode off, a new iteration is native again.
    let (c2, _): (String, Vec<Vec<u8>>) = query(&mut c, &["SCAN", "0"]).unwrap();
    assert!(c2.parse::<u64>().unwrap() < ISSUED);
}

/// Item 7: a cluster client's SCAN loop per node gets exactly each node's
/// keys; a cursor sent to the wrong node restarts there natively.
#[test]
fn cluster_clients_scan_each_node() {
    let cl = Cluster::start_with(3, 0, node_opts().module_args(&["serve-native", "all"]));
    let mut cc = cl.client();
    common::cluster::fill(&mut cc, "k:", 600);
    let mut total = 0;
    for node in &cl.nodes {
        let mut c = node.client();
        let dbsize: usize = query(&mut c, &["DBSIZE"]).unwrap();
        let (keys, _, _) = scan_all(&mut c, &["COUNT", "10"]);
        assert_eq!(keys.len(), dbsize);
        assert!(served(&mut c, "scan") > 0);
        total += keys.len();
    }
    assert_eq!(total, 600);
    // A cursor of node 0 sent to node 1.
    let (c0, _): (String, Vec<Vec<u8>>) =
        query(&mut cl.nodes[0].client(), &["SCAN", "0", "COUNT", "10"]).unwrap();
    let mut c = cl.nodes[1].client();
    let dbsize: usize = query(&mut c, &["DBSIZE"]).unwrap();
    let mut keys = BTreeSet::new();
    let mut cursor = c0;
    while cursor != "0" {
        let (n, p): (String, Vec<Vec<u8>>) = query(&mut c, &["SCAN", &cursor]).unwrap();
        keys.extend(p);
        cursor = n;
    }
    assert_eq!(keys.len(), dbsize);
}

/// Item 6: what operators see. INFO commandstats and SLOWLOG show the
/// module command (`snapshot.native-scan`), MONITOR the rewritten call.
#[test]
fn operators_see_the_module_command() {
    use std::io::{BufRead, BufReader, Write};
    let s = server_with("scan keys");
    let mut c = s.client();
    fill(&mut c, "k:", 300);
    let _: () = query(&mut c, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]).unwrap();
    let _: () = query(&mut c, &["SLOWLOG", "RESET"]).unwrap();
    let _: () = query(&mut c, &["CONFIG", "RESETSTAT"]).unwrap();
    let mut mon = std::net::TcpStream::connect(("127.0.0.1", s.port())).unwrap();
    mon.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    mon.write_all(b"MONITOR\r\n").unwrap();
    let mut lines = BufReader::new(mon.try_clone().unwrap());
    let mut line = String::new();
    lines.read_line(&mut line).unwrap();
    assert!(line.starts_with("+OK"), "{line}");
    let _: (String, Vec<String>) = query(&mut c, &["SCAN", "0", "COUNT", "10"]).unwrap();
    let _: Vec<String> = query(&mut c, &["KEYS", "k:00001*"]).unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        line.clear();
        lines.read_line(&mut line).unwrap();
        if line.contains("\"snapshot.native-") {
            seen.push(line.clone());
        }
        assert!(!line.is_empty(), "MONITOR ended");
    }
    assert!(
        seen[0].contains("\"snapshot.native-scan\" \"0\" \"COUNT\" \"10\""),
        "{seen:?}"
    );
    assert!(
        seen[1].contains("\"snapshot.native-keys\" \"k:00001*\""),
        "{seen:?}"
    );
    let stats = cmd_str(&mut c, &["INFO", "commandstats"]);
    assert!(
        stats.contains("cmdstat_snapshot.native-scan:calls=1,"),
        "{stats}"
    );
    assert!(
        stats.contains("cmdstat_snapshot.native-keys:calls=1,"),
        "{stats}"
    );
    assert!(!stats.contains("cmdstat_scan:"), "{stats}");
    let log: Vec<redis::Value> = query(&mut c, &["SLOWLOG", "GET", "128"]).unwrap();
    let text = format!("{log:?}");
    assert!(text.contains("snapshot.native-scan"), "{text}");
}

/// Item 5: the module commands carry the native commands' ACL categories
/// (where the server lets modules set them: Redis 7.2+, Valkey) and
/// SNAPSHOT.KEYS is documented like the other commands.
#[rstest]
#[case("snapshot.native-scan", "scan")]
#[case("snapshot.native-keys", "keys")]
#[case("snapshot.keys", "keys")]
#[case("snapshot.native-hscan", "hscan")]
#[case("snapshot.native-sscan", "sscan")]
#[case("snapshot.native-zscan", "zscan")]
fn module_commands_have_the_native_acl_categories(#[case] module: &str, #[case] native: &str) {
    let s = Server::start();
    let mut c = s.client();
    let categories = |c: &mut Connection, name: &str| -> Vec<String> {
        let v: Vec<Vec<redis::Value>> = query(c, &["COMMAND", "INFO", name]).unwrap();
        let info = &v[0];
        let mut cats: Vec<String> = match &info[6] {
            redis::Value::Array(a) | redis::Value::Set(a) => a
                .iter()
                .map(|x| redis::from_redis_value::<String>(x).unwrap())
                .collect(),
            other => panic!("{name}: categories {other:?}"),
        };
        cats.sort();
        cats
    };
    let want = categories(&mut c, native);
    if filter_knows_the_client(&s) {
        assert_eq!(categories(&mut c, module), want, "{module}");
    }
    let docs: Vec<redis::Value> = query(&mut c, &["COMMAND", "DOCS", module]).unwrap();
    assert_eq!(docs.len(), 2, "{module} has docs");
}

/// A call that fails after its client was blocked (a large collection
/// whose sliced copy grows past `snapshot.collection-memory-limit` after
/// its first slice) is answered by the native command, as a failure before
/// blocking is: the native elements, native cursors, never a snapscan
/// error; counted as answered natively, not as served.
#[rstest]
#[case::hscan("hscan", true)]
#[case::sscan("sscan", false)]
#[case::zscan("zscan", true)]
fn a_copy_failing_while_the_client_waits_is_answered_natively(
    #[case] cmd: &str,
    #[case] pairs: bool,
) {
    let s = server_with("all");
    let mut c = s.client();
    const N: usize = 5_000;
    for chunk in (0..N).collect::<Vec<_>>().chunks(500) {
        let mut p = redis::pipe();
        for &i in chunk {
            let m = format!("m{i:05}{}", "x".repeat(40));
            match cmd {
                "hscan" => p.cmd("HSET").arg("big").arg(m).arg("v").ignore(),
                "sscan" => p.cmd("SADD").arg("big").arg(m).ignore(),
                _ => p.cmd("ZADD").arg("big").arg(i).arg(m).ignore(),
            };
        }
        let _: () = p.query(&mut c).unwrap();
    }
    // A first slice of 100 elements fits; the whole copy does not.
    config_set(&mut c, "snapshot.hash-copy-batch", "100");
    config_set(&mut c, "snapshot.collection-memory-limit", "65536");
    let snapshot_cmd = format!("SNAPSHOT.{}", cmd.to_uppercase());
    let e = expect_err(&mut c, &[&snapshot_cmd, "big", "0"]);
    assert!(e.contains("snapshot.collection-memory-limit"), "{e}");
    let (nat0, served0) = (natively(&mut c, cmd), served(&mut c, cmd));
    let (got, calls) = coll_all(&mut c, cmd, "big", &["COUNT", "1000"]);
    assert_eq!(elements(&got, pairs).len(), N, "every element, natively");
    assert_eq!(natively(&mut c, cmd), nat0 + calls as u64);
    assert_eq!(served(&mut c, cmd), served0, "none counted as served");
    assert_eq!(info_u64(&mut c, "snapshot_hash_snapshot_bytes"), 0);
    assert_eq!(cmd_str(&mut c, &["PING"]), "PONG");
}

/// How an issued cursor is continued in
/// [`an_issued_cursor_never_reaches_the_native_command`].
#[derive(Clone, Copy, Debug)]
enum Via {
    Eval,
    Function,
    Multi,
    /// A user allowed `scan` by name only: the native command runs.
    ByName,
    /// The mode never on in this server (a restart without the config
    /// line, a replica promoted where it was never set).
    ModeOff,
}

/// Issue 26, item 5: a cursor snapscan issued never reaches the native
/// command as it is (native SCAN reads it as a bucket position and ends
/// having skipped keys, without an error). Inside EVAL, functions and
/// MULTI, for a user allowed the native command by name only, and where
/// the mode is off, the call restarts the iteration at 0: with the first
/// page, every key comes back, and the restart is counted.
#[rstest]
#[case::eval(Via::Eval)]
#[case::function(Via::Function)]
#[case::multi(Via::Multi)]
#[case::by_name(Via::ByName)]
#[case::mode_off(Via::ModeOff)]
fn an_issued_cursor_never_reaches_the_native_command(#[case] via: Via) {
    let mode = if matches!(via, Via::ModeOff) {
        "none"
    } else {
        "all"
    };
    let s = server_with(mode);
    let mut c = s.client();
    let _: () = query(&mut c, &["DEBUG", "POPULATE", "5000"]).unwrap();
    let all: BTreeSet<Vec<u8>> = (0..5000).map(|i| format!("key:{i}").into_bytes()).collect();
    let lib = "#!lua name=ilib\nredis.register_function{function_name='iscan', callback=function(keys, args) return redis.call('SCAN', args[1], 'COUNT', '1000') end, flags={'no-writes'}}";
    let _: String = query(&mut c, &["FUNCTION", "LOAD", lib]).unwrap();
    // The first page, from a snapshot: its cursor is one snapscan issued.
    let first = if matches!(via, Via::ModeOff) {
        "SNAPSHOT.SCAN"
    } else {
        "SCAN"
    };
    let (mut cursor, page): (String, Vec<Vec<u8>>) =
        query(&mut c, &[first, "0", "COUNT", "100"]).unwrap();
    let n: u64 = cursor.parse().unwrap();
    assert!((ISSUED..2 * ISSUED).contains(&n), "an issued cursor: {n}");
    let mut keys: BTreeSet<Vec<u8>> = page.into_iter().collect();
    let mut con = if matches!(via, Via::ByName) {
        let _: () = query(
            &mut c,
            &[
                "ACL", "SETUSER", "byname", "on", ">pw", "~*", "+scan", "+ping",
            ],
        )
        .unwrap();
        login(&s, "byname")
    } else {
        s.client()
    };
    if matches!(via, Via::ByName) && !filter_knows_the_client(&s) {
        // Redis 7.0 checks the user against the module command by name
        // (README, rule 5): refused, nothing runs.
        assert_eq!(
            expect_err(&mut con, &["SCAN", &cursor, "COUNT", "1000"]),
            "NOPERM this user has no permissions to run the 'snapshot.native-scan' command"
        );
        return;
    }
    let restarted = info_u64(&mut c, "snapshot_native_scan_restarted");
    let mut calls = 0;
    while cursor != "0" {
        let (next, page): (String, Vec<Vec<u8>>) = match via {
            Via::Eval => query(
                &mut con,
                &[
                    "EVAL",
                    "return redis.call('SCAN', ARGV[1], 'COUNT', '1000')",
                    "0",
                    &cursor,
                ],
            ),
            Via::Function => query(&mut con, &["FCALL", "iscan", "0", &cursor]),
            Via::Multi => {
                let mut p = redis::pipe();
                p.atomic().cmd("SCAN").arg(&cursor).arg("COUNT").arg("1000");
                p.query::<((String, Vec<Vec<u8>>),)>(&mut con).map(|(r,)| r)
            }
            Via::ByName | Via::ModeOff => query(&mut con, &["SCAN", &cursor, "COUNT", "1000"]),
        }
        .unwrap_or_else(|e| panic!("{via:?} at {cursor}: {e}"));
        let n: u64 = next.parse().unwrap();
        assert!(n < ISSUED, "{via:?}: the native command's cursor: {n}");
        keys.extend(page);
        cursor = next;
        calls += 1;
        assert!(calls < 1_000, "{via:?}: the iteration does not end");
    }
    assert_eq!(keys.len(), all.len(), "{via:?}: every key");
    assert_eq!(keys, all, "{via:?}: every key");
    assert_eq!(
        info_u64(&mut c, "snapshot_native_scan_restarted"),
        restarted + 1,
        "{via:?}: one restart"
    );
}

/// Issue 26, item 5, collections: an HSCAN/SSCAN/ZSCAN cursor snapscan
/// issued, continued inside EVAL, restarts the collection's iteration at
/// 0: every element comes back.
#[rstest]
#[case::hscan("HSCAN", "hscan")]
#[case::sscan("SSCAN", "sscan")]
#[case::zscan("ZSCAN", "zscan")]
fn an_issued_collection_cursor_in_a_script_restarts(#[case] cmd: &str, #[case] name: &str) {
    let s = server_with("all");
    let mut c = s.client();
    for start in (0..3000).step_by(500) {
        let mut w = match cmd {
            "HSCAN" => redis::cmd("HSET"),
            "SSCAN" => redis::cmd("SADD"),
            _ => redis::cmd("ZADD"),
        };
        w.arg("c");
        for i in start..start + 500 {
            match cmd {
                "HSCAN" => w.arg(format!("f{i}")).arg("v"),
                "SSCAN" => w.arg(format!("f{i}")),
                _ => w.arg(i).arg(format!("f{i}")),
            };
        }
        let _: i64 = w.query(&mut c).unwrap();
    }
    let member = |page: &[Vec<u8>]| -> Vec<Vec<u8>> {
        match cmd {
            "SSCAN" => page.to_vec(),
            "HSCAN" => page.iter().step_by(2).cloned().collect(),
            _ => page.iter().step_by(2).cloned().collect(),
        }
    };
    let (mut cursor, page): (String, Vec<Vec<u8>>) =
        query(&mut c, &[cmd, "c", "0", "COUNT", "100"]).unwrap();
    let n: u64 = cursor.parse().unwrap();
    assert!((ISSUED..2 * ISSUED).contains(&n), "an issued cursor: {n}");
    let mut got: BTreeSet<Vec<u8>> = member(&page).into_iter().collect();
    let restarted = info_u64(&mut c, &format!("snapshot_native_{name}_restarted"));
    let script = format!("return redis.call('{cmd}', KEYS[1], ARGV[1], 'COUNT', '1000')");
    let mut calls = 0;
    while cursor != "0" {
        let (next, page): (String, Vec<Vec<u8>>) =
            query(&mut c, &["EVAL", &script, "1", "c", &cursor]).unwrap();
        assert!(next.parse::<u64>().unwrap() < ISSUED);
        got.extend(member(&page));
        cursor = next;
        calls += 1;
        assert!(calls < 1_000, "the iteration does not end");
    }
    let want: BTreeSet<Vec<u8>> = (0..3000).map(|i| format!("f{i}").into_bytes()).collect();
    assert_eq!(got, want);
    assert_eq!(
        info_u64(&mut c, &format!("snapshot_native_{name}_restarted")),
        restarted + 1
    );
}

/// Issue 26, item 8 (as upstream's `SCAN with expired keys` tests): a
/// served SCAN has the server expire the expired keys it passes over, as
/// native SCAN does: with active expiry off, after one full iteration the
/// expired keys are gone from the keyspace (`INFO keyspace`), counted in
/// `expired_keys`, and were never returned. Those MATCH filters out stay;
/// TYPE filters out none on Redis and those of other types on Valkey, as
/// their own SCAN. Pages answered on the main thread (`inline`) and by a
/// worker alike.
#[rstest]
fn a_served_scan_expires_what_it_passes_over(
    #[values("256", "0")] inline_entries: &str,
    #[values(&[][..], &["TYPE", "string"][..], &["MATCH", "key:*"][..])] filter: &[&str],
) {
    let s = server_with("scan");
    let mut c = s.client();
    config_set(&mut c, "snapshot.inline-entries", inline_entries);
    let _: () = query(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]).unwrap();
    let _: () = query(&mut c, &["DEBUG", "POPULATE", "1000"]).unwrap();
    let _: () = query(&mut c, &["SET", "foo", "bar", "PX", "100"]).unwrap();
    let _: () = query(&mut c, &["SET", "zoo", "bar", "PX", "100"]).unwrap();
    let _: i64 = query(&mut c, &["HSET", "hash", "f", "v"]).unwrap();
    let _: i64 = query(&mut c, &["PEXPIRE", "hash", "100"]).unwrap();
    settle_before_the_ttls_pass(&mut c);
    let set_at = server_ms(&mut c);
    wait_until(
        "the three TTLs to pass",
        std::time::Duration::from_secs(5),
        || server_ms(&mut c) > set_at + 101,
    );
    let expired = info_section_u64(&mut c, "stats", "expired_keys");
    let args: Vec<&str> = ["COUNT", "10"].iter().chain(filter).copied().collect();
    let (keys, _, _) = scan_all(&mut c, &args);
    assert_eq!(keys.len(), 1000, "the live keys");
    assert!(!keys.contains(b"foo".as_slice()) && !keys.contains(b"hash".as_slice()));
    assert!(served(&mut c, "scan") > 0, "served");
    let small = info_u64(&mut c, "snapshot_scans_served_small");
    assert_eq!(
        small > 0,
        inline_entries != "0",
        "pages on the main thread: {small}"
    );
    let gone = match filter.first() {
        None => 3,
        Some(&"TYPE") if s.is_valkey() => 2,
        Some(&"TYPE") => 3,
        _ => 0,
    };
    assert_eq!(
        info_section_u64(&mut c, "stats", "expired_keys"),
        expired + gone,
        "expired by the scan with {filter:?}"
    );
    let keyspace: String = query(&mut c, &["INFO", "keyspace"]).unwrap();
    let db0 = info_field(&keyspace, "db0").unwrap_or_default();
    let left = format!("keys={},", 1003 - gone);
    assert!(
        db0.starts_with(&left),
        "INFO keyspace db0: {db0}, want {left}"
    );
}

/// README, rule 8: keyspace statistics and the LRU/LFU touch of HSCAN,
/// SSCAN and ZSCAN answered from a snapshot: the cursor-0 call counts one
/// or two `keyspace_hits` (more on Redis 7.0) and touches the key when the
/// copy is made in one call (not when sliced); its continuations count and
/// touch nothing; a native call (a small collection) counts one and
/// touches. (LFU with `lfu-log-factor 0` and no decay: every touch adds
/// exactly one to `OBJECT FREQ`.)
#[rstest]
#[case::copied_at_once(1_000)]
#[case::sliced(20_000)]
fn keyspace_hits_and_touch_of_a_served_collection_scan(
    #[values("hscan", "sscan", "zscan")] cmd: &str,
    #[case] n: usize,
) {
    let s = server_with(cmd);
    let mut c = s.client();
    config_set(&mut c, "maxmemory-policy", "allkeys-lfu");
    config_set(&mut c, "lfu-log-factor", "0");
    config_set(&mut c, "lfu-decay-time", "0");
    let add = |c: &mut Connection, key: &str, from: usize, to: usize| {
        let mut w = redis::cmd(match cmd {
            "hscan" => "HSET",
            "sscan" => "SADD",
            _ => "ZADD",
        });
        w.arg(key);
        for i in from..to {
            match cmd {
                "hscan" => w.arg(format!("f{i}")).arg("v"),
                "sscan" => w.arg(format!("m{i}")),
                _ => w.arg(i).arg(format!("m{i}")),
            };
        }
        let _: i64 = w.query(c).unwrap();
    };
    for start in (0..n).step_by(1000) {
        add(&mut c, "big", start, start + 1000);
    }
    add(&mut c, "small", 0, 1);
    let hits = |c: &mut Connection| info_section_u64(c, "stats", "keyspace_hits");
    // OBJECT FREQ counts a hit itself: the figures are read as
    // (freq, then hits).
    let freq =
        |c: &mut Connection, key: &str| -> i64 { query(c, &["OBJECT", "FREQ", key]).unwrap() };
    let f0 = freq(&mut c, "big");
    let h0 = hits(&mut c);
    let up = cmd.to_uppercase();
    let (cursor, _): (String, Vec<redis::Value>) =
        query(&mut c, &[&up, "big", "0", "COUNT", "10"]).unwrap();
    let h1 = hits(&mut c);
    // Redis 7.0 counts each slice of a copy too (no NOSTATS for modules);
    // a sorted set is copied by ZSCAN calls (COUNT 1000), each a hit: two
    // or more for 1,000 elements on Redis's dict, as its buckets fall.
    let most = if !filter_knows_the_client(&s) {
        u64::MAX
    } else if cmd == "zscan" {
        1 + (n / 100) as u64
    } else {
        2
    };
    assert!(
        (1..=most).contains(&(h1 - h0)),
        "cursor 0: {} hits",
        h1 - h0
    );
    assert!(served(&mut c, cmd) == 1, "served from a snapshot");
    // Copied in one call: touched (a sorted set once per ZSCAN call of
    // the copy, as it counts hits); sliced: not touched.
    let f1 = freq(&mut c, "big");
    let touches = f1 - f0;
    if n > 1_000 {
        assert_eq!(touches, 0, "a sliced copy touches nothing");
    } else if cmd == "zscan" {
        assert!(
            (1..=1 + (n / 100) as i64).contains(&touches),
            "cursor 0 touched the key {touches} times"
        );
    } else {
        assert_eq!(touches, 1, "cursor 0 touches the key once");
    }
    let h1 = hits(&mut c);
    let _: (String, Vec<redis::Value>) = query(&mut c, &[&up, "big", &cursor]).unwrap();
    assert_eq!(hits(&mut c), h1, "a continuation counts nothing");
    assert_eq!(freq(&mut c, "big"), f1, "a continuation touches nothing");
    let fs = freq(&mut c, "small");
    let h2 = hits(&mut c);
    let _: (String, Vec<redis::Value>) = query(&mut c, &[&up, "small", "0"]).unwrap();
    // (Redis 7.0 counts the module's size check too.)
    let native = if filter_knows_the_client(&s) { 1 } else { 2 };
    assert_eq!(hits(&mut c), h2 + native, "a native call counts one");
    assert_eq!(
        freq(&mut c, "small"),
        fs + 1,
        "a native call touches the key"
    );
}

/// Has the module read the key it left to read (README, Redis 7.0: the key
/// of an `expire` event is re-read once its command is over, and that read
/// expires it if its TTL has passed), before the TTLs just set pass: the
/// tests of what a served call expires count only the call's expiries.
fn settle_before_the_ttls_pass(c: &mut Connection) {
    let info: String = query(c, &["INFO", "snapshot"]).unwrap();
    assert!(
        info.contains("snapshot_index_keys"),
        "INFO snapshot: {info}"
    );
}

/// README, rule 8: a served SCAN expires at most COUNT keys a call, and a
/// served SCAN or KEYS counts no `keyspace_hits`; a served KEYS leaves the
/// expired keys in place (as native KEYS), hidden.
#[test]
fn served_scan_and_keys_count_no_hits_and_keys_expires_nothing() {
    let s = server_with("all");
    let mut c = s.client();
    let _: () = query(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]).unwrap();
    fill(&mut c, "k:", 1000);
    // 300 keys whose TTL passes, before the others in byte order.
    let mut set = redis::pipe();
    for i in 0..300 {
        set.cmd("SET")
            .arg(format!("a:{i:03}"))
            .arg("v")
            .arg("PX")
            .arg(300)
            .ignore();
    }
    let _: () = set.query(&mut c).unwrap();
    settle_before_the_ttls_pass(&mut c);
    let set_at = server_ms(&mut c);
    wait_until(
        "the TTLs to pass",
        std::time::Duration::from_secs(5),
        || server_ms(&mut c) > set_at + 301,
    );
    let hits = |c: &mut Connection| info_section_u64(c, "stats", "keyspace_hits");
    let expired = |c: &mut Connection| info_section_u64(c, "stats", "expired_keys");
    let (h0, e0) = (hits(&mut c), expired(&mut c));
    let keys: Vec<Vec<u8>> = query(&mut c, &["KEYS", "*"]).unwrap();
    assert_eq!(keys.len(), 1000, "KEYS: the live keys");
    assert!(served(&mut c, "keys") > 0, "KEYS served");
    assert_eq!(expired(&mut c), e0, "KEYS expires nothing");
    assert_eq!(
        dbsize(&mut c),
        1300,
        "KEYS leaves the expired keys in place"
    );
    let (next, page): (String, Vec<Vec<u8>>) =
        query(&mut c, &["SCAN", "0", "COUNT", "100"]).unwrap();
    assert!(served(&mut c, "scan") > 0, "SCAN served");
    let first = expired(&mut c) - e0;
    assert!(
        (1..=100).contains(&first),
        "the first page expired {first} keys (at most COUNT)"
    );
    let mut all: BTreeSet<Vec<u8>> = page.into_iter().collect();
    let mut cursor = next;
    while cursor != "0" {
        let (n, p): (String, Vec<Vec<u8>>) =
            query(&mut c, &["SCAN", &cursor, "COUNT", "100"]).unwrap();
        all.extend(p);
        cursor = n;
    }
    assert_eq!(all.len(), 1000, "SCAN: the live keys");
    assert_eq!(expired(&mut c) - e0, 300, "the iteration expired them all");
    assert_eq!(hits(&mut c), h0, "served SCAN and KEYS count no hits");
}

/// Issue 26, item 3: an iteration is bound to the ACL user who opened it.
/// Another user's call with its cursor finds it unknown (SNAPSHOT.SCAN,
/// SNAPSHOT.HSCAN) or restarts natively (a served SCAN); the iteration
/// stays its owner's, who goes on to its end.
#[test]
fn an_iteration_is_bound_to_its_user() {
    let s = server_with("scan");
    let mut c = s.client();
    let _: () = query(&mut c, &["DEBUG", "POPULATE", "3000"]).unwrap();
    let mut w = redis::cmd("HSET");
    w.arg("h");
    for i in 0..3000 {
        w.arg(format!("f{i}")).arg("v");
    }
    let _: i64 = w.query(&mut c).unwrap();
    for u in ["alice", "bob"] {
        let _: () = query(&mut c, &["ACL", "SETUSER", u, "on", ">pw", "~*", "+@all"]).unwrap();
    }
    let mut alice = login(&s, "alice");
    let mut bob = login(&s, "bob");
    // SNAPSHOT.SCAN and SNAPSHOT.HSCAN: unknown to bob, alice goes on.
    for cmd in [&["SNAPSHOT.SCAN"][..], &["SNAPSHOT.HSCAN", "h"][..]] {
        let first: Vec<&str> = cmd.iter().copied().chain(["0", "COUNT", "100"]).collect();
        let (cursor, _): (String, redis::Value) = query(&mut alice, &first).unwrap();
        let again: Vec<&str> = cmd.iter().copied().chain([cursor.as_str()]).collect();
        assert_eq!(
            expect_err(&mut bob, &again),
            unknown_cursor(&cursor),
            "{cmd:?}"
        );
        let (_, _): (String, redis::Value) =
            query(&mut alice, &again).unwrap_or_else(|e| panic!("{cmd:?}: the owner's call: {e}"));
    }
    // A served SCAN: bob's call restarts natively; alice's iteration is
    // still hers, served to its end.
    let (cursor, first): (String, Vec<Vec<u8>>) =
        query(&mut alice, &["SCAN", "0", "COUNT", "100"]).unwrap();
    let restarted = info_u64(&mut c, "snapshot_native_scan_restarted");
    let (next, _): (String, Vec<Vec<u8>>) = query(&mut bob, &["SCAN", &cursor]).unwrap();
    assert!(
        next.parse::<u64>().unwrap() < ISSUED,
        "bob's: a native cursor"
    );
    assert_eq!(
        info_u64(&mut c, "snapshot_native_scan_restarted"),
        restarted + 1
    );
    let mut keys: BTreeSet<Vec<u8>> = first.into_iter().collect();
    let mut cursor = cursor;
    while cursor != "0" {
        let (next, page): (String, Vec<Vec<u8>>) =
            query(&mut alice, &["SCAN", &cursor, "COUNT", "500"]).unwrap();
        let n: u64 = next.parse().unwrap();
        assert!(n == 0 || n >= ISSUED, "alice's: served: {n}");
        keys.extend(page);
        cursor = next;
    }
    assert_eq!(keys.len(), 3001, "alice's iteration, every key once");
}

/// A replica of `primary` (the module loaded, the mode never set there:
/// `CONFIG SET` is not replicated) once it holds the primary's data.
fn synced_replica(primary: &Server) -> Server {
    let replica = Server::start_with(ServerOpts::new().replica_of(primary.port()));
    let (mut p, mut r) = (primary.client(), replica.client());
    wait_until(
        "the replica in sync",
        std::time::Duration::from_secs(20),
        || {
            let pi = cmd_str(&mut p, &["INFO", "replication"]);
            let ri = cmd_str(&mut r, &["INFO", "replication"]);
            // (The primary's view too: FAILOVER wants the replica online.)
            info_field(&ri, "master_link_status").as_deref() == Some("up")
                && info_field(&pi, "master_repl_offset") == info_field(&ri, "slave_repl_offset")
                && pi.contains("state=online")
        },
    );
    replica
}

/// Item 8 (README rule 8): what a served SCAN expires is the server's own
/// expiry, as native SCAN's: an `expired` keyspace event for each key, and
/// the deletion replicated (a replica keeps an expired key until its
/// primary deletes it).
#[test]
fn a_served_scan_expiry_fires_expired_events_and_reaches_the_replica() {
    let s = server_with("scan");
    let mut c = s.client();
    config_set(&mut c, "notify-keyspace-events", "Ex");
    let _: () = query(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]).unwrap();
    fill(&mut c, "k:", 1000);
    let _: () = query(&mut c, &["SET", "foo", "bar", "PX", "1"]).unwrap();
    let _: () = query(&mut c, &["SET", "zoo", "bar", "PX", "1"]).unwrap();
    let _: i64 = query(&mut c, &["HSET", "hash", "f", "v"]).unwrap();
    let _: i64 = query(&mut c, &["PEXPIRE", "hash", "1"]).unwrap();
    let set_at = server_ms(&mut c);
    let replica = synced_replica(&s);
    let mut r = replica.client();
    wait_until(
        "the three TTLs to pass",
        std::time::Duration::from_secs(5),
        || server_ms(&mut c) > set_at + 2,
    );
    assert_eq!(dbsize(&mut r), 1003, "the replica keeps the expired keys");
    let mut sub = s.client();
    let mut ps = sub.as_pubsub();
    ps.subscribe("__keyevent@0__:expired").unwrap();
    ps.set_read_timeout(Some(std::time::Duration::from_millis(200)))
        .unwrap();
    let (keys, _, _) = scan_all(&mut c, &["COUNT", "10"]);
    assert_eq!(keys.len(), 1000, "the live keys");
    assert!(served(&mut c, "scan") > 0, "served");
    let mut events = BTreeSet::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while events.len() < 3 && std::time::Instant::now() < deadline {
        if let Ok(msg) = ps.get_message() {
            events.insert(msg.get_payload::<Vec<u8>>().unwrap());
        }
    }
    let want: BTreeSet<Vec<u8>> = [&b"foo"[..], b"hash", b"zoo"]
        .iter()
        .map(|k| k.to_vec())
        .collect();
    assert_eq!(events, want, "expired events");
    wait_until(
        "the deletions to reach the replica",
        std::time::Duration::from_secs(10),
        || dbsize(&mut r) == 1000,
    );
}

/// Items 3 and 5 (README rule 3) after a real failover: the client goes
/// on with the cursor the old primary issued on the new one, where the mode
/// was never set (a replica's CONFIG SET is its own). The cursor restarts
/// there natively at 0: every key comes back, none skipped, nothing is an
/// error.
#[test]
fn an_iteration_continued_after_a_failover_to_a_node_without_the_mode_restarts() {
    let s = server_with("all");
    let mut c = s.client();
    fill(&mut c, "k:", 3000);
    let (all, _, _) = scan_all(&mut c, &[]);
    let replica = synced_replica(&s);
    let (c1, page): (String, Vec<Vec<u8>>) = query(&mut c, &["SCAN", "0", "COUNT", "100"]).unwrap();
    assert_eq!(
        c1.parse::<u64>().map(|n| n >> 52),
        Ok(1),
        "an issued cursor: {c1}"
    );
    let port = replica.port().to_string();
    let _: () = query(
        &mut c,
        &["FAILOVER", "TO", "127.0.0.1", &port, "TIMEOUT", "10000"],
    )
    .unwrap();
    let mut r = replica.client();
    wait_until(
        "the replica promoted",
        std::time::Duration::from_secs(20),
        || {
            info_field(&cmd_str(&mut r, &["INFO", "replication"]), "role").as_deref()
                == Some("master")
        },
    );
    let mode: Vec<String> = query(&mut r, &["CONFIG", "GET", "snapshot.serve-native"]).unwrap();
    assert_eq!(mode.get(1).map(String::as_str), Some("none"));
    let before = info_u64(&mut r, "snapshot_native_scan_restarted");
    let mut keys: BTreeSet<Vec<u8>> = page.into_iter().collect();
    keys.extend(scan_from(&mut r, c1));
    assert_eq!(keys, all, "every key");
    assert_eq!(
        info_u64(&mut r, "snapshot_native_scan_restarted"),
        before + 1
    );
}

/// Item 3 (README rule 3): an iteration is bound to its database and its
/// key. A served SCAN sent in database 1 with a cursor opened in database
/// 0, or an HSCAN of `h2` with `h1`'s cursor, restarts natively there
/// (counted once) and returns exactly what that database or key holds.
#[test]
fn a_cursor_of_another_database_or_key_restarts_natively() {
    let s = server_with("all");
    let mut c = s.client();
    fill(&mut c, "k:", 1500);
    let (c0, _): (String, Vec<Vec<u8>>) = query(&mut c, &["SCAN", "0", "COUNT", "100"]).unwrap();
    assert_eq!(c0.parse::<u64>().map(|n| n >> 52), Ok(1), "issued: {c0}");
    let _: () = query(&mut c, &["SELECT", "1"]).unwrap();
    fill(&mut c, "d1:", 700);
    let (db1, _, _) = scan_all(&mut c, &[]);
    assert_eq!(db1.len(), 700);
    let before = info_u64(&mut c, "snapshot_native_scan_restarted");
    let keys = scan_from(&mut c, c0);
    assert_eq!(keys, db1, "database 1's keys, exactly");
    assert_eq!(
        info_u64(&mut c, "snapshot_native_scan_restarted"),
        before + 1
    );
    // HSCAN: h1's cursor sent for h2.
    for (key, prefix) in [("h1", "f"), ("h2", "g")] {
        for start in (0..2000).step_by(500) {
            let mut w = redis::cmd("HSET");
            w.arg(key);
            for i in start..start + 500 {
                w.arg(format!("{prefix}{i}")).arg("v");
            }
            let _: i64 = w.query(&mut c).unwrap();
        }
    }
    let (h1c, _): (String, Vec<Vec<u8>>) =
        query(&mut c, &["HSCAN", "h1", "0", "COUNT", "100"]).unwrap();
    assert_eq!(h1c.parse::<u64>().map(|n| n >> 52), Ok(1), "issued: {h1c}");
    let before = info_u64(&mut c, "snapshot_native_hscan_restarted");
    let (mut cursor, mut fields, mut calls) = (h1c, BTreeSet::new(), 0);
    while cursor != "0" {
        let (n, p): (String, Vec<Vec<u8>>) =
            query(&mut c, &["HSCAN", "h2", &cursor, "COUNT", "100"]).unwrap();
        fields.extend(p.into_iter().step_by(2));
        cursor = n;
        calls += 1;
        assert!(calls < 10_000, "the iteration does not end");
    }
    let want: BTreeSet<Vec<u8>> = (0..2000).map(|i| format!("g{i}").into_bytes()).collect();
    assert_eq!(fields, want, "h2's fields, exactly");
    assert_eq!(
        info_u64(&mut c, "snapshot_native_hscan_restarted"),
        before + 1
    );
}

/// Item 5 (README rule 3) across a real restart: the mode was set by
/// `CONFIG SET` only, so the restarted node runs without it; the cursor
/// its previous run issued restarts natively at 0 there: every key comes
/// back, none skipped, nothing is an error.
#[test]
fn an_iteration_continued_after_a_restart_without_the_mode_restarts() {
    let mut s = Server::start();
    let all = {
        let mut c = s.client();
        config_set(&mut c, "snapshot.serve-native", "all");
        fill(&mut c, "k:", 3000);
        scan_all(&mut c, &[]).0
    };
    let (c1, page): (String, Vec<Vec<u8>>) =
        query(&mut s.client(), &["SCAN", "0", "COUNT", "100"]).unwrap();
    assert_eq!(c1.parse::<u64>().map(|n| n >> 52), Ok(1), "issued: {c1}");
    s.restart();
    let mut c = s.client();
    let mode: Vec<String> = query(&mut c, &["CONFIG", "GET", "snapshot.serve-native"]).unwrap();
    assert_eq!(mode.get(1).map(String::as_str), Some("none"));
    let mut keys: BTreeSet<Vec<u8>> = page.into_iter().collect();
    keys.extend(scan_from(&mut c, c1));
    assert_eq!(keys, all, "every key");
    assert_eq!(info_u64(&mut c, "snapshot_native_scan_restarted"), 1);
}

/// Item 9 (README rule 1): limits raised at load (command line) count as
/// those set by CONFIG SET, and a set of strings kept as a listpack
/// (`set-max-listpack-entries`, where the server has it) comes back whole
/// in one native call too.
#[test]
fn compact_limits_given_at_load_and_listpack_sets_are_answered_natively() {
    let s = Server::start_with(
        ServerOpts::new()
            .module_args(&["serve-native", "all"])
            .config("hash-max-listpack-entries", "4096"),
    );
    let mut c = s.client();
    populate(&mut c, "HSET", "h", 2000, |i| {
        vec![format!("f{i}"), "v".into()]
    });
    let n0 = natively(&mut c, "hscan");
    let (cursor, items): (String, Vec<Vec<u8>>) = query(&mut c, &["HSCAN", "h", "0"]).unwrap();
    assert_eq!(
        (cursor.as_str(), items.len()),
        ("0", 4000),
        "whole in one call"
    );
    assert_eq!(natively(&mut c, "hscan"), n0 + 1, "answered natively");
    let has: Vec<String> = query(&mut c, &["CONFIG", "GET", "set-max-listpack-entries"]).unwrap();
    if has.is_empty() {
        eprintln!(
            "{}: no set listpacks, that part skipped",
            Server::server_name()
        );
        return;
    }
    config_set(&mut c, "set-max-listpack-entries", "4096");
    populate(&mut c, "SADD", "s", 2000, |i| vec![format!("m{i}")]);
    let enc: String = query(&mut c, &["OBJECT", "ENCODING", "s"]).unwrap();
    assert_eq!(enc, "listpack");
    let (n0, s0) = (natively(&mut c, "sscan"), served(&mut c, "sscan"));
    let (cursor, items): (String, Vec<Vec<u8>>) = query(&mut c, &["SSCAN", "s", "0"]).unwrap();
    assert_eq!(
        (cursor.as_str(), items.len()),
        ("0", 2000),
        "whole in one call"
    );
    assert_eq!(natively(&mut c, "sscan"), n0 + 1, "answered natively");
    assert_eq!(served(&mut c, "sscan"), s0, "not served");
}
