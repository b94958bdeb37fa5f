//! The random mix of writes: every data type, every TTL form, renames,
//! moves, copies, DUMP/RESTORE, databases, flushes, transactions (with
//! errors), Lua scripts and functions, evictions, encoding conversions,
//! hash field expiry where the server has it, the module's configs.
//!
//! Key names are `{tN}:kM` (a few with binary bytes): a multi-key command
//! takes keys of one tag, so that it is legal in cluster mode too, while
//! single-key commands spread over every tag's slot.

use crate::common::Rng;
use crate::step::{Cmd, Step};

/// Tags (one cluster slot each) and keys per tag.
pub const TAGS: u64 = 24;
const PER_TAG: u64 = 8;

/// What the generator may use: the server's commands and the mode's rules.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    /// Several databases, MOVE, COPY ... DB, SWAPDB, SELECT (not in cluster mode).
    pub databases: bool,
    /// HEXPIRE and friends (Redis 7.4+, Valkey 9+).
    pub field_expiry: bool,
    /// DEBUG RELOAD, maxmemory evictions, FLUSHALL (standalone primaries).
    pub heavy: bool,
    /// CONFIG SET snapshot.serve-native flips.
    pub flip_native: bool,
    /// Expiry in scripts is judged by the wall clock (Redis 7.0).
    pub wall_clock_scripts: bool,
}

pub struct Gen {
    pub rng: Rng,
    pub caps: Caps,
}

