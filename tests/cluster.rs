//! Cluster topologies: snapscan on every node, and a full SNAPSHOT.SCAN
//! iteration equal to the node's native SCAN through resharding (MIGRATE
//! and, on Valkey 9+, CLUSTER MIGRATESLOTS), failover and slot takeover.
//!
//! The heavy topology cases (replicas, writes during resharding, failover)
//! run on redis-7.0 and valkey-9.1 only (see [`heavy`]); the others run on
//! every server.
mod common;

use common::cluster::*;
use common::*;
use redis::Value;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Whether the heavy topology cases run on this server: on redis-7.0 and
/// valkey-9.1 (the oldest and newest servers), on any server when run
/// outside `scripts/test.sh`, or everywhere with `SNAPSCAN_TOPOLOGY=all`.
fn heavy(test: &str) -> bool {
    heavy_on(test, &["redis-7.0", "valkey-9.1"])
}

#[test]
fn every_node_runs_snapscan_and_scans_exactly_with_hashtag_prefix_seeks() {
    let replicas = usize::from(heavy("replicas in the creation test"));
    let c = Cluster::start(3, replicas);
    for (i, n) in c.nodes.iter().enumerate() {
        let mods = module_names(&mut n.client());
        assert!(mods.iter().any(|m| m == "snapshot"), "node {i}: {mods:?}");
    }
    let mut cc = c.client();
    fill(&mut cc, "key:", 3000);
    for i in 0..50 {
        cc.set(&format!("{{user42}}:{i}"), "v");
        cc.set(&format!("user42:{i}"), "v");
    }
    c.assert_exact_everywhere("after loading 3,100 keys");
    // Every primary holds part of the keys.
    for p in 0..c.primaries {
        assert!(
            dbsize(&mut c.nodes[p].client()) > 500,
            "primary {p} holds too few keys"
        );
    }
    // `{user42}:*`: every key with the prefix is in one slot, and the walk
    // stays a seek (examines only the 50 keys with the prefix).
    let owner = c.owner(key_slot(b"{user42}:"));
    let n = &c.nodes[owner];
    let before = info_u64(&mut n.client(), "snapshot_entries_examined");
    let got = full_scan(
        &mut n.client(),
        "SNAPSHOT.SCAN",
        &["MATCH", "{user42}:*", "COUNT", "1000"],
    );
    let examined = info_u64(&mut n.client(), "snapshot_entries_examined") - before;
    assert_eq!(got.len(), 50, "{{user42}}:* keys on their owner");
    assert!(
        examined <= 51,
        "a hashtag prefix is a seek: {examined} entries examined for 50 keys"
    );
    // Another node holds none of them.
    let other = &c.nodes[(owner + 1) % c.primaries];
    let before = info_u64(&mut other.client(), "snapshot_entries_examined");
    let none = full_scan(
        &mut other.client(),
        "SNAPSHOT.SCAN",
        &["MATCH", "{user42}:*"],
    );
    assert!(none.is_empty(), "{{user42}}:* on a node without its slot");
    assert_eq!(
        info_u64(&mut other.client(), "snapshot_entries_examined"),
        before,
        "a node without the hashtag's slot checks no key"
    );
}

/// A primary whose slot is claimed by another node (SETSLOT NODE + epoch
/// bump) drops that slot's keys; Redis 7.0 does so without any notification.
/// The index purges them too.
#[test]
fn a_slot_taken_over_by_another_node_leaves_nothing_in_the_index() {
    let c = Cluster::start(3, 0);
    let slot = c.slots_of(0)[100];
    let keys = keys_in_slot(slot, 26);
    let mut cc = c.client();
    for k in &keys {
        cc.set(k, "v");
    }
    fill(&mut cc, "other:", 300);
    c.assert_exact_everywhere("before the takeover");
    let before = dbsize(&mut c.nodes[0].client());
    let mut c1 = c.nodes[1].client();
    let _: () = query(
        &mut c1,
        &["CLUSTER", "SETSLOT", &slot.to_string(), "NODE", c.id(1)],
    )
    .expect("SETSLOT NODE");
    let _: Value = query(&mut c1, &["CLUSTER", "BUMPEPOCH"]).expect("BUMPEPOCH");
    wait_until("node 0 lost the slot", TOPOLOGY_TIMEOUT, || {
        slot_owners(&mut c.nodes[0].client())[slot as usize] == c.id(1)
    });
    wait_until("node 0 dropped the keys", TOPOLOGY_TIMEOUT, || {
        dbsize(&mut c.nodes[0].client()) == before - keys.len() as u64
    });
    assert_exact(&c.nodes[0], "the old owner after the takeover");
    // Purged from the index itself, not only hidden.
    wait_until("index purged", Duration::from_secs(5), || {
        info_u64(&mut c.nodes[0].client(), "snapshot_index_keys")
            == dbsize(&mut c.nodes[0].client())
    });
    c.assert_exact_everywhere("after the takeover");
}

