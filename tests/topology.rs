//! Topology changes seen at once: a full SNAPSHOT.SCAN iteration started
//! right after a change has completed (as the node's native commands show
//! it, with no settling delay) equals the node's native SCAN.
//!
//! - Atomic slot migration (Redis 8.4+'s `CLUSTER MIGRATION IMPORT`, Valkey
//!   9+'s `CLUSTER MIGRATESLOTS`, so on redis-8.6 and valkey-9.1): under
//!   writes, checked in the middle and right after completion on both
//!   nodes; a cancelled import, keys then deleted on the source and the
//!   slots imported again: nothing deleted comes back.
//! - `CLUSTER DELSLOTSRANGE` / `ADDSLOTSRANGE` (every server), checked right
//!   after each, with SNAPSHOT.UNLINK right after ADDSLOTSRANGE.
//! - A slot change earlier in the same turn of the event loop (pipelined,
//!   in `MULTI`): Redis writes `nodes.conf` only before it sleeps, so the
//!   module reads the server's memory (Redis 8.4+) where `SCAN` depends on
//!   ownership, and elsewhere shows every key the node holds, as `SCAN` does
//!   (every server).
//! - `DELSLOTS` then another node taking the slot, between two reads of the
//!   module: the node keeps the keys, so must the index (every server).
//! - A failover (`CLUSTER FAILOVER TAKEOVER`, on redis-8.6 and valkey-9.1
//!   only, like the other heavy topology cases), checked on the new primary
//!   right after its promotion.
mod common;

use common::cluster::*;
use common::*;
use redis::Value;
use std::time::{Duration, Instant};

/// Whether the heavy cases run on this server (see [`heavy_on`]).
fn heavy(test: &str) -> bool {
    heavy_on(test, &["redis-8.6", "valkey-9.1"])
}

/// `n` keys in each of every 10th slot of `a..=b`.
fn range_keys(a: u16, b: u16, n: usize) -> Vec<String> {
    (a..=b)
        .step_by(10)
        .flat_map(|s| keys_in_slot(s, n))
        .collect()
}

/// Two primaries; keys written in every 10th of the first `slots` slots of
/// node 0 (`per_slot` each), to be moved to node 1.
struct Moving {
    c: Cluster,
    a: u16,
    b: u16,
    range: String,
    keys: Vec<String>,
}

/// `None` (saying why) where the server has no atomic slot migration.
fn two_primaries_with_keys(slots: usize, per_slot: usize) -> Option<(Asm, Moving)> {
    let Some(asm) = Asm::detect() else {
        eprintln!(
            "skipped: no atomic slot migration on {}",
            Server::server_name()
        );
        return None;
    };
    let c = Cluster::start(2, 0);
    let own = c.slots_of(0);
    let (a, b) = (own[0], own[slots - 1]);
    let keys = range_keys(a, b, per_slot);
    let mut cc = c.client();
    for k in &keys {
        cc.set(k, "v");
    }
    let range = format!("{a}-{b}");
    Some((
        asm,
        Moving {
            c,
            a,
            b,
            range,
            keys,
        },
    ))
}

/// Atomic slot migration under writes: exact on both nodes in the middle,
/// and on each node right after it says the migration completed.
#[test]
fn atomic_migration_under_writes_is_exact_midway_and_right_after() {
    let Some((
        asm,
        Moving {
            c,
            a,
            b,
            range,
            keys,
        },
    )) = two_primaries_with_keys(300, 25)
    else {
        return;
    };
    let (src, dst) = (&c.nodes[0], &c.nodes[1]);
    fill(&mut c.client(), "bg:", 500);
    let dst_before = dbsize(&mut dst.client());
    if asm == Asm::Redis {
        // The source trims key by key (trim started ... completed), as when
        // some module asks for `key_trimmed` notifications; the cancelled
        // import's target in the next test trims in the background.
        let _: () = query(
            &mut src.client(),
            &["DEBUG", "ASM-TRIM-METHOD", "active", "0"],
        )
        .expect("DEBUG ASM-TRIM-METHOD");
    }
    asm.hold(src, true);
    let writer = Writer::start(&c, keys.clone(), 19);
    asm.start(&c, 0, 1, a, b);
    wait_until("the target receives keys", TOPOLOGY_TIMEOUT, || {
        info_u64(&mut dst.client(), "snapshot_index_keys") > dst_before
    });
    assert!(writer.stop() > 0, "the writer wrote during the migration");
    assert!(
        !asm.states(dst, &range)
            .iter()
            .chain(&asm.states(src, &range))
            .any(|s| s == asm.done_state()),
        "the migration is still under way"
    );
    assert_exact_now(dst, "target, midway");
    assert_exact_now(src, "source, midway");
    asm.hold(src, false);
    // Each node right after it says the migration is over.
    asm.wait(dst, &range, &[asm.done_state()]);
    assert_exact_now(dst, "target, right after the import completed");
    asm.wait(src, &range, &[asm.done_state()]);
    assert_exact_now(src, "source, right after the migration completed");
    assert!(
        dbsize(&mut dst.client()) > dst_before,
        "the target has the slots' keys"
    );
    wait_until(
        "both indexes hold only their keys",
        TOPOLOGY_TIMEOUT,
        || {
            [src, dst].iter().all(|n| {
                info_u64(&mut n.client(), "snapshot_index_keys") == dbsize(&mut n.client())
            })
        },
    );
}

