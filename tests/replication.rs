//! Replication: diskless replica loading into a temporary database
//! (`repl-diskless-load swapdb`, and Valkey's dual-channel replication) is
//! not switched off by snapscan; during the load the replica's SNAPSHOT.SCAN
//! serves the old dataset, after it the new one, and an aborted load leaves
//! the old index in place. Each check compares a full SNAPSHOT.SCAN
//! iteration with the node's native SCAN.
mod common;

use common::cluster::{assert_exact, native_keys, snapshot_keys};
use common::*;
use redis::Value;
use std::time::{Duration, Instant};

fn persistence(s: &Server, field: &str) -> String {
    let info = cmd_str(&mut s.client(), &["INFO", "persistence"]);
    info_field(&info, field).unwrap_or_else(|| panic!("no {field} in INFO persistence:\n{info}"))
}

fn in_sync(primary: &Server, replica: &Server) -> bool {
    let p = cmd_str(&mut primary.client(), &["INFO", "replication"]);
    let r = cmd_str(&mut replica.client(), &["INFO", "replication"]);
    info_field(&r, "master_link_status").as_deref() == Some("up")
        && info_field(&p, "master_repl_offset") == info_field(&r, "slave_repl_offset")
}

/// A primary with `keys` keys and a replica of it with diskless swapdb
/// loading, synced and exact; `extra` goes to both.
fn pair(keys: usize, value_len: usize, extra: &[(&str, &str)]) -> (Server, Server) {
    let popts = ServerOpts::new().config("repl-diskless-sync", "yes");
    let mut ropts = ServerOpts::new()
        .config("repl-diskless-load", "swapdb")
        // Serve clients every 1 KB of the load, so the test can scan during it.
        .config("loading-process-events-interval-bytes", "1024");
    for (k, v) in extra {
        ropts = ropts.config(k, v);
    }
    let primary = Server::start_with(popts);
    let _: Value = query(
        &mut primary.client(),
        &[
            "DEBUG",
            "POPULATE",
            &keys.to_string(),
            "k",
            &value_len.to_string(),
        ],
    )
    .unwrap();
    let replica = Server::start_with(ropts);
    let _: () = query(
        &mut replica.client(),
        &["REPLICAOF", "127.0.0.1", &primary.port().to_string()],
    )
    .unwrap();
    wait_until("initial sync", Duration::from_secs(20), || {
        in_sync(&primary, &replica)
            && info_u64(&mut replica.client(), "snapshot_backfill_in_progress") == 0
    });
    assert_exact(&replica, "replica after the initial sync");
    // The replica streams from its primary (not just loaded its snapshot).
    let _: () = query(&mut primary.client(), &["SET", "streamed", "1"]).unwrap();
    wait_until("the replica streams", Duration::from_secs(20), || {
        query::<Option<String>>(&mut replica.client(), &["GET", "streamed"])
            .is_ok_and(|v| v.is_some())
            && in_sync(&primary, &replica)
    });
    (primary, replica)
}

/// Forces a full sync with the same replication id (an async load): the
/// primary drops the replica's link and, in the same transaction, writes
/// more than its 16 KB backlog holds, plus `writes`.
fn force_full_sync(primary: &Server, writes: &[&[&str]]) {
    let mut c = primary.client();
    config_set(&mut c, "repl-backlog-size", "16384");
    let mut pipe = redis::pipe();
    pipe.atomic();
    pipe.cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica");
    pipe.cmd("SET").arg("big").arg(vec![b'x'; 100_000]);
    for w in writes {
        pipe.cmd(w[0]).arg(&w[1..]);
    }
    let _: Value = pipe.query(&mut c).expect("MULTI with CLIENT KILL");
}

/// A full SNAPSHOT.SCAN iteration, sorted, or the first error.
fn try_snapshot_keys(con: &mut redis::Connection) -> redis::RedisResult<Vec<Vec<u8>>> {
    let (mut cursor, mut out) = ("0".to_string(), Vec::new());
    for _ in 0..100_000 {
        let (next, page): (String, Vec<Vec<u8>>) = redis::cmd("SNAPSHOT.SCAN")
            .arg(&cursor)
            .arg("COUNT")
            .arg(1000)
            .query(con)?;
        out.extend(page);
        if next == "0" {
            break;
        }
        cursor = next;
    }
    out.sort();
    Ok(out)
}

