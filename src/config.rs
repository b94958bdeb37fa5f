//! Module configuration (`snapshot.*`), settable from `loadmodule`
//! arguments, the config file (`snapshot.<name> value` lines, e.g.
//! `include module.conf`) and `CONFIG SET`.
//!
//! [`CONFIGS`] is the one table of every config: its name, default, range
//! and kind. The same rows drive the registration with the server (which
//! then enforces the range in the config file and on CONFIG SET) and the
//! strict parsing of `loadmodule` arguments ([`parse_args`]), so all three
//! ways accept and refuse the same values. To add a config, add a row.
//!
//! Values live in atomics: worker threads read them without any lock.

use std::sync::atomic::{AtomicI64, Ordering};

/// `snapshot.workers`: threads serving scans.
pub static WORKERS: AtomicI64 = AtomicI64::new(2);
/// `snapshot.worker-nice`: scheduling niceness of worker threads (0-19; 19 = yield to everything).
pub static WORKER_NICE: AtomicI64 = AtomicI64::new(19);
/// `snapshot.cursor-idle-timeout`: seconds an unused cursor stays valid.
pub static IDLE_TIMEOUT: AtomicI64 = AtomicI64::new(60);
/// `snapshot.max-open-cursors`: open iterations kept at most.
pub static MAX_OPEN: AtomicI64 = AtomicI64::new(1024);
/// `snapshot.scan-budget`: index entries one call may examine at most.
pub static SCAN_BUDGET: AtomicI64 = AtomicI64::new(100_000);
/// `snapshot.inline-entries`: a page that needs at most this many index
/// entries (and a snapshot that is ready) is served on the main thread:
/// handing it to a worker and back costs the main thread more than the walk.
/// 0 hands every page to a worker.
pub static INLINE_ENTRIES: AtomicI64 = AtomicI64::new(256);
/// `snapshot.backfill-batch`: keys indexed per slice (one per turn of the
/// event loop) while building the index after MODULE LOAD.
pub static BACKFILL_BATCH: AtomicI64 = AtomicI64::new(1000);

/// `snapshot.hash-copy-batch`: hash fields copied per slice (one per turn
/// of the event loop) when SNAPSHOT.HSCAN snapshots a large hash.
pub static HASH_COPY_BATCH: AtomicI64 = AtomicI64::new(1000);
/// `snapshot.collection-memory-limit` (alias `snapshot.hash-memory-limit`):
/// capacity all SNAPSHOT.HSCAN/SSCAN/ZSCAN copies may reserve together.
pub static HASH_MEMORY_LIMIT: AtomicI64 = AtomicI64::new(256 << 20);

/// `snapshot.unlink-batch`: keys SNAPSHOT.UNLINK deletes per slice at most.
pub use crate::commands::unlink::UNLINK_BATCH;

/// `snapshot.index-idle-timeout`: seconds without a SNAPSHOT.SCAN or
/// SNAPSHOT.UNLINK call after which the index is dropped until the next
/// one (see `idle`); 0 keeps it always.
pub static INDEX_IDLE_TIMEOUT: AtomicI64 = AtomicI64::new(0);

/// `snapshot.max-retained-bytes`: bytes of index nodes that old versions
/// (kept by open SNAPSHOT.SCAN iterations) may hold; 0 = unbounded.
pub static MAX_RETAINED_BYTES: AtomicI64 = AtomicI64::new(1 << 30);

/// `snapshot.serve-native`: the native commands served from snapshots, as
/// `native::mode` flags (0 = none, the default).
pub static SERVE_NATIVE: AtomicI64 = AtomicI64::new(0);

pub fn get(v: &AtomicI64) -> usize {
    v.load(Ordering::Relaxed).max(0) as usize
}

/// How a value is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A decimal integer.
    Integer,
    /// Bytes: a decimal integer with an optional unit as the server's own
    /// memory configs take it (`b`, `k`, `kb`, `m`, `mb`, `g`, `gb`, any case:
    /// `k` = 1000, `kb` = 1024).
    Memory,
    /// Flags by name (see `native::mode`), registered as a flags config.
    Flags,
}

