//! Configuration that says no: `loadmodule`/`MODULE LOAD` arguments (both
//! spellings), `snapshot.<name> value` lines of a config file and CONFIG SET
//! accept and refuse the same values, and a refused load names the argument
//! in the server log. One table per way in; each case runs a real server.
//!
//! What the servers do with a refused load (Redis 7.0, 8.2, Valkey 8.1, 9.1
//! alike): MODULE LOAD answers `ERR Error loading the extension. Please check
//! the server logs.` (none passes the module's reason through), the log has
//! our `snapscan: refusing to load: ...` line followed by the server's
//! `Module ... initialization failed. Module not loaded`; at startup the
//! server then logs `Can't load module from ...: server aborting` and exits.

mod common;
use common::*;

use redis::Value;
use rstest::rstest;
use std::path::Path;
use std::time::Duration;

const REFUSED_LOAD: &str = "Error loading the extension";

/// Every config and its default, as CONFIG GET shows them.
const DEFAULTS: &[(&str, &str)] = &[
    ("workers", "2"),
    ("worker-nice", "19"),
    ("cursor-idle-timeout", "60"),
    ("max-open-cursors", "1024"),
    ("scan-budget", "100000"),
    ("inline-entries", "256"),
    ("backfill-batch", "1000"),
    ("hash-copy-batch", "1000"),
    ("hash-memory-limit", "268435456"),
];

fn config_get(con: &mut redis::Connection, name: &str) -> String {
    let v: Vec<String> = query(con, &["CONFIG", "GET", &format!("snapshot.{name}")]).unwrap();
    assert_eq!(v.len(), 2, "CONFIG GET snapshot.{name}: {v:?}");
    v[1].clone()
}

/// Every config has `want`'s value where given, else its default.
fn assert_configs(con: &mut redis::Connection, want: &[(&str, &str)]) {
    for &(name, default) in DEFAULTS {
        let expected = want
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(default, |&(_, v)| v);
        assert_eq!(config_get(con, name), expected, "snapshot.{name}");
    }
    // The pool follows snapshot.workers.
    let workers = config_get(con, "workers");
    let info = cmd_str(con, &["INFO", "snapshot"]);
    assert_eq!(
        info_field(&info, "snapshot_workers").as_deref(),
        Some(workers.as_str())
    );
}

/// The module's threads in the server (all are named `snapscan-*`; the
/// server's own come and go on some versions, e.g. Redis 7.4's).
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| {
        d.filter_map(Result::ok)
            .filter(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|c| c.starts_with("snapscan"))
            })
            .count()
    })
}

// ------------------------------------------------ loadmodule / MODULE LOAD

#[rstest]
#[case::short_names(&["workers", "3", "cursor-idle-timeout", "7"], &[("workers", "3"), ("cursor-idle-timeout", "7")])]
#[case::prefixed_names(&["snapshot.workers", "3", "snapshot.cursor-idle-timeout", "7"], &[("workers", "3"), ("cursor-idle-timeout", "7")])]
#[case::any_case_and_bounds(&["SNAPSHOT.WORKERS", "64", "Inline-Entries", "0", "worker-nice", "0"], &[("workers", "64"), ("inline-entries", "0"), ("worker-nice", "0")])]
#[case::memory_units(&["hash-memory-limit", "1mb", "scan-budget", "100"], &[("hash-memory-limit", "1048576"), ("scan-budget", "100")])]
#[case::memory_units_gb(&["snapshot.hash-memory-limit", "2GB"], &[("hash-memory-limit", "2147483648")])]
#[case::every_config(&["workers", "1", "worker-nice", "5", "cursor-idle-timeout", "86400", "max-open-cursors", "1000000", "scan-budget", "1000000000", "inline-entries", "100000", "backfill-batch", "1", "hash-copy-batch", "1000000", "hash-memory-limit", "1024"],
    &[("workers", "1"), ("worker-nice", "5"), ("cursor-idle-timeout", "86400"), ("max-open-cursors", "1000000"), ("scan-budget", "1000000000"), ("inline-entries", "100000"), ("backfill-batch", "1"), ("hash-copy-batch", "1000000"), ("hash-memory-limit", "1024")])]
#[case::none(&[], &[])]
fn load_arguments_accepted(#[case] args: &[&str], #[case] want: &[(&str, &str)]) {
    // MODULE LOAD at runtime...
    let server = Server::start_with(ServerOpts::without_module());
    server
        .module_load(args)
        .unwrap_or_else(|e| panic!("MODULE LOAD {args:?}: {e}"));
    assert_configs(&mut server.client(), want);
    drop(server);
    // ...and --loadmodule at startup.
    let server = Server::start_with(ServerOpts::new().module_args(args));
    assert_configs(&mut server.client(), want);
}

