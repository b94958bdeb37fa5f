//! The servers a run writes to and checks, one kind per mode: standalone,
//! a one-node cluster owning every slot, a 3-node cluster resharded under
//! writes (MIGRATE, atomic slot migration, a cancelled import), a primary
//! and its replica (compared after sync, then failed over), and a
//! standalone server serving the native commands.

use crate::common::cluster::*;
use crate::common::*;
use crate::step::Cmd;
use redis::{Connection, Value};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Standalone,
    ClusterOne,
    ClusterThree,
    Replica,
    Native,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Standalone => "standalone",
            Mode::ClusterOne => "cluster-1",
            Mode::ClusterThree => "cluster-3",
            Mode::Replica => "replica",
            Mode::Native => "serve-native",
        }
    }

    pub fn cluster(self) -> bool {
        matches!(self, Mode::ClusterOne | Mode::ClusterThree)
    }

    /// The configs every server of the mode starts with (printed with a
    /// replay).
    pub fn configs(self) -> Vec<(&'static str, &'static str)> {
        let mut v = vec![
            // Scripts that spin 15 ms pass it.
            ("busy-reply-threshold", "10"),
            ("maxmemory-policy", "allkeys-random"),
        ];
        if self.cluster() {
            v.push(("cluster-enabled", "yes"));
            v.push(("cluster-node-timeout", "3000"));
            v.push(("cluster-require-full-coverage", "no"));
        }
        v
    }
}

/// The function library every run loads (FCALL fz_swap).
const LIBRARY: &str = "#!lua name=fz\n\
    redis.register_function('fz_swap', function(keys, args) \
      redis.call('SET', keys[1], args[1]) \
      if redis.call('EXISTS', keys[2]) == 1 then redis.call('RENAME', keys[2], keys[1]) end \
      redis.call('PEXPIRE', keys[1], 500) \
      return 1 end)";

pub struct Target {
    pub mode: Mode,
    /// Standalone, cluster-1, serve-native: one server. Replica: the
    /// primary and the replica (`primary` says which is which now).
    servers: Vec<Server>,
    cluster: Option<Cluster>,
    cc: Option<ClusterClient>,
    /// The writer's connection (not in cluster-3), and its database.
    writer: Option<Connection>,
    pub db: u64,
    pub primary: usize,
    pub asm: Option<Asm>,
}

fn opts(mode: Mode) -> ServerOpts {
    // The test hooks: SNAPSHOT.TESTHOOK MISSING names what a failed count
    // check is missing.
    let mut o = ServerOpts::new().env("SNAPSCAN_TEST_HOOKS", "1");
    for (k, v) in mode.configs() {
        o = o.config(k, v);
    }
    o
}

fn connect(s: &Server) -> Connection {
    s.client()
}

impl Target {
    pub fn start(mode: Mode) -> Target {
        let mut t = Target {
            mode,
            servers: vec![],
            cluster: None,
            cc: None,
            writer: None,
            db: 0,
            primary: 0,
            asm: None,
        };
        match mode {
            Mode::Standalone | Mode::Native => t.servers.push(Server::start_with(opts(mode))),
            Mode::ClusterOne => {
                let c = Cluster::start_with(1, 0, opts(mode));
                t.cluster = Some(c);
            }
            Mode::ClusterThree => {
                t.asm = Asm::detect();
                let c = Cluster::start_with(3, 0, opts(mode));
                t.cc = Some(c.client());
                t.cluster = Some(c);
            }
            Mode::Replica => {
                let p = Server::start_with(opts(mode));
                let r = Server::start_with(opts(mode).replica_of(p.port()));
                t.servers = vec![p, r];
                t.wait_synced();
            }
        }
        if mode != Mode::ClusterThree {
            t.writer = Some(connect(t.writer_server()));
        }
        for n in t.primaries() {
            let _: () = query(&mut n.client(), &["FUNCTION", "LOAD", "REPLACE", LIBRARY])
                .map(|_: Value| ())
                .expect("FUNCTION LOAD");
        }
        if mode == Mode::Native {
            config_set(&mut t.servers[0].client(), "snapshot.serve-native", "all");
        }
        t.wait_synced();
        t
    }