/// A cancelled import leaves nothing in the target's index: keys then
/// deleted on the source do not come back when the slots are imported.
#[test]
fn cancelled_import_then_deletes_then_reimport_brings_nothing_back() {
    let Some((
        asm,
        Moving {
            c,
            a,
            b,
            range,
            keys,
        },
    )) = two_primaries_with_keys(200, 20)
    else {
        return;
    };
    let (src, dst) = (&c.nodes[0], &c.nodes[1]);
    let mut cc = c.client();
    let dst_before = dbsize(&mut dst.client());
    asm.hold(src, true);
    asm.start(&c, 0, 1, a, b);
    wait_until("the target receives keys", TOPOLOGY_TIMEOUT, || {
        info_u64(&mut dst.client(), "snapshot_index_keys") > dst_before
    });
    asm.cancel(&c, 0, 1);
    asm.wait(dst, &range, &["canceled", "cancelled", "failed"]);
    asm.hold(src, false);
    assert_exact_now(dst, "target, right after the cancelled import");
    wait_until("the cancelled import purged", TOPOLOGY_TIMEOUT, || {
        info_u64(&mut dst.client(), "snapshot_index_keys") == dbsize(&mut dst.client())
    });
    assert_eq!(dbsize(&mut dst.client()), dst_before);

    // Half the keys deleted on the source, then the slots imported for good.
    let deleted: Vec<&String> = keys.iter().step_by(2).collect();
    for k in &deleted {
        cc.del(k);
    }
    asm.start(&c, 0, 1, a, b);
    asm.wait(dst, &range, &[asm.done_state()]);
    assert_exact_now(dst, "target, right after the import completed");
    let snap = snapshot_keys(&mut dst.client());
    let back: Vec<&&String> = deleted
        .iter()
        .filter(|k| snap.binary_search(&k.as_bytes().to_vec()).is_ok())
        .collect();
    assert!(back.is_empty(), "deleted keys came back: {back:?}");
    assert_eq!(
        dbsize(&mut dst.client()),
        dst_before + (keys.len() - deleted.len()) as u64
    );
    wait_until(
        "the target's index holds only its keys",
        TOPOLOGY_TIMEOUT,
        || info_u64(&mut dst.client(), "snapshot_index_keys") == dbsize(&mut dst.client()),
    );
}

/// DELSLOTSRANGE then ADDSLOTSRANGE of slots whose keys the node keeps:
/// exact right after each; SNAPSHOT.UNLINK right after ADDSLOTSRANGE
/// deletes the slots' keys.
#[test]
fn delslots_and_addslots_are_seen_right_after() {
    let c = Cluster::start(1, 0);
    let node = &c.nodes[0];
    let mut cc = c.client();
    let (a, b) = (1000u16, 1099u16);
    let keys = range_keys(a, b, 10);
    for k in &keys {
        cc.set(k, "v");
    }
    fill(&mut cc, "bg:", 300);
    let mut con = node.client();
    let (sa, sb) = (a.to_string(), b.to_string());
    assert_exact_now(node, "before");
    let _: () = query(&mut con, &["CLUSTER", "DELSLOTSRANGE", &sa, &sb]).unwrap();
    assert_exact_now(node, "right after DELSLOTSRANGE");
    // And for longer than the module's safety-net refresh takes to come by
    // (the keys stay in the database: they must stay in the index too).
    let since = Instant::now();
    while since.elapsed() < Duration::from_millis(1500) {
        assert_exact_now(node, "after DELSLOTSRANGE");
    }
    let _: () = query(&mut con, &["CLUSTER", "ADDSLOTSRANGE", &sa, &sb]).unwrap();
    assert_exact_now(node, "right after ADDSLOTSRANGE");
    assert!(
        native_keys(&mut con).len() >= keys.len(),
        "the node kept the slots' keys"
    );
    // DELSLOTSRANGE, ADDSLOTSRANGE, then SNAPSHOT.UNLINK at once: every
    // key of those slots goes.
    let _: () = query(&mut con, &["CLUSTER", "DELSLOTSRANGE", &sa, &sb]).unwrap();
    let _: () = query(&mut con, &["CLUSTER", "ADDSLOTSRANGE", &sa, &sb]).unwrap();
    let n: i64 = query(&mut con, &["SNAPSHOT.UNLINK", "{t*}:*"]).unwrap();
    assert_eq!(
        n,
        keys.len() as i64,
        "SNAPSHOT.UNLINK right after ADDSLOTSRANGE"
    );
    assert_exact_now(node, "after SNAPSHOT.UNLINK");
}

