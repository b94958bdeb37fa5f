//! Monitoring with Prometheus (README): the real redis_exporter of Debian's
//! `prometheus-redis-exporter` (1.45) runs `contrib/redis_exporter/snapscan.lua`
//! against a server with the module, and its HTTP endpoint exports every figure
//! of the script, equal to the server's `INFO snapshot`, following scans,
//! writes, deletions and config changes, also when the server is over
//! `maxmemory`; without the module the scrape stays up with no figures. The
//! sample alerting rules pass `promtool check rules` and their unit tests
//! (`promtool test rules`).
//!
//! The exporter and promtool are required: a missing binary fails the test
//! (scripts/install-deps.sh installs both). `SNAPSCAN_REDIS_EXPORTER` and
//! `SNAPSCAN_PROMTOOL` name other binaries.
//!
//! The exporter cases run on every server (the script's `INFO` call and its
//! flags are what differs between servers; about a second each). The promtool
//! case does not touch a server and costs well under a second, so it simply
//! runs in every suite too.
mod common;

use common::*;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

const SCRIPT: &str = "contrib/redis_exporter/snapscan.lua";
const RULES: &str = "contrib/prometheus/snapscan-rules.yml";
const RULES_TEST: &str = "contrib/prometheus/snapscan-rules.test.yml";
const START_TIMEOUT: Duration = Duration::from_secs(15);
const FOLLOW_TIMEOUT: Duration = Duration::from_secs(20);

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// `$var`, else the first of `names` in /usr/bin or on PATH; panics (a missing
/// tool fails the test, never skips it) with how to install it.
fn tool(var: &str, names: &[&str], package: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "{var}={}: no such file", p.display());
        return p;
    }
    let mut dirs = vec![PathBuf::from("/usr/bin")];
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.iter()
        .flat_map(|d| names.iter().map(move |n| d.join(n)))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{} not found (Debian package {package}): run scripts/install-deps.sh, or set {var}",
                names.join(" / ")
            )
        })
}

fn exporter_binary() -> PathBuf {
    tool(
        "SNAPSCAN_REDIS_EXPORTER",
        &["prometheus-redis-exporter", "redis_exporter"],
        "prometheus-redis-exporter",
    )
}

fn promtool() -> PathBuf {
    tool("SNAPSCAN_PROMTOOL", &["promtool"], "prometheus")
}

/// The names the script exports: its `FIELDS` list, one quoted name a line.
fn script_fields() -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo(SCRIPT)).expect("reading the script");
    let start = text.find("local FIELDS = {").expect("FIELDS in the script");
    let end = start + text[start..].find("\n}").expect("end of FIELDS");
    let fields: BTreeSet<String> = text[start..end]
        .lines()
        .filter_map(|l| l.trim().strip_prefix('"')?.strip_suffix("\","))
        .map(str::to_string)
        .collect();
    assert!(fields.len() > 20, "FIELDS parsed as {fields:?}");
    fields
}

/// A redis_exporter process on a free loopback port, scraping `server_port`
/// with the script; killed on drop (its log is printed if the test fails).
struct Exporter {
    child: Child,
    port: u16,
    _dir: TempDir,
    log: PathBuf,
}

impl Exporter {
    fn start(server_port: u16) -> Exporter {
        let dir = tempfile::Builder::new()
            .prefix("snapscan-exporter-")
            .tempdir()
            .expect("tempdir");
        let log = dir.path().join("exporter.log");
        let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
        for attempt in 1..=5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let out = std::fs::File::create(&log).expect("exporter log");
            let mut child = Command::new(exporter_binary())
                .arg("-redis.addr")
                .arg(format!("redis://127.0.0.1:{server_port}"))
                .arg("-web.listen-address")
                .arg(format!("127.0.0.1:{port}"))
                .arg("-script")
                .arg(repo(SCRIPT))
                .args(["-include-config-metrics", "-redis-only-metrics"])
                .stdin(Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .unwrap_or_else(|e| panic!("spawning {:?}: {e}", exporter_binary()));
            let deadline = Instant::now() + START_TIMEOUT;
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    // Another process took the port between our probe and its bind.
                    if read_log().contains("address already in use") && attempt < 5 {
                        break;
                    }
                    panic!("redis_exporter exited with {status}:\n{}", read_log());
                }
                if get_metrics(port).is_ok() {
                    return Exporter {
                        child,
                        port,
                        _dir: dir,
                        log,
                    };
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "redis_exporter did not answer on 127.0.0.1:{port} within {START_TIMEOUT:?}:\n{}",
                        read_log()
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        unreachable!()
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn scrape(&self) -> Metrics {
        get_metrics(self.port)
            .unwrap_or_else(|e| panic!("scraping the exporter: {e}\n{}", self.log_text()))
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- redis_exporter log ---\n{}", self.log_text());
        }
    }
}

/// One GET /metrics from the exporter on `port` (HTTP/1.0, so the body ends
/// with the connection).
fn get_metrics(port: u16) -> Result<Metrics, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(CLIENT_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(CLIENT_TIMEOUT)).unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut body = String::new();
    s.read_to_string(&mut body).map_err(|e| e.to_string())?;
    let (head, text) = body
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no HTTP header end in {body:?}"))?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return Err(format!("GET /metrics: {head}"));
    }
    Ok(Metrics::parse(text))
}

