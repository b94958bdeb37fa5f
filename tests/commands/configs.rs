//! Configs.

use super::*;

const DEFAULTS: &[(&str, &str)] = &[
    ("snapshot.workers", "2"),
    ("snapshot.worker-nice", "19"),
    ("snapshot.cursor-idle-timeout", "60"),
    ("snapshot.max-open-cursors", "1024"),
    ("snapshot.scan-budget", "100000"),
    ("snapshot.backfill-batch", "1000"),
    ("snapshot.inline-entries", "256"),
];

#[test]
fn configs_have_their_defaults() {
    let server = Server::start();
    let mut con = server.client();
    let all: Vec<String> = query(&mut con, &["CONFIG", "GET", "snapshot.*"]).unwrap();
    let got: Vec<(String, String)> = all
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect();
    // Every contract config is listed by the pattern, with its default (the
    // module may have more, e.g. SNAPSHOT.HSCAN's).
    for (name, value) in DEFAULTS {
        assert!(
            got.iter().any(|(k, v)| k == name && v == value),
            "{name}={value} not in CONFIG GET snapshot.*: {got:?}"
        );
        assert_eq!(
            config_get(&mut con, name).as_deref(),
            Some(*value),
            "{name}"
        );
    }
    assert!(
        got.iter().all(|(k, _)| k.starts_with("snapshot.")),
        "{got:?}"
    );
}

#[rstest]
#[case("workers", "1", true)]
#[case("workers", "64", true)]
#[case("workers", "0", false)]
#[case("workers", "65", false)]
#[case("workers", "-1", false)]
#[case("workers", "two", false)]
#[case("worker-nice", "0", true)]
#[case("worker-nice", "19", true)]
#[case("worker-nice", "20", false)]
#[case("worker-nice", "-1", false)]
#[case("cursor-idle-timeout", "1", true)]
#[case("cursor-idle-timeout", "86400", true)]
#[case("cursor-idle-timeout", "0", false)]
#[case("max-open-cursors", "1", true)]
#[case("max-open-cursors", "0", false)]
#[case("scan-budget", "100", true)]
#[case("scan-budget", "5", false)]
#[case("scan-budget", "99", false)]
#[case("backfill-batch", "1", true)]
#[case("backfill-batch", "0", false)]
#[case("inline-entries", "0", true)]
#[case("inline-entries", "100000", true)]
#[case("inline-entries", "100001", false)]
#[case("inline-entries", "-1", false)]
fn config_set_accepts_valid_and_rejects_out_of_range(
    #[case] name: &str,
    #[case] value: &str,
    #[case] ok: bool,
) {
    let server = Server::start();
    let mut con = server.client();
    let full = format!("snapshot.{name}");
    let before = config_get(&mut con, &full).expect("config exists");
    let r = query::<()>(&mut con, &["CONFIG", "SET", &full, value]);
    let after = config_get(&mut con, &full).unwrap();
    if ok {
        r.unwrap_or_else(|e| panic!("CONFIG SET {full} {value}: {}", err_text(&e)));
        assert_eq!(after, value);
    } else {
        let e = r.expect_err("out of range accepted");
        assert!(err_text(&e).starts_with("ERR"), "{}", err_text(&e));
        assert_eq!(after, before, "a rejected value changed {full}");
    }
    // The module keeps serving either way.
    fill(&mut con, "k", 3);
    assert_eq!(full_scan(&mut con, "SNAPSHOT.SCAN", &[]).len(), 3);
}