/// A replica takes its primary's slots (`CLUSTER FAILOVER TAKEOVER`). What
/// a snapshot shows does not change on a failover on these servers (a
/// replica already shows its primary's slots); what does change is that
/// the node may now write. This guards that, right after the node says it
/// is a primary: its index equals its native SCAN (nothing was purged or
/// hidden by the role change) and SNAPSHOT.UNLINK deletes every matching
/// key at once (neither refused as on a replica nor skipping keys of slots
/// the module would not yet know the node owns); and exact everywhere
/// afterwards.
#[test]
fn failover_is_seen_right_after_on_the_new_primary() {
    if !heavy("failover_is_seen_right_after_on_the_new_primary") {
        return;
    }
    let c = Cluster::start(2, 1);
    let mut cc = c.client();
    fill(&mut cc, "k:", 1000);
    // Node 2 is node 0's replica.
    wait_until("the replica in sync", TOPOLOGY_TIMEOUT, || {
        c.replicas_in_sync()
    });
    let replica = &c.nodes[2];
    let mut con = replica.client();
    assert_exact_now(replica, "the replica before");
    let _: () = query(&mut con, &["CLUSTER", "FAILOVER", "TAKEOVER"]).expect("TAKEOVER");
    let deadline = Instant::now() + TOPOLOGY_TIMEOUT;
    loop {
        let info = cmd_str(&mut con, &["INFO", "replication"]);
        if info_field(&info, "role").as_deref() == Some("master") {
            break;
        }
        assert!(Instant::now() < deadline, "the replica was not promoted");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_exact_now(replica, "the new primary, right after its promotion");
    let mine = native_keys(&mut con)
        .iter()
        .filter(|k| k.starts_with(b"k:"))
        .count();
    let n: i64 = query(&mut con, &["SNAPSHOT.UNLINK", "k:*"]).expect("SNAPSHOT.UNLINK");
    assert_eq!(n, mine as i64, "SNAPSHOT.UNLINK right after the promotion");
    c.wait_stable();
    c.assert_exact_everywhere("after the failover");
}

/// 20,000 keys `k:<i>` written to `node` (which owns every slot).
fn write_20k(node: &Server) {
    let mut con = node.client();
    let mut p = redis::pipe();
    for i in 0..20_000 {
        p.cmd("SET").arg(format!("k:{i}")).arg("v").ignore();
    }
    p.query::<()>(&mut con).expect("SETs");
}

/// `SCAN 0 COUNT 1000000` and `SNAPSHOT.SCAN 0 COUNT 1000000` appended to
/// a pipeline.
fn scan_both(p: &mut redis::Pipeline) -> &mut redis::Pipeline {
    p.cmd("SCAN")
        .arg(0)
        .arg("COUNT")
        .arg(1_000_000)
        .cmd("SNAPSHOT.SCAN")
        .arg(0)
        .arg("COUNT")
        .arg(1_000_000)
}

/// Whether `SCAN` hides the keys of slots the node does not own (Redis
/// 8.4+).
fn scan_hides_unowned(node: &Server) -> bool {
    let (major, minor, _) = node.version();
    !node.is_valkey() && (major, minor) >= (8, 4)
}

/// A slot change earlier in the same turn of the event loop, before the
/// server rewrote `nodes.conf`: pipelined `CLUSTER DELSLOTSRANGE` then
/// `SCAN` and `SNAPSHOT.SCAN`; `MULTI` with `CLUSTER ADDSLOTSRANGE`, `SCAN`
/// and `SNAPSHOT.SCAN`. The snapshot shows what `SCAN` shows, on every
/// server (half the keys on Redis 8.4+, all of them elsewhere).
#[test]
fn a_slot_change_earlier_in_the_same_turn_is_seen() {
    let c = Cluster::start(1, 0);
    let node = &c.nodes[0];
    write_20k(node);
    assert_exact_now(node, "before");
    let hides = scan_hides_unowned(node);
    let mut con = node.client();

    let mut p = redis::pipe();
    p.cmd("CLUSTER")
        .arg("DELSLOTSRANGE")
        .arg(0)
        .arg(8191)
        .ignore();
    let (n, s): (Value, Value) = scan_both(&mut p).query(&mut con).expect("pipeline");
    let (native, snap) = scan_pair(&mut con, n, s);
    assert_eq!(
        native.len() < 20_000,
        hides,
        "SCAN hides unowned slots' keys on Redis 8.4+ only ({} keys)",
        native.len()
    );
    assert_same_keys(
        &snap,
        &native,
        "pipelined DELSLOTSRANGE, SCAN, SNAPSHOT.SCAN",
    );

    let mut p = redis::pipe();
    p.atomic()
        .cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(8191)
        .ignore();
    let (n, s): (Value, Value) = scan_both(&mut p).query(&mut con).expect("MULTI");
    let (native, snap) = scan_pair(&mut con, n, s);
    assert_eq!(native.len(), 20_000, "every key is the node's again");
    assert_same_keys(&snap, &native, "MULTI: ADDSLOTSRANGE, SCAN, SNAPSHOT.SCAN");
    assert_exact_now(node, "after");
}

/// Two primaries; 50 keys in node 0's first slot.
fn two_primaries_with_slot_keys() -> (Cluster, u16, Vec<String>) {
    let c = Cluster::start(2, 0);
    let slot = c.slots_of(0)[0];
    let keys = keys_in_slot(slot, 50);
    let mut cc = c.client();
    for k in &keys {
        cc.set(k, "v");
    }
    (c, slot, keys)
}

/// A legacy import (`CLUSTER SETSLOT ... IMPORTING`) started, then ended
/// (`STABLE`), earlier in the same turn, of a slot whose keys the node kept
/// after `DELSLOTS`: on Redis 8.4+ `SCAN` shows them only while importing;
/// elsewhere always. The snapshot shows what `SCAN` shows.
#[test]
fn a_legacy_import_in_the_same_turn_is_seen() {
    let (c, slot, keys) = two_primaries_with_slot_keys();
    let node = &c.nodes[0];
    let mut con = node.client();
    let s = slot.to_string();
    let _: () = query(&mut con, &["CLUSTER", "DELSLOTS", &s]).unwrap();
    assert_exact_now(node, "after DELSLOTS");
    let holds = |native: &[Vec<u8>]| {
        keys.iter()
            .filter(|k| native.binary_search(&k.as_bytes().to_vec()).is_ok())
            .count()
    };
    for (state, shown) in [("IMPORTING", keys.len()), ("STABLE", 0)] {
        let mut p = redis::pipe();
        p.cmd("CLUSTER").arg("SETSLOT").arg(&s).arg(state);
        if state == "IMPORTING" {
            p.arg(c.id(1));
        }
        p.ignore();
        let (n, sn): (Value, Value) = scan_both(&mut p).query(&mut con).expect("pipeline");
        let (native, snap) = scan_pair(&mut con, n, sn);
        let want = if scan_hides_unowned(node) {
            shown
        } else {
            keys.len()
        };
        assert_eq!(holds(&native), want, "SCAN after SETSLOT {state}");
        assert_same_keys(
            &snap,
            &native,
            &format!("pipelined SETSLOT {state}, SCAN, SNAPSHOT.SCAN"),
        );
    }
}

/// `CLUSTER DELSLOTS` then `SETSLOT ... NODE <other>` between two reads of
/// the module: before Redis 8.4 the node keeps the slot's keys (the server
/// deletes a lost slot's keys only while it owns the slot), so the index
/// keeps them too, right after and for longer than the safety-net refresh
/// takes to come by; Redis 8.4+ trims them and the index follows.
#[test]
fn delslots_then_another_node_takes_the_slot_keeps_the_keys_in_the_index() {
    let (c, slot, keys) = two_primaries_with_slot_keys();
    let node = &c.nodes[0];
    let mut con = node.client();
    assert_exact_now(node, "before");
    let s = slot.to_string();
    let _: () = query(&mut con, &["CLUSTER", "DELSLOTS", &s]).unwrap();
    let _: () = query(&mut con, &["CLUSTER", "SETSLOT", &s, "NODE", c.id(1)]).unwrap();
    assert_exact_now(node, "after DELSLOTS + SETSLOT NODE <other>");
    let since = Instant::now();
    while since.elapsed() < Duration::from_millis(1500) {
        assert_exact_now(node, "a while after DELSLOTS + SETSLOT NODE <other>");
    }
    // Redis 8.4+ trims the keys of a slot another node owns (its trim
    // events purge them); the others keep them.
    if !scan_hides_unowned(node) {
        let count: i64 = query(&mut con, &["CLUSTER", "COUNTKEYSINSLOT", &s]).unwrap();
        assert_eq!(count, keys.len() as i64, "the node kept the slot's keys");
    }
}