/// Legacy resharding (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE)
/// of 3 slots under writes: exact on both ends mid-migration (writes
/// paused) and after.
#[test]
fn migrate_based_resharding_under_writes() {
    if !heavy("migrate_based_resharding_under_writes") {
        return;
    }
    let c = Cluster::start(3, 1);
    let slots: Vec<u16> = c.slots_of(0)[..3].to_vec();
    let keys: Vec<String> = slots.iter().flat_map(|&s| keys_in_slot(s, 40)).collect();
    let mut cc = c.client();
    for k in &keys {
        cc.set(k, "v");
    }
    fill(&mut cc, "bg:", 1000);
    let (src, dst) = (&c.nodes[0], &c.nodes[1]);
    let (mut cs, mut cd) = (src.client(), dst.client());
    let mut writer = Writer::start(&c, keys.clone(), 7);
    for (i, &slot) in slots.iter().enumerate() {
        let s = slot.to_string();
        let _: () = query(&mut cd, &["CLUSTER", "SETSLOT", &s, "IMPORTING", c.id(0)]).unwrap();
        let _: () = query(&mut cs, &["CLUSTER", "SETSLOT", &s, "MIGRATING", c.id(1)]).unwrap();
        for round in 0..100 {
            let batch: Vec<String> =
                query(&mut cs, &["CLUSTER", "GETKEYSINSLOT", &s, "7"]).unwrap();
            if batch.is_empty() {
                break;
            }
            let mut args = vec![
                "MIGRATE".to_string(),
                "127.0.0.1".into(),
                dst.port().to_string(),
                String::new(),
                "0".into(),
                "5000".into(),
                "REPLACE".into(),
                "KEYS".into(),
            ];
            args.extend(batch);
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let _: Value = query(&mut cs, &refs).expect("MIGRATE");
            if i == 1 && round == 1 {
                // Mid-migration, writes paused: both ends exact (the
                // target shows the keys it imported, as SCAN does).
                writer.stop();
                wait_until("replicas in sync", TOPOLOGY_TIMEOUT, || {
                    c.replicas_in_sync()
                });
                assert_exact(src, "source mid-migration");
                assert_exact(dst, "target mid-migration");
                writer = Writer::start(&c, keys.clone(), 8);
            }
        }
        for n in [&mut cd, &mut cs] {
            let _: () = query(n, &["CLUSTER", "SETSLOT", &s, "NODE", c.id(1)]).unwrap();
        }
    }
    let writes = writer.stop();
    assert!(writes > 0, "the writer wrote");
    c.wait_stable();
    c.assert_exact_everywhere("after resharding under writes");
    assert!(slots.iter().all(|&s| c.owner(s) == 1));
}

/// `CLUSTER GETSLOTMIGRATIONS` on `node`: one map per migration.
fn migrations(node: &Server) -> Vec<HashMap<String, String>> {
    let v: Vec<Value> = query(&mut node.client(), &["CLUSTER", "GETSLOTMIGRATIONS"]).unwrap();
    v.into_iter().map(reply_fields).collect()
}

/// Waits until the migration of `range` (as "a-b") on `node` is in `state`.
fn wait_migration(node: &Server, range: &str, states: &[&str]) {
    wait_until(
        &format!("migration {range} in {states:?}"),
        TOPOLOGY_TIMEOUT,
        || {
            migrations(node).iter().any(|m| {
                m.get("slot_ranges").map(String::as_str) == Some(range)
                    && states.contains(&m.get("state").map_or("", String::as_str))
            })
        },
    );
}