fn b(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

impl Gen {
    pub fn new(seed: u64, caps: Caps) -> Gen {
        Gen {
            rng: Rng(seed),
            caps,
        }
    }

    fn below(&mut self, n: u64) -> u64 {
        self.rng.below(n)
    }

    fn chance(&mut self, num: u64, den: u64) -> bool {
        self.rng.chance(num, den)
    }

    /// A key of tag `tag`.
    fn key_of(&mut self, tag: u64) -> Vec<u8> {
        let mut k = format!("{{t{tag}}}:k{}", self.below(PER_TAG)).into_bytes();
        if self.chance(1, 16) {
            // Byte order with bytes above 0x7f and a NUL.
            k.extend_from_slice(if self.chance(1, 2) {
                b"\xff\x01"
            } else {
                b"\x00z"
            });
        }
        k
    }

    /// A key of tag `tag` in type family `f` (key numbers: 0-1 strings,
    /// 2 hashes, 3 sets, 4 sorted sets, 5 lists and streams; 6-7 anything).
    fn key_in(&mut self, tag: u64, f: u64) -> Vec<u8> {
        let m = if f == 0 { self.below(2) } else { f };
        let mut k = format!("{{t{tag}}}:k{m}").into_bytes();
        if self.chance(1, 16) {
            k.extend_from_slice(b"\xff\x01");
        }
        k
    }

    /// A random key and its tag.
    pub fn key(&mut self) -> (u64, Vec<u8>) {
        let tag = self.below(TAGS);
        (tag, self.key_of(tag))
    }

    fn val(&mut self) -> Vec<u8> {
        if self.chance(1, 4) {
            self.below(1000).to_string().into_bytes()
        } else {
            format!("v{}", self.below(100_000)).into_bytes()
        }
    }

    /// A member/field name; `wide` draws from a set large enough to convert
    /// encodings.
    fn member(&mut self, wide: bool) -> Vec<u8> {
        let n = if wide { 400 } else { 12 };
        if self.chance(1, 3) {
            self.below(n).to_string().into_bytes() // intset candidates
        } else {
            format!("m{}", self.below(n)).into_bytes()
        }
    }

    /// A TTL form for SET: none, EX, PX, EXAT, PXAT, KEEPTTL. `now_ms` is an
    /// estimate of the server clock (absolute forms).
    fn set_ttl(&mut self, now_ms: i64) -> Vec<Vec<u8>> {
        match self.below(9) {
            0 => vec![b("EX"), self.ttl_s().to_string().into_bytes()],
            1 | 2 => vec![b("PX"), self.ttl_ms().to_string().into_bytes()],
            3 => vec![
                b("EXAT"),
                ((now_ms / 1000) + self.ttl_s() as i64)
                    .to_string()
                    .into_bytes(),
            ],
            4 => vec![
                b("PXAT"),
                (now_ms + self.ttl_ms() as i64).to_string().into_bytes(),
            ],
            5 => vec![b("KEEPTTL")],
            _ => vec![],
        }
    }

    /// Seconds: mostly long, so keys stay.
    fn ttl_s(&mut self) -> u64 {
        1 + self.below(1000)
    }

    /// Milliseconds: some short enough to really expire during the run.
    fn ttl_ms(&mut self) -> u64 {
        if self.chance(1, 2) {
            1 + self.below(40)
        } else {
            1000 + self.below(1_000_000)
        }
    }

    fn cmd(&mut self, key: &[u8], args: Vec<Vec<u8>>) -> Cmd {
        Cmd::new(key, args)
    }

    /// One write command on a key of a random tag (multi-key commands stay
    /// within the tag).
    pub fn write(&mut self, now_ms: i64) -> Cmd {
        let which = self.below(60);
        // Most commands go to keys of their type's family (fewer WRONGTYPE
        // refusals); a quarter go anywhere.
        let family = match which {
            0..=15 => Some(0),
            22..=28 => Some(2),
            29..=35 => Some(3),
            36..=42 => Some(4),
            43..=49 => Some(5),
            _ => None,
        };
        let tag = self.below(TAGS);
        let (k, k2) = match family {
            Some(f) if self.chance(3, 4) => (self.key_in(tag, f), self.key_in(tag, f)),
            _ => (self.key_of(tag), self.key_of(tag)),
        };
        let kk = || k.clone();
        let c = |v: Vec<Vec<u8>>| v;
        let args: Vec<Vec<u8>> = match which {
            // Strings
            0..=5 => {
                let mut a = c(vec![b("SET"), kk(), self.val()]);
                a.extend(self.set_ttl(now_ms));
                match self.below(6) {
                    0 => a.push(b("NX")),
                    1 => a.push(b("XX")),
                    2 => a.push(b("GET")),
                    _ => {}
                }
                a
            }
            6 => vec![
                b("SETEX"),
                kk(),
                self.ttl_s().to_string().into_bytes(),
                self.val(),
            ],
            7 => vec![
                b("PSETEX"),
                kk(),
                self.ttl_ms().to_string().into_bytes(),
                self.val(),
            ],
            8 => match self.below(4) {
                0 => vec![b("GETEX"), kk(), b("PERSIST")],
                1 => vec![
                    b("GETEX"),
                    kk(),
                    b("PX"),
                    self.ttl_ms().to_string().into_bytes(),
                ],
                2 => vec![
                    b("GETEX"),
                    kk(),
                    b("EX"),
                    self.ttl_s().to_string().into_bytes(),
                ],
                _ => vec![b("GETDEL"), kk()],
            },
            9 => vec![b("APPEND"), kk(), self.val()],
            10 => vec![b("INCR"), kk()],
            11 => vec![b("INCRBYFLOAT"), kk(), b("1.5")],
            12 => vec![
                b("SETRANGE"),
                kk(),
                self.below(20).to_string().into_bytes(),
                b("x"),
            ],
            13 => vec![b("MSET"), kk(), self.val(), k2.clone(), self.val()],
            14 => vec![b("MSETNX"), kk(), self.val(), k2.clone(), self.val()],
            15 => vec![
                b("SETBIT"),
                kk(),
                self.below(64).to_string().into_bytes(),
                b("1"),
            ],
            // Deletions and expiry
            16 | 17 => vec![
                b(if self.chance(1, 2) { "DEL" } else { "UNLINK" }),
                kk(),
                k2.clone(),
            ],
            18..=20 => {
                let (cmd, n) = match self.below(4) {
                    0 => ("EXPIRE", self.ttl_s() as i64),
                    1 => ("PEXPIRE", self.ttl_ms() as i64),
                    2 => ("EXPIREAT", now_ms / 1000 + self.ttl_s() as i64 - 2),
                    _ => ("PEXPIREAT", now_ms + self.ttl_ms() as i64 - 20),
                };
                let mut a = vec![b(cmd), kk(), n.to_string().into_bytes()];
                if self.chance(1, 2) {
                    a.push(b(["NX", "XX", "GT", "LT"][self.below(4) as usize]));
                }
                a
            }
            21 => vec![b("PERSIST"), kk()],
            // Hashes
            22 | 23 => vec![
                b("HSET"),
                kk(),
                self.member(false),
                self.val(),
                self.member(false),
                self.val(),
            ],
            24 => {
                // Big enough to convert from listpack.
                let mut a = vec![b("HSET"), kk()];
                for _ in 0..(60 + self.below(100)) {
                    a.push(self.member(true));
                    a.push(self.val());
                }
                a
            }
            25 => vec![b("HDEL"), kk(), self.member(false), self.member(false)],
            26 => vec![b("HINCRBY"), kk(), self.member(false), b("3")],
            27 if self.caps.field_expiry => {
                let ms = if self.chance(1, 2) {
                    1 + self.below(30)
                } else {
                    100_000
                };
                let mut a = vec![
                    b("HPEXPIRE"),
                    kk(),
                    ms.to_string().into_bytes(),
                    b("FIELDS"),
                    b("2"),
                ];
                a.push(self.member(false));
                a.push(self.member(false));
                a
            }
            27 => vec![b("HSETNX"), kk(), self.member(false), self.val()],
            28 if self.caps.field_expiry => {
                vec![b("HPERSIST"), kk(), b("FIELDS"), b("1"), self.member(false)]
            }
            28 => vec![b("HSETNX"), kk(), self.member(false), self.val()],
            // Sets
            29 | 30 => vec![b("SADD"), kk(), self.member(false), self.member(false)],
            31 => {
                let mut a = vec![b("SADD"), kk()];
                for _ in 0..(100 + self.below(200)) {
                    a.push(self.member(true));
                }
                a
            }
            32 => vec![b("SREM"), kk(), self.member(false), self.member(false)],
            33 => vec![b("SPOP"), kk(), self.below(3).to_string().into_bytes()],
            34 => vec![b("SMOVE"), kk(), k2.clone(), self.member(false)],
            35 => vec![b("SUNIONSTORE"), k2.clone(), kk(), k2.clone()],
            // Sorted sets
            36 | 37 => vec![
                b("ZADD"),
                kk(),
                self.below(100).to_string().into_bytes(),
                self.member(false),
            ],
            38 => {
                let mut a = vec![b("ZADD"), kk()];
                for _ in 0..(70 + self.below(150)) {
                    a.push(self.below(1000).to_string().into_bytes());
                    a.push(self.member(true));
                }
                a
            }
            39 => vec![b("ZREM"), kk(), self.member(false)],
            40 => vec![b("ZPOPMIN"), kk(), self.below(3).to_string().into_bytes()],
            41 => vec![b("ZRANGESTORE"), k2.clone(), kk(), b("0"), b("-1")],
            42 => vec![b("ZINCRBY"), kk(), b("2"), self.member(false)],
            // Lists and streams
            43 => vec![
                b(if self.chance(1, 2) { "LPUSH" } else { "RPUSH" }),
                kk(),
                self.val(),
                self.val(),
            ],
            44 => vec![b(if self.chance(1, 2) { "LPOP" } else { "RPOP" }), kk()],
            45 => vec![b("LMOVE"), kk(), k2.clone(), b("LEFT"), b("RIGHT")],
            46 => vec![b("LTRIM"), kk(), b("1"), b("0")],
            47 => vec![b("XADD"), kk(), b("*"), b("f"), self.val()],
            48 => vec![b("XTRIM"), kk(), b("MAXLEN"), b("0")],
            49 => vec![b("PFADD"), kk(), self.val()],
            // Renames and copies
            50 => vec![b("RENAME"), kk(), k2.clone()],
            51 => vec![b("RENAMENX"), kk(), k2.clone()],
            52 => {
                let mut a = vec![b("COPY"), kk(), k2.clone()];
                if self.chance(1, 2) {
                    a.push(b("REPLACE"));
                }
                a
            }
            53 if self.caps.databases => {
                vec![
                    b("COPY"),
                    kk(),
                    kk(),
                    b("DB"),
                    self.db().to_string().into_bytes(),
                    b("REPLACE"),
                ]
            }
            54 if self.caps.databases => vec![b("MOVE"), kk(), self.db().to_string().into_bytes()],
            // Scripts and functions
            55 => {
                let body = "redis.call('SET', KEYS[1], ARGV[1]) \
                            redis.call('HSET', KEYS[2], 'f', ARGV[1]) \
                            redis.call('PEXPIRE', KEYS[1], ARGV[2]) \
                            if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('DEL', KEYS[1]) end \
                            return 1";
                let ttl = self.ttl_ms().to_string().into_bytes();
                vec![
                    b("EVAL"),
                    b(body),
                    b("2"),
                    kk(),
                    k2.clone(),
                    self.val(),
                    ttl,
                ]
            }
            56 => vec![
                b("FCALL"),
                b("fz_swap"),
                b("2"),
                kk(),
                k2.clone(),
                self.val(),
            ],
            57 => {
                let body = "local n = 0 \
                            for i = 1, 3 do redis.call('INCR', KEYS[1]) n = n + 1 end \
                            redis.call('RENAME', KEYS[1], KEYS[2]) return n";
                vec![b("EVAL"), b(body), b("2"), kk(), k2.clone()]
            }
            // DUMP/RESTORE (the payload is fetched when the step runs)
            58 => vec![
                b("DUMP+RESTORE"),
                kk(),
                k2.clone(),
                self.ttl_ms().to_string().into_bytes(),
            ],
            _ => vec![b("SET"), kk(), self.val()],
        };
        self.cmd(&k, args)
    }

    /// A database for the multi-database commands.
    pub fn db(&mut self) -> u64 {
        self.below(4)
    }

    /// A transaction on one tag, sometimes with a queued error (aborted) or
    /// a runtime error (the other commands still run).
    fn multi(&mut self, now_ms: i64) -> Step {
        let (tag, k) = self.key();
        let mut cmds = Vec::new();
        for _ in 0..(2 + self.below(4)) {
            let mut c = self.write(now_ms);
            // Keep every command on the transaction's tag.
            if c.key != k && !c.key.is_empty() {
                let k2 = self.key_of(tag);
                c = c.rekey(&k2);
            }
            if c.args[0] == b"DUMP+RESTORE" {
                c = Cmd::new(&c.key.clone(), vec![b("DEL"), c.key.clone()]);
            }
            cmds.push(c);
        }
        match self.below(8) {
            0 => cmds.push(Cmd::new(&k, vec![b("SET"), k.clone()])), // arity: EXECABORT
            1 => cmds.push(Cmd::new(&k, vec![b("LPUSH"), k.clone(), b("x")])), // WRONGTYPE maybe
            // A reload inside the transaction (standalone): every key's
            // `loaded` event fired from within EXEC.
            2 if self.caps.heavy && self.chance(1, 8) => {
                let at = self.below(cmds.len() as u64 + 1) as usize;
                cmds.insert(at, Cmd::keyless(vec![b("DEBUG"), b("RELOAD")]));
            }
            3 if self.caps.databases => {
                let at = self.below(cmds.len() as u64 + 1) as usize;
                cmds.insert(
                    at,
                    Cmd::keyless(vec![b("SELECT"), self.db().to_string().into_bytes()]),
                );
            }
            _ => {}
        }
        Step::Multi(cmds)
    }

    /// The next step (not a check: the runner decides those).
    pub fn step(&mut self, now_ms: i64) -> Step {
        match self.below(200) {
            0..=9 => self.multi(now_ms),
            10 | 11 if self.caps.databases => Step::Cmd(Cmd::keyless(vec![
                b("SELECT"),
                self.db().to_string().into_bytes(),
            ])),
            12 if self.caps.databases => Step::Cmd(Cmd::keyless(vec![
                b("SWAPDB"),
                self.db().to_string().into_bytes(),
                self.db().to_string().into_bytes(),
            ])),
            13 if self.chance(1, 3) => Step::Cmd(Cmd::keyless(if self.chance(1, 2) {
                vec![b("FLUSHDB")]
            } else {
                vec![b("FLUSHDB"), b("ASYNC")]
            })),
            14 if self.caps.heavy && self.chance(1, 4) => {
                Step::Cmd(Cmd::keyless(vec![b("FLUSHALL")]))
            }
            15 if self.caps.heavy && self.chance(1, 6) => {
                Step::Cmd(Cmd::keyless(vec![b("DEBUG"), b("RELOAD")]))
            }
            16 if self.caps.heavy && self.chance(1, 3) => {
                Step::Evict(64 * 1024 + self.below(256 * 1024))
            }
            17 if self.caps.databases => {
                // A script that SELECTs another database.
                let db = self.db().to_string().into_bytes();
                let (_, k) = self.key();
                let body = "redis.call('SELECT', ARGV[1]) redis.call('SET', KEYS[1], 'sel') \
                            redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1";
                Step::Cmd(Cmd::new(
                    &k,
                    vec![
                        b("EVAL"),
                        b(body),
                        b("1"),
                        k.clone(),
                        db,
                        self.ttl_ms().to_string().into_bytes(),
                    ],
                ))
            }
            18 => {
                // A script that spins past busy-reply-threshold, writing.
                let (tag, k) = self.key();
                let k2 = self.key_of(tag);
                let body = "local t = redis.call('TIME') \
                            local start = t[1] * 1000000 + t[2] \
                            redis.call('SET', KEYS[1], 'spin', 'PX', ARGV[1]) \
                            local i = 0 \
                            while true do \
                              local n = redis.call('TIME') i = i + 1 \
                              if n[1] * 1000000 + n[2] - start > 15000 then break end \
                            end \
                            redis.call('DEL', KEYS[2]) return i";
                Step::Cmd(Cmd::new(
                    &k,
                    vec![
                        b("EVAL"),
                        b(body),
                        b("2"),
                        k.clone(),
                        k2,
                        (1 + self.below(10)).to_string().into_bytes(),
                    ],
                ))
            }
            19 => {
                // The module's configs that change how a page is built, not
                // what it holds.
                let (name, v) = match self.below(3) {
                    0 => (
                        "snapshot.inline-entries",
                        ["1", "16", "256", "4096"][self.below(4) as usize],
                    ),
                    1 => (
                        "snapshot.scan-budget",
                        ["10", "1000", "100000"][self.below(3) as usize],
                    ),
                    _ => (
                        "snapshot.hash-copy-batch",
                        ["10", "100", "1000"][self.below(3) as usize],
                    ),
                };
                Step::Cmd(Cmd::keyless(vec![b("CONFIG"), b("SET"), b(name), b(v)]))
            }
            20 if self.caps.flip_native => {
                let v = ["none", "all", "scan keys", "hscan sscan zscan"][self.below(4) as usize];
                Step::Cmd(Cmd::keyless(vec![
                    b("CONFIG"),
                    b("SET"),
                    b("snapshot.serve-native"),
                    b(v),
                ]))
            }
            21 | 22 => Step::Pause(1 + self.below(25)),
            _ => Step::Cmd(self.write(now_ms)),
        }
    }
}
