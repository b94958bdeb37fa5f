//! COMMAND INFO and ACLs.

use super::*;

/// INFO does not apply the log on the main thread: after a bulk write its
/// figures are those of the applied position, the backlog says how far
/// behind, and both converge once the indexer has applied the log.
#[test]
fn info_after_a_bulk_write_reports_the_backlog_and_converges() {
    let server = Server::start();
    let mut con = server.client();
    let n = 300_000u64;
    cmd_str(
        &mut con,
        &["DEBUG", "POPULATE", &n.to_string(), "bulk", "8"],
    );
    let info = cmd_str(&mut con, &["INFO", "snapshot"]);
    let num = |f: &str| info_num(&info, f);
    let (keys, backlog) = (num("snapshot_index_keys"), num("snapshot_index_backlog"));
    // The figures are of the applied position: every key not yet in them is
    // still in the backlog.
    assert!(
        keys <= n && keys + backlog >= n,
        "index_keys {keys}, backlog {backlog}"
    );
    wait_until("the index to catch up", Duration::from_secs(60), || {
        info_u64(&mut con, "snapshot_index_backlog") == 0
    });
    assert_eq!(info_u64(&mut con, "snapshot_index_keys"), n);
}

#[test]
fn command_info_flags_keys_and_acl_categories() {
    let server = Server::start();
    let mut con = server.client();
    let info: Vec<Value> = query(&mut con, &["COMMAND", "INFO", "snapshot.scan"]).unwrap();
    let Some(Value::Array(entry)) = info.first() else {
        panic!("COMMAND INFO: {info:?}")
    };
    let as_str = |v: &Value| -> String {
        match v {
            Value::BulkString(b) => String::from_utf8(b.clone()).unwrap(),
            Value::SimpleString(s) => s.clone(),
            other => panic!("not a string: {other:?}"),
        }
    };
    let strs = |v: &Value| -> Vec<String> {
        match v {
            Value::Array(a) | Value::Set(a) => a.iter().map(as_str).collect(),
            other => panic!("not an array: {other:?}"),
        }
    };
    assert_eq!(as_str(&entry[0]), "snapshot.scan");
    let flags = strs(&entry[2]);
    assert!(flags.iter().any(|f| f == "readonly"), "flags {flags:?}");
    assert!(!flags.iter().any(|f| f == "write"), "flags {flags:?}");
    assert_eq!(
        (&entry[3], &entry[4], &entry[5]),
        (&Value::Int(0), &Value::Int(0), &Value::Int(0)),
        "first/last/step key"
    );
    let cats = strs(&entry[6]);
    let cat_lists: Vec<String> = query(&mut con, &["ACL", "CAT", "keyspace"]).unwrap();
    let in_keyspace = cat_lists.iter().any(|c| c == "snapshot.scan");

    let _: () = query(
        &mut con,
        &[
            "ACL",
            "SETUSER",
            "nokeyspace",
            "on",
            "nopass",
            "allkeys",
            "+@all",
            "-@keyspace",
        ],
    )
    .unwrap();
    let _: () = query(
        &mut con,
        &[
            "ACL",
            "SETUSER",
            "readonly",
            "on",
            "nopass",
            "allkeys",
            "+@read",
            "+@keyspace",
            "-@write",
        ],
    )
    .unwrap();
    let mut limited = server.client();
    let _: () = query(&mut limited, &["AUTH", "nokeyspace", "x"]).unwrap();
    let limited_result = query::<Value>(&mut limited, &["SNAPSHOT.SCAN", "0"]);
    let mut reader = server.client();
    let _: () = query(&mut reader, &["AUTH", "readonly", "x"]).unwrap();
    let reader_result = query::<Value>(&mut reader, &["SNAPSHOT.SCAN", "0"]);

    if has_acl_categories(&server) {
        for c in ["@keyspace", "@read", "@slow"] {
            assert!(cats.iter().any(|x| x == c), "{c} not in {cats:?}");
        }
        assert!(!cats.iter().any(|x| x == "@write"), "{cats:?}");
        // Redis 7.2-7.4 leave module commands out of `ACL CAT <category>` (redis#13489, 8.0).
        if server.is_valkey() || server.version() >= (8, 0, 0) {
            assert!(in_keyspace, "ACL CAT keyspace lacks snapshot.scan");
        } else {
            assert!(
                !in_keyspace,
                "ACL CAT lists module commands on Redis 7.x now"
            );
        }
        let e = err_text(&limited_result.expect_err("-@keyspace user ran SNAPSHOT.SCAN"));
        assert!(
            e.starts_with("NOPERM") && e.to_lowercase().contains("snapshot.scan"),
            "{e}"
        );
        reader_result.unwrap_or_else(|e| panic!("+@read +@keyspace user: {}", err_text(&e)));
    } else {
        assert!(
            !cats.iter().any(|x| x == "@keyspace"),
            "Redis 7.0 has no API to set categories: {cats:?}"
        );
        assert!(!in_keyspace);
        // No categories: -@keyspace does not take away what +@all granted.
        limited_result.unwrap_or_else(|e| panic!("{}", err_text(&e)));
    }
}
