//! The index's own threads and the main thread: supervised threads (a panic
//! or a failed spawn is logged, counted and recovered from), the main
//! thread's bounded share of the index backlog (TRYAGAIN), expiry inside
//! scripts judged at the server's frozen clock, and the cap on memory held
//! by old versions (`snapshot.max-retained-bytes`).
//!
//! Faults are injected with the test-only `SNAPSHOT.TESTHOOK` command, which
//! the module registers only when `SNAPSCAN_TEST_HOOKS=1` is in the
//! server's environment at load (set here, inherited by the servers).
mod common;

use common::*;
use redis::{Connection, Value};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Serialises changes of this process's environment with server starts.
static ENV: Mutex<()> = Mutex::new(());

/// Starts a server whose module has its test hooks, optionally with the
/// first `fail_spawns` thread spawns failing.
fn start(opts: ServerOpts, fail_spawns: Option<usize>) -> Server {
    let _g = ENV.lock().unwrap_or_else(|e| e.into_inner());
    std::env::set_var("SNAPSCAN_TEST_HOOKS", "1");
    match fail_spawns {
        Some(n) => std::env::set_var("SNAPSCAN_TEST_FAIL_SPAWNS", n.to_string()),
        None => std::env::remove_var("SNAPSCAN_TEST_FAIL_SPAWNS"),
    }
    let server = Server::start_with(opts);
    std::env::remove_var("SNAPSCAN_TEST_FAIL_SPAWNS");
    server
}

fn hook(con: &mut Connection, args: &[&str]) {
    let mut full = vec!["SNAPSHOT.TESTHOOK"];
    full.extend_from_slice(args);
    let _: Value = query(con, &full).unwrap_or_else(|e| panic!("{full:?}: {e}"));
}

fn log_has(server: &Server, needle: &str) -> bool {
    std::fs::read_to_string(server.log_path()).is_ok_and(|l| l.contains(needle))
}

/// Keys of a full SNAPSHOT.SCAN iteration, sorted.
fn keys(con: &mut Connection, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = full_scan(con, "SNAPSHOT.SCAN", extra)
        .into_iter()
        .map(|k| String::from_utf8(k).unwrap())
        .collect();
    v.sort();
    v
}

// ------------------------------------------------- 1. supervised threads

#[test]
fn a_panicking_thread_is_logged_counted_and_restarted() {
    let server = start(
        ServerOpts::new()
            .module_args(&["inline-entries", "0"])
            .config("loglevel", "notice"),
        None,
    );
    let mut con = server.client();
    // Without test hooks the command does not exist (checked in the other
    // suites implicitly); here it does.
    assert_eq!(info_u64(&mut con, "snapshot_thread_restarts"), 0);
    for (round, thread) in ["indexer", "janitor", "reaper", "worker"]
        .into_iter()
        .enumerate()
    {
        let before = info_u64(&mut con, "snapshot_thread_restarts");
        hook(&mut con, &["PANIC", thread]);
        // The reaper and the janitor act only when woken or on their tick.
        let _: Vec<Value> = query(&mut con, &["SNAPSHOT.SCAN", "0"]).unwrap();
        wait_until(
            &format!("{thread}: a restart counted"),
            Duration::from_secs(10),
            || info_u64(&mut con, "snapshot_thread_restarts") > before,
        );
        let name = if thread == "worker" {
            "snapscan-worker".to_string()
        } else {
            format!("snapscan-{thread}")
        };
        wait_until(
            &format!("{thread}: the panic in the server log"),
            Duration::from_secs(5),
            || log_has(&server, &format!("thread {name}")) && log_has(&server, "injected fault"),
        );
        // Still serving: a write is indexed by the (restarted) indexer and
        // seen by a scan served by a worker.
        let key = format!("after:{round}");
        let _: () = query(&mut con, &["SET", &key, "v"]).unwrap();
        wait_until("the indexer applies", Duration::from_secs(10), || {
            info_u64(&mut con, "snapshot_index_backlog") == 0
                && info_u64(&mut con, "snapshot_index_keys") == round as u64 + 1
        });
        assert_eq!(
            keys(&mut con, &["MATCH", "after:*"]).len(),
            round + 1,
            "{thread}"
        );
        assert_eq!(info_u64(&mut con, "snapshot_threads_down"), 0, "{thread}");
    }
    assert_eq!(info_u64(&mut con, "snapshot_thread_failures"), 0);
    // The janitor still expires idle cursors after its restart.
    config_set(&mut con, "snapshot.cursor-idle-timeout", "1");
    let expired = info_u64(&mut con, "snapshot_cursors_expired");
    let (_, _): (String, Vec<String>) =
        query(&mut con, &["SNAPSHOT.SCAN", "0", "COUNT", "1"]).unwrap();
    wait_until(
        "the janitor expires the cursor",
        Duration::from_secs(10),
        || info_u64(&mut con, "snapshot_cursors_expired") > expired,
    );
}

