//! TTLs: the index must carry each key's final expiry.

use super::*;

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
