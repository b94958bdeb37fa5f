//! Reuse.

use super::*;

#[test]
fn an_unchanged_hash_shares_its_copy_and_a_changed_one_does_not() {
    let server = Server::start_with(ServerOpts::new().quick_retry());
    let mut con = server.client();
    let reuse = reuse_expected(&server, &mut con);
    fill_hash(&mut con, "h", 5_000, |i| format!("v{i}"));
    let truth = hgetall(&mut con, "h");
    let o = Opts::count(10);
    let made0 = info_u64(&mut con, "snapshot_hash_copies_made");
    let reused0 = info_u64(&mut con, "snapshot_hash_copies_reused");

    let (ca, pa) = hscan(&mut con, "h", "0", &o);
    let (cb, pb) = hscan(&mut con, "h", "0", &o);
    let made = info_u64(&mut con, "snapshot_hash_copies_made") - made0;
    let reused = info_u64(&mut con, "snapshot_hash_copies_reused") - reused0;
    if reuse {
        assert_eq!((made, reused), (1, 1), "copies made, reused");
        assert_eq!(info_u64(&mut con, "snapshot_hash_snapshots_open"), 1);
    } else {
        assert_eq!(
            (made, reused),
            (2, 0),
            "no reuse on {}",
            Server::server_name()
        );
        assert_eq!(info_u64(&mut con, "snapshot_hash_snapshots_open"), 2);
    }

    // A write: a new cursor 0 copies again and sees it; old iterations do not.
    let _: i64 = query(&mut con, &["HSET", "h", "new", "1"]).unwrap();
    let _: i64 = query(&mut con, &["HSET", "h", "f00009", "changed"]).unwrap();
    let made1 = info_u64(&mut con, "snapshot_hash_copies_made");
    let mut now = truth.clone();
    now.insert(b"new".to_vec(), b"1".to_vec());
    now.insert(b"f00009".to_vec(), b"changed".to_vec());
    assert_same(
        &full(&mut con, "h", &Opts::count(1000)),
        &now,
        "after the write",
    );
    assert_eq!(info_u64(&mut con, "snapshot_hash_copies_made") - made1, 1);
    for (c, p) in [(ca, pa), (cb, pb)] {
        let mut pages = vec![p];
        pages.extend(finish_from(&mut con, "h", &c, &Opts::count(500), |_| {}));
        assert_same(&to_hash(&pages, false), &truth, "an old iteration");
    }
    // (Once their last cursors are past the retry window.)
    wait_until("copies to be released", POLL + QUICK_RETRY_WINDOW, || {
        info_u64(&mut con, "snapshot_hash_snapshots_open") == 0
    });

    // No iteration holds the copy any more: the next cursor 0 copies again.
    let made2 = info_u64(&mut con, "snapshot_hash_copies_made");
    let reused2 = info_u64(&mut con, "snapshot_hash_copies_reused");
    assert_same(&full(&mut con, "h", &Opts::count(1000)), &now, "again");
    assert_eq!(info_u64(&mut con, "snapshot_hash_copies_made") - made2, 1);
    assert_eq!(info_u64(&mut con, "snapshot_hash_copies_reused"), reused2);
}

/// A key whose TTL passed fires no event until touched: a cursor 0 must
/// still see it missing rather than share the copy an iteration holds.
#[rstest]
#[case::listpack(50)]
#[case::hashtable_sliced(3_000)]
fn a_held_copy_is_not_reused_after_the_key_expired(#[case] n: usize) {
    let server = Server::start();
    let mut con = server.client();
    let _: Value = query(&mut con, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]).unwrap();
    fill_hash(&mut con, "h", n, |i| i.to_string());
    let truth = hgetall(&mut con, "h");
    let mut ok = false;
    for ttl in [300u64, 1_000, 3_000] {
        let _: i64 = query(&mut con, &["PEXPIRE", "h", &ttl.to_string()]).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_millis(ttl);
        let o = Opts::count(10);
        let (c, p) = hscan(&mut con, "h", "0", &o);
        if std::time::Instant::now() >= deadline {
            // Too slow to open the iteration before the TTL passed: longer TTL.
            let _: i64 = query(&mut con, &["DEL", "h"]).unwrap();
            fill_hash(&mut con, "h", n, |i| i.to_string());
            continue;
        }
        // Nothing touches h until its TTL has passed (the clock is the point).
        wait_until("the key's TTL to pass", POLL, || {
            std::time::Instant::now() > deadline + Duration::from_millis(5)
        });
        let v: Value = query(&mut con, &[CMD, "h", "0"]).unwrap();
        assert_eq!(
            v,
            Value::Array(vec![Value::BulkString(b"0".to_vec()), Value::Array(vec![])]),
            "an expired key is missing"
        );
        let mut pages = vec![p];
        pages.extend(finish_from(&mut con, "h", &c, &o, |_| {}));
        assert_same(&to_hash(&pages, false), &truth, "the held iteration");
        ok = true;
        break;
    }
    assert!(ok, "never opened the iteration before the TTL passed");
}