    fn writer_server(&self) -> &Server {
        match &self.cluster {
            Some(c) => &c.nodes[0],
            None => &self.servers[self.primary],
        }
    }

    /// The primaries, where writes go.
    pub fn primaries(&self) -> Vec<&Server> {
        match &self.cluster {
            Some(c) => c.nodes.iter().take(c.primaries).collect(),
            None => vec![&self.servers[self.primary]],
        }
    }

    /// The servers whose index a check compares with their own truth.
    pub fn checked(&self) -> Vec<&Server> {
        match &self.cluster {
            Some(c) => c.nodes.iter().collect(),
            None => self.servers.iter().collect(),
        }
    }

    /// The databases a check looks at.
    pub fn dbs(&self) -> u64 {
        if self.mode.cluster() {
            1
        } else {
            4
        }
    }

    /// Replica mode: waits (bounded) until the replica has everything the
    /// primary wrote.
    pub fn wait_synced(&self) {
        if self.mode != Mode::Replica {
            return;
        }
        let (p, r) = (&self.servers[self.primary], &self.servers[1 - self.primary]);
        let (mut pc, mut rc) = (p.client(), r.client());
        wait_until("the replica in sync", Duration::from_secs(20), || {
            let pi = cmd_str(&mut pc, &["INFO", "replication"]);
            let ri = cmd_str(&mut rc, &["INFO", "replication"]);
            info_field(&ri, "master_link_status").as_deref() == Some("up")
                && info_field(&pi, "master_repl_offset") == info_field(&ri, "slave_repl_offset")
        });
    }

    /// Keeps every node's log in target/fuzz-failures (`why`: in the
    /// names), for a failure or a harness panic: the servers' temporary
    /// directories go with them.
    pub fn save_logs(&self, why: &str) {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-failures");
        let _ = std::fs::create_dir_all(&dir);
        for (i, s) in self.checked().iter().enumerate() {
            let to = dir.join(format!(
                "{}-{}-{why}-node{i}.log",
                Server::server_name(),
                self.mode.name()
            ));
            if std::fs::copy(s.log_path(), &to).is_ok() {
                eprintln!(
                    "fuzz: node {i} (port {}) log kept in {}",
                    s.port(),
                    to.display()
                );
            }
        }
    }