#[rstest]
#[case::unknown(&["bogus", "1"], "unknown argument 'bogus'")]
#[case::unknown_prefixed(&["snapshot.bogus", "1"], "unknown argument 'snapshot.bogus'")]
#[case::other_module_prefix(&["search.workers", "1"], "unknown argument 'search.workers'")]
#[case::missing_value(&["workers"], "argument 'workers' has no value")]
#[case::missing_second_value(&["workers", "3", "snapshot.scan-budget"], "argument 'snapshot.scan-budget' has no value")]
#[case::not_integer(&["workers", "abc"], "argument 'workers': value 'abc' is not an integer")]
#[case::fraction(&["snapshot.workers", "3.5"], "argument 'snapshot.workers': value '3.5' is not an integer")]
#[case::workers_zero(&["workers", "0"], "argument 'workers': value '0' is out of range (must be between 1 and 64 inclusive)")]
#[case::workers_negative(&["workers", "-5"], "argument 'workers': value '-5' is out of range")]
#[case::workers_too_many(&["snapshot.workers", "200"], "argument 'snapshot.workers': value '200' is out of range")]
#[case::nice(&["worker-nice", "20"], "argument 'worker-nice': value '20' is out of range")]
#[case::max_open_zero(&["max-open-cursors", "0"], "argument 'max-open-cursors': value '0' is out of range")]
#[case::idle_zero(&["cursor-idle-timeout", "0"], "argument 'cursor-idle-timeout': value '0' is out of range")]
#[case::budget_one(&["scan-budget", "1"], "argument 'scan-budget': value '1' is out of range")]
#[case::memory_small(&["hash-memory-limit", "100"], "argument 'hash-memory-limit': value '100' is out of range")]
#[case::memory_unit(&["hash-memory-limit", "12qb"], "argument 'hash-memory-limit': value '12qb' is not a memory size")]
#[case::twice(&["workers", "3", "snapshot.workers", "4"], "argument 'snapshot.workers' is given twice")]
fn load_arguments_refused(#[case] args: &[&str], #[case] why: &str) {
    let server = Server::start_with(ServerOpts::without_module());
    let mut con = server.client();
    let before = threads(server.pid());
    let e = server
        .module_load(args)
        .expect_err("the load must be refused");
    let e = err_text(&e);
    assert!(
        e.contains(why) || e.contains(REFUSED_LOAD),
        "MODULE LOAD error {e:?}"
    );
    let line = format!("snapscan: refusing to load: {why}");
    assert!(
        server.log_text().contains(&line),
        "no {line:?} in the log:\n{}",
        server.log_tail(10)
    );
    assert!(!module_names(&mut con).iter().any(|m| m == "snapshot"));
    assert_eq!(before, 0);
    assert_eq!(
        threads(server.pid()),
        0,
        "a refused load left threads behind"
    );
    // Nothing of the refused load stays: the next load starts from the defaults.
    server.module_load(&["cursor-idle-timeout", "9"]).unwrap();
    assert_configs(&mut con, &[("cursor-idle-timeout", "9")]);
    // (The count above can see the module's threads: a load starts them.)
    wait_until("the module's threads", Duration::from_secs(10), || {
        threads(server.pid()) > 0
    });

    // At startup the server refuses to start, with the same line in its log.
    let log = start_expecting_exit(ServerOpts::new().module_args(args));
    assert!(
        log.contains(&line),
        "no {line:?} in the startup log:\n{log}"
    );
}

/// MODULE LOADEX ... CONFIG values go through the server's range check.
#[test]
fn loadex_config_is_range_checked_and_wins_over_args() {
    let server = Server::start_with(ServerOpts::without_module());
    let m = path_str(&module_path());
    let mut con = server.client();
    let e = expect_err(
        &mut con,
        &["MODULE", "LOADEX", &m, "CONFIG", "snapshot.workers", "0"],
    );
    assert!(e.contains(REFUSED_LOAD), "{e}");
    let log = server.log_text();
    assert!(
        log.contains("snapshot.workers") && log.contains("between 1 and 64"),
        "{}",
        server.log_tail(10)
    );
    assert!(log.contains("snapscan: refusing to load: a snapshot.* value"));
    // Refused while the server applied the values: no thread was started.
    assert_eq!(
        threads(server.pid()),
        0,
        "a refused load left threads behind"
    );
    let _: Value = query(
        &mut con,
        &[
            "MODULE",
            "LOADEX",
            &m,
            "CONFIG",
            "snapshot.workers",
            "4",
            "ARGS",
            "workers",
            "3",
            "scan-budget",
            "500",
        ],
    )
    .unwrap();
    assert_configs(&mut con, &[("workers", "4"), ("scan-budget", "500")]);
    // The threads start with the values loaded, after a refused load too.
    wait_until("4 workers", Duration::from_secs(10), || {
        info_u64(&mut con, "snapshot_workers") == 4
            && info_u64(&mut con, "snapshot_threads_down") == 0
    });
}

