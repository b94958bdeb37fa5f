//! Key specs and ACLs.

use super::*;

#[test]
fn key_is_position_one_and_read_only() {
    let server = Server::start();
    let mut con = server.client();
    for args in [
        &["COMMAND", "GETKEYS", CMD, "h", "0"][..],
        &[
            "COMMAND",
            "GETKEYS",
            "snapshot.hscan",
            "h",
            "123",
            "MATCH",
            "x",
            "COUNT",
            "5",
            "NOVALUES",
        ],
    ] {
        assert_eq!(cmd_strs(&mut con, args), vec!["h"], "{args:?}");
    }
    let v: Value = query(&mut con, &["COMMAND", "GETKEYSANDFLAGS", CMD, "h", "0"]).unwrap();
    let text = format!("{v:?}");
    assert!(
        text.contains("RO") && text.contains("access") && !text.contains("RW"),
        "{text}"
    );
    let info: Vec<Value> = query(&mut con, &["COMMAND", "INFO", "snapshot.hscan"]).unwrap();
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
        for cat in ["read", "hash", "slow"] {
            let cmds: Vec<String> = query(&mut con, &["ACL", "CAT", cat]).unwrap();
            assert!(cmds.iter().any(|c| c == "snapshot.hscan"), "ACL CAT {cat}");
        }
    }
}

#[test]
fn read_only_key_acl_allows_it() {
    let server = Server::start();
    let mut con = server.client();
    fill_hash(&mut con, "h", 30, |i| i.to_string());
    for (user, keys) in [("reader", "%R~*"), ("writer", "%W~*"), ("other", "%R~x*")] {
        let _: () = query(
            &mut con,
            &["ACL", "SETUSER", user, "on", ">pw", keys, "+@all"],
        )
        .unwrap();
    }
    let login = |user: &str| {
        let mut c = server.client();
        let _: () = query(&mut c, &["AUTH", user, "pw"]).unwrap();
        c
    };
    let mut reader = login("reader");
    assert_same(
        &full(&mut reader, "h", &Opts::count(7)),
        &hgetall(&mut con, "h"),
        "read-only user",
    );
    assert!(expect_err(&mut reader, &["HSET", "h", "x", "1"]).starts_with("NOPERM"));
    for user in ["writer", "other"] {
        let mut c = login(user);
        let e = expect_err(&mut c, &[CMD, "h", "0"]);
        assert!(e.starts_with("NOPERM"), "{user}: {e}");
    }
    let dry = |user: &str| -> String {
        query::<String>(
            &mut server.client(),
            &["ACL", "DRYRUN", user, CMD, "h", "0"],
        )
        .unwrap_or_else(|e| err_text(&e))
    };
    assert_eq!(dry("reader"), "OK");
    assert_ne!(dry("writer"), "OK");
}
