//! Eviction, blocking commands, MIGRATE.

use super::*;

#[test]
fn eviction_removes_keys_from_index() {
    let server = Server::start_with(ServerOpts::new().config("maxmemory-policy", "allkeys-random"));
    let mut con = server.client();
    let used = info_section_u64(&mut con, "memory", "used_memory");
    let limit = used + 3 * 1024 * 1024;
    config_set(&mut con, "maxmemory", &limit.to_string());
    let value = "x".repeat(1000);
    let (mut written, mut after_first) = (0u64, 0);
    for batch in 0..400u32 {
        let db = if batch % 2 == 0 { 0 } else { 3 };
        let mut pipe = redis::pipe();
        pipe.cmd("SELECT").arg(db).ignore();
        for i in 0..100 {
            let k = format!("ev:{batch}:{i}");
            match i % 10 {
                0 => pipe.cmd("HSET").arg(&k).arg("f").arg(&value).ignore(),
                1 => pipe.cmd("RPUSH").arg(&k).arg(&value).ignore(),
                _ => pipe.cmd("SET").arg(&k).arg(&value).ignore(),
            };
            written += 1;
        }
        pipe.cmd("SELECT").arg(0).ignore();
        let _: () = pipe
            .query(&mut con)
            .unwrap_or_else(|e| panic!("batch {batch}: {e}"));
        if info_section_u64(&mut con, "stats", "evicted_keys") > 0 {
            after_first += 1;
            if after_first > 10 {
                break;
            }
        }
    }
    // No more evictions (the server may keep evicting in a timer while over the limit).
    config_set(&mut con, "maxmemory", "0");
    let evicted = info_section_u64(&mut con, "stats", "evicted_keys");
    assert!(evicted > 0, "no eviction after {written} writes");
    let held = dbsize_in(&mut con, 0) + dbsize_in(&mut con, 3);
    assert!(
        held < written,
        "{held} keys held of {written} written, but {evicted} evicted"
    );
    assert_index_matches(&mut con, &[0, 3]);
    assert_index_sizes(&mut con, &[0, 3]);
}

#[test]
fn blocked_pop_served_by_push_in_other_db() {
    let (server, mut con, mut chk) = server_with_bg();
    let mut blocked = server.client();
    select(&mut blocked, 3);
    let waiter = std::thread::spawn(move || {
        let got: Option<String> = query(
            &mut blocked,
            &["BLMOVE", "src", "dst", "LEFT", "RIGHT", "5"],
        )
        .expect("BLMOVE");
        let got2: Option<Vec<String>> =
            query(&mut blocked, &["BZPOPMIN", "z", "5"]).expect("BZPOPMIN");
        (got, got2)
    });
    wait_until("the client to block", WAIT, || {
        info_section_u64(&mut chk, "clients", "blocked_clients") == 1
    });
    select(&mut con, 3);
    let _: i64 = query(&mut con, &["RPUSH", "src", "x"]).unwrap();
    wait_until("the second block", WAIT, || {
        info_section_u64(&mut chk, "clients", "blocked_clients") == 1 && dbsize_in(&mut chk, 3) == 8
    });
    let _: i64 = query(&mut con, &["ZADD", "z", "1", "m"]).unwrap();
    let (got, got2) = waiter.join().unwrap();
    assert_eq!(got.as_deref(), Some("x"));
    assert_eq!(got2.map(|v| v[1].clone()).as_deref(), Some("m"));
    assert_keyspace(
        &mut chk,
        &parse_expect("0: @bg0; 3: @bg3 dst"),
        "blocked pops",
    );
    assert_index_matches(&mut chk, &[0, 3]);
    assert_index_sizes(&mut chk, &[0, 3]);
}

#[test]
fn migrate_moves_keys_between_servers() {
    let (src, mut s, _) = server_with_bg();
    let (dst, mut d, _) = server_with_bg();
    let port = dst.port().to_string();
    let p = port.as_str();
    let script = format!(
        "SET a 1; HSET h f v; RPUSH l x; SET t v EX 100000; \
         MIGRATE 127.0.0.1 {p} a 0 5000; \
         MIGRATE 127.0.0.1 {p} \"\" 3 5000 KEYS h l; \
         MIGRATE 127.0.0.1 {p} t 0 5000 COPY; \
         MIGRATE 127.0.0.1 {p} \"\" 3 5000 COPY REPLACE KEYS bg0:zset bg0:str; \
         ! MIGRATE 127.0.0.1 {p} bg0:list 0 5000 COPY; \
         MIGRATE 127.0.0.1 {p} bg0:list 0 5000 REPLACE"
    );
    let mut chk = src.client();
    assert!(run_script(&mut s, &mut chk, &script, &[0, 3], true));

    assert_keyspace(
        &mut chk,
        &parse_expect("0: @bg0 -bg0:list t; 3: @bg3"),
        "MIGRATE source",
    );
    assert_index_matches(&mut chk, &[0, 3]);
    assert_index_sizes(&mut chk, &[0, 3]);
    assert_keyspace(
        &mut d,
        &parse_expect("0: @bg0 a t; 3: @bg3 h l bg0:zset bg0:str"),
        "MIGRATE destination",
    );
    assert_index_matches(&mut d, &[0, 3]);
    assert_index_sizes(&mut d, &[0, 3]);
}
