//! The servers' own SCAN tests with `snapshot.serve-native all` (issue 26):
//! upstream `tests/unit/scan.tcl`, unmodified, run by its own
//! `tests/test_helper.tcl` against a server of ours (its external-server
//! mode), once natively (no module) and once with the mode on. Every test
//! that passes natively passes with the mode on, and the mode served the
//! calls.
//!
//! The suites come from Debian's source packages: `scripts/install-deps.sh`
//! unpacks the upstream tarball's `tests/` into `$SNAPSCAN_VENV/upstream-tests`
//! (default /opt/snapscan-venv): Valkey's (for Valkey, Redis 8.x and the
//! Stack) and Redis 7.0's (for Redis 7.0). `SNAPSCAN_UPSTREAM_TESTS` names
//! another directory of the same layout.

mod common;

use common::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One suite run is a few seconds; this bounds a stuck one.
const SUITE_TIMEOUT: Duration = Duration::from_secs(300);

fn upstream_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SNAPSCAN_UPSTREAM_TESTS") {
        return PathBuf::from(d);
    }
    std::env::var_os("SNAPSCAN_VENV")
        .map_or_else(|| PathBuf::from("/opt/snapscan-venv"), PathBuf::from)
        .join("upstream-tests")
}

/// The suites for the server under test: Redis 7.0's for Redis 7.0,
/// Valkey's for Valkey; both for Redis 8.x and the Stack (Valkey's stops at
/// its first ZSCAN test there, on an option Redis lacks: Redis 7.0's covers
/// the rest).
fn suites_for(server: &str) -> &'static [&'static str] {
    if server == "redis-7.0" {
        &["redis"]
    } else if server.starts_with("valkey") {
        &["valkey"]
    } else {
        &["valkey", "redis"]
    }
}

/// The fewest tests a suite passes natively on `server` (24 and 17 when
/// written; Valkey's stops after 10 on Redis): fewer means the run broke
/// off, and then it proves little.
fn floor(server: &str, suite: &str) -> usize {
    match suite {
        "redis" => 15,
        _ if server.starts_with("valkey") => 20,
        _ => 8,
    }
}

/// What one run of the suite printed and which tests passed or failed.
struct Outcome {
    passed: BTreeSet<String>,
    failed: BTreeSet<String>,
    output: String,
}

/// Strips the terminal colours the helper prints even into a pipe.
fn plain(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A test's name from its result line (`[ok]: NAME (12 ms)`).
fn test_name(rest: &str) -> String {
    let rest = rest.trim();
    match rest.rfind(" (") {
        Some(i) if rest.ends_with(" ms)") => rest[..i].to_string(),
        _ => rest.to_string(),
    }
}

fn parse(output: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut passed, mut failed) = (BTreeSet::new(), BTreeSet::new());
    for line in output.lines().map(plain) {
        if let Some(rest) = line.strip_prefix("[ok]:") {
            passed.insert(test_name(rest));
        } else if let Some(rest) = line.strip_prefix("[err]:") {
            failed.insert(test_name(rest));
        } else if line.starts_with("[exception]") {
            failed.insert(line);
        }
    }
    (passed, failed)
}