#[test]
fn failed_spawns_are_counted_logged_and_retried() {
    // The first three spawns at load fail: a worker, the reaper, the indexer.
    let server = start(ServerOpts::new(), Some(3));
    let mut con = server.client();
    assert_eq!(info_u64(&mut con, "snapshot_thread_failures"), 3);
    assert!(log_has(&server, "cannot start thread snapscan-"));
    // Served meanwhile (inline if no worker is up yet), exactly.
    for i in 0..50 {
        let _: () = query(&mut con, &["SET", &format!("k{i}"), "v"]).unwrap();
    }
    assert_eq!(keys(&mut con, &["COUNT", "7"]).len(), 50);
    // Every missing thread is started again within about a second.
    wait_until("all threads running", Duration::from_secs(10), || {
        info_u64(&mut con, "snapshot_threads_down") == 0
    });
    assert_eq!(info_u64(&mut con, "snapshot_workers"), 2);
    let _: () = query(&mut con, &["SET", "late", "v"]).unwrap();
    wait_until("the indexer applies", Duration::from_secs(10), || {
        info_u64(&mut con, "snapshot_index_backlog") == 0
            && info_u64(&mut con, "snapshot_index_keys") == 51
    });
    // A failed worker spawn at runtime (CONFIG SET) is counted and retried.
    hook(&mut con, &["FAIL-SPAWNS", "1"]);
    config_set(&mut con, "snapshot.workers", "3");
    assert_eq!(info_u64(&mut con, "snapshot_thread_failures"), 4);
    wait_until("the third worker", Duration::from_secs(10), || {
        info_u64(&mut con, "snapshot_workers") == 3
            && info_u64(&mut con, "snapshot_threads_down") == 0
    });
}

// --------------------------------------- 2. the main thread's bounded share

/// Issue 26, item 10: a client the module keeps blocked (a cursor 0 waiting
/// for the indexer: `SNAPSHOT.SCAN`, or a `SCAN` served by the mode) is
/// counted in `snapshot_blocked_clients` beside the server's
/// `blocked_clients`, and no longer once it has its reply; `CLIENT LIST`
/// shows it blocked (`flags=b`) in the command it runs.
#[rstest::rstest]
#[case::snapshot_scan("none", "SNAPSHOT.SCAN", "snapshot.scan")]
#[case::served_scan("all", "SCAN", "snapshot.native-scan")]
fn clients_blocked_by_the_module_are_counted_apart(
    #[case] mode: &str,
    #[case] cmd: &str,
    #[case] listed: &str,
) {
    use std::io::{Read, Write};
    let server = start(ServerOpts::new().module_args(&["serve-native", mode]), None);
    let mut con = server.client();
    hook(&mut con, &["PAUSE-INDEXER", "1"]);
    let _: Value = query(&mut con, &["DEBUG", "POPULATE", "300000"]).unwrap();
    assert_eq!(info_u64(&mut con, "snapshot_blocked_clients"), 0);
    let mut waiting = std::net::TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    waiting.set_read_timeout(Some(CLIENT_TIMEOUT)).unwrap();
    let request = format!(
        "*4\r\n${}\r\n{cmd}\r\n$1\r\n0\r\n$5\r\nCOUNT\r\n$1\r\n1\r\n",
        cmd.len()
    );
    waiting.write_all(request.as_bytes()).unwrap();
    wait_until(
        "the call blocked by the module",
        Duration::from_secs(10),
        || info_u64(&mut con, "snapshot_blocked_clients") == 1,
    );
    assert!(info_section_u64(&mut con, "clients", "blocked_clients") >= 1);
    let list = cmd_str(&mut con, &["CLIENT", "LIST"]);
    let line = list
        .lines()
        .find(|l| l.contains(&format!(" cmd={listed} ")))
        .unwrap_or_else(|| panic!("no client in {listed}:\n{list}"));
    let flags = line
        .split_whitespace()
        .find_map(|f| f.strip_prefix("flags="))
        .unwrap_or_default();
    assert!(flags.contains('b'), "blocked: {line}");
    hook(&mut con, &["PAUSE-INDEXER", "0"]);
    let mut first = [0u8; 1];
    waiting.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"*", "a SCAN page");
    wait_until("the client unblocked", Duration::from_secs(10), || {
        info_u64(&mut con, "snapshot_blocked_clients") == 0
    });
}

