//! Unit and property tests of the index and its MVCC rules.

use super::meta::{HASH, LIST, STRING};
use super::walk::{walk_snapshot_at, ScanSpec};
use super::*;
use crate::glob::Pattern;
use proptest::prelude::*;
use rstest::rstest;
use std::collections::BTreeMap;

fn m(ty: TypeId) -> Option<Meta> {
    Some(Meta::new(ty, None))
}

fn spec(pattern: Option<&[u8]>, count: usize, budget: usize) -> ScanSpec {
    ScanSpec {
        pattern: pattern.map(Pattern::new),
        type_filter: None,
        count,
        budget,
        expired_max: 0,
        expired_any_type: false,
    }
}

/// Runs a whole iteration page by page; returns all keys and the page sizes.
fn full(snap: &Snapshot, s: &ScanSpec) -> (Vec<Vec<u8>>, Vec<usize>) {
    let mut out = Vec::new();
    let mut pages = Vec::new();
    let mut after: Option<Key> = None;
    for _ in 0..1_000_000 {
        let p = walk_snapshot_at(snap, snap.at_ms, after.as_ref(), s);
        pages.push(p.keys.len());
        out.extend(p.keys.iter().map(|k| k.as_bytes().to_vec()));
        match p.resume_after {
            Some(k) => after = Some(k),
            None => return (out, pages),
        }
    }
    panic!("iteration did not terminate");
}

#[rstest]
#[case(None, Change::Unchanged)]
#[case(m(STRING), Change::Inserted)]
fn apply_on_missing_key(#[case] truth: Option<Meta>, #[case] want: Change) {
    let mut ks = Keyspace::new(1);
    let v0 = ks.version(0);
    assert_eq!(ks.apply(0, &Key::new(b"k"), truth), want);
    assert_eq!(ks.version(0) != v0, want != Change::Unchanged);
}

#[test]
fn apply_same_truth_twice_changes_nothing() {
    let mut ks = Keyspace::new(1);
    ks.apply(0, &Key::new(b"k"), m(HASH));
    let v = ks.version(0);
    assert_eq!(ks.apply(0, &Key::new(b"k"), m(HASH)), Change::Unchanged);
    assert_eq!(ks.version(0), v);
    assert_eq!(ks.apply(0, &Key::new(b"k"), m(STRING)), Change::Updated);
    assert_eq!(ks.get(0, b"k"), m(STRING));
    assert_eq!(ks.apply(0, &Key::new(b"k"), None), Change::Removed);
    assert_eq!(ks.len(0), 0);
}

#[test]
fn snapshot_is_isolated_from_later_writes_flush_and_swap() {
    let mut ks = Keyspace::new(2);
    for i in 0..1000u32 {
        ks.apply(0, &Key::new(format!("k{i}").as_bytes()), m(STRING));
    }
    let snap = ks.snapshot(0, 0);
    for i in 0..500u32 {
        ks.apply(0, &Key::new(format!("k{i}").as_bytes()), None);
        ks.apply(0, &Key::new(format!("new{i}").as_bytes()), m(HASH));
    }
    ks.swap(0, 1);
    ks.flush_all();
    assert_eq!(snap.live_keys().len(), 1000);
    assert!(snap
        .read()
        .to_vec()
        .iter()
        .all(|(_, v)| v.type_id() == STRING));
    assert_eq!(ks.total_keys(), 0);
}

#[test]
fn swap_exchanges_databases() {
    let mut ks = Keyspace::new(4);
    ks.apply(0, &Key::new(b"a"), m(STRING));
    ks.apply(3, &Key::new(b"b"), m(STRING));
    ks.swap(0, 3);
    assert!(ks.get(0, b"b").is_some() && ks.get(3, b"a").is_some());
    assert_eq!(ks.sizes(), vec![(0, 1), (3, 1)]);
}

#[test]
fn expired_keys_are_excluded_at_the_snapshot_instant() {
    let mut ks = Keyspace::new(1);
    ks.apply(0, &Key::new(b"gone"), Some(Meta::new(STRING, Some(99))));
    ks.apply(0, &Key::new(b"edge"), Some(Meta::new(STRING, Some(100))));
    ks.apply(0, &Key::new(b"later"), Some(Meta::new(STRING, Some(101))));
    let snap = ks.snapshot(0, 100);
    let keys = snap.live_keys();
    assert_eq!(keys, vec![b"edge".to_vec(), b"later".to_vec()]);
}

