//! Topology changes under writes: in a 3-node cluster, a slot resharded
//! the classic way (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE),
//! by atomic slot migration (Valkey 9 MIGRATESLOTS, Redis 8.4+ CLUSTER
//! MIGRATION), or an atomic import cancelled halfway; a replica failed
//! over. Each carries the writes made while it runs, so a replay has them.

use crate::common::cluster::*;
use crate::common::*;
use crate::gen::{Gen, TAGS};
use crate::step::Cmd;
use crate::target::{Mode, Target};
use redis::Value;

#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    Reshard,
    Atomic,
    CancelledImport,
    Failover,
}

/// A topology change: what, which slot, from and to which node, and the
/// writes made at each of its stages.
#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    pub kind: Kind,
    pub slot: u16,
    pub from: usize,
    pub to: usize,
    pub writes: Vec<Vec<Cmd>>,
}

/// Steps since the last change.
#[derive(Default)]
pub struct State {
    since: u64,
}

/// Every this many steps, a change (where the mode has them).
const EVERY: u64 = 150;

/// Maybe a topology change now.
pub fn maybe(t: &Target, g: &mut Gen, st: &mut State) -> Option<Op> {
    st.since += 1;
    if st.since < EVERY {
        return None;
    }
    st.since = 0;
    match t.mode {
        Mode::Replica => Some(Op {
            kind: Kind::Failover,
            slot: 0,
            from: 0,
            to: 0,
            writes: vec![],
        }),
        Mode::ClusterThree => {
            let c = t.cluster()?;
            let tag = g.rng.below(TAGS);
            let slot = key_slot(format!("t{tag}").as_bytes());
            // Every node's view: node 0's alone may still be the one from
            // before the last migration (Valkey 9.1 campaign: SETSLOT
            // MIGRATING on the former owner).
            let from = c.agreed_owner(slot);
            let to = (from + 1 + g.rng.below(2) as usize) % 3;
            let kind = match (t.asm.is_some(), g.rng.below(3)) {
                (true, 0) => Kind::Atomic,
                (true, 1) => Kind::CancelledImport,
                _ => Kind::Reshard,
            };
            // Writes at each stage, on the moving slot's tag mostly.
            let writes = (0..6)
                .map(|_| {
                    (0..(2 + g.rng.below(6)))
                        .map(|_| {
                            let w = g.write(crate::now_ms());
                            if g.rng.chance(2, 3) {
                                let k = format!("{{t{tag}}}:k{}", g.rng.below(8)).into_bytes();
                                w.rekey(&k)
                            } else {
                                w
                            }
                        })
                        .collect()
                })
                .collect();
            Some(Op {
                kind,
                slot,
                from,
                to,
                writes,
            })
        }
        _ => None,
    }
}

fn write_stage(t: &mut Target, op: &Op, i: usize) {
    for w in op.writes.get(i).into_iter().flatten() {
        let _ = t.exec(w);
    }
}

fn q(s: &Server, args: &[&str]) -> redis::RedisResult<Value> {
    query(&mut s.client(), args)
}

/// Whether a refusal says a slot migration or import is still under way
/// (Redis 8.6: "... active atomic slot migration ..."; Valkey 9.1: "Slot
/// import in progress.").
fn winding_down(e: &str) -> bool {
    e.contains("migrat") || e.contains("in progress")
}

