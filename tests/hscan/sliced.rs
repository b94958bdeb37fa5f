//! Sliced copies of large hashes.

use super::*;

#[rstest]
#[case::values(false)]
#[case::novalues(true)]
fn sliced_copy_is_exact_with_writes_between_pages(#[case] novalues: bool) {
    let server = Server::start();
    let mut con = server.client();
    let mut w = server.client();
    config_set(&mut con, "snapshot.hash-copy-batch", "100");
    fill_hash(&mut con, "h", 5_000, |i| i.to_string());
    assert_eq!(encoding(&mut con, "h"), "hashtable");
    let made0 = info_u64(&mut con, "snapshot_hash_copies_made");
    let before = hgetall(&mut con, "h");
    let mut o = Opts::count(50);
    o.novalues = novalues;
    let mut rng = Rng(7);
    let mut op = 0;
    let pages = iterate(&mut con, "h", &o, |_| {
        mutate(&mut w, &mut rng, op % 25, 5_000);
        op += 1;
    });
    assert_eq!(pages.len(), 100);
    assert_same(
        &to_hash(&pages, novalues),
        &expected(&before, None, novalues),
        "sliced copy",
    );
    assert_eq!(
        info_u64(&mut con, "snapshot_hash_copies_made") - made0,
        1,
        "one copy"
    );
    assert!(info_u64(&mut con, "snapshot_hash_longest_lock_hold_us") > 0);
    assert_eq!(info_u64(&mut con, "snapshot_hash_copy_fallbacks"), 0);
}

/// One write of the hammering writer: `field = Some(value)` or a delete.
type Op = (Bytes, Option<Bytes>);

/// Whether `snap` equals the hash at some instant: `start` with a prefix of
/// `ops` applied, the prefix at least `min_ops` long. O(|hash| + |ops|).
fn equals_some_prefix(snap: &Hash, start: &Hash, ops: &[Op], min_ops: usize) -> bool {
    let mut state = start.clone();
    let differs = |s: &Hash, f: &Bytes| snap.get(f) != s.get(f);
    let keys: BTreeSet<&Bytes> = snap.keys().chain(start.keys()).collect();
    let mut mismatches = keys.iter().filter(|f| differs(&state, f)).count();
    for (k, (f, v)) in ops.iter().enumerate() {
        if k >= min_ops && mismatches == 0 {
            return true;
        }
        mismatches -= usize::from(differs(&state, f));
        match v {
            Some(v) => state.insert(f.clone(), v.clone()),
            None => state.remove(f),
        };
        mismatches += usize::from(differs(&state, f));
    }
    mismatches == 0
}

/// A writer hammering the hash while cursor 0 copies it in small slices: the
/// copy must still be the hash at one instant between the call and its reply
/// (the writer's log replayed up to some point), and the copy restarts and
/// falls back to one hold.
#[test]
fn sliced_copy_under_a_hammering_writer() {
    const N: usize = 5_000;
    let server = Server::start_with(ServerOpts::new().quick_retry());
    let mut con = server.client();
    // 500 slices: plenty of chances for writes to land between two of them.
    config_set(&mut con, "snapshot.hash-copy-batch", "10");
    fill_hash(&mut con, "h", N, |i| format!("v{i}"));

    let (mut retries_moved, mut fallbacks_moved) = (false, false);
    for attempt in 0..12u64 {
        let retries0 = info_u64(&mut con, "snapshot_hash_copy_retries");
        let fallbacks0 = info_u64(&mut con, "snapshot_hash_copy_fallbacks");
        let start = hgetall(&mut con, "h");
        let stop = Arc::new(AtomicBool::new(false));
        let writes = Arc::new(AtomicUsize::new(0));
        let mut wc = server.client();
        let writer = {
            let (stop, writes) = (stop.clone(), writes.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(attempt);
                let mut log: Vec<Op> = Vec::new();
                for i in 0..200_000 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let value = format!("{attempt}-{i}").into_bytes();
                    let op: Op = match i % 10 {
                        0 => (fld(rng.below(N as u64) as usize).into_bytes(), None),
                        1..=4 => (format!("w{attempt}-{i}").into_bytes(), Some(value)),
                        _ => (fld(rng.below(N as u64) as usize).into_bytes(), Some(value)),
                    };
                    let r: RedisResult<i64> = match &op {
                        (f, None) => redis::cmd("HDEL").arg("h").arg(f).query(&mut wc),
                        (f, Some(v)) => redis::cmd("HSET").arg("h").arg(f).arg(v).query(&mut wc),
                    };
                    r.expect("writer");
                    log.push(op);
                    writes.fetch_add(1, Ordering::SeqCst);
                }
                log
            })
        };
        wait_until("the writer to start", POLL, || {
            writes.load(Ordering::SeqCst) >= 20
        });
        // Every write acknowledged before the call is in the snapshot.
        let before_call = writes.load(Ordering::SeqCst);
        let t0 = std::time::Instant::now();
        let r = try_hscan(&mut con, "h", "0", &Opts::count(100_000));
        let took = t0.elapsed();
        let during = writes.load(Ordering::SeqCst) - before_call;
        stop.store(true, Ordering::SeqCst);
        let log = writer.join().expect("writer thread");
        let (next, page) = r.unwrap_or_else(|e| panic!("cursor 0: {}", err_text(&e)));
        assert_eq!(next, "0", "COUNT 100000 takes all in one page");
        let got = to_hash(&[page], false);
        assert!(
            equals_some_prefix(&got, &start, &log, before_call),
            "attempt {attempt}: the copy ({} fields) is not the hash at any instant \
             after the {before_call} writes acknowledged before the call ({} writes in all, \
             {during} during the call)",
            got.len(),
            log.len()
        );
        let retries = info_u64(&mut con, "snapshot_hash_copy_retries") - retries0;
        let fallbacks = info_u64(&mut con, "snapshot_hash_copy_fallbacks") - fallbacks0;
        eprintln!("attempt {attempt}: call {took:?}, {during} writes during it, retries +{retries}, fallbacks +{fallbacks}");
        retries_moved |= retries > 0;
        fallbacks_moved |= fallbacks > 0;
        if retries_moved && fallbacks_moved {
            break;
        }
    }
    assert!(retries_moved, "snapshot_hash_copy_retries never moved");
    assert!(fallbacks_moved, "snapshot_hash_copy_fallbacks never moved");
    // The last page's copy is released once its cursor is past the retry
    // window.
    wait_until("copies to be released", POLL + QUICK_RETRY_WINDOW, || {
        info_u64(&mut con, "snapshot_hash_snapshots_open") == 0
            && info_u64(&mut con, "snapshot_hash_snapshot_bytes") == 0
    });
}