/// Atomic slot migration (Valkey 9+): not refused with snapscan loaded;
/// mid-import the target hides the importing keys (as SCAN does) though it
/// has indexed them; after completion both ends are exact; a cancelled
/// import leaves nothing in the target's index.
#[test]
fn atomic_slot_migration_mid_import_completion_and_cancel() {
    let probe = Server::start_with(ServerOpts::without_module());
    if !has_atomic_slot_migration(&probe) {
        eprintln!(
            "skipped: no CLUSTER MIGRATESLOTS on {}",
            Server::server_name()
        );
        return;
    }
    drop(probe);
    let c = Cluster::start(3, 0);
    let (src, dst) = (&c.nodes[0], &c.nodes[1]);
    let own = c.slots_of(0);
    let (a, b) = (own[0], own[199]);
    let range = format!("{a}-{b}");
    let keys: Vec<String> = (a..=b)
        .step_by(10)
        .flat_map(|s| keys_in_slot(s, 5))
        .collect();
    let mut cc = c.client();
    for k in &keys {
        cc.set(k, "v");
    }
    fill(&mut cc, "bg:", 1000);
    let dst_before = dbsize(&mut dst.client());
    let _: () = query(
        &mut src.client(),
        &["DEBUG", "SLOTMIGRATION", "PREVENT-PAUSE", "1"],
    )
    .unwrap();
    let writer = Writer::start(&c, keys.clone(), 11);
    let _: Value = query(
        &mut src.client(),
        &[
            "CLUSTER",
            "MIGRATESLOTS",
            "SLOTSRANGE",
            &a.to_string(),
            &b.to_string(),
            "NODE",
            c.id(1),
        ],
    )
    .expect("CLUSTER MIGRATESLOTS is not refused with snapscan loaded");
    wait_migration(src, &range, &["waiting-to-pause"]);
    assert!(writer.stop() > 0);
    // Mid-import: the target indexed the importing keys but shows none.
    wait_until("target received the keys", TOPOLOGY_TIMEOUT, || {
        info_u64(&mut dst.client(), "snapshot_index_keys") > dst_before
    });
    assert_eq!(
        dbsize(&mut dst.client()),
        dst_before,
        "DBSIZE hides importing keys"
    );
    assert_exact(dst, "target mid-import");
    assert_exact(src, "source mid-import");
    let _: () = query(
        &mut src.client(),
        &["DEBUG", "SLOTMIGRATION", "PREVENT-PAUSE", "0"],
    )
    .unwrap();
    wait_migration(src, &range, &["success"]);
    c.wait_stable();
    assert!(
        dbsize(&mut dst.client()) > dst_before,
        "the target has the slots' keys"
    );
    c.assert_exact_everywhere("after the import completed");
    wait_until("source index purged", Duration::from_secs(5), || {
        info_u64(&mut src.client(), "snapshot_index_keys") == dbsize(&mut src.client())
    });

    // Cancelled import: from node 1 back to node 2.
    let dst2 = &c.nodes[2];
    let before2 = dbsize(&mut dst2.client());
    let _: () = query(
        &mut dst.client(),
        &["DEBUG", "SLOTMIGRATION", "PREVENT-PAUSE", "1"],
    )
    .unwrap();
    let _: Value = query(
        &mut dst.client(),
        &[
            "CLUSTER",
            "MIGRATESLOTS",
            "SLOTSRANGE",
            &a.to_string(),
            &b.to_string(),
            "NODE",
            c.id(2),
        ],
    )
    .expect("CLUSTER MIGRATESLOTS");
    wait_migration(dst, &range, &["waiting-to-pause"]);
    wait_until("node 2 received the keys", TOPOLOGY_TIMEOUT, || {
        info_u64(&mut dst2.client(), "snapshot_index_keys") > before2
    });
    assert_exact(dst2, "target of the import to cancel");
    let _: Value = query(&mut dst.client(), &["CLUSTER", "CANCELSLOTMIGRATIONS"]).unwrap();
    wait_migration(dst, &range, &["cancelled", "failed"]);
    let _: () = query(
        &mut dst.client(),
        &["DEBUG", "SLOTMIGRATION", "PREVENT-PAUSE", "0"],
    )
    .unwrap();
    wait_until("cancelled import purged", Duration::from_secs(5), || {
        info_u64(&mut dst2.client(), "snapshot_index_keys") == before2
    });
    assert_eq!(dbsize(&mut dst2.client()), before2);
    c.assert_exact_everywhere("after the cancelled import");
}