/// One config: `snapshot.<name>`.
pub struct Spec {
    /// Name without the module prefix.
    pub name: &'static str,
    /// The value. Two rows may share one atomic (an alias): a value given
    /// for either name applies to both.
    pub var: &'static AtomicI64,
    pub default: i64,
    /// Inclusive range, enforced at load, in the config file and on CONFIG SET.
    pub min: i64,
    pub max: i64,
    pub kind: Kind,
    /// Called (main thread) after the value changed at runtime.
    pub on_change: Option<fn(i64)>,
}

/// An integer config (constructor for one-line rows of [`CONFIGS`]).
const fn int(
    name: &'static str,
    var: &'static AtomicI64,
    default: i64,
    min: i64,
    max: i64,
) -> Spec {
    Spec {
        name,
        var,
        default,
        min,
        max,
        kind: Kind::Integer,
        on_change: None,
    }
}

/// A memory config (bytes; accepts `256mb`-style values).
const fn memory(
    name: &'static str,
    var: &'static AtomicI64,
    default: i64,
    min: i64,
    max: i64,
) -> Spec {
    Spec {
        kind: Kind::Memory,
        ..int(name, var, default, min, max)
    }
}

/// A flags config (`native::mode` names: `none`, `all`, `scan keys ...`).
const fn flags(name: &'static str, var: &'static AtomicI64, default: i64, max: i64) -> Spec {
    Spec {
        kind: Kind::Flags,
        ..int(name, var, default, 0, max)
    }
}

impl Spec {
    /// Runs `f` after the value changed at runtime.
    const fn hook(mut self, f: fn(i64)) -> Spec {
        self.on_change = Some(f);
        self
    }
}

/// Every config, in registration order: one row each. A row may share its
/// atomic with another (an alias name for the same value).
pub static CONFIGS: &[Spec] = &[
    int("workers", &WORKERS, 2, 1, 64).hook(on_workers_changed),
    int("worker-nice", &WORKER_NICE, 19, 0, 19).hook(on_nice_changed),
    int("cursor-idle-timeout", &IDLE_TIMEOUT, 60, 1, 86_400),
    int("max-open-cursors", &MAX_OPEN, 1024, 1, 1_000_000),
    int("scan-budget", &SCAN_BUDGET, 100_000, 100, 1_000_000_000),
    int("inline-entries", &INLINE_ENTRIES, 256, 0, 100_000),
    int("backfill-batch", &BACKFILL_BATCH, 1000, 1, 1_000_000),
    int("hash-copy-batch", &HASH_COPY_BATCH, 1000, 1, 1_000_000),
    memory(
        "collection-memory-limit",
        &HASH_MEMORY_LIMIT,
        256 << 20,
        1024,
        i64::MAX,
    ),
    // The name before SNAPSHOT.SSCAN/ZSCAN: an alias (same value).
    memory(
        "hash-memory-limit",
        &HASH_MEMORY_LIMIT,
        256 << 20,
        1024,
        i64::MAX,
    ),
    int("unlink-batch", &UNLINK_BATCH, 10_000, 1, 1_000_000),
    memory(
        "max-retained-bytes",
        &MAX_RETAINED_BYTES,
        1 << 30,
        0,
        i64::MAX,
    ),
    int("index-idle-timeout", &INDEX_IDLE_TIMEOUT, 0, 0, 31_536_000),
    flags("serve-native", &SERVE_NATIVE, 0, crate::native::mode::ALL),
];

/// The prefix of every config name (the module's name).
pub const PREFIX: &str = "snapshot.";

fn on_workers_changed(v: i64) {
    if let Some(m) = crate::state::try_get() {
        m.pool.resize(v.max(0) as usize);
    }
}

fn on_nice_changed(v: i64) {
    if let Some(m) = crate::state::try_get() {
        m.pool.set_nice(v.max(0) as usize);
    }
}

/// The row for `name`, given with or without the `snapshot.` prefix, in
/// any case.
pub fn find(name: &[u8]) -> Option<usize> {
    let bare = match name.get(..PREFIX.len()) {
        Some(p) if p.eq_ignore_ascii_case(PREFIX.as_bytes()) => &name[PREFIX.len()..],
        _ => name,
    };
    CONFIGS
        .iter()
        .position(|s| s.name.as_bytes().eq_ignore_ascii_case(bare))
}

