//! Cluster harness: a cluster of real servers on 127.0.0.1 (ports chosen at
//! run time, one temp dir each), every node with the module loaded, and a
//! small cluster-aware client that follows MOVED/ASK redirections.
//!
//! Usage: `mod common; use common::cluster::*;` then
//! `let c = Cluster::start(3, 0); c.write_keys(...); c.assert_exact_everywhere();`
#![allow(dead_code)]

use super::*;
use std::collections::HashMap;

pub const SLOTS: u16 = 16384;
/// Longest wait for the cluster to agree on its topology.
pub const TOPOLOGY_TIMEOUT: Duration = Duration::from_secs(20);

/// CRC16/XMODEM of the hashtag rule (`CLUSTER KEYSLOT`).
pub fn key_slot(key: &[u8]) -> u16 {
    let mut k = key;
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                k = &key[open + 1..open + 1 + len];
            }
        }
    }
    let mut crc: u16 = 0;
    for &b in k {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % SLOTS
}

/// Options of every cluster node (the module loaded, cluster mode on).
pub fn node_opts() -> ServerOpts {
    ServerOpts::new()
        .config("cluster-enabled", "yes")
        .config("cluster-node-timeout", "3000")
        // Writes to the other nodes' slots keep working while one is down.
        .config("cluster-require-full-coverage", "no")
}

pub struct Cluster {
    /// Primaries first (`0..primaries`), then replicas.
    pub nodes: Vec<Server>,
    pub primaries: usize,
    ids: Vec<String>,
}

impl Cluster {
    /// `primaries` primaries sharing the slots evenly, each with `replicas`
    /// replicas; returns once every node sees the whole topology.
    pub fn start(primaries: usize, replicas: usize) -> Cluster {
        Cluster::start_with(primaries, replicas, node_opts())
    }