#[rstest]
#[case(1)]
#[case(7)]
#[case(1000)]
fn pages_never_exceed_count_and_cover_everything_once(#[case] count: usize) {
    let mut ks = Keyspace::new(1);
    for i in 0..777u32 {
        ks.apply(0, &Key::new(format!("key:{i:05}").as_bytes()), m(STRING));
    }
    let snap = ks.snapshot(0, 0);
    let (keys, pages) = full(&snap, &spec(None, count, 1_000_000));
    assert!(pages.iter().all(|&n| n <= count));
    assert_eq!(keys.len(), 777);
    let mut sorted = keys.clone();
    sorted.dedup();
    assert_eq!(sorted.len(), 777);
}

#[test]
fn budget_bounds_the_work_of_one_call() {
    let mut ks = Keyspace::new(1);
    for i in 0..1000u32 {
        ks.apply(0, &Key::new(format!("k{i:04}").as_bytes()), m(STRING));
    }
    let snap = ks.snapshot(0, 0);
    let s = spec(Some(b"*999"), 10, 100);
    let p = walk_snapshot_at(&snap, 0, None, &s);
    assert_eq!(p.examined, 100);
    assert!(p.keys.is_empty() && p.resume_after.is_some());
    let (keys, _) = full(&snap, &s);
    assert_eq!(keys, vec![b"k0999".to_vec()]);
}

#[test]
fn prefix_pattern_visits_only_the_prefix_range() {
    let mut ks = Keyspace::new(1);
    for u in 0..200u32 {
        for n in 0..10u32 {
            ks.apply(0, &Key::new(format!("user:{u}:{n}").as_bytes()), m(STRING));
        }
    }
    let snap = ks.snapshot(0, 0);
    let p = walk_snapshot_at(&snap, 0, None, &spec(Some(b"user:42:*"), 100, 1_000_000));
    assert_eq!(p.keys.len(), 10);
    assert_eq!(p.examined, 10, "must not look outside the prefix");
    assert!(p.resume_after.is_none());
}

#[test]
fn type_filter() {
    let mut ks = Keyspace::new(1);
    ks.apply(0, &Key::new(b"s"), m(STRING));
    ks.apply(0, &Key::new(b"h"), m(HASH));
    let snap = ks.snapshot(0, 0);
    let mut s = spec(None, 10, 100);
    s.type_filter = Some(HASH);
    let (keys, _) = full(&snap, &s);
    assert_eq!(keys, vec![b"h".to_vec()]);
}

#[derive(Debug, Clone)]
enum Op {
    Set(u8, u8),
    Del(u8),
    Flush,
    Snap,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..40, 0u8..3).prop_map(|(k, t)| Op::Set(k, t)),
        3 => (0u8..40).prop_map(Op::Del),
        1 => Just(Op::Flush),
        2 => Just(Op::Snap),
    ]
}

proptest! {
    /// MVCC rule: every snapshot, read after any later sequence of writes,
    /// flushes and other snapshots, equals the model at its instant; and the
    /// live index equals the model at the end.
    #[test]
    fn snapshots_equal_model_at_their_instant(ops in proptest::collection::vec(op(), 1..200), count in 1usize..8) {
        let mut ks = Keyspace::new(1);
        let mut model: BTreeMap<Vec<u8>, TypeId> = BTreeMap::new();
        type Model = BTreeMap<Vec<u8>, TypeId>;
        let mut snaps: Vec<(std::sync::Arc<Snapshot>, Model)> = Vec::new();
        for o in ops {
            match o {
                Op::Set(k, t) => {
                    let key = vec![b'k', k];
                    ks.apply(0, &Key::new(&key), m(t));
                    model.insert(key, t);
                }
                Op::Del(k) => {
                    let key = vec![b'k', k];
                    ks.apply(0, &Key::new(&key), None);
                    model.remove(&key);
                }
                Op::Flush => {
                    drop(ks.flush(0));
                    model.clear();
                }
                Op::Snap => snaps.push((ks.snapshot(0, 0), model.clone())),
            }
        }
        for (snap, want) in &snaps {
            let (keys, pages) = full(snap, &spec(None, count, 3));
            prop_assert!(pages.iter().all(|&n| n <= count));
            let want_keys: Vec<Vec<u8>> = want.keys().cloned().collect();
            prop_assert_eq!(keys, want_keys);
            for (k, t) in want {
                prop_assert_eq!(snap.get(k).map(|mm| mm.type_id()), Some(*t));
            }
        }
        prop_assert_eq!(ks.len(0), model.len());
    }

    /// Walking with a pattern returns exactly the keys the matcher accepts.
    #[test]
    fn walk_with_pattern_equals_filter(keys in proptest::collection::btree_set(proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b':'), Just(b'*')], 0..6), 0..60),
                                       pat in proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b':'), Just(b'*'), Just(b'?'), Just(b'\\')], 0..5),
                                       count in 1usize..5, budget in 1usize..7) {
        let mut ks = Keyspace::new(1);
        for k in &keys { ks.apply(0, &Key::new(k), m(STRING)); }
        let snap = ks.snapshot(0, 0);
        let (got, _) = full(&snap, &spec(Some(&pat), count, budget));
        let want: Vec<Vec<u8>> = keys.iter().filter(|k| crate::glob::matches(&pat, k)).cloned().collect();
        prop_assert_eq!(got, want);
    }
}