#[test]
fn calls_that_cannot_block_answer_tryagain_instead_of_applying_a_big_backlog() {
    let server = start(ServerOpts::new(), None);
    let mut con = server.client();
    hook(&mut con, &["PAUSE-INDEXER", "1"]);
    let _: Value = query(&mut con, &["DEBUG", "POPULATE", "300000"]).unwrap();
    let backlog = info_u64(&mut con, "snapshot_index_backlog");
    assert!(backlog > 250_000, "backlog {backlog}");

    // MULTI/EXEC: the call inside answers TRYAGAIN, the EXEC returns fast.
    let t = Instant::now();
    let reply: Value = redis::pipe()
        .atomic()
        .cmd("SNAPSHOT.SCAN")
        .arg("0")
        .query(&mut con)
        .map(|v: Value| v)
        .unwrap_or_else(|e| Value::SimpleString(err_text(&e)));
    let took = t.elapsed();
    let text = format!("{reply:?}");
    assert!(
        text.contains("TRYAGAIN") && text.contains("retry shortly"),
        "{text}"
    );
    // A bound only (a loaded machine stretches wall time): that the EXEC
    // applied no big share of the backlog is checked on the backlog below.
    assert!(took < Duration::from_secs(2), "EXEC took {took:?}");

    // A script gets the same error (catchable with pcall).
    let got: String = query(
        &mut con,
        &[
            "EVAL",
            "local r = redis.pcall('SNAPSHOT.SCAN', '0') \
             if type(r) == 'table' and r.err then return r.err end return 'served'",
            "0",
        ],
    )
    .unwrap();
    assert!(
        got.starts_with("TRYAGAIN snapscan: the index has "),
        "{got}"
    );
    assert!(info_u64(&mut con, "snapshot_scans_refused_busy") >= 2);
    // The main thread applied only a small share of the backlog.
    let left = info_u64(&mut con, "snapshot_index_backlog");
    assert!(left + 100_000 > backlog, "backlog {backlog} -> {left}");

    // Once the indexer catches up the same calls are served.
    hook(&mut con, &["PAUSE-INDEXER", "0"]);
    wait_until("the indexer catches up", Duration::from_secs(60), || {
        info_u64(&mut con, "snapshot_index_backlog") == 0
    });
    let (next, page): (String, Vec<String>) = redis::pipe()
        .atomic()
        .cmd("SNAPSHOT.SCAN")
        .arg("0")
        .arg("COUNT")
        .arg("5")
        .query::<((String, Vec<String>),)>(&mut con)
        .unwrap()
        .0;
    assert_ne!(next, "0");
    assert_eq!(page.len(), 5);
}

#[test]
fn without_any_thread_calls_run_inline_within_their_budget_until_threads_start() {
    // Every thread start fails until the hook allows them again.
    let server = start(ServerOpts::new(), Some(1_000_000));
    let mut con = server.client();
    assert_eq!(info_u64(&mut con, "snapshot_workers"), 0);
    // Indexer, janitor, reaper and both workers are missing.
    assert_eq!(info_u64(&mut con, "snapshot_threads_down"), 5);
    // A small backlog is applied by the call itself (inline: no worker).
    for i in 0..20 {
        let _: () = query(&mut con, &["SET", &format!("s{i}"), "v"]).unwrap();
    }
    assert_eq!(keys(&mut con, &["COUNT", "3"]).len(), 20);
    // A large one is not: the call answers TRYAGAIN instead.
    let _: Value = query(&mut con, &["DEBUG", "POPULATE", "200000"]).unwrap();
    let err = expect_err(&mut con, &["SNAPSHOT.SCAN", "0"]);
    assert!(
        err.starts_with("TRYAGAIN snapscan: the index has "),
        "{err}"
    );
    // Once threads can start they are (within about a second), and the
    // same call is served.
    hook(&mut con, &["FAIL-SPAWNS", "0"]);
    wait_until("all threads running", Duration::from_secs(10), || {
        info_u64(&mut con, "snapshot_threads_down") == 0
    });
    wait_until("the indexer catches up", Duration::from_secs(60), || {
        info_u64(&mut con, "snapshot_index_backlog") == 0
    });
    assert_eq!(keys(&mut con, &["MATCH", "s*", "COUNT", "1000"]).len(), 20);
    // At load: the first worker (the pool stops at a failure), the reaper,
    // the indexer and the janitor.
    assert!(info_u64(&mut con, "snapshot_thread_failures") >= 4);
}