/// A replica takes over its primary (CLUSTER FAILOVER) under writes.
#[test]
fn failover_under_writes_keeps_every_node_exact() {
    if !heavy("failover_under_writes_keeps_every_node_exact") {
        return;
    }
    let c = Cluster::start(3, 1);
    let mut cc = c.client();
    fill(&mut cc, "k:", 2000);
    let keys: Vec<String> = (0..300).map(|i| format!("w:{i}")).collect();
    let writer = Writer::start(&c, keys, 3);
    // Node 3 is node 0's replica. A manual failover the primary never hears
    // of (its cluster-bus link was not up yet) lapses after 5 s: ask again.
    let mut asked: Option<Instant> = None;
    wait_until("replica promoted", Duration::from_secs(40), || {
        let info = cmd_str(&mut c.nodes[3].client(), &["INFO", "replication"]);
        if info_field(&info, "role").as_deref() == Some("master") {
            return true;
        }
        if asked.is_none_or(|t| t.elapsed() > Duration::from_secs(6)) {
            let _: () =
                query(&mut c.nodes[3].client(), &["CLUSTER", "FAILOVER"]).expect("FAILOVER");
            asked = Some(Instant::now());
        }
        false
    });
    assert!(writer.stop() > 0);
    c.wait_stable();
    c.assert_exact_everywhere("after failover");
    assert!(c.current_primaries().contains(&3));
}

/// SNAPSHOT.UNLINK on a node importing a slot the legacy way (SETSLOT
/// IMPORTING): the snapshot shows the imported keys (as SCAN does), but the
/// server lets no module write them, so they are skipped (counted in INFO)
/// and every key of the node's own slots is unlinked; DRYRUN counts the
/// same. Once the slot is the node's, its keys go too. A refused `UNLINK`
/// (the cluster down) answers the server's own error text.
#[test]
fn unlink_on_an_importing_node_skips_the_imported_keys() {
    let c = Cluster::start(2, 0);
    let (src, dst) = (&c.nodes[0], &c.nodes[1]);
    let (own, imported) = (c.slots_of(1)[0], c.slots_of(0)[0]);
    let own_keys = keys_in_slot(own, 5);
    let imported_keys = keys_in_slot(imported, 3);
    let mut cc = c.client();
    for k in own_keys.iter().chain(&imported_keys) {
        cc.set(k, "v");
    }
    let (mut cs, mut cd) = (src.client(), dst.client());
    let s = imported.to_string();
    let _: () = query(&mut cd, &["CLUSTER", "SETSLOT", &s, "IMPORTING", c.id(0)]).unwrap();
    let _: () = query(&mut cs, &["CLUSTER", "SETSLOT", &s, "MIGRATING", c.id(1)]).unwrap();
    let mut args: Vec<String> = ["MIGRATE", "127.0.0.1", &dst.port().to_string(), "", "0"]
        .iter()
        .map(|a| a.to_string())
        .collect();
    args.extend(["5000".into(), "KEYS".into()]);
    args.extend(imported_keys.iter().cloned());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let _: Value = query(&mut cs, &refs).expect("MIGRATE");
    // The target's snapshot shows the imported keys once it has read the
    // import from the topology.
    wait_until(
        "the import in the target's snapshot",
        TOPOLOGY_TIMEOUT,
        || snapshot_keys(&mut cd).len() == own_keys.len() + imported_keys.len(),
    );
    let unlink = |con: &mut redis::Connection, extra: &[&str]| -> i64 {
        let mut a = vec!["SNAPSHOT.UNLINK", "*"];
        a.extend(extra);
        query(con, &a).unwrap_or_else(|e| panic!("{a:?}: {}", err_text(&e)))
    };
    let not_owned = |con: &mut redis::Connection| info_u64(con, "snapshot_unlink_keys_not_owned");
    assert_eq!(not_owned(&mut cd), 0);
    assert_eq!(unlink(&mut cd, &["DRYRUN"]), own_keys.len() as i64);
    assert_eq!(not_owned(&mut cd), imported_keys.len() as u64);
    assert_eq!(unlink(&mut cd, &[]), own_keys.len() as i64);
    assert_eq!(not_owned(&mut cd), 2 * imported_keys.len() as u64);
    let mut left: Vec<Vec<u8>> = native_keys(&mut cd);
    left.sort();
    let mut want: Vec<Vec<u8>> = imported_keys
        .iter()
        .map(|k| k.clone().into_bytes())
        .collect();
    want.sort();
    assert_eq!(
        left, want,
        "the imported keys stay, the node's own are gone"
    );

    // The slot becomes the target's: its keys go too (once the module has
    // read the new topology; until then calls unlink nothing).
    for n in [&mut cd, &mut cs] {
        let _: () = query(n, &["CLUSTER", "SETSLOT", &s, "NODE", c.id(1)]).unwrap();
    }
    let mut unlinked = 0;
    wait_until(
        "the slot's keys unlinked once owned",
        TOPOLOGY_TIMEOUT,
        || {
            unlinked += unlink(&mut cd, &[]);
            unlinked >= imported_keys.len() as i64
        },
    );
    assert_eq!(unlinked, imported_keys.len() as i64);
    assert!(native_keys(&mut cd).is_empty());

    // The cluster down (a slot of the target unassigned, full coverage
    // required): the server refuses the module's UNLINK; the caller gets
    // the count so far (none) and the server's reason.
    for k in &own_keys {
        cc.set(k, "v");
    }
    config_set(&mut cd, "cluster-require-full-coverage", "yes");
    // Neither the slot of its own keys nor the imported one (Redis 8.4+'s
    // SCAN hides the keys of unassigned slots).
    let spare = c
        .slots_of(1)
        .into_iter()
        .find(|&x| x != own && x != imported)
        .expect("a spare slot")
        .to_string();
    let _: () = query(&mut cd, &["CLUSTER", "DELSLOTS", &spare]).unwrap();
    wait_until("the target's cluster down", TOPOLOGY_TIMEOUT, || {
        let info = cmd_str(&mut cd, &["CLUSTER", "INFO"]);
        info_field(&info, "cluster_state").as_deref() == Some("fail")
    });
    let err = match query::<Value>(&mut cd, &["SNAPSHOT.UNLINK", "*"]) {
        Ok(v) => panic!("SNAPSHOT.UNLINK on a down cluster replied {v:?}"),
        Err(e) => err_text(&e),
    };
    let reason = err
        .strip_prefix("ERR snapscan: UNLINK failed after 0 keys: ")
        .unwrap_or_else(|| panic!("unexpected error {err:?}"));
    // Valkey and Redis word it "Attempted to access a non local key in a
    // cluster node" or "... while the cluster is down".
    assert!(
        reason.starts_with("ERR ") && reason.to_ascii_lowercase().contains("cluster"),
        "the server's own reason, not a generic one: {err:?}"
    );
    assert_eq!(native_keys(&mut cd).len(), own_keys.len());
}