/// A parsed text exposition: (metric name, labels) -> value.
#[derive(Debug)]
struct Metrics(Vec<(String, BTreeMap<String, String>, f64)>);

impl Metrics {
    fn parse(text: &str) -> Metrics {
        let mut out = Vec::new();
        for line in text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let (series, value) = line.rsplit_once(' ').expect("`series value` line");
            let value: f64 = value.parse().unwrap_or_else(|e| panic!("{line}: {e}"));
            let (name, labels) = match series.split_once('{') {
                None => (series.to_string(), BTreeMap::new()),
                Some((name, rest)) => (name.to_string(), parse_labels(rest, line)),
            };
            out.push((name, labels, value));
        }
        Metrics(out)
    }

    /// Values of `name` by the value of its label `label`.
    fn by_label(&self, name: &str, label: &str) -> BTreeMap<String, f64> {
        self.0
            .iter()
            .filter(|(n, _, _)| n == name)
            .filter_map(|(_, l, v)| Some((l.get(label)?.clone(), *v)))
            .collect()
    }

    /// `redis_script_values` by `key`: what the script returned.
    fn script(&self) -> BTreeMap<String, f64> {
        self.by_label("redis_script_values", "key")
    }

    fn one(&self, name: &str) -> Option<f64> {
        self.0.iter().find(|(n, _, _)| n == name).map(|e| e.2)
    }

    /// Panics unless the exporter reached the server and its last scrape had no error.
    fn assert_scrape_ok(&self) {
        assert_eq!(self.one("redis_up"), Some(1.0), "redis_up");
        let errors = self.by_label("redis_exporter_last_scrape_error", "err");
        assert_eq!(
            errors,
            BTreeMap::from([(String::new(), 0.0)]),
            "redis_exporter_last_scrape_error"
        );
    }
}

/// `a="x",b="y\"z"}` -> {a: x, b: y"z}
fn parse_labels(rest: &str, line: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut chars = rest.chars().peekable();
    loop {
        let name: String = chars.by_ref().take_while(|&c| c != '=').collect();
        let name = name.trim_start_matches(',').to_string();
        if name.starts_with('}') || name.is_empty() {
            return labels;
        }
        assert_eq!(chars.next(), Some('"'), "label value in {line}");
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(c) => value.push(c),
                    None => panic!("bad escape in {line}"),
                },
                c => value.push(c),
            }
        }
        labels.insert(name, value);
        if chars.peek() == Some(&'}') {
            return labels;
        }
    }
}

