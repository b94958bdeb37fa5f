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
//! Values live in atomics, fields of one [`Config`] value that the
//! `Module` owns (`state::Shared::config`): worker threads read them
//! without any lock, the notification path with one relaxed load through
//! the `&Module` it already holds. The table points at the fields by
//! accessor ([`Spec::var`]), so it is immutable and global while the values
//! are not.

use std::sync::atomic::{AtomicI64, Ordering};

/// The value of every config, one atomic each; defaults from [`CONFIGS`].
/// Registered with the server (which reads and writes it through `&'static`
/// pointers) at OnLoad, right after the `Module` holding it is made.
pub struct Config {
    /// `snapshot.workers`: threads serving scans.
    pub workers: AtomicI64,
    /// `snapshot.worker-nice`: scheduling niceness of worker threads (0-19; 19 = yield to everything).
    pub worker_nice: AtomicI64,
    /// `snapshot.cursor-idle-timeout`: seconds an unused cursor stays valid.
    pub idle_timeout: AtomicI64,
    /// `snapshot.max-open-cursors`: open iterations kept at most.
    pub max_open: AtomicI64,
    /// `snapshot.scan-budget`: index entries one call may examine at most.
    pub scan_budget: AtomicI64,
    /// `snapshot.inline-entries`: a page that needs at most this many index
    /// entries (and a snapshot that is ready) is served on the main thread:
    /// handing it to a worker and back costs the main thread more than the walk.
    /// 0 hands every page to a worker.
    pub inline_entries: AtomicI64,
    /// `snapshot.backfill-batch`: keys indexed per slice (one per turn of the
    /// event loop) while building the index after MODULE LOAD.
    pub backfill_batch: AtomicI64,
    /// `snapshot.hash-copy-batch`: hash fields copied per slice (one per turn
    /// of the event loop) when SNAPSHOT.HSCAN snapshots a large hash.
    pub hash_copy_batch: AtomicI64,
    /// `snapshot.collection-memory-limit` (alias `snapshot.hash-memory-limit`):
    /// capacity all SNAPSHOT.HSCAN/SSCAN/ZSCAN copies may reserve together.
    pub hash_memory_limit: AtomicI64,
    /// `snapshot.unlink-batch`: keys SNAPSHOT.UNLINK deletes per slice at most.
    pub unlink_batch: AtomicI64,
    /// `snapshot.index-idle-timeout`: seconds without a SNAPSHOT.SCAN or
    /// SNAPSHOT.UNLINK call after which the index is dropped until the next
    /// one (see `idle`); 0 keeps it always.
    pub index_idle_timeout: AtomicI64,
    /// `snapshot.max-retained-bytes`: bytes of index nodes that old versions
    /// (kept by open SNAPSHOT.SCAN iterations) may hold; 0 = no absolute limit.
    pub max_retained_bytes: AtomicI64,
    /// `snapshot.max-retained-percent`: the same limit relative to the index:
    /// live and retained bytes together stay within (100 + this) percent of
    /// the largest live index since the oldest open iteration began (retained
    /// bytes at least [`RETAINED_FLOOR`]); 0 = no relative limit. With both
    /// set, the smaller applies.
    pub max_retained_percent: AtomicI64,
    /// `snapshot.serve-native`: the native commands served from snapshots, as
    /// flags (0 = none, the default; see [`SERVE_NATIVE_NAMES`]).
    pub serve_native: AtomicI64,
}

impl Default for Config {
    /// Every value at its row's default.
    fn default() -> Self {
        let c = Config::zeroed();
        for s in CONFIGS {
            (s.var)(&c).store(s.default, Ordering::Relaxed);
        }
        c
    }
}

impl Config {
    fn zeroed() -> Self {
        let z = || AtomicI64::new(0);
        Config {
            workers: z(),
            worker_nice: z(),
            idle_timeout: z(),
            max_open: z(),
            scan_budget: z(),
            inline_entries: z(),
            backfill_batch: z(),
            hash_copy_batch: z(),
            hash_memory_limit: z(),
            unlink_batch: z(),
            index_idle_timeout: z(),
            max_retained_bytes: z(),
            max_retained_percent: z(),
            serve_native: z(),
        }
    }

    /// Whether `spec` is the row (or an alias) of `field`.
    pub fn is(&self, spec: &Spec, field: &AtomicI64) -> bool {
        std::ptr::eq((spec.var)(self), field)
    }

