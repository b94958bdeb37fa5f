//! Byte order within and across pages.

use super::*;

#[rstest]
#[case::count_1(1)]
#[case::count_4(4)]
#[case::count_97(97)]
fn keys_come_in_byte_order(#[case] count: usize) {
    let server = Server::start();
    let mut con = server.client();
    let mut rng = Rng(count as u64);
    let mut pipe = redis::pipe();
    let mut keys = KeySet::new();
    // Binary keys of lengths around the 22-byte inline limit and beyond, with
    // shared prefixes so that order is decided late, and high bytes that sort
    // after ASCII (unsigned byte order).
    while keys.len() < 600 {
        let mut k = b"shared-prefix:".repeat(rng.below(3) as usize);
        k.extend(random_bytes(&mut rng, b"\x00\x01az\x7f\x80\xfe\xff", 12));
        if keys.insert(k.clone()) {
            pipe.cmd("SET").arg(k).arg(1).ignore();
        }
    }
    let () = pipe.query(&mut con).unwrap();
    let count = count.to_string();
    let pages = snap_pages(&mut con, &[b"COUNT", count.as_bytes()]);
    let flat: Vec<Bytes> = pages.concat();
    // Sorted by unsigned bytes: exactly the BTreeSet order.
    assert_eq!(flat, keys.iter().cloned().collect::<Vec<_>>());
    // The same with a pattern and a TYPE filter over the paging.
    let got = snap_keys(
        &mut con,
        &[
            b"MATCH",
            b"*\xff*",
            b"TYPE",
            b"string",
            b"COUNT",
            count.as_bytes(),
        ],
    );
    let want: Vec<Bytes> = keys.iter().filter(|k| k.contains(&0xff)).cloned().collect();
    assert_eq!(got, want);
}

/// MULTI/EXEC and scripts run at one server instant: a TTL that runs out while
/// they execute does not expire the key for EXISTS or SCAN, so SNAPSHOT.SCAN
/// (served inline there, "with the same results") must agree with SCAN.
#[rstest]
#[case::multi(true)]
#[case::lua(false)]
fn expiry_inside_multi_and_lua_follows_the_server_clock(#[case] multi: bool) {
    let server = Server::start();
    let mut con = server.client();
    // Redis 7.0 has no module API for the server's cached command time: the
    // module uses the wall clock there (README).
    if !server.is_valkey() && server.version() < (7, 2, 0) {
        eprintln!("skipped on {}", Server::server_name());
        return;
    }
    let (exists, native_keys, snap_keys): (i64, ScanReply, ScanReply) = if multi {
        let mut tx = redis::pipe();
        tx.atomic()
            .cmd("SET")
            .arg("x")
            .arg(1)
            .arg("PX")
            .arg(2)
            .ignore()
            // Lets the TTL run out in wall-clock time inside the transaction.
            .cmd("DEBUG")
            .arg("SLEEP")
            .arg("0.02")
            .ignore()
            .cmd("EXISTS")
            .arg("x")
            .cmd("SCAN")
            .arg(0)
            .arg("MATCH")
            .arg("x")
            .cmd("SNAPSHOT.SCAN")
            .arg(0)
            .arg("MATCH")
            .arg("x");
        tx.query(&mut con).expect("MULTI")
    } else {
        let script = r"
            redis.call('SET', 'x', '1', 'PX', '2')
            -- Burns CPU past the TTL (TIME is cached inside scripts on newer servers).
            local n = 0
            for i = 1, 3000000 do n = n + i % 7 end
            return {redis.call('EXISTS', 'x'), redis.call('SCAN', '0', 'MATCH', 'x'),
                    redis.call('SNAPSHOT.SCAN', '0', 'MATCH', 'x')}
        ";
        redis::cmd("EVAL")
            .arg(script)
            .arg(0)
            .query(&mut con)
            .expect("EVAL")
    };
    assert_eq!(exists, 1, "the server still sees x");
    assert_eq!(native_keys.1, vec![b("x")], "SCAN");
    assert_eq!(
        snap_keys.1, native_keys.1,
        "SNAPSHOT.SCAN disagrees with SCAN"
    );
}

/// A cursor-0 call queued behind a busy worker: writes made after the call
/// (and applied by the indexer long before the worker gets to it) must not
/// leak into its snapshot, and deletions after it must not remove keys.
#[test]
fn a_queued_cursor_zero_is_cut_at_its_call_not_when_served() {
    let server = Server::start();
    let mut con = server.client();
    config_set(&mut con, "snapshot.workers", "1");
    config_set(&mut con, "snapshot.scan-budget", "100000000");
    let mut p = redis::pipe();
    for i in 0..200_000u32 {
        p.cmd("SET").arg(format!("k{i:06}")).arg(1).ignore();
    }
    let _: () = p.query(&mut con).expect("load");
    cmd_str(&mut con, &["SET", "oldkey", "1"]);
    // Ten X calls keep the only worker busy walking 200k keys each.
    let busy: Vec<_> = (0..10)
        .map(|_| {
            let mut x = server.client();
            std::thread::spawn(move || {
                let _: Value = query(
                    &mut x,
                    &["SNAPSHOT.SCAN", "0", "MATCH", "*a*a*a*zz*", "COUNT", "1"],
                )
                .unwrap();
            })
        })
        .collect();
    wait_until("the worker to be busy", POLL, || {
        info_field(
            &cmd_str(&mut con, &["INFO", "snapshot"]),
            "snapshot_worker_queue_depth",
        )
        .is_some_and(|d| d != "0")
    });
    // A opens its snapshot while the worker is busy.
    let port = server.port();
    let a = std::thread::spawn(move || {
        let mut a = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .and_then(|c| c.get_connection())
            .expect("connect");
        let _: () = query(&mut a, &["CLIENT", "SETNAME", "a"]).unwrap();
        full_scan(&mut a, "SNAPSHOT.SCAN", &["COUNT", "1000000"])
    });
    wait_until("A to be blocked", POLL, || {
        let list = cmd_str(&mut con, &["CLIENT", "LIST"]);
        list.lines()
            .any(|l| l.contains(" name=a ") && l.contains("flags=b"))
    });
    // B writes after A's call; the indexer applies these within ~2 ms.
    cmd_str(&mut con, &["SET", "newkey", "1"]);
    let _: i64 = query(&mut con, &["DEL", "oldkey"]).unwrap();
    let keys = a.join().expect("A");
    for x in busy {
        x.join().expect("X");
    }
    assert!(
        keys.iter().any(|k| k == b"oldkey"),
        "a key deleted after the call is part of the snapshot"
    );
    assert!(
        !keys.iter().any(|k| k == b"newkey"),
        "a key written after the call leaked into the snapshot"
    );
    assert_eq!(keys.len(), 200_001);
}