/// `cmd key <cursor> extra...` pages through `con` from cursor 0 to the
/// end, sending `ASKING` before each page when `asking`; returns the flat
/// elements of every page.
fn pages(
    con: &mut redis::Connection,
    cmd: &str,
    key: &str,
    extra: &[&str],
    asking: bool,
) -> Vec<Vec<u8>> {
    let mut cursor = "0".to_string();
    let mut out = Vec::new();
    for _ in 0..100_000 {
        if asking {
            let _: () = query(con, &["ASKING"]).unwrap();
        }
        let mut args = vec![cmd, key, &cursor];
        args.extend_from_slice(extra);
        let (next, page): (String, Vec<Vec<u8>>) =
            query(con, &args).unwrap_or_else(|e| panic!("{args:?}: {}", err_text(&e)));
        out.extend(page);
        if next == "0" {
            return out;
        }
        cursor = next;
    }
    panic!("{cmd} {key} did not finish");
}

/// `[a, b, c, d, ...]` as sorted `(a, b), (c, d)` pairs.
fn sorted_pairs(flat: &[Vec<u8>]) -> Vec<(Vec<u8>, Vec<u8>)> {
    sorted(
        &flat
            .chunks(2)
            .map(|kv| (kv[0].clone(), kv[1].clone()))
            .collect::<Vec<_>>(),
    )
}