    pub fn start_with(primaries: usize, replicas: usize, opts: ServerOpts) -> Cluster {
        let total = primaries * (1 + replicas);
        let nodes: Vec<Server> = (0..total)
            .map(|_| Server::start_with(opts.clone()))
            .collect();
        let ids: Vec<String> = nodes
            .iter()
            .map(|n| cmd_str(&mut n.client(), &["CLUSTER", "MYID"]))
            .collect();
        let per = SLOTS as usize / primaries;
        for (i, n) in nodes.iter().take(primaries).enumerate() {
            let first = i * per;
            let last = if i + 1 == primaries {
                SLOTS as usize - 1
            } else {
                first + per - 1
            };
            let _: () = query(
                &mut n.client(),
                &[
                    "CLUSTER",
                    "ADDSLOTSRANGE",
                    &first.to_string(),
                    &last.to_string(),
                ],
            )
            .expect("ADDSLOTSRANGE");
        }
        // Distinct config epochs before the nodes meet, as `redis-cli
        // --cluster create` sets them: left to collision resolution, a
        // node may get its epoch after a resharding closed a slot on its
        // importer without a bump (already the highest epoch), and its
        // stale claim, now of a higher epoch, takes the slot back: neither
        // node claims it for good (redis-stack-7.4 cluster-3 fuzz, seed
        // 300007 under load: "timed out ... waiting for cluster stable").
        for (i, n) in nodes.iter().enumerate() {
            let _: () = query(
                &mut n.client(),
                &["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()],
            )
            .expect("CLUSTER SET-CONFIG-EPOCH");
        }
        let mut c0 = nodes[0].client();
        for n in &nodes[1..] {
            let _: () = query(
                &mut c0,
                &["CLUSTER", "MEET", "127.0.0.1", &n.port().to_string()],
            )
            .expect("CLUSTER MEET");
        }
        let cluster = Cluster {
            nodes,
            primaries,
            ids,
        };
        cluster.wait_all_known();
        for r in 0..primaries * replicas {
            let node = primaries + r;
            let primary = r % primaries;
            let id = cluster.ids[primary].clone();
            let mut c = cluster.nodes[node].client();
            wait_until("replica attached", TOPOLOGY_TIMEOUT, || {
                query::<()>(&mut c, &["CLUSTER", "REPLICATE", &id]).is_ok()
            });
        }
        cluster.wait_stable();
        cluster
    }

    pub fn id(&self, node: usize) -> &str {
        &self.ids[node]
    }

    /// Waits until every node lists every other node.
    fn wait_all_known(&self) {
        for n in &self.nodes {
            let mut c = n.client();
            wait_until("every node known", TOPOLOGY_TIMEOUT, || {
                let nodes = cmd_str(&mut c, &["CLUSTER", "NODES"]);
                self.ids.iter().all(|id| nodes.contains(id.as_str()))
                    && !nodes.contains("handshake")
            });
        }
    }

    /// Waits until every node says `cluster_state:ok`, agrees on the owner
    /// of every slot with node 0, and every replica is in sync.
    /// On a timeout, the panic says what each node still disagrees on.
    pub fn wait_stable(&self) {
        wait_until_or(
            "cluster stable",
            TOPOLOGY_TIMEOUT,
            || self.stable(),
            || self.describe(),
        );
    }

    fn stable(&self) -> bool {
        let want = slot_owners(&mut self.nodes[0].client());
        self.nodes.iter().all(|n| {
            let mut c = n.client();
            let info = cmd_str(&mut c, &["CLUSTER", "INFO"]);
            info_field(&info, "cluster_state").as_deref() == Some("ok")
                && slot_owners(&mut c) == want
        }) && self.replicas_in_sync()
    }

    /// Each node's state, epochs, the slots it sees owned unlike node 0,
    /// and its `CLUSTER NODES`: what a topology timeout reports.
    pub fn describe(&self) -> String {
        let want = slot_owners(&mut self.nodes[0].client());
        let mut out = String::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let mut c = n.client();
            let info = cmd_str(&mut c, &["CLUSTER", "INFO"]);
            let field = |f: &str| info_field(&info, f).unwrap_or_else(|| "?".into());
            let owners = slot_owners(&mut c);
            let differ: Vec<String> = (0..SLOTS as usize)
                .filter(|&s| owners[s] != want[s])
                .take(8)
                .map(|s| format!("{s}: {:.8} (node 0: {:.8})", owners[s], want[s]))
                .collect();
            out += &format!(
                "node {i} ({:.8}, port {}): state={} current_epoch={} my_epoch={} slots unlike node 0: {differ:?}\n{}\n",
                self.ids[i],
                n.port(),
                field("cluster_state"),
                field("cluster_current_epoch"),
                field("cluster_my_epoch"),
                cmd_str(&mut c, &["CLUSTER", "NODES"]).trim_end()
            );
        }
        out
    }

    /// Whether every replica's link is up and it has its primary's offset.
    pub fn replicas_in_sync(&self) -> bool {
        self.nodes.iter().all(|n| {
            let info = cmd_str(&mut n.client(), &["INFO", "replication"]);
            if info_field(&info, "role").as_deref() != Some("slave") {
                return true;
            }
            if info_field(&info, "master_link_status").as_deref() != Some("up") {
                return false;
            }
            let port = info_field(&info, "master_port").unwrap_or_default();
            let Some(primary) = self.nodes.iter().find(|p| p.port().to_string() == port) else {
                return false;
            };
            let pinfo = cmd_str(&mut primary.client(), &["INFO", "replication"]);
            info_field(&pinfo, "master_repl_offset") == info_field(&info, "slave_repl_offset")
        })
    }

    /// Slots owned by node `i` according to node 0.
    pub fn slots_of(&self, i: usize) -> Vec<u16> {
        let owners = slot_owners(&mut self.nodes[0].client());
        (0..SLOTS)
            .filter(|&s| owners[s as usize] == self.ids[i])
            .collect()
    }

