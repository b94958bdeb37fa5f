//! COUNT and the scan budget.

use super::*;

/// Without filters every page but the last carries exactly COUNT keys.
#[rstest]
#[case::count_1(Some(1))]
#[case::count_3(Some(3))]
#[case::default_10(None)]
#[case::count_1000(Some(1000))]
fn pages_hold_at_most_count_keys(#[case] count: Option<usize>) {
    let server = Server::start();
    let mut con = server.client();
    let mut rng = Rng(7);
    let model = random_keys(&mut con, &mut rng, "k:", 10_000, 250);
    let count_arg = count.map(|c| c.to_string());
    let opts: Vec<&[u8]> = match &count_arg {
        Some(c) => vec![b"COUNT", c.as_bytes()],
        None => vec![],
    };
    let count = count.unwrap_or(10);
    let pages = snap_pages(&mut con, &opts);
    let (last, full) = pages.split_last().expect("at least one page");
    for (i, p) in full.iter().enumerate() {
        assert_eq!(p.len(), count, "page {i} of {}", pages.len());
    }
    assert!(last.len() <= count, "last page has {} keys", last.len());
    let keys: Vec<Bytes> = pages.into_iter().flatten().collect();
    assert_same(&keys, &model.keys().cloned().collect(), "all keys");
}

#[test]
fn default_count_is_ten() {
    let server = Server::start();
    let mut con = server.client();
    let mut pipe = redis::pipe();
    for i in 0..100 {
        pipe.cmd("SET").arg(format!("key:{i:03}")).arg(i).ignore();
    }
    let () = pipe.query(&mut con).unwrap();
    let pages = snap_pages(&mut con, &[]);
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    // Ten pages of ten; an empty eleventh page is allowed (the cursor of
    // the tenth page may not know that nothing follows).
    assert!(
        sizes == [10; 10] || sizes[..10] == [10; 10] && sizes[10..] == [0],
        "page sizes {sizes:?}"
    );
    // The same with MATCH *: filtering everything-matching changes nothing.
    let pages = snap_pages(&mut con, &[b"MATCH", b"*"]);
    assert!(pages.iter().take(10).all(|p| p.len() == 10), "MATCH *");
}

/// A sparse MATCH: COUNT is not reached, the scan budget ends each call.
#[test]
fn sparse_match_finishes_in_few_calls() {
    const TOTAL: usize = 10_000;
    let server = Server::start();
    let mut con = server.client();
    let mut pipe = redis::pipe();
    let mut want = KeySet::new();
    for i in 0..TOTAL {
        // 1 key in 5000 contains the needle.
        let k = if i % 5000 == 1234 {
            format!("k:{i}:needle:x")
        } else {
            format!("k:{i}")
        };
        if k.contains("needle") {
            want.insert(k.clone().into_bytes());
        }
        pipe.cmd("SET").arg(k).arg(1).ignore();
    }
    let () = pipe.query(&mut con).unwrap();
    assert_eq!(want.len(), 2);
    let opts: [&[u8]; 4] = [b"MATCH", b"*needle*", b"COUNT", b"10"];

    // Default budget (100000): one call covers the whole database.
    let budget = 100_000;
    let pages = snap_pages(&mut con, &opts);
    assert!(pages.len() <= TOTAL / budget + 2, "{} calls", pages.len());
    assert_same(&pages.concat(), &want, "default budget");

    // Budget 1000: at least TOTAL/1000 calls, not many more, some empty
    // pages with a non-zero cursor.
    config_set(&mut con, "snapshot.scan-budget", "1000");
    let examined_before = info_u64(&mut con, "snapshot_entries_examined");
    let mut cursor = "0".to_string();
    let mut pages = Vec::new();
    let mut empty_continuations = 0;
    for _ in 0..TOTAL {
        let (next, page) = snap(&mut con, &cursor, &opts);
        if page.is_empty() && next != "0" {
            empty_continuations += 1;
        }
        pages.push(page);
        if next == "0" {
            break;
        }
        cursor = next;
    }
    let calls = pages.len();
    assert!(
        (TOTAL / 1000..=TOTAL / 1000 + 2).contains(&calls),
        "{calls} calls with budget 1000"
    );
    assert!(
        empty_continuations > 0,
        "no empty page with a non-zero cursor"
    );
    assert_same(&pages.concat(), &want, "budget 1000");
    let examined = info_u64(&mut con, "snapshot_entries_examined") - examined_before;
    assert!(
        (TOTAL as u64..=(TOTAL + calls) as u64).contains(&examined),
        "examined {examined} entries for {TOTAL} keys"
    );
}

/// A literal-prefix MATCH seeks to the prefix: the budget counts only the
/// entries inside the prefix range.
#[test]
fn literal_prefix_match_seeks() {
    let server = Server::start();
    let mut con = server.client();
    for chunk in 0..20 {
        let mut mset = redis::cmd("MSET");
        for n in chunk * 100..(chunk + 1) * 100 {
            for m in 0..10 {
                mset.arg(format!("user:{n}:{m}")).arg(1);
            }
        }
        let () = mset.query(&mut con).unwrap();
    }
    assert_eq!(dbsize(&mut con), 20_000);
    config_set(&mut con, "snapshot.scan-budget", "100");

    for (pattern, count) in [
        ("user:42:*", "100"),
        ("user:0:*", "10"),
        ("user:1999:?", "11"),
    ] {
        let before = info_u64(&mut con, "snapshot_entries_examined");
        let (cursor, keys) = snap(
            &mut con,
            "0",
            &[b"MATCH", pattern.as_bytes(), b"COUNT", count.as_bytes()],
        );
        let examined = info_u64(&mut con, "snapshot_entries_examined") - before;
        assert_eq!(cursor, "0", "{pattern}: not done in one call");
        let stem = &pattern[..pattern.len() - 1];
        let want: KeySet = (0..10).map(|m| format!("{stem}{m}").into_bytes()).collect();
        assert_same(&keys, &want, pattern);
        assert!(examined <= 11, "{pattern}: examined {examined} entries");
    }

    // COUNT smaller than the prefix range: pages of COUNT, resumed inside it.
    let pages = snap_pages(&mut con, &[b"MATCH", b"user:42:*", b"COUNT", b"3"]);
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert!(
        sizes == [3, 3, 3, 1] || sizes == [3, 3, 3, 1, 0],
        "{sizes:?}"
    );

    // A prefix range larger than the budget: about range/budget calls.
    let want = native(&mut con, &[b"MATCH", b"user:1*"]);
    assert_eq!(want.len(), 11_110);
    let pages = snap_pages(&mut con, &[b"MATCH", b"user:1*", b"COUNT", b"100000"]);
    let calls = pages.len();
    assert!(
        (want.len() / 100..=want.len() / 100 + 2).contains(&calls),
        "{calls} calls for {} keys with budget 100",
        want.len()
    );
    assert_same(&pages.concat(), &want, "MATCH user:1*");
}