proptest! {
    /// A run applied in batches ends exactly as the same truths applied one
    /// by one (repeated keys in one batch, several databases), and counts
    /// the same changes.
    #[test]
    fn apply_run_equals_apply_one_by_one(ops in proptest::collection::vec((0usize..3, 0u8..24, proptest::option::of(0u8..3)), 0..120)) {
        let keys: Vec<Key> = ops.iter().map(|(_, k, _)| Key::new(&[b'k', *k])).collect();
        let run: Vec<(usize, &Key, Option<Meta>)> = ops
            .iter()
            .zip(&keys)
            .map(|((db, _, t), k)| (*db % 2 * (*db), k, t.map(|t| Meta::new(t, None))))
            .collect();
        let mut a = Keyspace::new(3);
        let mut b = Keyspace::new(3);
        // Some state to start from.
        for (db, k, t) in run.iter().step_by(3) {
            a.apply(*db, k, *t);
            b.apply(*db, k, *t);
        }
        let changed = a.apply_run(&run);
        let mut want = 0;
        for (db, k, t) in &run {
            if b.apply(*db, k, *t) != Change::Unchanged {
                want += 1;
            }
        }
        prop_assert_eq!(changed, want);
        for db in 0..3 {
            prop_assert_eq!(a.snapshot(db, 0).read().to_vec(), b.snapshot(db, 0).read().to_vec());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Runs that split, merge and edit the same leaf several times within
    /// one lookup batch (many long keys in a narrow range, some snapshots
    /// sharing the paths) end exactly as the truths applied one by one: a
    /// write reuses where its lookup found the key only while that is still
    /// true.
    #[test]
    fn apply_run_reuses_lookups_only_while_valid(
        ops in proptest::collection::vec((0u16..1500, 0u8..4), 1..3000),
        chunk in 1usize..200,
        snap_every in 0usize..400,
    ) {
        let key = |k: u16| Key::new(format!("user:{:06}:item:with-a-long-tail", u32::from(k) * 7919 % 1500).as_bytes());
        let keys: Vec<Key> = ops.iter().map(|(k, _)| key(*k)).collect();
        let truth = |t: u8| match t {
            0 => None,
            1 => Some(Meta::new(0, None)),
            2 => Some(Meta::new(0, Some(1_900_000_000_000 + 1))),
            _ => Some(Meta::new(2, None)),
        };
        let run: Vec<(usize, &Key, Option<Meta>)> =
            ops.iter().zip(&keys).map(|((_, t), k)| (0, k, truth(*t))).collect();
        let mut a = Keyspace::new(1);
        let mut b = Keyspace::new(1);
        let mut snaps = Vec::new();
        for (n, part) in run.chunks(chunk).enumerate() {
            if snap_every > 0 && n % (snap_every / chunk + 1) == 0 {
                snaps.push((a.snapshot(0, 0), b.snapshot(0, 0).read().to_vec()));
            }
            let changed = a.apply_run(part);
            let mut want = 0;
            for (db, k, t) in part {
                if b.apply(*db, k, *t) != Change::Unchanged {
                    want += 1;
                }
            }
            prop_assert_eq!(changed, want);
        }
        a.live_map(0).check();
        prop_assert_eq!(a.snapshot(0, 0).read().to_vec(), b.snapshot(0, 0).read().to_vec());
        for (snap, model) in snaps {
            prop_assert_eq!(snap.read().to_vec(), model);
        }
    }
}

/// A tree of two branch levels, where a change reshapes one branch and the
/// lookups of the same batch under other branches are still reused: runs
/// of inserts (leaf and branch splits) and removals (merges) spread over
/// the tree end as the truths applied one by one, and every reuse is checked
/// against a fresh search (in tests, `Route` asserts it).
#[test]
fn apply_run_reuses_lookups_beside_a_reshaped_branch() {
    let key = |i: u64| Key::new(format!("user:{:08}:item:tail", i * 7).as_bytes());
    let mut a = Keyspace::new(1);
    let mut b = Keyspace::new(1);
    let loaded: Vec<Key> = (0..60_000).map(key).collect();
    for part in loaded.chunks(64) {
        let run: Vec<(usize, &Key, Option<Meta>)> = part
            .iter()
            .map(|k| (0, k, Some(Meta::new(0, None))))
            .collect();
        a.apply_run(&run);
        for (db, k, t) in &run {
            b.apply(*db, k, *t);
        }
    }
    let mut x = 99u64;
    let ops: Vec<(Key, Option<Meta>)> = (0..60_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // New keys between the loaded ones, and removals of loaded ones.
            let i = x % 420_000;
            let truth = (x >> 40) % 3;
            if truth == 0 {
                (key(i / 7), None)
            } else {
                (
                    Key::new(format!("user:{i:08}:item:tail").as_bytes()),
                    Some(Meta::new(0, None)),
                )
            }
        })
        .collect();
    for part in ops.chunks(64) {
        let run: Vec<(usize, &Key, Option<Meta>)> = part.iter().map(|(k, t)| (0, k, *t)).collect();
        let changed = a.apply_run(&run);
        let mut want = 0;
        for (db, k, t) in &run {
            if b.apply(*db, k, *t) != Change::Unchanged {
                want += 1;
            }
        }
        assert_eq!(changed, want);
    }
    let (sa, sb) = (a.snapshot(0, 0), b.snapshot(0, 0));
    a.live_map(0).check();
    assert!(
        a.live_map(0).height() >= 2,
        "height {}",
        a.live_map(0).height()
    );
    assert_eq!(sa.read().to_vec(), sb.read().to_vec());
}

/// The indexer's own cost per write, without a server: the write scenario's
/// workloads (scripts/bench/s6_writes.py) applied through
/// [`Keyspace::apply_run`] in runs of 64, as the indexer does.
/// `cargo test --release --lib index::tests::speed -- --ignored --nocapture`
mod speed {
    use super::*;

    use crate::index::thread_cpu_ns as cpu_ns;

    fn run(ks: &mut Keyspace, keys: &[Key], truth: Option<Meta>) -> f64 {
        let t0 = cpu_ns();
        for chunk in keys.chunks(64) {
            let ops: Vec<(usize, &Key, Option<Meta>)> =
                chunk.iter().map(|k| (0, k, truth)).collect();
            ks.apply_run(&ops);
        }
        (cpu_ns() - t0) as f64 / keys.len() as f64
    }

    #[test]
    #[ignore]
    fn writes() {
        let n: u64 = std::env::var("SPEED_N")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000);
        // Measure what the module does: no test-only check of each reuse.
        crate::index::tree::VERIFY_REUSE.set(false);
        let perm = |i: u64| i.wrapping_mul(0x9E3779B97F4A7C15).rotate_left(29) % 1_000_000_000_000;
        let mut ks = Keyspace::new(1);
        let plain = Meta::new(0, None);
        let loaded: Vec<Key> = (0..n)
            .map(|i| Key::new(format!("key:{i:012}").as_bytes()))
            .collect();
        let load = run(&mut ks, &loaded, Some(plain));
        let fresh: Vec<Key> = (0..n)
            .map(|i| Key::new(format!("n0:{:012}", perm(i)).as_bytes()))
            .collect();
        let new = run(&mut ks, &fresh, Some(plain));
        let exp = run(&mut ks, &fresh, Some(Meta::new(0, Some(1_900_000_000_000))));
        let del = run(&mut ks, &fresh, None);
        eprintln!("load {load:.0} ns/op, SET new {new:.0}, EXPIRE {exp:.0}, DEL {del:.0}");
    }
}

