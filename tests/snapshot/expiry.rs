//! Expiry before vs after the snapshot instant.

use super::*;

fn pttl(con: &mut Connection, key: &str) -> i64 {
    query(con, &["PTTL", key]).expect("PTTL")
}

/// Creates `n` keys `<prefix><i>` of mixed types expiring at `at_ms` (server clock).
fn create_expiring(con: &mut Connection, prefix: &str, n: usize, at_ms: i64) -> KeySet {
    let mut pipe = redis::pipe();
    let mut keys = KeySet::new();
    for i in 0..n {
        let k = format!("{prefix}{i}").into_bytes();
        create(&mut pipe, &k, i % TYPES.len());
        pipe.cmd("PEXPIREAT").arg(&k).arg(at_ms).ignore();
        keys.insert(k);
    }
    let () = pipe.query(con).expect("create expiring keys");
    keys
}

#[test]
fn expiry_before_the_snapshot_excludes_after_includes() {
    let server = Server::start();
    let mut scan = server.client();
    let mut w = server.client();
    // Expired keys stay in memory until something touches them.
    ok(&mut w, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    let mut pipe = redis::pipe();
    for i in 0..40 {
        create(&mut pipe, format!("p:{i}").as_bytes(), i % TYPES.len());
    }
    let () = pipe.query(&mut w).expect("persistent keys");
    let persistent = native(&mut w, &[]);

    // `gone:*` expire before cursor 0 and are never touched: logically expired,
    // physically present.
    let t1 = server_ms(&mut w) + 300;
    let _gone = create_expiring(&mut w, "gone:", 40, t1);
    ok(&mut w, &["SET", "sentinel1", "x", "PXAT", &t1.to_string()]);
    wait_until("sentinel1 to expire", POLL, || {
        pttl(&mut w, "sentinel1") == -2
    });
    assert!(server_ms(&mut w) > t1);
    assert_eq!(
        dbsize(&mut w),
        80,
        "expired gone:* keys should still be in memory"
    );

    // `late:*` expire after cursor 0, before the iterations end.
    let t2 = server_ms(&mut w) + 1000;
    let late = create_expiring(&mut w, "late:", 40, t2);
    ok(&mut w, &["SET", "sentinel2", "x", "PXAT", &t2.to_string()]);

    let mut all_want = persistent.clone();
    all_want.extend(late.iter().cloned());
    all_want.insert(b("sentinel2"));
    let hashes_want: KeySet = all_want
        .iter()
        .filter(|k| {
            let t: String = query(&mut w, &["TYPE", &String::from_utf8_lossy(k)]).unwrap();
            t == "hash"
        })
        .cloned()
        .collect();
    let mut its = [
        Iteration::open(&mut scan, "no filter", &[], 3, all_want),
        Iteration::open(
            &mut scan,
            "MATCH late:*",
            &[b("MATCH"), b("late:*")],
            2,
            late.clone(),
        ),
        Iteration::open(
            &mut scan,
            "MATCH gone:*",
            &[b("MATCH"), b("gone:*")],
            2,
            KeySet::new(),
        ),
        Iteration::open(&mut scan, "MATCH *:1*", &[b("MATCH"), b("*:1*")], 1, {
            let mut s: KeySet = persistent
                .iter()
                .filter(|k| k.starts_with(b"p:1"))
                .cloned()
                .collect();
            s.extend(late.iter().filter(|k| k.starts_with(b"late:1")).cloned());
            s
        }),
        Iteration::open(
            &mut scan,
            "TYPE hash",
            &[b("TYPE"), b("hash")],
            2,
            hashes_want,
        ),
    ];
    // Precondition: cursor 0 ran before the late keys expired.
    assert!(
        pttl(&mut w, "sentinel2") > 0,
        "late:* expired before cursor 0 (machine too slow?)"
    );
    wait_until("sentinel2 to expire", POLL, || {
        pttl(&mut w, "sentinel2") == -2
    });
    // Delete half of the late keys lazily, the rest by active expiry.
    for i in (0..40).step_by(2) {
        let n: i64 = query(&mut w, &["EXISTS", &format!("late:{i}")]).unwrap();
        assert_eq!(n, 0, "late:{i} should have expired");
    }
    ok(&mut w, &["DEBUG", "SET-ACTIVE-EXPIRE", "1"]);
    wait_until("active expiry to delete the rest", POLL, || {
        dbsize(&mut w) == 40
    });

    for it in its.iter_mut() {
        while !it.done() {
            it.step(&mut scan);
        }
        it.check();
    }
    assert_same(
        &snap_keys(&mut scan, &[]),
        &persistent,
        "snapshot after expiry",
    );
}
