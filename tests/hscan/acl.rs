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
    check_key_specs(&mut con, &server, CMD, &["read", "hash", "slow"]);
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