/// `HSET key f0 v0 ... f<n-1> v<n-1>` through `con`.
fn hset_fields(con: &mut redis::Connection, key: &str, n: usize) {
    let mut args: Vec<String> = vec!["HSET".into(), key.into()];
    for i in 0..n {
        args.push(format!("f{i}"));
        args.push(format!("v{i}"));
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let added: i64 = query(con, &a).unwrap();
    assert_eq!(added, n as i64);
}

/// SNAPSHOT.HSCAN/SSCAN/ZSCAN on a READONLY cluster replica, of collections
/// larger than `snapshot.hash-copy-batch`: the copy's later slices run on
/// the module's own context, whose client is not READONLY; they used to
/// go through RM_Call HSCAN, whose cluster check redirected them ("cannot
/// copy the hash: the scan call failed", review finding). Each iteration
/// equals the native read on the same connection. Then, while the primary
/// adds fields one by one, each copy the replica makes holds a prefix of
/// them (the hash at one instant: slices restart, or end in one hold).
#[test]
fn large_collections_on_a_readonly_replica() {
    let c = Cluster::start(1, 1);
    let mut p = c.nodes[0].client();
    hset_fields(&mut p, "h", 3000);
    let mut args: Vec<String> = vec!["SADD".into(), "s".into()];
    args.extend((0..3000).map(|i| format!("m{i}")));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let _: i64 = query(&mut p, &a).unwrap();
    // Scores of every format: integers, fractions, huge, tiny, infinities.
    let mut args: Vec<String> = vec!["ZADD".into(), "z".into()];
    for i in 0..3000 {
        let score = match i % 6 {
            0 => format!("{}", i / 6),
            1 => format!("{}", i as f64 / 7.0),
            2 => format!("{}e300", i),
            3 => format!("-{}e-300", i),
            4 => "0.1".to_string(),
            _ => if i % 12 == 5 { "inf" } else { "-inf" }.to_string(),
        };
        args.push(score);
        args.push(format!("m{i}"));
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let _: i64 = query(&mut p, &a).unwrap();
    wait_until("replica in sync", TOPOLOGY_TIMEOUT, || c.replicas_in_sync());

    let mut r = c.nodes[1].client();
    config_set(&mut r, "snapshot.hash-copy-batch", "100");
    let _: () = query(&mut r, &["READONLY"]).unwrap();
    let hgetall: Vec<Vec<u8>> = query(&mut r, &["HGETALL", "h"]).unwrap();
    let got = pages(&mut r, "SNAPSHOT.HSCAN", "h", &["COUNT", "700"], false);
    assert_eq!(got.len(), 6000, "SNAPSHOT.HSCAN on the replica");
    assert_eq!(
        sorted_pairs(&got),
        sorted_pairs(&hgetall),
        "SNAPSHOT.HSCAN = HGETALL"
    );
    let smembers: Vec<Vec<u8>> = query(&mut r, &["SMEMBERS", "s"]).unwrap();
    let got = pages(&mut r, "SNAPSHOT.SSCAN", "s", &["COUNT", "700"], false);
    assert_eq!(got.len(), 3000, "SNAPSHOT.SSCAN on the replica");
    assert_eq!(sorted(&got), sorted(&smembers), "SNAPSHOT.SSCAN = SMEMBERS");
    // Scores as bytes: exactly native ZSCAN's formatting.
    let zscan = pages(&mut r, "ZSCAN", "z", &["COUNT", "1000"], false);
    let got = pages(&mut r, "SNAPSHOT.ZSCAN", "z", &["COUNT", "700"], false);
    assert_eq!(got.len(), 6000, "SNAPSHOT.ZSCAN on the replica");
    assert_eq!(
        sorted_pairs(&got),
        sorted_pairs(&zscan),
        "SNAPSHOT.ZSCAN = ZSCAN"
    );
    // Inside MULTI and a read-only script the copy is made inline, through
    // the caller's (READONLY) client.
    let _: () = query(&mut r, &["MULTI"]).unwrap();
    let _: () = query(&mut r, &["SNAPSHOT.HSCAN", "h", "0", "COUNT", "100000"]).unwrap();
    let exec: Vec<(String, Vec<Vec<u8>>)> = query(&mut r, &["EXEC"])
        .unwrap_or_else(|e| panic!("MULTI on the replica: {}", err_text(&e)));
    assert_eq!(sorted_pairs(&exec[0].1), sorted_pairs(&hgetall), "in MULTI");
    let script = "return redis.call('SNAPSHOT.HSCAN', KEYS[1], '0', 'COUNT', '100000')";
    let (next, got): (String, Vec<Vec<u8>>) = query(&mut r, &["EVAL_RO", script, "1", "h"])
        .unwrap_or_else(|e| panic!("EVAL_RO on the replica: {}", err_text(&e)));
    assert_eq!(next, "0");
    assert_eq!(sorted_pairs(&got), sorted_pairs(&hgetall), "in EVAL_RO");

    // Fields w0, w1, ... added one by one on the primary while the replica
    // copies: every copy holds w0..w<k> for some k, and all of f0..f2999.
    // At most 90,000 of them, so that a whole copy always fits one page of
    // COUNT 100000 (and snapshot.scan-budget's 100,000 entries).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let mut w = c.nodes[0].client();
    let writer = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut n = 0usize;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed)
            && Instant::now() < deadline
            && n < 90_000
        {
            let f = format!("w{n}");
            let _: i64 = query(&mut w, &["HSET", "h", &f, "x"]).unwrap();
            n += 1;
        }
        n
    });
    wait_until(
        "the writer's fields on the replica",
        TOPOLOGY_TIMEOUT,
        || query::<i64>(&mut r, &["HEXISTS", "h", "w0"]).unwrap() == 1,
    );
    let retries_before = info_u64(&mut c.nodes[1].client(), "snapshot_hash_copy_retries");
    let mut sizes = Vec::new();
    for round in 0..8 {
        let (next, names): (String, Vec<Vec<u8>>) = query(
            &mut r,
            &["SNAPSHOT.HSCAN", "h", "0", "COUNT", "100000", "NOVALUES"],
        )
        .unwrap_or_else(|e| panic!("round {round}: {}", err_text(&e)));
        assert_eq!(next, "0");
        let names: std::collections::HashSet<Vec<u8>> = names.into_iter().collect();
        let k = names.iter().filter(|n| n.starts_with(b"w")).count();
        for i in 0..3000 {
            assert!(
                names.contains(format!("f{i}").as_bytes()),
                "round {round}: f{i} missing"
            );
        }
        for i in 0..k {
            assert!(
                names.contains(format!("w{i}").as_bytes()),
                "round {round}: the copy holds {k} w-fields but not w{i}: not one instant"
            );
        }
        sizes.push(k);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let writes = writer.join().unwrap();
    let retries = info_u64(&mut c.nodes[1].client(), "snapshot_hash_copy_retries") - retries_before;
    eprintln!("{writes} writes; w-fields per copy {sizes:?}; {retries} restarts");
    assert!(
        writes > 0 && sizes.last() > sizes.first(),
        "the copies saw the writes"
    );
}