// ------------------------------------------------------------- CONFIG SET

#[rstest]
#[case::workers("workers", "5", Ok("5"))]
#[case::workers_zero("workers", "0", Err("between 1 and 64"))]
#[case::workers_many("workers", "65", Err("between 1 and 64"))]
#[case::workers_text("workers", "abc", Err(""))]
#[case::nice("worker-nice", "20", Err("between 0 and 19"))]
#[case::idle("cursor-idle-timeout", "7", Ok("7"))]
#[case::idle_zero("cursor-idle-timeout", "0", Err("between 1 and 86400"))]
#[case::max_open_zero("max-open-cursors", "0", Err("between 1 and 1000000"))]
#[case::budget_one("scan-budget", "1", Err("between 100 and 1000000000"))]
#[case::inline_zero("inline-entries", "0", Ok("0"))]
#[case::backfill_zero("backfill-batch", "0", Err("between 1 and 1000000"))]
#[case::copy_batch_zero("hash-copy-batch", "0", Err("between 1 and 1000000"))]
#[case::memory_units("hash-memory-limit", "10mb", Ok("10485760"))]
#[case::memory_small("hash-memory-limit", "100", Err("between 1024 and"))]
#[case::memory_unit("hash-memory-limit", "12qb", Err(""))]
fn config_set(#[case] name: &str, #[case] value: &str, #[case] want: Result<&str, &str>) {
    let server = Server::start();
    let mut con = server.client();
    let full = format!("snapshot.{name}");
    let r = query::<Value>(&mut con, &["CONFIG", "SET", &full, value]);
    match want {
        Ok(v) => {
            r.unwrap_or_else(|e| panic!("CONFIG SET {full} {value}: {e}"));
            assert_configs(&mut con, &[(name, v)]);
        }
        Err(why) => {
            let e = err_text(&r.expect_err("CONFIG SET must be refused"));
            assert!(e.contains(&full) && e.contains(why), "{e}");
            assert_configs(&mut con, &[]);
        }
    }
}

// -------------------------------------------------------- config file lines

#[rstest]
#[case::applied(&[], &["snapshot.workers 3", "snapshot.hash-memory-limit 1mb"], Ok(&[("workers", "3"), ("hash-memory-limit", "1048576")][..]))]
#[case::file_wins_over_args(&["workers", "4", "scan-budget", "500"], &["snapshot.workers 3"], Ok(&[("workers", "3"), ("scan-budget", "500")][..]))]
#[case::out_of_range(&[], &["snapshot.workers 0"], Err("snapshot.workers"))]
#[case::idle_zero(&[], &["snapshot.cursor-idle-timeout 0"], Err("snapshot.cursor-idle-timeout"))]
#[case::not_integer(&[], &["snapshot.scan-budget lots"], Err("snapshot.scan-budget"))]
// The server refuses unknown `snapshot.*` lines itself (Redis 8.2 and Valkey
// also log `Unused Module Configuration: snapshot.bogus`; Redis 7.0 does not
// name it).
#[case::unknown(&[], &["snapshot.bogus 3"], Err("Module Configuration detected without loadmodule directive"))]
#[case::args_refused(&["workers", "0"], &["snapshot.scan-budget 500"], Err("snapscan: refusing to load: argument 'workers'"))]
fn config_file(
    #[case] args: &[&str],
    #[case] lines: &[&str],
    #[case] want: Result<&[(&str, &str)], &str>,
) {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("server.conf");
    let mut text = format!("loadmodule \"{}\"", path_str(&module_path()));
    for a in args {
        text += &format!(" {a}");
    }
    text += "\n";
    for l in lines {
        text += &format!("{l}\n");
    }
    std::fs::write(&conf, text).unwrap();
    match want {
        Ok(want) => {
            let server = Server::start_with(ServerOpts::without_module().config_file(&conf));
            assert_configs(&mut server.client(), want);
        }
        Err(why) => {
            let log = start_expecting_exit(ServerOpts::without_module().config_file(&conf));
            assert!(log.contains(why), "no {why:?} in the startup log:\n{log}");
        }
    }
}

// ------------------------------------------------------------------ helpers

fn path_str(p: &Path) -> String {
    p.to_str().expect("a UTF-8 module path").to_string()
}

/// Starts a server that must refuse to start; returns its log.
fn start_expecting_exit(opts: ServerOpts) -> String {
    match Server::try_start_with(opts.clone()) {
        Ok(_) => panic!("the server started with {opts:?}"),
        Err(log) => log,
    }
}