fn wait_async_loading(replica: &Server) {
    wait_until("the replica's async load", Duration::from_secs(20), || {
        persistence(replica, "async_loading") == "1"
    });
}

fn assert_no_skipped_diskless_load(replica: &Server) {
    let log = std::fs::read_to_string(replica.log_path()).unwrap_or_default();
    assert!(
        !log.contains("Skipping diskless-load"),
        "the replica refused diskless loading:\n{}",
        replica.log_tail(20)
    );
    assert!(
        log.contains("Swapping active DB with loaded DB"),
        "no swapdb load in the replica's log:\n{}",
        replica.log_tail(20)
    );
}

/// Full sync with `repl-diskless-load swapdb` under writes: SNAPSHOT.SCAN on
/// the replica during the load returns the old dataset (as SCAN does), and
/// the new one after the switch; then an aborted load keeps the old index.
fn swapdb_load(extra: &[(&str, &str)]) {
    let (primary, replica) = pair(20_000, 1000, extra);
    // The primary takes the extra options only now: a replica whose first
    // sync was a dual-channel one loads its next full syncs the blocking
    // way (server behaviour: its replication id differs from the primary's).
    for (k, v) in extra {
        config_set(&mut primary.client(), k, v);
    }
    let old = native_keys(&mut replica.client());
    // Slow the load down: 100 µs per key, about 2 s.
    config_set(&mut replica.client(), "key-load-delay", "100");
    let runs_before = info_u64(&mut replica.client(), "snapshot_backfill_runs");
    force_full_sync(
        &primary,
        &[
            &["SET", "new:1", "v"],
            &["DEL", "k:1", "k:2"],
            &["SET", "new:2", "v"],
        ],
    );
    // Writes go on at the primary during the load.
    let mut pc = primary.client();
    wait_async_loading(&replica);
    let mut scans = 0;
    let mut rc = replica.client();
    let deadline = Instant::now() + Duration::from_secs(20);
    while persistence(&replica, "async_loading") == "1" && Instant::now() < deadline {
        let _: () = query(&mut pc, &["SET", &format!("during:{scans}"), "v"]).unwrap();
        // A load that ends during these two iterations rebuilds the index
        // (SNAPSHOT.SCAN answers LOADING meanwhile): that check is void.
        let snap = try_snapshot_keys(&mut rc);
        let native = native_keys(&mut rc);
        if persistence(&replica, "async_loading") != "1" {
            break;
        }
        let snap = snap.expect("SNAPSHOT.SCAN during the load");
        assert_eq!(
            snap, old,
            "SNAPSHOT.SCAN during the load serves the old dataset"
        );
        assert_eq!(native, old, "SCAN during the load serves the old dataset");
        scans += 1;
    }
    assert!(scans > 0, "no scan ran during the load");
    wait_until("the new dataset indexed", Duration::from_secs(20), || {
        persistence(&replica, "async_loading") == "0"
            && in_sync(&primary, &replica)
            && info_u64(&mut replica.client(), "snapshot_backfill_runs") > runs_before
            && info_u64(&mut replica.client(), "snapshot_backfill_in_progress") == 0
    });
    let new = snapshot_keys(&mut rc);
    assert!(new.contains(&b"new:1".to_vec()) && !new.contains(&b"k:1".to_vec()));
    assert_exact(&replica, "replica after the switch");
    assert!(info_u64(&mut replica.client(), "snapshot_backfill_runs") > runs_before);
    assert_no_skipped_diskless_load(&replica);
    if !extra.is_empty() {
        let log = std::fs::read_to_string(replica.log_path()).unwrap_or_default();
        assert!(
            log.contains("Dual channel replication"),
            "no dual-channel sync"
        );
    }

    // An aborted load: the primary drops the link while the replica loads.
    let old = native_keys(&mut rc);
    let runs_before = info_u64(&mut replica.client(), "snapshot_backfill_runs");
    force_full_sync(&primary, &[&["SET", "lost:1", "v"]]);
    wait_async_loading(&replica);
    // The replica reconnects at once: its next load must not end during
    // the checks below (1 ms per key at the primary's end).
    config_set(&mut pc, "rdb-key-save-delay", "1000");
    let _: Value = query(&mut pc, &["CLIENT", "KILL", "TYPE", "replica"]).unwrap();
    wait_until("the load aborted", Duration::from_secs(20), || {
        std::fs::read_to_string(replica.log_path())
            .unwrap_or_default()
            .contains("Discarding temporary DB")
    });
    // Right after the abort (before any new sync completes) the replica
    // serves its old dataset, and the index was not rebuilt.
    let snap = snapshot_keys(&mut rc);
    assert_eq!(snap, old, "the old index after an aborted load");
    assert_eq!(native_keys(&mut rc), old);
    assert_eq!(
        info_u64(&mut replica.client(), "snapshot_backfill_runs"),
        runs_before,
        "an aborted load rebuilds nothing"
    );
    config_set(&mut replica.client(), "key-load-delay", "0");
}