/// Small pages are answered on the main thread, every other page by a
/// worker, and both give the same iteration.
#[rstest]
// COUNT within the limit, every page complete in few entries: all small.
#[case::small_pages(&["COUNT", "7"], "256", Some(true))]
// COUNT above the limit: all on workers.
#[case::count_above_the_limit(&["COUNT", "300"], "256", Some(false))]
// A sparse MATCH needs more entries than the limit for its COUNT: workers.
#[case::sparse_match(&["MATCH", "*7*7*", "COUNT", "5"], "16", Some(false))]
// The limit at 0 hands everything to workers.
#[case::limit_zero(&["COUNT", "7"], "0", Some(false))]
// TYPE filters count their entries too; whatever path, same keys.
#[case::type_filter(&["TYPE", "string", "COUNT", "20"], "256", None)]
fn small_pages_are_served_inline_and_match_worker_pages(
    #[case] opts: &[&str],
    #[case] limit: &str,
    #[case] all_small: Option<bool>,
) {
    let server = Server::start();
    let mut con = server.client();
    let keys = fill(&mut con, "k", 600);
    config_set(&mut con, "snapshot.inline-entries", "0");
    let on_workers = to_strings(full_scan(&mut con, "SNAPSHOT.SCAN", opts));
    config_set(&mut con, "snapshot.inline-entries", limit);
    let small0 = info_u64(&mut con, "snapshot_scans_served_small");
    let served0 = info_u64(&mut con, "snapshot_scans_served");
    let got = to_strings(full_scan(&mut con, "SNAPSHOT.SCAN", opts));
    assert_eq!(got, on_workers);
    if !opts.contains(&"MATCH") {
        assert_eq!(got, keys);
    }
    let small = info_u64(&mut con, "snapshot_scans_served_small") - small0;
    let served = info_u64(&mut con, "snapshot_scans_served") - served0;
    match all_small {
        // Cursor 0 may find the indexer busy and go to a worker.
        Some(true) => assert!(small + 1 >= served && small > 0, "{small} of {served}"),
        Some(false) => assert_eq!(small, 0, "{served} calls"),
        None => {}
    }
    // The inline path registers cursors like the worker path: a cursor
    // sent again returns the same page.
    let (c, _) = page(&mut con, "0", &["COUNT", "3"]);
    let (n1, p1) = page(&mut con, &c, &["COUNT", "3"]);
    let (n2, p2) = page(&mut con, &c, &["COUNT", "3"]);
    assert_eq!(p1, p2, "the same page again");
    assert_eq!(p1.len(), 3);
    assert_eq!(
        page(&mut con, &n1, &["COUNT", "3"]).1,
        page(&mut con, &n2, &["COUNT", "3"]).1
    );
}

#[test]
fn small_hash_pages_are_served_inline_and_match_worker_pages() {
    let server = Server::start();
    let mut con = server.client();
    let mut p = redis::pipe();
    for i in 0..3000 {
        p.cmd("HSET")
            .arg("h")
            .arg(format!("f{i:05}"))
            .arg(i)
            .ignore();
    }
    let _: () = p.query(&mut con).unwrap();
    config_set(&mut con, "snapshot.inline-entries", "0");
    let on_workers: Vec<Vec<u8>> = full_hscan(&mut con, "SNAPSHOT.HSCAN", "h", &["COUNT", "100"]);
    config_set(&mut con, "snapshot.inline-entries", "256");
    let small0 = info_u64(&mut con, "snapshot_scans_served_small");
    let got: Vec<Vec<u8>> = full_hscan(&mut con, "SNAPSHOT.HSCAN", "h", &["COUNT", "100"]);
    assert_eq!(got, on_workers);
    assert_eq!(got.len(), 6000, "3000 fields and their values");
    // The first page makes the copy (worker); the other 29 are small.
    let small = info_u64(&mut con, "snapshot_scans_served_small") - small0;
    assert!(small >= 29, "{small} small pages");
}

#[test]
fn loadmodule_arguments_take_effect() {
    let server = Server::start_with(ServerOpts::new().module_args(&[
        "workers",
        "3",
        "scan-budget",
        "500",
        "worker-nice",
        "15",
        "cursor-idle-timeout",
        "7",
        "max-open-cursors",
        "33",
        "backfill-batch",
        "77",
    ]));
    let mut con = server.client();
    for (name, value) in [
        ("workers", "3"),
        ("scan-budget", "500"),
        ("worker-nice", "15"),
        ("cursor-idle-timeout", "7"),
        ("max-open-cursors", "33"),
        ("backfill-batch", "77"),
    ] {
        assert_eq!(
            config_get(&mut con, &format!("snapshot.{name}")).as_deref(),
            Some(value),
            "{name}"
        );
    }
    assert_eq!(info_u64(&mut con, "snapshot_workers"), 3);
    wait_until("3 worker threads at nice 15", POLL, || {
        let t = worker_threads(server.pid());
        t.len() == 3 && t.iter().all(|(_, n)| *n == 15)
    });

    // scan-budget 500: a sparse MATCH examines 500 entries per call.
    fill(&mut con, "k", 2000);
    let examined0 = info_u64(&mut con, "snapshot_entries_examined");
    let (c, items) = page(&mut con, "0", &["MATCH", "*zzz", "COUNT", "10"]);
    assert!(items.is_empty());
    assert_ne!(c, "0", "budget exhausted: the iteration continues");
    assert_eq!(
        info_u64(&mut con, "snapshot_entries_examined") - examined0,
        500
    );
    let (mut cursor, mut calls) = (c, 1);
    while cursor != "0" {
        cursor = page(&mut con, &cursor, &["MATCH", "*zzz", "COUNT", "10"]).0;
        calls += 1;
        assert!(calls <= 4, "more calls than 2000 keys / budget 500");
    }
    assert_eq!(calls, 4, "2000 keys / budget 500");

    // max-open-cursors 33.
    for _ in 0..50 {
        page(&mut con, "0", &["COUNT", "1"]);
    }
    assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), 33);
}