/// The numeric `snapshot_*` fields of one `INFO snapshot`.
fn info_figures(con: &mut redis::Connection) -> BTreeMap<String, u64> {
    cmd_str(con, &["INFO", "snapshot"])
        .lines()
        .filter_map(|l| {
            let (k, v) = l.trim().split_once(':')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// Scrapes until every field the script exports equals `INFO snapshot`
/// (read just before and just after the scrape: a figure that moved meanwhile
/// must lie between the two) and `check` accepts the scrape; returns it. On
/// the deadline, panics with the last mismatch.
fn scrape_until(
    e: &Exporter,
    con: &mut redis::Connection,
    what: &str,
    mut check: impl FnMut(&BTreeMap<String, f64>) -> Result<(), String>,
) -> Metrics {
    let fields = script_fields();
    let deadline = Instant::now() + FOLLOW_TIMEOUT;
    loop {
        let before = info_figures(con);
        let m = e.scrape();
        let after = info_figures(con);
        let got = m.script();
        let mut problem = None;
        let names: BTreeSet<String> = got.keys().cloned().collect();
        if names != fields {
            problem = Some(format!(
                "exported {names:?}, the script's FIELDS are {fields:?}"
            ));
        }
        for (name, &v) in &got {
            if problem.is_some() {
                break;
            }
            let (Some(&a), Some(&b)) = (before.get(name), after.get(name)) else {
                problem = Some(format!("{name} exported but not in INFO snapshot"));
                break;
            };
            if v.fract() != 0.0 || v < a.min(b) as f64 || v > a.max(b) as f64 {
                problem = Some(format!("{name}: exported {v}, INFO said {a} then {b}"));
            }
        }
        if problem.is_none() {
            problem = check(&got).err();
        }
        match problem {
            None => {
                m.assert_scrape_ok();
                return m;
            }
            Some(p) if Instant::now() > deadline => panic!(
                "{what} on {}: after {FOLLOW_TIMEOUT:?}: {p}",
                Server::server_name()
            ),
            Some(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn want(got: &BTreeMap<String, f64>, name: &str, ok: impl Fn(f64) -> bool) -> Result<(), String> {
    match got.get(name) {
        Some(&v) if ok(v) => Ok(()),
        v => Err(format!("{name} is {v:?}")),
    }
}

#[test]
fn exporter_exports_the_scripts_figures_and_follows_the_server() {
    let server = Server::start();
    let mut con = server.client();
    let exporter = Exporter::start(server.port());

    // Every documented figure is there, equal to INFO, on an empty server.
    let m = scrape_until(&exporter, &mut con, "the first scrape", |got| {
        want(got, "snapshot_index_keys", |v| v == 0.0)?;
        want(got, "snapshot_workers", |v| v >= 1.0)
    });
    let readme = std::fs::read_to_string(repo("README.md")).expect("README.md");
    let start = readme
        .find("# Monitoring with Prometheus\n")
        .expect("README section `Monitoring with Prometheus`");
    let section = &readme[start..];
    let section = &section[..section[2..].find("\n#").map_or(section.len(), |i| i + 2)];
    for name in script_fields() {
        assert!(
            section.contains(&format!("`{name}`")),
            "{name} is exported but not in README's Monitoring with Prometheus table"
        );
    }
    // The caps the rules compare against (-include-config-metrics).
    let caps = m.by_label("redis_config_value", "key");
    assert_eq!(
        caps.get("snapshot.max-retained-bytes"),
        Some(&0.0),
        "redis_config_value of snapshot.max-retained-bytes"
    );
    assert_eq!(
        caps.get("snapshot.collection-memory-limit"),
        Some(&268435456.0),
        "redis_config_value of snapshot.collection-memory-limit"
    );
    let served0 = m.script()["snapshot_scans_served"];

    // Writes: 3000 keys and a hash of 2000 fields.
    const KEYS: usize = 3000;
    let mut pipe = redis::pipe();
    for i in 0..KEYS {
        pipe.cmd("SET").arg(format!("k:{i}")).arg(i).ignore();
    }
    for i in 0..2000 {
        pipe.cmd("HSET")
            .arg("h")
            .arg(format!("f{i}"))
            .arg(i)
            .ignore();
    }
    pipe.query::<()>(&mut con).expect("writes");
    let total = (KEYS + 1) as f64;
    scrape_until(&exporter, &mut con, "the writes", |got| {
        want(got, "snapshot_index_keys", |v| v == total)?;
        want(got, "snapshot_index_bytes_per_key", |v| v > 0.0)
    });

    // Scans: a whole iteration, one left open, a collection iteration left open.
    let keys = full_scan(&mut con, "SNAPSHOT.SCAN", &["COUNT", "500"]);
    assert_eq!(keys.len(), KEYS + 1);
    let (cursor, _): (String, Vec<Vec<u8>>) =
        query(&mut con, &["SNAPSHOT.SCAN", "0", "COUNT", "10"]).expect("SNAPSHOT.SCAN");
    assert_ne!(cursor, "0");
    let (hcursor, _): (String, Vec<Vec<u8>>) =
        query(&mut con, &["SNAPSHOT.HSCAN", "h", "0", "COUNT", "10"]).expect("SNAPSHOT.HSCAN");
    assert_ne!(hcursor, "0");
    scrape_until(&exporter, &mut con, "the scans", |got| {
        want(got, "snapshot_scans_served", |v| v >= served0 + 3.0)?;
        want(got, "snapshot_open_snapshots", |v| v == 1.0)?;
        want(got, "snapshot_hash_cursors_open", |v| v == 1.0)?;
        want(got, "snapshot_hash_copies_made", |v| v >= 1.0)?;
        want(got, "snapshot_hash_snapshot_bytes", |v| v > 0.0)
    });

    // The native commands served from snapshots: counted per command and
    // outcome (README, Serving the native commands).
    let _: () = query(&mut con, &["CONFIG", "SET", "snapshot.serve-native", "all"])
        .expect("CONFIG SET serve-native");
    let _: i64 = query(&mut con, &["SADD", "small", "a", "b"]).expect("SADD");
    let (c, _): (String, Vec<Vec<u8>>) = query(&mut con, &["SCAN", "0"]).expect("SCAN");
    assert_ne!(c, "0");
    let (c, _): (String, Vec<Vec<u8>>) = query(&mut con, &["HSCAN", "h", "0"]).expect("HSCAN");
    assert_ne!(c, "0");
    let (c, _): (String, Vec<Vec<u8>>) = query(&mut con, &["SSCAN", "small", "0"]).expect("SSCAN");
    assert_eq!(c, "0");
    // A cursor of the form snapscan issues, of an iteration it never had.
    let lost = ((1u64 << 52) + 12_345).to_string();
    let _: (String, Vec<Vec<u8>>) = query(&mut con, &["SCAN", &lost]).expect("SCAN lost");
    let _: () = query(
        &mut con,
        &["CONFIG", "SET", "snapshot.serve-native", "none"],
    )
    .expect("CONFIG SET serve-native");
    let _: i64 = query(&mut con, &["DEL", "small"]).expect("DEL");
    scrape_until(&exporter, &mut con, "the native commands", |got| {
        want(got, "snapshot_native_scan_served", |v| v == 1.0)?;
        want(got, "snapshot_native_scan_restarted", |v| v == 1.0)?;
        want(got, "snapshot_native_hscan_served", |v| v == 1.0)?;
        want(got, "snapshot_native_sscan_native", |v| v == 1.0)?;
        want(got, "snapshot_native_keys_served", |v| v == 0.0)
    });

    // Deletions by pattern: k:1, k:10..k:19, k:100..k:199, k:1000..k:1999.
    let unlinked: u64 = query(&mut con, &["SNAPSHOT.UNLINK", "k:1*"]).expect("SNAPSHOT.UNLINK");
    assert_eq!(unlinked, 1111);
    let left = total - 1111.0;
    scrape_until(&exporter, &mut con, "SNAPSHOT.UNLINK", |got| {
        want(got, "snapshot_unlink_calls", |v| v == 1.0)?;
        want(got, "snapshot_unlink_keys_unlinked", |v| v == 1111.0)?;
        want(got, "snapshot_index_keys", |v| v == left)
    });

    // A config change reaches the limit the alert compares against (an
    // absolute one under the default relative one's 4 MiB floor).
    let _: () = query(
        &mut con,
        &["CONFIG", "SET", "snapshot.max-retained-bytes", "1048576"],
    )
    .expect("CONFIG SET");
    scrape_until(
        &exporter,
        &mut con,
        "CONFIG SET max-retained-bytes",
        |got| want(got, "snapshot_retained_limit_bytes", |v| v == 1048576.0),
    );

    // Over maxmemory (where alerts matter most) the script still runs: it
    // writes nothing and says so (no-writes).
    let _: () = query(
        &mut con,
        &["CONFIG", "SET", "maxmemory-policy", "noeviction"],
    )
    .unwrap();
    let _: () = query(&mut con, &["CONFIG", "SET", "maxmemory", "1"]).unwrap();
    let oom = expect_err(&mut con, &["SET", "x", "y"]);
    assert!(oom.starts_with("OOM"), "SET over maxmemory answered {oom}");
    scrape_until(&exporter, &mut con, "a scrape over maxmemory", |got| {
        want(got, "snapshot_index_keys", |v| v == left)
    });
    let _: () = query(&mut con, &["CONFIG", "SET", "maxmemory", "0"]).unwrap();
}

#[test]
fn exporter_without_the_module_stays_up_with_no_figures() {
    let server = Server::start_with(ServerOpts::without_module());
    let exporter = Exporter::start(server.port());
    // The exporter reads the server at each request.
    let m = exporter.scrape();
    m.assert_scrape_ok();
    assert_eq!(m.script(), BTreeMap::new(), "figures without the module");
}

#[test]
fn alerting_rules_pass_promtool() {
    for args in [["check", "rules", RULES], ["test", "rules", RULES_TEST]] {
        let out = Command::new(promtool())
            .args(&args[..2])
            .arg(repo(args[2]))
            .output()
            .unwrap_or_else(|e| panic!("running promtool: {e}"));
        assert!(
            out.status.success(),
            "promtool {} failed:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Every figure a rule reads is one the script exports.
    let rules = std::fs::read_to_string(repo(RULES)).expect("rules file");
    let fields = script_fields();
    let mut read = 0;
    for part in rules.split("redis_script_values{key=\"").skip(1) {
        let name = &part[..part.find('"').expect("closing quote")];
        assert!(
            fields.contains(name),
            "{RULES} reads {name}, which {SCRIPT} does not export"
        );
        read += 1;
    }
    assert!(read >= 10, "only {read} figures read by the rules");
}