/// Issue 20's experiment: what a write-optimised front (changes buffered as
/// sorted runs, each touched leaf re-encoded once per merge) would save
/// against today's apply of the log in batches of 1,024.
/// `SPEED_N=1000000 cargo test --release --lib index::tests::front -- --ignored --nocapture`
mod front {
    use super::*;

    use crate::index::thread_cpu_ns as cpu_ns;

    /// Ops applied per configuration (a quarter of the keys at 1M).
    const TOTAL: usize = 256 * 1024;

    /// A random mix of index-changing writes: a new key (between existing
    /// ones), a new expiry, a deletion, in turn; no key twice.
    fn ops(n: u64) -> Vec<(Key, Option<Meta>)> {
        let perm = |i: u64, m: u64| i.wrapping_mul(0x9E3779B97F4A7C15).rotate_left(29) % m;
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::with_capacity(TOTAL);
        let mut j = 0u64;
        while out.len() < TOTAL {
            j += 1;
            let kind = out.len() % 3;
            let i = perm(j, n);
            // Loaded keys are the even ones.
            let id = if kind == 0 { 2 * i + 1 } else { 2 * i };
            if !seen.insert(id) {
                continue;
            }
            let key = Key::new(format!("key:{id:012}").as_bytes());
            let truth = match kind {
                0 => Some(Meta::new(0, None)),
                1 => Some(Meta::new(0, Some(1_900_000_000_000))),
                _ => None,
            };
            out.push((key, truth));
        }
        out
    }