#[test]
fn swapdb_full_sync_serves_the_old_index_during_the_load() {
    swapdb_load(&[]);
}

#[test]
fn dual_channel_swapdb_full_sync_serves_the_old_index_during_the_load() {
    let probe = Server::start_with(ServerOpts::without_module());
    if !(probe.is_valkey() && probe.version() >= (8, 0, 0)) {
        eprintln!(
            "skipped: no dual-channel replication on {}",
            Server::server_name()
        );
        return;
    }
    drop(probe);
    swapdb_load(&[("dual-channel-replication-enabled", "yes")]);
}

/// `redismodule.h` of the redis-module crate in the cargo registry.
fn redismodule_include_dir() -> std::path::PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let src = home.join("registry").join("src");
    std::fs::read_dir(&src)
        .unwrap_or_else(|e| panic!("{}: {e}", src.display()))
        .filter_map(|d| d.ok())
        .map(|d| d.path().join("redis-module-2.0.8/src/include"))
        .find(|p| p.join("redismodule.h").is_file())
        .expect("redis-module-2.0.8's redismodule.h in the cargo registry (run cargo build)")
}

/// Builds tests/modules/deleter.c into `dir`; returns the .so path.
fn build_deleter(dir: &std::path::Path) -> std::path::PathBuf {
    let out = dir.join("deleter.so");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/modules/deleter.c");
    let status = std::process::Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&out)
        .arg("-I")
        .arg(redismodule_include_dir())
        .arg(&src)
        .status()
        .expect("running cc");
    assert!(status.success(), "cc failed on {}", src.display());
    out
}

/// Another module's RedisModule_DeleteKey fires no keyspace notification;
/// the `Key` server event still takes the keys out of the index.
#[test]
fn keys_deleted_by_another_modules_delete_key_leave_the_index() {
    let probe = Server::start_with(ServerOpts::without_module());
    if !probe.is_valkey() && probe.version() < (7, 2, 0) {
        eprintln!(
            "skipped: no Key server event on {} (a known limitation)",
            Server::server_name()
        );
        return;
    }
    let so = build_deleter(probe.dir());
    let s = Server::start_with(
        ServerOpts::new().config("loadmodule", so.to_str().expect("utf-8 path")),
    );
    drop(probe);
    let mut c = s.client();
    for i in 0..100 {
        let _: () = query(&mut c, &["SET", &format!("k:{i}"), "v"]).unwrap();
    }
    let _: () = query(&mut c, &["HSET", "h", "f", "v"]).unwrap();
    let _: () = query(&mut c, &["SELECT", "3"]).unwrap();
    let _: () = query(&mut c, &["SET", "k:1", "in db 3"]).unwrap();
    let _: () = query(&mut c, &["SELECT", "0"]).unwrap();
    assert_exact(&s, "before");
    let deleted: i64 = query(&mut c, &["DELETER.DEL", "k:1", "k:2", "h", "missing"]).unwrap();
    assert_eq!(deleted, 3);
    let keys = snapshot_keys(&mut c);
    assert_eq!(
        keys.len(),
        98,
        "the deleted keys are gone from SNAPSHOT.SCAN"
    );
    assert_exact(&s, "after RedisModule_DeleteKey");
    // Only db 0's k:1 was deleted.
    let _: () = query(&mut c, &["SELECT", "3"]).unwrap();
    assert_eq!(snapshot_keys(&mut c), vec![b"k:1".to_vec()]);
}