/// A decimal integer as the server writes them: optional `-`, digits, no
/// `+`, no spaces.
fn parse_int(v: &[u8]) -> Option<i64> {
    let digits = v.strip_prefix(b"-").unwrap_or(v);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// A memory value: digits and an optional unit (see [`Kind::Memory`]).
pub fn parse_memory(v: &[u8]) -> Option<i64> {
    let split = v
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(v.len());
    let (digits, unit) = v.split_at(split);
    if digits.is_empty() {
        return None;
    }
    let mul: i64 = match unit.to_ascii_lowercase().as_slice() {
        b"" | b"b" => 1,
        b"k" => 1000,
        b"kb" => 1024,
        b"m" => 1000 * 1000,
        b"mb" => 1024 * 1024,
        b"g" => 1000 * 1000 * 1000,
        b"gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    let n: i64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    n.checked_mul(mul)
}

/// Checks `v` against row `i`: the value, or the reason it is refused
/// (the argument is named as the user wrote it, `given`).
pub fn check(i: usize, given: &str, v: &[u8]) -> Result<i64, String> {
    let s = &CONFIGS[i];
    let shown = String::from_utf8_lossy(v);
    let n = match s.kind {
        Kind::Integer => parse_int(v)
            .ok_or_else(|| format!("argument '{given}': value '{shown}' is not an integer"))?,
        Kind::Memory => parse_memory(v).ok_or_else(|| {
            format!("argument '{given}': value '{shown}' is not a memory size (e.g. 1048576, 512kb, 256mb, 1gb)")
        })?,
        Kind::Flags => crate::native::mode::parse(v).ok_or_else(|| {
            format!("argument '{given}': value '{shown}' is not 'none', 'all' or a list of: scan keys hscan sscan zscan")
        })?,
    };
    if n < s.min || n > s.max {
        return Err(format!(
            "argument '{given}': value '{shown}' is out of range (must be between {} and {} inclusive)",
            s.min, s.max
        ));
    }
    Ok(n)
}

/// Parses `loadmodule`/`MODULE LOAD` arguments: `name value` pairs, each
/// name with or without the `snapshot.` prefix, in any case. Returns the
/// (row, value) pairs, or the first problem: an unknown name, a name
/// without its value, a value that does not parse or is out of range, a
/// config given twice.
pub fn parse_args(args: &[&[u8]]) -> Result<Vec<(usize, i64)>, String> {
    let mut out: Vec<(usize, i64)> = Vec::new();
    let mut it = args.iter();
    while let Some(name) = it.next() {
        let given = String::from_utf8_lossy(name).into_owned();
        let Some(i) = find(name) else {
            let names: Vec<&str> = CONFIGS.iter().map(|s| s.name).collect();
            return Err(format!(
                "unknown argument '{given}' (arguments are name value pairs; names, with or without the '{PREFIX}' prefix: {})",
                names.join(", ")
            ));
        };
        let Some(value) = it.next() else {
            return Err(format!("argument '{given}' has no value"));
        };
        let n = check(i, &given, value)?;
        if out
            .iter()
            .any(|&(j, _)| std::ptr::eq(CONFIGS[j].var, CONFIGS[i].var))
        {
            return Err(format!("argument '{given}' is given twice"));
        }
        out.push((i, n));
    }
    Ok(out)
}

/// The value of row `i` for CONFIG GET.
pub fn value(i: usize) -> i64 {
    CONFIGS.get(i).map_or(0, |s| s.var.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn row(name: &str) -> usize {
        find(name.as_bytes()).unwrap()
    }

    #[rstest]
    #[case(&["workers", "3", "cursor-idle-timeout", "7"], &[("workers", 3), ("cursor-idle-timeout", 7)])]
    #[case(&["snapshot.workers", "3", "SNAPSHOT.Cursor-Idle-Timeout", "7"], &[("workers", 3), ("cursor-idle-timeout", 7)])]
    #[case(&["WORKERS", "64", "inline-entries", "0"], &[("workers", 64), ("inline-entries", 0)])]
    #[case(&["hash-memory-limit", "256mb"], &[("hash-memory-limit", 256 << 20)])]
    #[case(&["hash-memory-limit", "2GB"], &[("hash-memory-limit", 2 << 30)])]
    #[case(&["hash-memory-limit", "5k"], &[("hash-memory-limit", 5000)])]
    #[case(&["hash-memory-limit", "1024"], &[("hash-memory-limit", 1024)])]
    #[case(&[], &[])]
    #[case(&["serve-native", "all"], &[("serve-native", 31)])]
    #[case(&["snapshot.serve-native", "scan KEYS"], &[("serve-native", 3)])]
    #[case(&["serve-native", "none"], &[("serve-native", 0)])]
    fn accepted(#[case] args: &[&str], #[case] want: &[(&str, i64)]) {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let got = parse_args(&args).unwrap();
        let want: Vec<(usize, i64)> = want.iter().map(|&(n, v)| (row(n), v)).collect();
        assert_eq!(got, want);
    }

    #[rstest]
    #[case(&["bogus", "1"], "unknown argument 'bogus'")]
    #[case(&["snapshot.bogus", "1"], "unknown argument 'snapshot.bogus'")]
    #[case(&["snapshot."], "unknown argument 'snapshot.'")]
    #[case(&["workers"], "argument 'workers' has no value")]
    #[case(&["workers", "3", "scan-budget"], "argument 'scan-budget' has no value")]
    #[case(&["workers", "abc"], "argument 'workers': value 'abc' is not an integer")]
    #[case(&["workers", "3.5"], "value '3.5' is not an integer")]
    #[case(&["workers", "+3"], "value '+3' is not an integer")]
    #[case(&["workers", ""], "value '' is not an integer")]
    #[case(&["workers", "99999999999999999999"], "is not an integer")]
    #[case(&["workers", "0"], "argument 'workers': value '0' is out of range (must be between 1 and 64 inclusive)")]
    #[case(&["workers", "-5"], "value '-5' is out of range")]
    #[case(&["workers", "200"], "value '200' is out of range")]
    #[case(&["worker-nice", "20"], "'worker-nice': value '20' is out of range")]
    #[case(&["max-open-cursors", "0"], "'max-open-cursors': value '0' is out of range")]
    #[case(&["cursor-idle-timeout", "0"], "'cursor-idle-timeout': value '0' is out of range")]
    #[case(&["scan-budget", "1"], "'scan-budget': value '1' is out of range")]
    #[case(&["hash-memory-limit", "100"], "'hash-memory-limit': value '100' is out of range")]
    #[case(&["hash-memory-limit", "12qb"], "value '12qb' is not a memory size")]
    #[case(&["hash-memory-limit", "mb"], "value 'mb' is not a memory size")]
    #[case(&["hash-memory-limit", "-1mb"], "value '-1mb' is not a memory size")]
    #[case(&["hash-memory-limit", "99999999999gb"], "is not a memory size")]
    #[case(&["workers", "3", "snapshot.workers", "4"], "argument 'snapshot.workers' is given twice")]
    #[case(&["serve-native", "scan,keys"], "argument 'serve-native': value 'scan,keys' is not 'none', 'all' or a list of: scan keys hscan sscan zscan")]
    #[case(&["serve-native", "clusterscan"], "value 'clusterscan' is not 'none'")]
    #[case(&["serve-native"], "argument 'serve-native' has no value")]
    fn refused(#[case] args: &[&str], #[case] want: &str) {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let e = parse_args(&args).unwrap_err();
        assert!(e.contains(want), "{e:?} lacks {want:?}");
    }

    #[test]
    fn table_is_consistent() {
        for (i, s) in CONFIGS.iter().enumerate() {
            assert!(s.min <= s.default && s.default <= s.max, "{}", s.name);
            assert_eq!(s.var.load(Ordering::Relaxed), s.default, "{}", s.name);
            assert_eq!(find(format!("{PREFIX}{}", s.name).as_bytes()), Some(i));
        }
    }
}