    /// One way of applying a run of writes.
    type Apply = dyn Fn(&mut Keyspace, &[(Key, Option<Meta>)]);

    /// ns of thread CPU per op for `ops` applied in runs of `run`, by
    /// `apply` (given the map and one run); with `snap`, a snapshot is
    /// opened before each run (every leaf shared) and dropped after it,
    /// off the clock.
    fn measure(
        base: &KeyMap,
        ops: &[(Key, Option<Meta>)],
        run: usize,
        snap: bool,
        apply: &Apply,
    ) -> f64 {
        let mut ks = Keyspace::new(1);
        ks.dbs[0].map = base.deep_clone();
        let mut el = 0;
        for chunk in ops.chunks(run) {
            let s = snap.then(|| ks.snapshot(0, 0));
            let t0 = cpu_ns();
            apply(&mut ks, chunk);
            el += cpu_ns() - t0;
            drop(s);
        }
        el as f64 / ops.len() as f64
    }

    /// Today: batches of 1,024 applied in chunks of 64 (`apply_batch`).
    fn today(ks: &mut Keyspace, ops: &[(Key, Option<Meta>)]) {
        for chunk in ops.chunks(64) {
            let run: Vec<(usize, &Key, Option<Meta>)> =
                chunk.iter().map(|(k, t)| (0, k, *t)).collect();
            ks.apply_run(&run);
        }
    }

    /// The run sorted by key (the last truth of a key wins).
    fn sorted(ops: &[(Key, Option<Meta>)]) -> Vec<(&[u8], Option<Meta>)> {
        let mut v: Vec<(&[u8], Option<Meta>)> =
            ops.iter().map(|(k, t)| (k.as_bytes(), *t)).collect();
        v.sort_by(|a, b| a.0.cmp(b.0));
        v.dedup_by(|later, earlier| {
            let same = later.0 == earlier.0;
            if same {
                earlier.1 = later.1;
            }
            same
        });
        v
    }

    /// Sorted, then applied one by one (the cache locality of order alone).
    fn sorted_each(ks: &mut Keyspace, ops: &[(Key, Option<Meta>)]) {
        let v = sorted(ops);
        let keys: Vec<Key> = v.iter().map(|(k, _)| Key::new(k)).collect();
        let run: Vec<(usize, &Key, Option<Meta>)> =
            keys.iter().zip(&v).map(|(k, (_, t))| (0, k, *t)).collect();
        for chunk in run.chunks(64) {
            ks.apply_run(chunk);
        }
    }