    /// [`retained_limit`] with the configured values.
    pub fn retained_limit(&self, live: usize, peak: usize) -> (usize, RetainedSource) {
        retained_limit(
            get(&self.max_retained_bytes),
            get(&self.max_retained_percent),
            live,
            peak,
        )
    }

    /// The value of row `i` (CONFIG GET's).
    pub fn value(&self, i: usize) -> i64 {
        CONFIGS
            .get(i)
            .map_or(0, |s| (s.var)(self).load(Ordering::Relaxed))
    }
}

/// The least a relative limit allows, so that a small index does not end
/// iterations over a few changed leaves.
pub const RETAINED_FLOOR: usize = 4 << 20;

/// Which setting decides the limit on bytes held by old versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetainedSource {
    /// Neither: no limit.
    None,
    /// `snapshot.max-retained-bytes`.
    Bytes,
    /// `snapshot.max-retained-percent` of the index's peak.
    Percent,
    /// `snapshot.max-retained-percent`, raised to [`RETAINED_FLOOR`].
    Floor,
}

impl RetainedSource {
    /// As INFO shows it.
    pub fn name(self) -> &'static str {
        match self {
            RetainedSource::None => "none",
            RetainedSource::Bytes => "max-retained-bytes",
            RetainedSource::Percent => "max-retained-percent",
            RetainedSource::Floor => "max-retained-percent-floor",
        }
    }

    /// The setting, as the error of an ended iteration names it.
    pub fn setting(self) -> &'static str {
        match self {
            RetainedSource::None | RetainedSource::Bytes => "snapshot.max-retained-bytes",
            RetainedSource::Percent => "snapshot.max-retained-percent",
            RetainedSource::Floor => "snapshot.max-retained-percent, at its 4 MiB floor",
        }
    }

    /// A tag for the registry's memory of ended iterations.
    pub fn tag(self) -> u8 {
        self as u8
    }

    pub fn from_tag(t: u8) -> Self {
        [
            RetainedSource::None,
            RetainedSource::Bytes,
            RetainedSource::Percent,
            RetainedSource::Floor,
        ]
        .get(t as usize)
        .copied()
        .unwrap_or(RetainedSource::Bytes)
    }
}

/// The limit on bytes held by old versions (0: none) and what decides it:
/// `bytes` (0: no absolute limit), and `percent`: live and retained bytes
/// together within (100 + `percent`)% of `peak`, the largest live index
/// (node bytes) since the oldest open iteration began, `live` being the
/// live index now, with [`RETAINED_FLOOR`] (0: no relative limit); the
/// smaller of the two when both are set. Deleting keys (which moves bytes
/// from the live index to old versions) never reaches the relative limit;
/// copies made by writes to keys an old version shares do.
pub fn retained_limit(
    bytes: usize,
    percent: usize,
    live: usize,
    peak: usize,
) -> (usize, RetainedSource) {
    let relative = (percent > 0).then(|| {
        let total = peak.max(live) as u128 * (100 + percent as u128) / 100;
        let share = total.saturating_sub(live as u128).min(usize::MAX as u128) as usize;
        if share >= RETAINED_FLOOR {
            (share, RetainedSource::Percent)
        } else {
            (RETAINED_FLOOR, RetainedSource::Floor)
        }
    });
    match (bytes, relative) {
        (0, None) => (0, RetainedSource::None),
        (0, Some(r)) => r,
        (b, Some(r)) if r.0 < b => r,
        (b, _) => (b, RetainedSource::Bytes),
    }
}

/// The names of `snapshot.serve-native`'s flags (the bits of
/// `native::mode::Native::bit`), `none` and `all` included. The server
/// shows a value as `none`, `all` or the single flags it holds.
pub static SERVE_NATIVE_NAMES: &[(&str, i64)] = &[
    ("none", 0),
    ("scan", 1),
    ("keys", 2),
    ("hscan", 4),
    ("sscan", 8),
    ("zscan", 16),
    ("all", 31),
];

/// A flags value as the server's flags configs take it: names of `names`
/// separated by spaces, any case; `none` alone (or nothing) is 0.
pub fn parse_flags(names: &[(&str, i64)], v: &[u8]) -> Option<i64> {
    let mut bits = 0;
    for word in v.split(|&b| b == b' ').filter(|w| !w.is_empty()) {
        let &(_, b) = names
            .iter()
            .find(|(n, _)| word.eq_ignore_ascii_case(n.as_bytes()))?;
        bits |= b;
    }
    Some(bits)
}