#[test]
fn workers_resize_at_runtime_and_have_low_priority() {
    let server = Server::start();
    let pid = server.pid();
    let mut con = server.client();
    fill(&mut con, "k", 100);
    assert_eq!(info_u64(&mut con, "snapshot_workers"), 2);
    wait_until("2 worker threads", POLL, || worker_threads(pid).len() == 2);
    for (comm, nice) in worker_threads(pid) {
        assert_worker_name(&comm);
        assert_eq!(nice, 19, "default worker-nice for {comm}");
    }

    config_set(&mut con, "snapshot.workers", "4");
    wait_until("INFO snapshot_workers 4", POLL, || {
        info_u64(&mut con, "snapshot_workers") == 4
    });
    wait_until("4 worker threads", POLL, || worker_threads(pid).len() == 4);
    assert_eq!(
        full_scan(&mut con, "SNAPSHOT.SCAN", &["COUNT", "9"]).len(),
        100
    );

    config_set(&mut con, "snapshot.workers", "1");
    wait_until("INFO snapshot_workers 1", POLL, || {
        info_u64(&mut con, "snapshot_workers") == 1
    });
    wait_until("1 worker thread", POLL, || worker_threads(pid).len() == 1);
    assert_eq!(
        full_scan(&mut con, "SNAPSHOT.SCAN", &["COUNT", "9"]).len(),
        100
    );

    // worker-nice applies to running workers (at their next job) and new ones.
    config_set(&mut con, "snapshot.worker-nice", "17");
    page(&mut con, "0", &["COUNT", "1000"]);
    wait_until("the worker at nice 17", POLL, || {
        worker_threads(pid).iter().all(|(_, n)| *n == 17)
    });
    config_set(&mut con, "snapshot.workers", "3");
    wait_until("3 worker threads at nice 17", POLL, || {
        let t = worker_threads(pid);
        t.len() == 3 && t.iter().all(|(_, n)| *n == 17)
    });
    assert_eq!(info_u64(&mut con, "snapshot_workers"), 3);
}

/// Repro of a pool bug: `Pool::resize` names a new thread by the live count
/// (`idx = alive.fetch_add(1)`), but after a partial shrink the live indices
/// are not 0..alive (e.g. {0, 2, 3} when thread 1 retired first), so a grow
/// duplicates a live index ({0, 2, 3, 3}) and a later shrink to 3 retires both
/// index-3 threads: 2 workers while `snapshot.workers` says 3 (or 4 when the
/// duplicated index survives). Each round hits it with probability ~2/3.
#[test]
fn worker_count_converges_after_a_shrink_interrupted_by_a_grow() {
    let server = Server::start();
    let pid = server.pid();
    let mut con = server.client();
    for round in 0..5 {
        config_set(&mut con, "snapshot.workers", "4");
        wait_until("4 workers", POLL, || {
            info_u64(&mut con, "snapshot_workers") == 4 && worker_threads(pid).len() == 4
        });
        config_set(&mut con, "snapshot.workers", "1");
        wait_until("one worker to retire", POLL, || {
            info_u64(&mut con, "snapshot_workers") <= 3
        });
        config_set(&mut con, "snapshot.workers", "4");
        config_set(&mut con, "snapshot.workers", "3");
        // Retiring threads notice within (threads x 100 ms): once at 3,
        // it must stay there past that time (a wrong count settles later).
        let sample =
            |con: &mut Connection| (info_u64(con, "snapshot_workers"), worker_threads(pid).len());
        wait_until("3 workers", Duration::from_secs(2), || {
            sample(&mut con) == (3, 3)
        });
        let settled = std::time::Instant::now() + Duration::from_millis(600);
        while std::time::Instant::now() < settled {
            assert_eq!(
                sample(&mut con),
                (3, 3),
                "round {round}: (INFO snapshot_workers, threads) with snapshot.workers 3"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