    /// Sorted, then merged in bulk (each touched leaf re-encoded once).
    fn bulk(ks: &mut Keyspace, ops: &[(Key, Option<Meta>)]) {
        let v = sorted(ops);
        ks.dbs[0].map.merge_sorted(&v);
    }

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    }

    #[test]
    #[ignore]
    fn runs() {
        let n: u64 = std::env::var("SPEED_N")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000);
        crate::index::tree::VERIFY_REUSE.set(false);
        // Loaded in random order (leaves as the server's writes grow them).
        let perm = |i: u64| i.wrapping_mul(0x9E3779B97F4A7C15).rotate_left(17) % n;
        let mut base = KeyMap::new();
        let mut seen = vec![false; n as usize];
        for i in 0..n {
            let j = perm(i);
            if !std::mem::replace(&mut seen[j as usize], true) {
                base.insert(format!("key:{:012}", 2 * j).as_bytes(), Meta::new(0, None));
            }
        }
        for (j, s) in seen.iter().enumerate() {
            if !s {
                base.insert(format!("key:{:012}", 2 * j).as_bytes(), Meta::new(0, None));
            }
        }
        let (leaves, mean) = base.leaf_stats();
        eprintln!(
            "{} keys, {leaves} leaves of {mean:.0} B, {:.1} B/key; {TOTAL} ops",
            base.len(),
            base.live_bytes() as f64 / base.len() as f64
        );
        let ops = ops(n);
        // Same result whichever way.
        let (mut a, mut b) = (Keyspace::new(1), Keyspace::new(1));
        a.dbs[0].map = base.deep_clone();
        b.dbs[0].map = base.deep_clone();
        today(&mut a, &ops);
        for chunk in ops.chunks(16 * 1024) {
            bulk(&mut b, chunk);
        }
        assert_eq!(a.dbs[0].map.len(), b.dbs[0].map.len());
        let mut it = (a.dbs[0].map.iter(), b.dbs[0].map.iter());
        loop {
            let x = it.0.next_entry().map(|(k, m)| (k.to_vec(), m));
            let y = it.1.next_entry().map(|(k, m)| (k.to_vec(), m));
            assert_eq!(x, y);
            if x.is_none() {
                break;
            }
        }
        let (lb, mb) = b.dbs[0].map.leaf_stats();
        eprintln!(
            "after the ops: one by one {:.1} B/key, bulk {:.1} B/key ({lb} leaves of {mb:.0} B)",
            a.dbs[0].map.live_bytes() as f64 / a.dbs[0].map.len() as f64,
            b.dbs[0].map.live_bytes() as f64 / b.dbs[0].map.len() as f64,
        );
        drop((a, b));
        let reps = 3;
        eprintln!("ns/op (median of {reps}; min-max)");
        eprintln!("run    snapshot  today(1024)  lookup alone  sort alone  sorted+each  sorted+bulk  today/bulk");
        for snap in [false, true] {
            let runs: &[usize] = if std::env::var("SPEED_FEW").is_ok() {
                &[16 * 1024, 256 * 1024]
            } else {
                &[1024, 16 * 1024, 64 * 1024, 256 * 1024]
            };
            for &run in runs {
                let mut t = Vec::new();
                let mut e = Vec::new();
                let mut bk = Vec::new();
                let mut so = Vec::new();
                let mut lk = Vec::new();
                for _ in 0..reps {
                    // What finding each key costs (the part a bulk descent
                    // could spare at best), in today's batches.
                    lk.push(measure(&base, &ops, run, false, &|ks, c| {
                        let mut out = Vec::new();
                        for b in c.chunks(tree::GET_MANY) {
                            let keys: Vec<&[u8]> = b.iter().map(|(k, _)| k.as_bytes()).collect();
                            ks.dbs[0].map.locate_many(&keys, &mut out);
                            std::hint::black_box(&out);
                        }
                    }));
                    so.push(measure(&base, &ops, run, false, &|_, c| {
                        std::hint::black_box(sorted(c));
                    }));
                    // Today's batches are 1,024 whatever the run; the run
                    // sets how often a snapshot is opened.
                    t.push(measure(&base, &ops, run, snap, &|ks, c| {
                        for b in c.chunks(1024) {
                            today(ks, b)
                        }
                    }));
                    e.push(measure(&base, &ops, run, snap, &sorted_each));
                    bk.push(measure(&base, &ops, run, snap, &bulk));
                }
                let r = |v: &Vec<f64>| {
                    let lo = v.iter().copied().fold(f64::MAX, f64::min);
                    let hi = v.iter().copied().fold(0.0, f64::max);
                    format!("{:5.0} ({lo:.0}-{hi:.0})", median(v.clone()))
                };
                eprintln!(
                    "{:>4}k  {:8}  {}  {}  {}  {}  {}  {:.2}x",
                    run / 1024,
                    if snap { "yes" } else { "no" },
                    r(&t),
                    r(&lk),
                    r(&so),
                    r(&e),
                    r(&bk),
                    median(t.clone()) / median(bk.clone())
                );
            }
        }
    }
}

/// Each open snapshot is told the bytes of the undo entries only it can
/// still read, once a collector pass has seen the whole log: an old value
/// that two snapshots read counts for neither, and one behind a snapshot's
/// position no longer counts for it (and is collected).
#[test]
fn a_snapshot_knows_the_old_values_only_it_reads() {
    let mut ks = Keyspace::new(1);
    for c in b'a'..=b'z' {
        ks.apply(0, &Key::new(&[c]), m(STRING));
    }
    let full_pass = |ks: &mut Keyspace| {
        // A whole pass begun with the snapshots open now.
        ks.restart_collection();
        let mut calls = 0;
        while !ks.collect_history(usize::MAX) {
            calls += 1;
            assert!(calls < 10, "the pass does not end");
        }
    };
    let s1 = ks.snapshot(0, 0);
    ks.apply(0, &Key::new(b"m"), m(HASH)); // read by s1 alone
    let s2 = ks.snapshot(0, 0);
    ks.apply(0, &Key::new(b"n"), m(HASH)); // read by both
    ks.apply(0, &Key::new(b"m"), m(LIST)); // read by s2 alone
    assert_eq!(
        (s1.alone_bytes(), s2.alone_bytes()),
        (0, 0),
        "before a pass"
    );
    full_pass(&mut ks);
    let (entries, _, bytes) = ks.history_size();
    assert_eq!(entries, 3);
    let one = bytes / entries;
    assert!(one > 0);
    assert_eq!((s1.alone_bytes(), s2.alone_bytes()), (one, one));
    // s1 passes `m`: its old value of `m` is collected, `n` still shared.
    s1.advance(&Key::new(b"m"));
    full_pass(&mut ks);
    assert_eq!(ks.history_size().0, 2);
    assert_eq!(s1.alone_bytes(), 0, "s1 reads only `n`, which s2 reads too");
    assert!(s2.alone_bytes() > 0);
    // s2 ends: s1 alone reads `n` now.
    drop(s2);
    full_pass(&mut ks);
    assert_eq!(ks.history_size().0, 1, "only s1's old `n` is left");
    let (_, _, bytes) = ks.history_size();
    assert_eq!(s1.alone_bytes(), bytes);
}

