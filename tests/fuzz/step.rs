//! The fuzzer's steps, and how a replay prints them: as `redis-cli` lines.

use std::fmt::Write;

/// One command: its arguments and the key that routes it in a cluster
/// (empty: keyless, sent to every primary of a cluster).
#[derive(Clone, Debug, PartialEq)]
pub struct Cmd {
    pub key: Vec<u8>,
    pub args: Vec<Vec<u8>>,
}

impl Cmd {
    pub fn new(key: &[u8], args: Vec<Vec<u8>>) -> Cmd {
        Cmd {
            key: key.to_vec(),
            args,
        }
    }

    pub fn keyless(args: Vec<Vec<u8>>) -> Cmd {
        Cmd { key: vec![], args }
    }

    /// The same command with every occurrence of its key replaced by `k`.
    pub fn rekey(&self, k: &[u8]) -> Cmd {
        let args = self
            .args
            .iter()
            .map(|a| {
                if *a == self.key {
                    k.to_vec()
                } else {
                    a.clone()
                }
            })
            .collect();
        Cmd::new(k, args)
    }
}

/// What a check compares (see `check.rs`).
#[derive(Clone, Debug, PartialEq)]
pub enum Check {
    /// A full SNAPSHOT.SCAN iteration of database `db`, opened in the same
    /// transaction as the truth, with `between[i]` written after page `i`.
    Scan {
        db: u64,
        count: u64,
        pattern: Option<Vec<u8>>,
        ty: Option<&'static str>,
        between: Vec<Vec<Cmd>>,
    },
    /// A full SNAPSHOT.HSCAN/SSCAN/ZSCAN iteration of a collection (chosen
    /// when the check runs: `pick` indexes the collections the truth
    /// lists), writes to it between pages.
    Collection {
        db: u64,
        pick: u64,
        count: u64,
        between: Vec<Vec<Cmd>>,
    },
    /// `snapshot_index_keys_db<N>` against DBSIZE, every database.
    Count,
    /// Served SCAN/KEYS/HSCAN/SSCAN/ZSCAN (`snapshot.serve-native`),
    /// `flip` the mode mid-iteration.
    Served { db: u64, count: u64, flip: bool },
    /// A script spinning past busy-reply-threshold, then SNAPSHOT.SCAN and
    /// native SCAN in it, at its frozen clock.
    ScriptScan { db: u64, count: u64 },
}

/// A step of a run.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Cmd(Cmd),
    /// MULTI ... EXEC (all on one tag).
    Multi(Vec<Cmd>),
    /// Let short TTLs run out: the server's clock moves on by this many ms
    /// (not a synchronisation: nothing waits for anything).
    Pause(u64),
    /// An eviction episode: maxmemory set this many bytes above the used
    /// memory, big values written, maxmemory back to 0.
    Evict(u64),
    /// A topology change of the mode (resharding, failover...).
    Topology(crate::topo::Op),
    Check(Check),
}

/// `a` as redis-cli reads it: bare when plain, else double-quoted with
/// `\xHH` escapes.
pub fn quote(a: &[u8]) -> String {
    let plain = !a.is_empty()
        && a.iter()
            .all(|&c| c.is_ascii_graphic() && c != b'"' && c != b'\'' && c != b'\\');
    if plain {
        return String::from_utf8_lossy(a).into_owned();
    }
    let mut s = String::from("\"");
    for &c in a {
        match c {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            b' ' => s.push(' '),
            c if c.is_ascii_graphic() => s.push(c as char),
            c => {
                let _ = write!(s, "\\x{c:02x}");
            }
        }
    }
    s.push('"');
    s
}

pub fn line(c: &Cmd) -> String {
    c.args
        .iter()
        .map(|a| quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The steps as redis-cli lines (checks and topology changes as comments).
pub fn replay(steps: &[Step]) -> String {
    let mut out = String::new();
    for s in steps {
        match s {
            Step::Cmd(c) => {
                let _ = writeln!(out, "{}", line(c));
            }
            Step::Multi(cmds) => {
                out.push_str("MULTI\n");
                for c in cmds {
                    let _ = writeln!(out, "{}", line(c));
                }
                out.push_str("EXEC\n");
            }
            Step::Pause(ms) => {
                let _ = writeln!(out, "# wait {ms} ms");
            }
            Step::Evict(b) => {
                let _ = writeln!(
                    out,
                    "# CONFIG SET maxmemory-policy allkeys-random; CONFIG SET maxmemory <used_memory + {b}>; \
                     SET {{t0}}:big<i> <32 KiB> until evictions; CONFIG SET maxmemory 0"
                );
            }
            Step::Topology(op) => {
                let _ = writeln!(
                    out,
                    "# topology: {:?} of slot {} from node {} to node {}",
                    op.kind, op.slot, op.from, op.to
                );
                for (i, stage) in op.writes.iter().enumerate() {
                    for w in stage {
                        let _ = writeln!(out, "#   at stage {i}: {}", line(w));
                    }
                }
            }
            Step::Check(c) => {
                let _ = writeln!(out, "# check: {}", describe(c));
                if let Check::Scan { between, .. } | Check::Collection { between, .. } = c {
                    for (i, page) in between.iter().enumerate() {
                        for w in page {
                            let _ = writeln!(out, "#   after page {i}: {}", line(w));
                        }
                    }
                }
            }
        }
    }
    out
}

pub fn describe(c: &Check) -> String {
    match c {
        Check::Scan {
            db,
            count,
            pattern,
            ty,
            ..
        } => format!(
            "SELECT {db}; MULTI; EVAL <native SCAN in Lua>; SNAPSHOT.SCAN 0 COUNT {count}{}{}; EXEC; then the rest of the iteration",
            pattern.as_ref().map(|p| format!(" MATCH {}", quote(p))).unwrap_or_default(),
            ty.map(|t| format!(" TYPE {t}")).unwrap_or_default()
        ),
        Check::Collection { db, pick, count, .. } => {
            format!("SELECT {db}; collection #{pick} of the truth, SNAPSHOT.[HSZ]SCAN COUNT {count} vs HGETALL/SMEMBERS/ZRANGE in Lua")
        }
        Check::Count => "snapshot_index_keys_db<N> == DBSIZE in every database".into(),
        Check::Served { db, count, flip } => format!(
            "SELECT {db}; served SCAN/KEYS/HSCAN/SSCAN/ZSCAN COUNT {count} vs the truth{}",
            if *flip { ", serve-native flipped mid-iteration" } else { "" }
        ),
        Check::ScriptScan { db, count } => format!(
            "SELECT {db}; EVAL <spin past busy-reply-threshold; SNAPSHOT.SCAN COUNT {count} and SCAN in the script>"
        ),
    }
}