/// A value as a count (a negative one, which no range allows, as 0).
#[inline(always)]
pub fn get(v: &AtomicI64) -> usize {
    v.load(Ordering::Relaxed).max(0) as usize
}

pub use crate::server::configs::Kind;

/// One config: a row of [`CONFIGS`], its value a field of [`Config`].
pub type Spec = crate::server::configs::Spec<Config>;

/// The field of a config's value.
type Field = for<'a> fn(&'a Config) -> &'a AtomicI64;

/// An integer config (constructor for one-line rows of [`CONFIGS`]).
const fn int(name: &'static str, var: Field, default: i64, min: i64, max: i64) -> Spec {
    Spec {
        name,
        var,
        default,
        min,
        max,
        kind: Kind::Integer,
        names: &[],
    }
}

/// A memory config (bytes; accepts `256mb`-style values).
const fn memory(name: &'static str, var: Field, default: i64, min: i64, max: i64) -> Spec {
    Spec {
        kind: Kind::Memory,
        ..int(name, var, default, min, max)
    }
}

/// A flags config (`names`: each name with its value).
const fn flags(
    name: &'static str,
    var: Field,
    names: &'static [(&'static str, i64)],
    max: i64,
) -> Spec {
    Spec {
        kind: Kind::Flags,
        names,
        ..int(name, var, 0, 0, max)
    }
}

/// Every config, in registration order: one row each. A row may share its
/// field with another (an alias name for the same value). Immutable, so
/// global: the values are in the `Module`'s [`Config`].
pub static CONFIGS: &[Spec] = &[
    int("workers", |c| &c.workers, 2, 1, 64),
    int("worker-nice", |c| &c.worker_nice, 19, 0, 19),
    int("cursor-idle-timeout", |c| &c.idle_timeout, 60, 1, 86_400),
    int("max-open-cursors", |c| &c.max_open, 1024, 1, 1_000_000),
    int(
        "scan-budget",
        |c| &c.scan_budget,
        100_000,
        100,
        1_000_000_000,
    ),
    int("inline-entries", |c| &c.inline_entries, 256, 0, 100_000),
    int("backfill-batch", |c| &c.backfill_batch, 1000, 1, 1_000_000),
    int(
        "hash-copy-batch",
        |c| &c.hash_copy_batch,
        1000,
        1,
        1_000_000,
    ),
    memory(
        "collection-memory-limit",
        |c| &c.hash_memory_limit,
        256 << 20,
        1024,
        i64::MAX,
    ),
    // The name before SNAPSHOT.SSCAN/ZSCAN: an alias (same value).
    memory(
        "hash-memory-limit",
        |c| &c.hash_memory_limit,
        256 << 20,
        1024,
        i64::MAX,
    ),
    int("unlink-batch", |c| &c.unlink_batch, 10_000, 1, 1_000_000),
    memory(
        "max-retained-bytes",
        |c| &c.max_retained_bytes,
        0,
        0,
        i64::MAX,
    ),
    int(
        "max-retained-percent",
        |c| &c.max_retained_percent,
        100,
        0,
        1_000_000,
    ),
    int(
        "index-idle-timeout",
        |c| &c.index_idle_timeout,
        0,
        0,
        31_536_000,
    ),
    flags("serve-native", |c| &c.serve_native, SERVE_NATIVE_NAMES, 31),
];