// ------------------------------------------------ 3. expiry inside scripts

/// TTL of the keys a busy script outlives (margin for a slow test machine
/// between the SET and the script's start), and how long the script runs.
const TTL_MS: &str = "1000";
const BUSY_MS: &str = "1600";

/// Runs a script that keeps the server busy (past busy-reply-threshold,
/// so the server refreshes its cached clock while the script's own clock
/// stays frozen) for `busy_ms`, then returns what the script sees.
const BUSY_SCRIPT: &str = "
local function now() local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000) end
local t0 = now()
local n = 0
while now() - t0 < tonumber(ARGV[1]) and n < 50000000 do redis.call('PING') n = n + 1 end
local exists = {}
for i, k in ipairs(KEYS) do exists[i] = redis.call('EXISTS', k) end
local seen, cursor = {}, '0'
repeat
  local r = redis.call('SNAPSHOT.SCAN', cursor, 'MATCH', 'edge*', 'COUNT', '1')
  cursor = r[1]
  for _, k in ipairs(r[2]) do seen[#seen + 1] = k end
until cursor == '0'
return {exists, seen}
";

#[test]
fn expiry_inside_a_busy_script_is_judged_at_the_scripts_frozen_clock() {
    let server = start(ServerOpts::new(), None);
    let mut con = server.client();
    if !server.is_valkey() && server.version() < (7, 2, 0) {
        // Redis 7.0 has no side-effect-free key open (NOEXPIRE): the module
        // uses the wall clock there (documented in the README).
        return;
    }
    config_set(&mut con, "busy-reply-threshold", "100");
    for k in ["edge:a", "edge:b", "edge:c"] {
        let _: () = query(&mut con, &["SET", k, "v", "PX", TTL_MS]).unwrap();
    }
    let _: () = query(&mut con, &["SET", "edge:keep", "v"]).unwrap();
    let _: () = query(&mut con, &["SET", "edge:gone", "v", "PX", "1"]).unwrap();
    // edge:gone's TTL passes before the script starts (no read reclaims it).
    std::thread::sleep(Duration::from_millis(5));
    let keys_arg = ["edge:a", "edge:b", "edge:c", "edge:keep", "edge:gone"];
    let mut args = vec!["EVAL", BUSY_SCRIPT, "5"];
    args.extend(keys_arg);
    args.push(BUSY_MS);
    let (exists, mut seen): (Vec<i64>, Vec<String>) = query(&mut con, &args).unwrap();
    seen.sort();
    assert_eq!(exists, vec![1, 1, 1, 1, 0], "what the script sees");
    assert_eq!(
        seen,
        vec!["edge:a", "edge:b", "edge:c", "edge:keep"],
        "SNAPSHOT.SCAN inside the script agrees with it"
    );
    // After the script the keys are expired for everyone.
    assert_eq!(keys(&mut con, &["MATCH", "edge*"]), vec!["edge:keep"]);
}

/// Busy for `ARGV[1]` ms, then returns the first page of
/// `SNAPSHOT.SCAN 0 MATCH edge* COUNT ARGV[2]`.
const BUSY_FIRST_PAGE: &str = "
local function now() local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000) end
local t0 = now()
local n = 0
while now() - t0 < tonumber(ARGV[1]) and n < 50000000 do redis.call('PING') n = n + 1 end
return redis.call('SNAPSHOT.SCAN', '0', 'MATCH', 'edge*', 'COUNT', ARGV[2])
";