/// Runs the suite at `suite` (a directory holding `tests/`) against
/// `server`, from a copy in `work` (the helper writes into `tests/tmp`).
fn run_suite(server: &Server, suite: &Path, work: &Path) -> Outcome {
    let copy = Command::new("cp")
        .arg("-r")
        .arg(suite.join("tests"))
        .arg(work)
        .status()
        .expect("cp");
    assert!(copy.success(), "copying {}", suite.display());
    // Valkey's helper wants a server binary in VALKEY_BIN_DIR even against
    // an external server: the one under test.
    let bin = work.join("bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    let link = bin.join("valkey-server");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(server_binary(), &link).expect("symlink");
    let out_path = work.join("output.txt");
    let out = std::fs::File::create(&out_path).expect("output file");
    let mut child = Command::new("tclsh")
        .args(["tests/test_helper.tcl", "--host", "127.0.0.1", "--port"])
        .arg(server.port().to_string())
        .args(["--single", "unit/scan", "--clients", "1"])
        .current_dir(work)
        .env("VALKEY_BIN_DIR", &bin)
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("output file"))
        .stderr(out)
        .spawn()
        .expect("tclsh (scripts/install-deps.sh installs Debian's tcl)");
    let deadline = Instant::now() + SUITE_TIMEOUT;
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for tclsh") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let output = std::fs::read_to_string(&out_path).unwrap_or_default();
            panic!("the upstream suite ran past {SUITE_TIMEOUT:?}:\n{output}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = std::fs::read_to_string(&out_path).unwrap_or_default();
    let (passed, failed) = parse(&output);
    assert!(
        !passed.is_empty() || !failed.is_empty(),
        "the upstream suite ran no test (exit {status}):\n{output}"
    );
    Outcome {
        passed,
        failed,
        output,
    }
}

#[test]
fn upstream_scan_suite_passes_with_serve_native_all() {
    let name = Server::server_name();
    let native_server = Server::start_with(ServerOpts::without_module());
    let served = Server::start_with(ServerOpts::new().module_args(&["serve-native", "all"]));
    let work = tempfile::tempdir().expect("tempdir");
    for which in suites_for(&name) {
        let suite = upstream_dir().join(which);
        assert!(
            suite.join("tests/unit/scan.tcl").is_file(),
            "no upstream suite in {} (scripts/install-deps.sh fetches it)",
            suite.display()
        );
        let version = std::fs::read_to_string(suite.join("VERSION")).unwrap_or_default();
        let run = |server: &Server, how: &str| {
            let dir = work.path().join(format!("{which}-{how}"));
            std::fs::create_dir_all(&dir).expect("dir");
            run_suite(server, &suite, &dir)
        };
        let native = run(&native_server, "native");
        let with_mode = run(&served, "served");
        eprintln!(
            "{name}: {} ({}): natively {} passed, {} failed; with serve-native all {} passed, {} failed",
            suite.display(),
            version.trim(),
            native.passed.len(),
            native.failed.len(),
            with_mode.passed.len(),
            with_mode.failed.len()
        );
        assert!(
            native.passed.len() >= floor(&name, which),
            "{name}: {which}'s suite passed {} tests natively, fewer than {}:\n{}",
            native.passed.len(),
            floor(&name, which),
            native.output
        );
        let lost: Vec<&String> = native
            .passed
            .iter()
            .filter(|t| !with_mode.passed.contains(*t))
            .collect();
        assert!(
            lost.is_empty(),
            "{name}: passed natively, not with serve-native all: {lost:?}\n--- with the mode ---\n{}",
            with_mode.output
        );
    }
    // The mode served the suites' calls (else the runs prove nothing).
    let mut con = served.client();
    for cmd in ["scan", "sscan", "hscan", "zscan"] {
        let n = info_u64(&mut con, &format!("snapshot_native_{cmd}_served"));
        assert!(n > 0, "{name}: no {cmd} call was served");
    }
}

#[test]
fn result_lines_are_parsed() {
    let out = "[\u{1b}[0;32;49mok\u{1b}[0m]: {standalone} SCAN basic (110 ms)\n\
               [err]: ZSCAN with NOSCORES in tests/unit/scan.tcl\n\
               [ok]: SSCAN with PATTERN (0 ms)\n\
               [ignore]: Not supported on external server\n";
    let (passed, failed) = parse(out);
    assert_eq!(
        passed,
        BTreeSet::from([
            "{standalone} SCAN basic".to_string(),
            "SSCAN with PATTERN".to_string()
        ])
    );
    assert_eq!(
        failed,
        BTreeSet::from(["ZSCAN with NOSCORES in tests/unit/scan.tcl".to_string()])
    );
}