/// The prefix of every config name (the module's name).
pub const PREFIX: &str = "snapshot.";

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
        Kind::Flags => parse_flags(s.names, v).ok_or_else(|| {
            let names: Vec<&str> = s.names.iter().map(|(n, _)| *n).collect();
            format!(
                "argument '{given}': value '{shown}' is not 'none', 'all' or a list of: {}",
                names[1..names.len() - 1].join(" ")
            )
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
        let probe = Config::zeroed();
        if out
            .iter()
            .any(|&(j, _)| probe.is(&CONFIGS[j], (CONFIGS[i].var)(&probe)))
        {
            return Err(format!("argument '{given}' is given twice"));
        }
        out.push((i, n));
    }
    Ok(out)
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

    const MIB: usize = 1 << 20;

    #[rstest]
    // Defaults: half the live index, never under the floor.
    #[case::small_index(0, 50, MIB, MIB, (RETAINED_FLOOR, RetainedSource::Floor))]
    #[case::index_at_the_floor(0, 50, 8 * MIB, 8 * MIB, (4 * MIB, RetainedSource::Percent))]
    #[case::big_index(0, 50, 1000 * MIB, 1000 * MIB, (500 * MIB, RetainedSource::Percent))]
    #[case::several_times_the_index(0, 300, 100 * MIB, 100 * MIB, (300 * MIB, RetainedSource::Percent))]
    // Absolute only (relative off), and neither.
    #[case::bytes_only(64 * MIB, 0, 1000 * MIB, 1000 * MIB, (64 * MIB, RetainedSource::Bytes))]
    #[case::no_limit(0, 0, 1000 * MIB, 1000 * MIB, (0, RetainedSource::None))]
    // Both: the smaller applies.
    #[case::bytes_smaller(16 * MIB, 50, 1000 * MIB, 1000 * MIB, (16 * MIB, RetainedSource::Bytes))]
    #[case::percent_smaller(1 << 30, 50, 100 * MIB, 100 * MIB, (50 * MIB, RetainedSource::Percent))]
    #[case::bytes_under_the_floor(MIB, 50, MIB, MIB, (MIB, RetainedSource::Bytes))]
    #[case::equal_is_bytes(50 * MIB, 50, 100 * MIB, 100 * MIB, (50 * MIB, RetainedSource::Bytes))]
    #[case::no_overflow(0, 1_000_000, usize::MAX, usize::MAX, (usize::MAX, RetainedSource::Percent))]
    // Keys deleted (or flushed) while an iteration is open: the bytes they
    // leave in old versions are within the limit, whatever the live index.
    #[case::after_deleting_most(0, 50, 10 * MIB, 100 * MIB, (140 * MIB, RetainedSource::Percent))]
    #[case::after_a_flush(0, 50, 0, 100 * MIB, (150 * MIB, RetainedSource::Percent))]
    #[case::bytes_still_bound_deletes(64 * MIB, 50, 0, 100 * MIB, (64 * MIB, RetainedSource::Bytes))]
    // Grown since: the live index is its own peak.
    #[case::grown(0, 50, 200 * MIB, 100 * MIB, (100 * MIB, RetainedSource::Percent))]
    fn retained_limit_follows_the_index(
        #[case] bytes: usize,
        #[case] percent: usize,
        #[case] live: usize,
        #[case] peak: usize,
        #[case] want: (usize, RetainedSource),
    ) {
        assert_eq!(retained_limit(bytes, percent, live, peak), want);
    }

    #[test]
    fn retained_sources_survive_their_tags() {
        for s in [
            RetainedSource::None,
            RetainedSource::Bytes,
            RetainedSource::Percent,
            RetainedSource::Floor,
        ] {
            assert_eq!(RetainedSource::from_tag(s.tag()), s);
        }
    }

    #[test]
    fn table_is_consistent() {
        let c = Config::default();
        for (i, s) in CONFIGS.iter().enumerate() {
            assert!(s.min <= s.default && s.default <= s.max, "{}", s.name);
            assert_eq!(c.value(i), s.default, "{}", s.name);
            assert_eq!(find(format!("{PREFIX}{}", s.name).as_bytes()), Some(i));
        }
    }

    /// Every field of [`Config`] has a row, and rows share a field only as
    /// the declared alias.
    #[test]
    fn every_field_has_a_row_and_only_aliases_share_one() {
        let c = Config::zeroed();
        let fields = std::mem::size_of::<Config>() / std::mem::size_of::<AtomicI64>();
        let mut seen: Vec<(*const AtomicI64, &str)> = Vec::new();
        for s in CONFIGS {
            let f: *const AtomicI64 = (s.var)(&c);
            if let Some(&(_, first)) = seen.iter().find(|(p, _)| *p == f) {
                assert_eq!(
                    (first, s.name),
                    ("collection-memory-limit", "hash-memory-limit"),
                    "only the declared alias shares a field"
                );
            } else {
                seen.push((f, s.name));
            }
        }
        assert_eq!(seen.len(), fields);
        // Separate values: setting one row moves no other field.
        for s in CONFIGS {
            let c = Config::default();
            (s.var)(&c).store(-7, Ordering::Relaxed);
            for (j, t) in CONFIGS.iter().enumerate() {
                let moved = c.value(j) == -7;
                assert_eq!(moved, c.is(t, (s.var)(&c)), "{} vs {}", s.name, t.name);
            }
        }
    }

    #[test]
    fn a_config_value_is_per_module() {
        let (a, b) = (Config::default(), Config::default());
        a.workers.store(9, Ordering::Relaxed);
        assert_eq!((get(&a.workers), get(&b.workers)), (9, 2));
    }
}