#[test]
fn pages_served_outside_the_script_judge_expiry_at_the_scripts_clock() {
    let server = start(ServerOpts::new(), None);
    let mut con = server.client();
    if !server.is_valkey() && server.version() < (7, 2, 0) {
        return;
    }
    config_set(&mut con, "busy-reply-threshold", "100");
    for (count, rest) in [("1", vec!["edge:a", "edge:b"]), ("2", vec!["edge:b"])] {
        let _: () = query(&mut con, &["FLUSHALL"]).unwrap();
        let _: () = query(&mut con, &["SET", "edge:0", "v"]).unwrap();
        for k in ["edge:a", "edge:b"] {
            let _: () = query(&mut con, &["SET", k, "v", "PX", TTL_MS]).unwrap();
        }
        let (cursor, first): (String, Vec<String>) =
            query(&mut con, &["EVAL", BUSY_FIRST_PAGE, "0", BUSY_MS, count]).unwrap();
        // The cursor-0 call inside the script settles the script's clock
        // (edge:a, judged by the server, reveals it), whatever its first
        // page holds: the pages served later by a worker judge every key
        // as the script did.
        let mut expect_first = vec!["edge:0".to_string()];
        if count == "2" {
            expect_first.push("edge:a".into());
        }
        assert_eq!(first, expect_first, "COUNT {count}");
        let (_, more): (String, Vec<String>) =
            query(&mut con, &["SNAPSHOT.SCAN", &cursor, "COUNT", "10"]).unwrap();
        assert_eq!(more, rest, "COUNT {count}: the pages after the script");
    }
}

#[test]
fn the_issue_case_exists_and_scan_agree() {
    let server = start(ServerOpts::new(), None);
    let mut con = server.client();
    if !server.is_valkey() && server.version() < (7, 2, 0) {
        return;
    }
    config_set(&mut con, "busy-reply-threshold", "100");
    // The issue's case (PX 200, a script of about 0.5 s), with the margins
    // of the other tests.
    let _: () = query(&mut con, &["SET", "edge", "v", "PX", TTL_MS]).unwrap();
    let (exists, (cursor, found)): (i64, (String, Vec<String>)) = query(
        &mut con,
        &[
            "EVAL",
            "local t = redis.call('TIME') local t0 = t[1] * 1000 + t[2] / 1000 local n = 0 \
             repeat redis.call('PING') t = redis.call('TIME') n = n + 1 \
             until t[1] * 1000 + t[2] / 1000 - t0 > tonumber(ARGV[1]) or n > 50000000 \
             return {redis.call('EXISTS','edge'), redis.call('SNAPSHOT.SCAN','0','MATCH','edge')}",
            "0",
            BUSY_MS,
        ],
    )
    .unwrap();
    assert_eq!(
        (exists, cursor.as_str(), found),
        (1, "0", vec!["edge".to_string()])
    );
}

#[test]
fn expiry_inside_a_busy_function_is_judged_at_its_frozen_clock() {
    let server = start(ServerOpts::new(), None);
    let mut con = server.client();
    if !server.is_valkey() && server.version() < (7, 2, 0) {
        return;
    }
    let lib = "#!lua name=robust
redis.register_function('busy_scan', function(keys, args)
  local function now() local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000) end
  local t0 = now()
  local n = 0
  while now() - t0 < tonumber(args[1]) and n < 50000000 do redis.call('PING') n = n + 1 end
  return {redis.call('EXISTS', 'edge'), redis.call('SNAPSHOT.SCAN', '0', 'MATCH', 'edge')}
end)";
    let _: String = query(&mut con, &["FUNCTION", "LOAD", lib]).unwrap();
    config_set(&mut con, "busy-reply-threshold", "100");
    let _: () = query(&mut con, &["SET", "edge", "v", "PX", TTL_MS]).unwrap();
    let (exists, (cursor, found)): (i64, (String, Vec<String>)) =
        query(&mut con, &["FCALL", "busy_scan", "0", BUSY_MS]).unwrap();
    assert_eq!(
        (exists, cursor.as_str(), found),
        (1, "0", vec!["edge".to_string()])
    );
}

// ----------------------------------------- 4./6. retained versions and memory