    /// Index of the node that owns `slot` according to node 0.
    /// The owner of `slot` once every node names the same one (polled, no
    /// sleep, for at most [`TOPOLOGY_TIMEOUT`]): right after a migration a
    /// node's view may still be the old one.
    pub fn agreed_owner(&self, slot: u16) -> usize {
        let deadline = Instant::now() + TOPOLOGY_TIMEOUT;
        loop {
            let views: Vec<String> = self
                .nodes
                .iter()
                .map(|n| slot_owners(&mut n.client())[slot as usize].clone())
                .collect();
            if views.iter().all(|v| *v == views[0]) {
                if let Some(i) = self.ids.iter().position(|id| *id == views[0]) {
                    return i;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the nodes disagree on the owner of slot {slot}: {views:?}"
            );
        }
    }

    pub fn owner(&self, slot: u16) -> usize {
        let owners = slot_owners(&mut self.nodes[0].client());
        let id = &owners[slot as usize];
        self.ids
            .iter()
            .position(|i| i == id)
            .expect("slot owner is a cluster node")
    }

    /// A cluster-aware client over this cluster's nodes.
    pub fn client(&self) -> ClusterClient {
        ClusterClient {
            ports: self.nodes.iter().map(|n| n.port()).collect(),
            cons: HashMap::new(),
            last_port: 0,
        }
    }

    /// Node indexes that are primaries now (after failovers too).
    pub fn current_primaries(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| {
                let info = cmd_str(&mut self.nodes[i].client(), &["INFO", "replication"]);
                info_field(&info, "role").as_deref() == Some("master")
            })
            .collect()
    }

    /// Asserts, on every node, that a full SNAPSHOT.SCAN iteration returns
    /// exactly the node's native SCAN (waiting for replicas to catch up).
    pub fn assert_exact_everywhere(&self, what: &str) {
        wait_until("replicas in sync", TOPOLOGY_TIMEOUT, || {
            self.replicas_in_sync()
        });
        for (i, n) in self.nodes.iter().enumerate() {
            assert_exact(n, &format!("{what}, node {i}"));
        }
    }
}

/// The owner id of every slot, from `CLUSTER SLOTS` (empty when unowned).
pub fn slot_owners(con: &mut Connection) -> Vec<String> {
    let mut owners = vec![String::new(); SLOTS as usize];
    let slots: Vec<Value> = query(con, &["CLUSTER", "SLOTS"]).expect("CLUSTER SLOTS");
    for range in slots {
        let Value::Array(parts) = range else { continue };
        if parts.len() < 3 {
            continue;
        }
        let first: u16 = FromRedisValue::from_redis_value(&parts[0]).unwrap();
        let last: u16 = FromRedisValue::from_redis_value(&parts[1]).unwrap();
        let Value::Array(primary) = &parts[2] else {
            continue;
        };
        let id: String = primary
            .get(2)
            .map(|v| FromRedisValue::from_redis_value(v).unwrap())
            .unwrap_or_default();
        for s in first..=last {
            owners[s as usize] = id.clone();
        }
    }
    owners
}

/// A full SNAPSHOT.SCAN iteration (COUNT 1000), sorted.
pub fn snapshot_keys(con: &mut Connection) -> Vec<Vec<u8>> {
    sorted(&full_scan(con, "SNAPSHOT.SCAN", &["COUNT", "1000"]))
}

/// A full native SCAN iteration, sorted and deduplicated.
pub fn native_keys(con: &mut Connection) -> Vec<Vec<u8>> {
    let mut v = sorted(&full_scan(con, "SCAN", &["COUNT", "1000"]));
    v.dedup();
    v
}