/// One step of the history property test.
#[derive(Debug, Clone)]
enum HistOp {
    Set(usize, u8, u8),
    Snap(usize),
    Advance(usize, u8),
    Collect(usize),
    Flush(usize),
    Swap,
    Drop(usize),
}

fn hist_op() -> impl Strategy<Value = HistOp> {
    prop_oneof![
        12 => (0..2usize, 0..40u8, 0..4u8).prop_map(|(d, k, t)| HistOp::Set(d, k, t)),
        2 => (0..2usize).prop_map(HistOp::Snap),
        3 => (0..8usize, 0..40u8).prop_map(|(s, k)| HistOp::Advance(s, k)),
        2 => (1..60usize).prop_map(HistOp::Collect),
        1 => (0..2usize).prop_map(HistOp::Flush),
        1 => Just(HistOp::Swap),
        1 => (0..8usize).prop_map(HistOp::Drop),
    ]
}

/// A snapshot of the history test, what it must read, and its position.
type OpenSnap = (Arc<Snapshot>, BTreeMap<Vec<u8>, Meta>, Option<Key>);

fn hist_key(i: u8) -> Key {
    // Some keys share prefixes and hold 0x00 bytes, as real keys may.
    match i % 4 {
        0 => Key::new(format!("k{i:02}").as_bytes()),
        1 => Key::new(&[b'k', 0, i]),
        2 => Key::new(format!("k{:02}\x00x", i - 1).as_bytes()),
        _ => Key::new(format!("user:{i}:item").as_bytes()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// Every open snapshot reads, for every key after its position, the
    /// value the key had when it was cut, whatever the later writes,
    /// flushes, swaps and collector passes; and once no snapshot is open
    /// the collector empties the undo logs.
    #[test]
    fn snapshots_read_their_version_while_the_collector_runs(
        ops in prop::collection::vec(hist_op(), 1..300)
    ) {
        let truth = |t: u8| match t {
            0 => None,
            1 => Some(Meta::new(STRING, None)),
            2 => Some(Meta::new(STRING, Some(1_900_000_000_000))),
            _ => Some(Meta::new(HASH, None)),
        };
        let mut ks = Keyspace::new(2);
        let mut model: Vec<BTreeMap<Vec<u8>, Meta>> = vec![BTreeMap::new(); 2];
        let mut snaps: Vec<OpenSnap> = Vec::new();
        for op in ops {
            match op {
                HistOp::Set(db, k, t) => {
                    let key = hist_key(k);
                    ks.apply(db, &key, truth(t));
                    match truth(t) {
                        Some(m) => model[db].insert(key.as_bytes().to_vec(), m),
                        None => model[db].remove(key.as_bytes()),
                    };
                }
                HistOp::Snap(db) => {
                    snaps.push((ks.snapshot(db, 0), model[db].clone(), None));
                }
                HistOp::Advance(i, k) => {
                    if let Some((snap, _, from)) = snaps.get_mut(i) {
                        let key = hist_key(k);
                        if from.as_ref().is_none_or(|f| f < &key) {
                            snap.advance(&key);
                            *from = Some(key);
                        }
                    }
                }
                HistOp::Collect(budget) => {
                    ks.collect_history(budget);
                    drop(ks.take_garbage());
                }
                HistOp::Flush(db) => {
                    drop(ks.flush(db));
                    model[db].clear();
                }
                HistOp::Swap => {
                    ks.swap(0, 1);
                    model.swap(0, 1);
                }
                HistOp::Drop(i) => {
                    if i < snaps.len() {
                        snaps.remove(i);
                    }
                }
            }
            for (snap, want, from) in &snaps {
                let lower = match from {
                    Some(f) => std::ops::Bound::Excluded(f.as_bytes()),
                    None => std::ops::Bound::Unbounded,
                };
                let r = snap.read();
                let mut it = r.range_from(lower);
                let mut got = Vec::new();
                while let Some((k, m)) = it.next_entry() {
                    got.push((k.to_vec(), m));
                }
                let expect: Vec<(Vec<u8>, Meta)> = want
                    .iter()
                    .filter(|(k, _)| from.as_ref().is_none_or(|f| k.as_slice() > f.as_bytes()))
                    .map(|(k, m)| (k.clone(), *m))
                    .collect();
                prop_assert_eq!(&got, &expect);
                for i in 0..40u8 {
                    let key = hist_key(i);
                    if from.as_ref().is_none_or(|f| key.as_bytes() > f.as_bytes()) {
                        prop_assert_eq!(r.get(key.as_bytes()), want.get(key.as_bytes()).copied());
                    }
                }
            }
        }
        prop_assert_eq!(ks.live_map(0).to_vec(), model[0].iter().map(|(k, m)| (k.clone(), *m)).collect::<Vec<_>>());
        // After a whole pass begun after the last change, what each
        // snapshot alone reads is a share of the log, and no entry is
        // counted for two snapshots.
        ks.restart_collection();
        let mut passes = 0;
        while !ks.collect_history(usize::MAX) {
            passes += 1;
            prop_assert!(passes < 10, "the pass does not end");
        }
        let (_, _, bytes) = ks.history_size();
        let alone: usize = snaps.iter().map(|(s, _, _)| s.alone_bytes()).sum();
        prop_assert!(alone <= bytes, "{} bytes alone of {}", alone, bytes);
        snaps.clear();
        for _ in 0..3 {
            ks.collect_history(usize::MAX);
        }
        prop_assert_eq!(ks.history_size(), (0, 0, 0), "nothing kept once no snapshot is open");
        ks.live_map(0).check();
    }
}

/// Tombstones and creation stamps behind every open snapshot's position
/// are purged by the collector within a few passes, with the indexer's
/// small budgets, and all of them once no snapshot is open.
#[test]
fn kept_in_place_goes_once_every_snapshot_passed_it() {
    let mut ks = Keyspace::new(1);
    let key = |i: u32| Key::new(format!("key:{i:06}").as_bytes());
    for i in 0..100_000 {
        ks.apply(0, &key(i), m(STRING));
    }
    let s = ks.snapshot(0, 0);
    // Every tenth key deleted, as many created (after every old one).
    for i in (0..100_000).step_by(10) {
        ks.apply(0, &key(i), None);
        ks.apply(0, &Key::new(format!("new:{i:06}").as_bytes()), m(STRING));
    }
    assert_eq!(ks.history_size(), (0, 20_000, ks.history_size().2));
    // The snapshot passes the first half of the old keys (`key:050000`
    // included).
    s.advance(&key(50_000));
    // The indexer's budget after a batch of 64 changes, until `done`.
    let collect_until = |ks: &mut Keyspace, done: &dyn Fn(&Keyspace) -> bool| {
        let mut calls = 0;
        while !done(ks) {
            ks.collect_history(2 * 64 + 256);
            calls += 1;
            assert!(
                calls < 10_000,
                "{:?} kept after {calls} calls",
                ks.history_size()
            );
        }
    };
    collect_until(&mut ks, &|ks| ks.history_size().1 <= 14_999);
    // The creations (ahead) and the second half's tombstones stay.
    let (undo, kept, _) = ks.history_size();
    assert_eq!((undo, kept), (0, 14_999));
    // A change behind every snapshot keeps nothing (its position is
    // known from the collector's last look); one ahead is kept.
    ks.apply(0, &key(1), None);
    ks.apply(0, &key(3), Some(Meta::new(HASH, None)));
    ks.apply(0, &Key::new(b"a"), m(STRING));
    assert_eq!((ks.history_size().0, ks.history_size().1), (0, 14_999));
    ks.apply(0, &key(60_001), None);
    ks.apply(0, &key(60_003), Some(Meta::new(HASH, None)));
    assert_eq!((ks.history_size().0, ks.history_size().1), (1, 15_000));
    ks.apply(0, &key(60_003), m(STRING));
    ks.apply(0, &key(60_001), m(STRING));
    assert_eq!(s.live_keys().len(), 100_000);
    drop(s);
    collect_until(&mut ks, &|ks| ks.history_size() == (0, 0, 0));
    ks.live_map(0).check();
    assert_eq!(ks.len(0), 100_000);
}