/// `ASKING` on a node importing a slot: SNAPSHOT.HSCAN of a hash larger than
/// `snapshot.hash-copy-batch` that was migrated there is served, equal to
/// native HGETALL (its later slices used to be redirected like the
/// replica's); without `ASKING`, the command is redirected as HGETALL is.
#[test]
fn asking_on_an_importing_node_copies_a_large_hash() {
    let c = Cluster::start(2, 0);
    let slot = c.slots_of(0)[0];
    let key = keys_in_slot(slot, 1).remove(0);
    let (src, dst) = (&c.nodes[0], &c.nodes[1]);
    let (mut cs, mut cd) = (src.client(), dst.client());
    hset_fields(&mut cs, &key, 3000);
    let s = slot.to_string();
    let _: () = query(&mut cd, &["CLUSTER", "SETSLOT", &s, "IMPORTING", c.id(0)]).unwrap();
    let _: () = query(&mut cs, &["CLUSTER", "SETSLOT", &s, "MIGRATING", c.id(1)]).unwrap();
    let port = dst.port().to_string();
    let _: Value = query(&mut cs, &["MIGRATE", "127.0.0.1", &port, &key, "0", "5000"]).unwrap();
    config_set(&mut cd, "snapshot.hash-copy-batch", "100");

    let native = expect_err(&mut cd, &["HGETALL", &key]);
    let snap = expect_err(&mut cd, &["SNAPSHOT.HSCAN", &key, "0"]);
    assert!(
        native.starts_with("MOVED"),
        "HGETALL without ASKING: {native}"
    );
    assert!(
        snap.starts_with("MOVED"),
        "SNAPSHOT.HSCAN without ASKING: {snap}"
    );
    let _: () = query(&mut cd, &["ASKING"]).unwrap();
    let hgetall: Vec<Vec<u8>> = query(&mut cd, &["HGETALL", &key]).unwrap();
    assert_eq!(hgetall.len(), 6000, "the hash was migrated");
    let got = pages(&mut cd, "SNAPSHOT.HSCAN", &key, &["COUNT", "700"], true);
    assert_eq!(
        sorted_pairs(&got),
        sorted_pairs(&hgetall),
        "SNAPSHOT.HSCAN = HGETALL"
    );
}