    /// Replica mode: primary and replica in sync hold as many keys in every
    /// database (polled, bounded: an expiry may fall between two reads);
    /// what each holds when they do not.
    pub fn diverged(&self) -> Option<String> {
        if self.mode != Mode::Replica {
            return None;
        }
        let sizes = |s: &Server| -> Vec<u64> {
            let mut c = s.client();
            (0..self.dbs())
                .map(|db| {
                    let _: () = query(&mut c, &["SELECT", &db.to_string()]).expect("SELECT");
                    query(&mut c, &["DBSIZE"]).expect("DBSIZE")
                })
                .collect()
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            self.wait_synced();
            let p = sizes(&self.servers[self.primary]);
            let r = sizes(&self.servers[1 - self.primary]);
            if p == r {
                return None;
            }
            if Instant::now() > deadline {
                return Some(format!(
                    "the replica diverged: DBSIZE per database, primary {p:?}, replica {r:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs one command; the server's error is a result like any other.
    pub fn exec(&mut self, c: &Cmd) -> Result<Value, String> {
        if c.args[0] == b"DUMP+RESTORE" {
            let dump = Cmd::new(&c.key, vec![b"DUMP".to_vec(), c.args[1].clone()]);
            let payload = match self.exec(&dump)? {
                Value::BulkString(p) => p,
                _ => return Ok(Value::Nil),
            };
            let restore = Cmd::new(
                &c.args[2],
                vec![
                    b"RESTORE".to_vec(),
                    c.args[2].clone(),
                    c.args[3].clone(),
                    payload,
                    b"REPLACE".to_vec(),
                ],
            );
            return self.exec(&restore);
        }
        if let Some(cc) = self.cc.as_mut() {
            if c.key.is_empty() {
                let ports: Vec<u16> = self
                    .cluster
                    .as_ref()
                    .unwrap()
                    .nodes
                    .iter()
                    .map(|n| n.port())
                    .collect();
                let mut last = Ok(Value::Nil);
                for p in ports {
                    let mut con = redis::Client::open(format!("redis://127.0.0.1:{p}/"))
                        .and_then(|c| c.get_connection_with_timeout(CLIENT_TIMEOUT))
                        .map_err(|e| e.to_string())?;
                    last = raw(&mut con, &c.args);
                }
                return last;
            }
            let args: Vec<&[u8]> = c.args.iter().map(|a| a.as_slice()).collect();
            return cc.run(&c.key, &args).map_err(|e| e.to_string());
        }
        let con = self.writer.as_mut().expect("a writer");
        let r = raw(con, &c.args);
        if r.is_ok() && c.args[0].eq_ignore_ascii_case(b"SELECT") {
            self.db = String::from_utf8_lossy(&c.args[1]).parse().unwrap_or(0);
        }
        r
    }

    /// MULTI ... EXEC.
    pub fn exec_multi(&mut self, cmds: &[Cmd]) -> Result<Value, String> {
        let args: Vec<Vec<Vec<u8>>> = cmds
            .iter()
            .map(|c| {
                if c.args[0] == b"DUMP+RESTORE" {
                    vec![b"DEL".to_vec(), c.args[1].clone()]
                } else {
                    c.args.clone()
                }
            })
            .collect();
        if let Some(cc) = self.cc.as_mut() {
            return cc
                .run_atomic(&cmds[0].key, &args)
                .map_err(|e| e.to_string());
        }
        let con = self.writer.as_mut().expect("a writer");
        let mut p = redis::pipe();
        p.atomic();
        for a in &args {
            p.add_command(command(a));
        }
        p.query::<Value>(con).map_err(|e| e.to_string())
    }

    /// An eviction episode on the (standalone) primary.
    pub fn evict(&mut self, headroom: u64) -> Result<(), String> {
        let s = &self.servers[self.primary];
        let mut c = s.client();
        let used = info_section_u64(&mut c, "memory", "used_memory");
        let _: () = query(
            &mut c,
            &["CONFIG", "SET", "maxmemory", &(used + headroom).to_string()],
        )
        .map_err(|e| e.to_string())?;
        let big = "x".repeat(32 * 1024);
        let before = info_section_u64(&mut c, "stats", "evicted_keys");
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut i = 0;
        while info_section_u64(&mut c, "stats", "evicted_keys") == before
            && Instant::now() < deadline
            && i < 200
        {
            let _: redis::RedisResult<Value> =
                query(&mut c, &["SET", &format!("{{t0}}:big{i}"), &big]);
            i += 1;
        }
        let _: () =
            query(&mut c, &["CONFIG", "SET", "maxmemory", "0"]).map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Replica mode: the replica becomes the primary, the old primary its
    /// replica (a real failover, writes go to the new primary).
    pub fn failover(&mut self) {
        if self.mode != Mode::Replica {
            return;
        }
        self.wait_synced();
        let (old, new) = (self.primary, 1 - self.primary);
        let _: () = query(&mut self.servers[new].client(), &["REPLICAOF", "NO", "ONE"])
            .expect("REPLICAOF NO ONE");
        let port = self.servers[new].port().to_string();
        let _: () = query(
            &mut self.servers[old].client(),
            &["REPLICAOF", "127.0.0.1", &port],
        )
        .expect("REPLICAOF");
        self.primary = new;
        let mut w = connect(&self.servers[new]);
        let _: () = query(&mut w, &["SELECT", &self.db.to_string()]).expect("SELECT");
        self.writer = Some(w);
        self.wait_synced();
    }

    pub fn cluster(&self) -> Option<&Cluster> {
        self.cluster.as_ref()
    }
}

/// A command of byte-string arguments.
pub fn command(args: &[Vec<u8>]) -> redis::Cmd {
    let mut cmd = redis::cmd(&String::from_utf8_lossy(&args[0]));
    for a in &args[1..] {
        cmd.arg(a.as_slice());
    }
    cmd
}

/// Runs `args` on `con`; the server's error as text.
pub fn raw(con: &mut Connection, args: &[Vec<u8>]) -> Result<Value, String> {
    command(args).query::<Value>(con).map_err(|e| e.to_string())
}

impl Drop for Target {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.save_logs("panic");
        }
    }
}