/// `f` again while the server says a slot migration is still winding down
/// (a finished or cancelled atomic migration's last steps, a trim), for at
/// most [`TOPOLOGY_TIMEOUT`]; panics with the last refusal.
fn when_settled(what: &str, mut f: impl FnMut() -> redis::RedisResult<Value>) {
    let deadline = std::time::Instant::now() + TOPOLOGY_TIMEOUT;
    loop {
        match f() {
            Ok(_) => return,
            Err(e)
                if std::time::Instant::now() < deadline
                    && winding_down(&e.to_string().to_lowercase()) =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// Runs `op`, its writes interleaved; returns once the cluster is stable,
/// and whether an atomic migration the server left stuck was abandoned.
pub fn run(t: &mut Target, op: &Op) -> bool {
    let abandoned = match op.kind {
        Kind::Failover => {
            t.failover();
            false
        }
        Kind::Reshard => {
            reshard(t, op);
            false
        }
        Kind::Atomic | Kind::CancelledImport => atomic(t, op),
    };
    if let Some(c) = t.cluster() {
        c.wait_stable();
    }
    abandoned
}

fn reshard(t: &mut Target, op: &Op) {
    let slot = op.slot.to_string();
    let mut op = op.clone();
    {
        let c = t.cluster().expect("a cluster");
        // The owner as every node sees it at each try: an atomic migration
        // of the slot finishing late (a cancel that did not land) may move
        // it under the harness (Valkey 9.1: "I'm not the owner of hash
        // slot ..."); the import mark is then undone and set again.
        let deadline = std::time::Instant::now() + TOPOLOGY_TIMEOUT;
        loop {
            let from = c.agreed_owner(op.slot);
            if from == op.to {
                op.to = (from + 1) % 3;
            }
            op.from = from;
            let (from_id, to_id) = (c.id(op.from).to_string(), c.id(op.to).to_string());
            when_settled("IMPORTING", || {
                q(
                    &c.nodes[op.to],
                    &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id],
                )
            });
            match q(
                &c.nodes[op.from],
                &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id],
            ) {
                Ok(_) => break,
                Err(e) if std::time::Instant::now() < deadline => {
                    let text = e.to_string().to_lowercase();
                    if !text.contains("not the owner") && !winding_down(&text) {
                        panic!("MIGRATING: {e}");
                    }
                    let _ = q(&c.nodes[op.to], &["CLUSTER", "SETSLOT", &slot, "STABLE"]);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => panic!("MIGRATING: {e}"),
            }
        }
    }
    let op = &op;
    let (to_id, to_port) = {
        let c = t.cluster().expect("a cluster");
        (c.id(op.to).to_string(), c.nodes[op.to].port().to_string())
    };
    write_stage(t, op, 0);
    for round in 0..200 {
        let keys: Vec<Vec<u8>> = {
            let c = t.cluster().expect("a cluster");
            query(
                &mut c.nodes[op.from].client(),
                &["CLUSTER", "GETKEYSINSLOT", &slot, "3"],
            )
            .expect("GETKEYSINSLOT")
        };
        if keys.is_empty() {
            break;
        }
        {
            let c = t.cluster().expect("a cluster");
            let mut cmd = redis::cmd("MIGRATE");
            cmd.arg("127.0.0.1")
                .arg(&to_port)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("REPLACE")
                .arg("KEYS");
            for k in &keys {
                cmd.arg(k.as_slice());
            }
            let _: redis::RedisResult<Value> = cmd.query(&mut c.nodes[op.from].client());
        }
        write_stage(t, op, 1 + round % 4);
    }
    let c = t.cluster().expect("a cluster");
    for n in [op.to, op.from, 3 - op.to - op.from] {
        q(&c.nodes[n], &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]).expect("SETSLOT NODE");
    }
    write_stage(t, op, 5);
}

/// Whether the migration was left stuck by the server and abandoned.
fn atomic(t: &mut Target, op: &Op) -> bool {
    let asm = t.asm.expect("atomic slot migration");
    let range = format!("{}-{}", op.slot, op.slot);
    let cancel = op.kind == Kind::CancelledImport;
    let mut op = op.clone();
    {
        let c = t.cluster().expect("a cluster");
        // The owner as every node sees it now, at each try: right after a
        // migration the former owner may still be named somewhere, and the
        // new one refuses to migrate the slot until its import is done
        // (Valkey 9.1: "Slots are not served by this node").
        let mut tries = 0;
        let mut start = || {
            // A try the server refused may have started it all the same
            // (Valkey 9.1: the next one is told "I am already migrating
            // slot ..."): an active migration of the slot after a try of
            // ours is that one.
            if tries > 0 {
                let from = c.agreed_owner(op.slot);
                let active = asm.states(&c.nodes[from], &range);
                if active.iter().any(|s| !Asm::finished(s)) {
                    op.from = from;
                    return Ok(Value::Okay);
                }
            }
            tries += 1;
            let from = c.agreed_owner(op.slot);
            if from == op.to {
                op.to = (from + 1) % 3;
            }
            if cancel && from != op.from {
                asm.hold(&c.nodes[op.from], false);
            }
            op.from = from;
            if cancel {
                asm.hold(&c.nodes[op.from], true);
            }
            asm.try_start(c, op.from, op.to, op.slot, op.slot)
        };
        when_settled("the atomic migration's start", || match start() {
            Err(e) if e.to_string().contains("not served by this node") => {
                Err(redis::RedisError::from((
                    redis::ErrorKind::TryAgain,
                    "slot migration in progress (the slot's owner is changing)",
                )))
            }
            r => r,
        });
    }
    let op = &op;
    for i in 0..5 {
        write_stage(t, op, i);
    }
    let c = t.cluster().expect("a cluster");
    let waited = if cancel {
        asm.cancel(c, op.from, op.to);
        // A slot of a few keys may be imported before the cancel lands
        // (Redis holds its snapshot per key): then it simply completed.
        let r = asm.try_wait(
            &c.nodes[op.to],
            &range,
            &["canceled", "cancelled", "failed", asm.done_state()],
        );
        asm.hold(&c.nodes[op.from], false);
        asm.cancel_source(c, op.from);
        asm.wait_settled(&c.nodes[op.from], &range);
        r
    } else {
        asm.try_wait(&c.nodes[op.to], &range, &[asm.done_state()])
            .and_then(|()| asm.try_wait(&c.nodes[op.from], &range, &[asm.done_state()]))
    };
    // A migration the server leaves stuck (Redis 8.6, rarely: an import
    // waiting for the source's STREAM-EOF that never comes, right after a
    // cancelled one from the same source) is not the module's to judge:
    // cancelled on both sides, and the checks go on over what each node
    // then holds.
    let abandoned = waited.is_err();
    if let Err(states) = waited {
        eprintln!("fuzz: atomic migration {range} stuck ({states:?}): cancelled on both sides");
        asm.hold(&c.nodes[op.from], false);
        asm.cancel(c, op.from, op.to);
        asm.cancel_source(c, op.from);
        asm.wait_settled(&c.nodes[op.to], &range);
        asm.wait_settled(&c.nodes[op.from], &range);
    }
    write_stage(t, op, 5);
    abandoned
}