#[test]
fn memory_held_by_old_versions_is_capped_by_ending_the_oldest_iterations() {
    const CAP: u64 = 1 << 20;
    let server = start(
        ServerOpts::new().module_args(&["max-retained-bytes", &CAP.to_string()]),
        None,
    );
    let mut con = server.client();
    let _: Value = query(&mut con, &["DEBUG", "POPULATE", "200000"]).unwrap();
    // Old versions cost an undo entry per changed key (about 20 bytes):
    // 80 rounds of 3,000 expiries pass 1 MiB (new iterations are refused
    // from three quarters of it).
    let cursors = pin_versions(&mut con, 200_000, 80, 3000, 7);
    // One batch of the indexer: 1,024 writes, each copying a path of at
    // most 4 nodes of 2 KiB.
    let batch = 1024 * 4 * 2048;
    wait_until("the cap holds", Duration::from_secs(30), || {
        info_u64(&mut con, "snapshot_index_backlog") == 0
            && info_u64(&mut con, "snapshot_retained_bytes") <= CAP + batch
    });
    // Both figures from one INFO reply (the registry reports them under one
    // lock): the module may still be ending iterations meanwhile.
    let info = cmd_str(&mut con, &["INFO", "snapshot"]);
    let figure = |name: &str| -> u64 { info_field(&info, name).unwrap().parse().unwrap() };
    let evicted = figure("snapshot_cursors_evicted_memory");
    assert!(evicted > 0, "no iteration ended");
    let open = figure("snapshot_open_snapshots");
    assert_eq!(open + evicted, cursors.len() as u64);
    assert!(info_u64(&mut con, "snapshot_retained_versions") <= open);
    // The oldest was ended, and says why. (The newest may be too: the
    // changes made since it opened, which it alone still needs, pass the
    // cap by themselves.)
    let oldest = &cursors[0];
    assert_eq!(
        expect_err(&mut con, &["SNAPSHOT.SCAN", oldest]),
        ended_for_memory(oldest, "snapshot.max-retained-bytes")
    );
}

#[test]
fn without_a_cap_nothing_is_ended_and_retained_versions_are_counted() {
    let server = start(
        ServerOpts::new().module_args(&["max-retained-bytes", "0", "max-retained-percent", "0"]),
        None,
    );
    let mut con = server.client();
    // A memory config: accepts `1gb`-style values.
    config_set(&mut con, "snapshot.max-retained-bytes", "1gb");
    let got: Vec<String> =
        query(&mut con, &["CONFIG", "GET", "snapshot.max-retained-bytes"]).unwrap();
    assert_eq!(got[1], "1073741824");
    config_set(&mut con, "snapshot.max-retained-bytes", "0");
    let _: Value = query(&mut con, &["DEBUG", "POPULATE", "20000"]).unwrap();
    let mut cursors = Vec::new();
    for i in 0..6 {
        // Two iterations per version.
        for _ in 0..2 {
            let (c, _): (String, Vec<String>) =
                query(&mut con, &["SNAPSHOT.SCAN", "0", "COUNT", "1"]).unwrap();
            cursors.push(c);
        }
        let _: () = query(&mut con, &["SET", &format!("new:{i}"), "v"]).unwrap();
    }
    wait_until("applied", Duration::from_secs(10), || {
        info_u64(&mut con, "snapshot_index_backlog") == 0
    });
    assert_eq!(info_u64(&mut con, "snapshot_retained_versions"), 6);
    assert!(info_u64(&mut con, "snapshot_retained_bytes") > 0);
    // Ending both iterations of the oldest version unpins it.
    for c in &cursors[..2] {
        let _ = full_scan_from(&mut con, c);
    }
    assert_eq!(info_u64(&mut con, "snapshot_retained_versions"), 5);
    assert_eq!(info_u64(&mut con, "snapshot_cursors_evicted_memory"), 0);
}

/// Continues an iteration from `cursor` to its end.
fn full_scan_from(con: &mut Connection, cursor: &str) -> usize {
    let mut cursor = cursor.to_string();
    let mut n = 0;
    for _ in 0..1_000_000 {
        let (next, page): (String, Vec<String>) =
            query(con, &["SNAPSHOT.SCAN", &cursor, "COUNT", "1000"]).unwrap();
        n += page.len();
        if next == "0" {
            return n;
        }
        cursor = next;
    }
    panic!("no end");
}