/// Asserts that a full SNAPSHOT.SCAN iteration on `node` returns exactly
/// what its native SCAN returns, with the keyspace quiet. Slot changes
/// reach the module at the next server cron tick, so this polls (bounded)
/// before failing with the difference.
pub fn assert_exact(node: &Server, what: &str) {
    let mut c = node.client();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let native = native_keys(&mut c);
        let snap = snapshot_keys(&mut c);
        if snap == native {
            return;
        }
        if Instant::now() > deadline {
            panic!("{what}: {}", difference(&snap, &native));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts that a full SNAPSHOT.SCAN iteration started now on `node` returns
/// exactly the keys of the node's native SCAN, with no settling delay: the
/// snapshot is opened first (its cursor-0 call is the first command after
/// the caller's), then the native iteration runs; if they differ, a second
/// native iteration tells a keyspace still changing by itself (e.g. a trim
/// under way: read again, a few times at most) from a wrong snapshot.
pub fn assert_exact_now(node: &Server, what: &str) {
    let mut c = node.client();
    for _ in 0..5 {
        let snap = snapshot_keys(&mut c);
        let native = native_keys(&mut c);
        if snap == native {
            return;
        }
        if native_keys(&mut c) != native {
            continue;
        }
        panic!("{what}: {}", difference(&snap, &native));
    }
    panic!("{what}: the native SCAN kept changing");
}

/// The keys of one `SCAN 0 COUNT 1000000` reply (the whole keyspace of a
/// test node in one page: its cursor must be 0) and of a full SNAPSHOT.SCAN
/// iteration whose cursor-0 call is `snapshot_reply` (later pages fetched
/// now: they come from the snapshot), both sorted.
pub fn scan_pair(
    con: &mut Connection,
    native_reply: Value,
    snapshot_reply: Value,
) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let page = |v: Value| -> (String, Vec<Vec<u8>>) {
        FromRedisValue::from_redis_value(&v).expect("a SCAN-like page")
    };
    let (cursor, mut native) = page(native_reply);
    assert_eq!(
        cursor, "0",
        "SCAN 0 COUNT 1000000 returned the whole keyspace"
    );
    native.sort();
    native.dedup();
    let (mut cursor, mut snap) = page(snapshot_reply);
    while cursor != "0" {
        let (next, keys) = page(
            query(con, &["SNAPSHOT.SCAN", &cursor, "COUNT", "1000000"]).expect("SNAPSHOT.SCAN"),
        );
        snap.extend(keys);
        cursor = next;
    }
    snap.sort();
    (native, snap)
}

/// Asserts that two sorted key lists (a snapshot's and the native SCAN's)
/// are equal, showing how they differ.
pub fn assert_same_keys(snap: &[Vec<u8>], native: &[Vec<u8>], what: &str) {
    assert!(snap == native, "{what}: {}", difference(snap, native));
}

/// How two sorted key lists differ: their sizes and the first keys only in
/// one of them.
fn difference(snap: &[Vec<u8>], native: &[Vec<u8>]) -> String {
    let only = |a: &[Vec<u8>], b: &[Vec<u8>]| -> Vec<String> {
        a.iter()
            .filter(|k| b.binary_search(k).is_err())
            .take(10)
            .map(|k| show(k))
            .collect()
    };
    format!(
        "SNAPSHOT.SCAN has {} keys, SCAN {}; extra {:?}, missing {:?}",
        snap.len(),
        native.len(),
        only(snap, native),
        only(native, snap)
    )
}

/// A flat key/value reply (RESP2 array or RESP3 map) as a map, e.g. one
/// migration of `CLUSTER GETSLOTMIGRATIONS` or `CLUSTER MIGRATION STATUS`.
pub fn reply_fields(v: Value) -> HashMap<String, String> {
    let items: Vec<Value> = match v {
        Value::Array(a) => a,
        Value::Map(kv) => kv.into_iter().flat_map(|(k, v)| [k, v]).collect(),
        _ => Vec::new(),
    };
    items
        .chunks(2)
        .filter_map(|kv| {
            let k = String::from_redis_value(&kv[0]).ok()?;
            let v = String::from_redis_value(kv.get(1)?).unwrap_or_default();
            Some((k, v))
        })
        .collect()
}

/// Whether a heavy topology case runs on this server: on `servers` (names
/// of `scripts/servers.sh`), on any server when run outside
/// `scripts/test.sh`, or everywhere with `SNAPSCAN_TOPOLOGY=all`.
pub fn heavy_on(test: &str, servers: &[&str]) -> bool {
    let name = std::env::var("SNAPSCAN_SERVER_NAME").unwrap_or_default();
    let run = name.is_empty()
        || servers.contains(&name.as_str())
        || std::env::var("SNAPSCAN_TOPOLOGY").as_deref() == Ok("all");
    if !run {
        eprintln!("{test}: heavy topology case skipped on {name} (runs on {}; SNAPSCAN_TOPOLOGY=all runs it everywhere)", servers.join(" and "));
    }
    run
}

/// A client of the whole cluster: sends a command to the node that owns
/// its key's slot (per a table refreshed on MOVED), follows ASK.
pub struct ClusterClient {
    ports: Vec<u16>,
    cons: HashMap<u16, Connection>,
    /// The node that answered the last [`ClusterClient::run`].
    last_port: u16,
}

impl ClusterClient {
    fn con(&mut self, port: u16) -> &mut Connection {
        self.cons.entry(port).or_insert_with(|| {
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
            let con = client
                .get_connection_with_timeout(CLIENT_TIMEOUT)
                .expect("connect");
            con.set_read_timeout(Some(CLIENT_TIMEOUT)).unwrap();
            con
        })
    }

    /// Runs `args` (whose key is `key`) on the right node; returns the
    /// reply, following up to 5 redirections.
    pub fn run(&mut self, key: &[u8], args: &[&[u8]]) -> RedisResult<Value> {
        let mut port = self.ports[key_slot(key) as usize % self.ports.len()];
        let mut asking = false;
        let mut last = None;
        for _ in 0..6 {
            let con = self.con(port);
            if asking {
                let _: RedisResult<Value> = redis::cmd("ASKING").query(con);
            }
            let mut cmd = redis::cmd(std::str::from_utf8(args[0]).unwrap());
            for a in &args[1..] {
                cmd.arg(*a);
            }
            match cmd.query::<Value>(con) {
                Ok(v) => {
                    self.last_port = port;
                    return Ok(v);
                }
                Err(e) => {
                    let code = e.code().unwrap_or("").to_string();
                    let target = e
                        .redirect_node()
                        .and_then(|(addr, _)| addr.rsplit(':').next()?.parse::<u16>().ok());
                    match (code.as_str(), target) {
                        ("MOVED", Some(p)) => {
                            port = p;
                            asking = false;
                        }
                        ("ASK", Some(p)) => {
                            port = p;
                            asking = true;
                        }
                        ("TRYAGAIN" | "CLUSTERDOWN", _) => {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        _ => return Err(e),
                    }
                    last = Some(e);
                }
            }
        }
        Err(last.expect("a redirection"))
    }

    /// Runs `cmds` (all on `key`'s slot) as one MULTI/EXEC on the node that
    /// serves `key` now (found with a `TYPE key` that follows redirections):
    /// the EXEC reply, or the error (a slot being migrated may refuse it).
    pub fn run_atomic(&mut self, key: &[u8], cmds: &[Vec<Vec<u8>>]) -> RedisResult<Value> {
        self.run(key, &[b"TYPE", key])?;
        let port = self.last_port;
        let mut p = redis::pipe();
        p.atomic();
        for c in cmds {
            let mut cmd = redis::cmd(&String::from_utf8_lossy(&c[0]));
            for a in &c[1..] {
                cmd.arg(a.as_slice());
            }
            p.add_command(cmd);
        }
        p.query::<Value>(self.con(port))
    }

    pub fn set(&mut self, key: &str, value: &str) {
        self.run(key.as_bytes(), &[b"SET", key.as_bytes(), value.as_bytes()])
            .unwrap_or_else(|e| panic!("SET {key}: {e}"));
    }

    pub fn del(&mut self, key: &str) {
        self.run(key.as_bytes(), &[b"DEL", key.as_bytes()])
            .unwrap_or_else(|e| panic!("DEL {key}: {e}"));
    }
}

/// Writes `n` keys `{prefix}<i>` spread over every slot, through `cc`.
pub fn fill(cc: &mut ClusterClient, prefix: &str, n: usize) {
    for i in 0..n {
        cc.set(&format!("{prefix}{i}"), "v");
    }
}

/// A writer thread: sets and deletes keys of `slots` (names from
/// [`key_in_slot`]) until stopped; returns the number of writes.
pub struct Writer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<usize>>,
}

impl Writer {
    /// Starts the writer and returns once it has made its first write (on a
    /// loaded machine a new thread may otherwise not run before `stop`).
    pub fn start(cluster: &Cluster, keys: Vec<String>, seed: u64) -> Writer {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let made = std::sync::Arc::new(AtomicUsize::new(0));
        let (s2, made2) = (stop.clone(), made.clone());
        let mut cc = cluster.client();
        let handle = std::thread::spawn(move || {
            let mut rng = Rng(seed);
            let mut n = 0;
            let deadline = Instant::now() + Duration::from_secs(60);
            while !s2.load(Ordering::Relaxed) && Instant::now() < deadline {
                let k = rng.pick(&keys).clone();
                if rng.chance(1, 4) {
                    let _ = cc.run(k.as_bytes(), &[b"DEL", k.as_bytes()]);
                } else {
                    let _ = cc.run(k.as_bytes(), &[b"SET", k.as_bytes(), b"w"]);
                }
                n += 1;
                made2.store(n, Ordering::Relaxed);
            }
            n
        });
        wait_until("the writer's first write", TOPOLOGY_TIMEOUT, || {
            made.load(Ordering::Relaxed) > 0 || handle.is_finished()
        });
        Writer {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops the writer; returns how many writes it made.
    pub fn stop(mut self) -> usize {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.take().map_or(0, |h| h.join().expect("writer"))
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// `count` key names whose slot is `slot` (`{tag}:<i>` with a tag found by
/// search).
pub fn keys_in_slot(slot: u16, count: usize) -> Vec<String> {
    let tag = (0u64..)
        .map(|i| format!("t{i}"))
        .find(|t| key_slot(t.as_bytes()) == slot)
        .expect("a tag for every slot");
    (0..count).map(|i| format!("{{{tag}}}:{i}")).collect()
}

/// Whether the server has `CLUSTER MIGRATESLOTS` (Valkey 9+).
pub fn has_atomic_slot_migration(s: &Server) -> bool {
    s.is_valkey() && s.version().0 >= 9
}

/// The server's atomic slot migration, driven the same way on both.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Asm {
    /// Redis 8.4+: the target runs `CLUSTER MIGRATION IMPORT`; the source
    /// sends the slots' snapshot from a child, slowed by
    /// `rdb-key-save-delay` (per key).
    Redis,
    /// Valkey 9+: the source runs `CLUSTER MIGRATESLOTS`; `DEBUG
    /// SLOTMIGRATION PREVENT-PAUSE` holds it before its last step.
    Valkey,
}

impl Asm {
    pub fn detect() -> Option<Asm> {
        let probe = Server::start_with(ServerOpts::without_module());
        let (major, minor, _) = probe.version();
        if probe.is_valkey() {
            (major >= 9).then_some(Asm::Valkey)
        } else {
            (major > 8 || (major == 8 && minor >= 4)).then_some(Asm::Redis)
        }
    }

    /// Holds (`on`) or releases the next migration out of `src` before it
    /// completes. Redis: slows the source's snapshot (the child keeps the
    /// delay it was forked with).
    pub fn hold(self, src: &Server, on: bool) {
        let mut c = src.client();
        let _: () = match self {
            Asm::Redis => query(
                &mut c,
                &[
                    "CONFIG",
                    "SET",
                    "rdb-key-save-delay",
                    if on { "2000" } else { "0" },
                ],
            ),
            Asm::Valkey => query(
                &mut c,
                &[
                    "DEBUG",
                    "SLOTMIGRATION",
                    "PREVENT-PAUSE",
                    if on { "1" } else { "0" },
                ],
            ),
        }
        .expect("hold the migration");
    }

    /// Starts moving slots `a..=b` from node `from` to node `to`.
    pub fn start(self, c: &Cluster, from: usize, to: usize, a: u16, b: u16) {
        self.try_start(c, from, to, a, b)
            .expect("the migration starts with snapscan loaded");
    }

    /// [`start`](Self::start), the server's refusal returned.
    pub fn try_start(
        self,
        c: &Cluster,
        from: usize,
        to: usize,
        a: u16,
        b: u16,
    ) -> RedisResult<Value> {
        let (a, b) = (a.to_string(), b.to_string());
        match self {
            Asm::Redis => query(
                &mut c.nodes[to].client(),
                &["CLUSTER", "MIGRATION", "IMPORT", &a, &b],
            ),
            Asm::Valkey => query(
                &mut c.nodes[from].client(),
                &[
                    "CLUSTER",
                    "MIGRATESLOTS",
                    "SLOTSRANGE",
                    &a,
                    &b,
                    "NODE",
                    c.id(to),
                ],
            ),
        }
    }

    /// Cancels the migration (on the node that started it).
    pub fn cancel(self, c: &Cluster, from: usize, to: usize) {
        let _: Value = match self {
            Asm::Redis => query(
                &mut c.nodes[to].client(),
                &["CLUSTER", "MIGRATION", "CANCEL", "ALL"],
            ),
            Asm::Valkey => query(
                &mut c.nodes[from].client(),
                &["CLUSTER", "CANCELSLOTMIGRATIONS"],
            ),
        }
        .expect("cancel");
    }

    /// Redis: cancels the source's side too. A cancel on the destination
    /// does not stop the source's task at once (it notices the closed link
    /// later), and while it is active the source refuses every other slot
    /// migration. Valkey's cancel, on the source, already ends both sides.
    pub fn cancel_source(self, c: &Cluster, from: usize) {
        if self == Asm::Redis {
            let _: Value = query(
                &mut c.nodes[from].client(),
                &["CLUSTER", "MIGRATION", "CANCEL", "ALL"],
            )
            .expect("cancel on the source");
        }
    }

    /// Whether a listed state is a finished migration's.
    pub fn finished(state: &str) -> bool {
        ["canceled", "cancelled", "failed", "completed", "success"].contains(&state)
    }

    /// Polls `node` (no sleep) until none of its migrations of `range` is
    /// still active (none listed counts as settled).
    pub fn wait_settled(self, node: &Server, range: &str) {
        let deadline = Instant::now() + TOPOLOGY_TIMEOUT;
        loop {
            let now = self.states(node, range);
            if now.iter().all(|s| Self::finished(s)) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "migration {range} still active on port {}: {now:?}",
                node.port()
            );
        }
    }

    /// The states of the migrations of `range` ("a-b") that `node` lists.
    pub fn states(self, node: &Server, range: &str) -> Vec<String> {
        let mut c = node.client();
        let reply: Vec<Value> = match self {
            Asm::Redis => query(&mut c, &["CLUSTER", "MIGRATION", "STATUS", "ALL"]),
            Asm::Valkey => query(&mut c, &["CLUSTER", "GETSLOTMIGRATIONS"]),
        }
        .expect("migration status");
        let (slots_field, state_field) = match self {
            Asm::Redis => ("slots", "state"),
            Asm::Valkey => ("slot_ranges", "state"),
        };
        reply
            .into_iter()
            .map(reply_fields)
            .filter(|m| m.get(slots_field).map(String::as_str) == Some(range))
            .filter_map(|m| m.get(state_field).cloned())
            .collect()
    }

    pub fn done_state(self) -> &'static str {
        match self {
            Asm::Redis => "completed",
            Asm::Valkey => "success",
        }
    }

    /// Polls `node` (no sleep) until one of its migrations of `range` is in
    /// one of `states`.
    pub fn wait(self, node: &Server, range: &str, states: &[&str]) {
        if let Err(now) = self.try_wait(node, range, states) {
            panic!("migration {range} not in {states:?}: {now:?}");
        }
    }

    /// [`wait`](Self::wait) for at most [`TOPOLOGY_TIMEOUT`]; the states
    /// listed last if none got there.
    pub fn try_wait(self, node: &Server, range: &str, states: &[&str]) -> Result<(), Vec<String>> {
        let deadline = Instant::now() + TOPOLOGY_TIMEOUT;
        loop {
            let now = self.states(node, range);
            if now.iter().any(|s| states.contains(&s.as_str())) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(now);
            }
        }
    }
}