/// Changes that must invalidate a held copy: each one between two cursor 0s.
#[rstest]
#[case::hset("HSET h f00003 x")]
#[case::hdel("HDEL h f00003")]
#[case::hincrby("HINCRBY h f00003 1")]
#[case::hincrbyfloat("HINCRBYFLOAT h f00003 0.5")]
#[case::del_and_recreate("DEL h; HSET h f00003 x")]
#[case::rename_away_and_back("RENAME h t; HSET t f00003 x; RENAME t h")]
#[case::copy_replace("HSET o only 1; COPY o h REPLACE")]
#[case::swapdb("SELECT 1; HSET h db1 1; SWAPDB 0 1; SELECT 0")]
#[case::flushdb("FLUSHDB; HSET h f00003 3")]
#[case::restore_replace("")]
fn writes_invalidate_a_held_copy(#[case] writes: &str) {
    let server = Server::start();
    let mut con = server.client();
    let mut w = server.client();
    fill_hash(&mut con, "h", 1_500, |i| i.to_string());
    let o = Opts::count(10);
    let truth = hgetall(&mut con, "h");
    let (ca, pa) = hscan(&mut con, "h", "0", &o);
    if writes.is_empty() {
        // RESTORE ... REPLACE with another hash's serialization.
        let _: i64 = query(&mut w, &["HSET", "o", "restored", "1"]).unwrap();
        let dump: Vec<u8> = redis::cmd("DUMP").arg("o").query(&mut w).unwrap();
        let _: () = redis::cmd("RESTORE")
            .arg("h")
            .arg(0)
            .arg(dump)
            .arg("REPLACE")
            .query(&mut w)
            .unwrap();
    }
    for cmd in writes.split(';').filter(|c| !c.trim().is_empty()) {
        let args: Vec<&str> = cmd.split_whitespace().collect();
        let _: Value = query(&mut w, &args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    }
    let now = hgetall(&mut con, "h");
    assert_ne!(now, truth);
    assert_same(
        &full(&mut con, "h", &Opts::count(1000)),
        &now,
        "new cursor 0",
    );
    let mut pages = vec![pa];
    pages.extend(finish_from(&mut con, "h", &ca, &Opts::count(1000), |_| {}));
    assert_same(&to_hash(&pages, false), &truth, "the held iteration");
}

#[test]
fn same_key_in_two_dbs_never_shares_a_copy() {
    let server = Server::start();
    let mut c0 = server.client();
    let mut c1 = server.client();
    let _: () = query(&mut c1, &["SELECT", "1"]).unwrap();
    fill_hash(&mut c0, "h", 2_000, |i| format!("zero{i}"));
    fill_hash(&mut c1, "h", 2_000, |i| format!("one{i}"));
    let o = Opts::count(10);
    let (a, pa) = hscan(&mut c0, "h", "0", &o);
    let (b, pb) = hscan(&mut c1, "h", "0", &o);
    assert_same(&full(&mut c1, "h", &o), &hgetall(&mut c1, "h"), "db 1");
    assert_same(&full(&mut c0, "h", &o), &hgetall(&mut c0, "h"), "db 0");
    for (con, c, p) in [(&mut c0, a, pa), (&mut c1, b, pb)] {
        let mut pages = vec![p];
        pages.extend(finish_from(con, "h", &c, &Opts::count(1000), |_| {}));
        let want = hgetall(con, "h");
        assert_same(&to_hash(&pages, false), &want, "held");
    }
}

#[test]
fn future_field_ttls_do_not_prevent_reuse_where_visible() {
    let server = Server::start();
    let mut con = server.client();
    // Valkey and Redis 7.4 have no module API to read a hash's field TTLs.
    if !has_field_ttl(&mut con) || no_field_ttl_api(&server) {
        eprintln!("skipped on {}", Server::server_name());
        return;
    }
    fill_hash(&mut con, "h", 2_000, |i| i.to_string());
    hpexpire(&mut con, "h", 1_000_000, &[fld(5)]);
    let reused0 = info_u64(&mut con, "snapshot_hash_copies_reused");
    let o = Opts::count(10);
    let (ca, _) = hscan(&mut con, "h", "0", &o);
    let truth = hgetall(&mut con, "h");
    assert_same(&full(&mut con, "h", &Opts::count(1000)), &truth, "second");
    assert_eq!(
        info_u64(&mut con, "snapshot_hash_copies_reused") - reused0,
        1
    );
    finish_from(&mut con, "h", &ca, &o, |_| {});
}

/// Valkey 9 (and Redis 7.4) cannot show one hash's field TTLs to a module: once
/// the database holds keys with field TTLs, copies are made in one hold and not shared.
#[test]
fn valkey_with_field_ttls_in_the_db_does_not_share_copies() {
    let server = Server::start();
    let mut con = server.client();
    if !has_field_ttl(&mut con) || !no_field_ttl_api(&server) {
        eprintln!("skipped on {}", Server::server_name());
        return;
    }
    fill_hash(&mut con, "h", 2_000, |i| i.to_string());
    fill_hash(&mut con, "other", 10, |i| i.to_string());
    hpexpire(&mut con, "other", 1_000_000, &[fld(1)]);
    assert!(!reuse_expected(&server, &mut con));
    let made0 = info_u64(&mut con, "snapshot_hash_copies_made");
    let reused0 = info_u64(&mut con, "snapshot_hash_copies_reused");
    let o = Opts::count(10);
    let (ca, _) = hscan(&mut con, "h", "0", &o);
    let (cb, _) = hscan(&mut con, "h", "0", &o);
    assert_eq!(info_u64(&mut con, "snapshot_hash_copies_made") - made0, 2);
    assert_eq!(
        info_u64(&mut con, "snapshot_hash_copies_reused") - reused0,
        0
    );
    finish_from(&mut con, "h", &ca, &o, |_| {});
    finish_from(&mut con, "h", &cb, &o, |_| {});
}
