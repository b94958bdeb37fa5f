//! Integration-test harness: starts a real Redis/Valkey server with the module
//! loaded, on a free loopback port, in its own temporary directory (its log is
//! `server.log` there; a failing test prints its tail).
//!
//! Server: `SNAPSCAN_SERVER` (path; default `redis-server` from PATH), labelled
//! `SNAPSCAN_SERVER_NAME`; `scripts/test.sh` sets both and runs every test file
//! once per server of `scripts/servers.sh`. Module: see [`module_path`].
//!
//! Usage: `mod common; use common::*;` then `let s = Server::start(); let mut c = s.client();`
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub mod cluster;

use redis::{Connection, FromRedisValue, RedisResult, ToRedisArgs, Value};
use tempfile::TempDir;

/// A bound on every reply, not a synchronisation: generous, because a
/// bulk command (`DEBUG POPULATE 300000`) on a loaded 2-core machine took
/// over 10 s once.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a used cursor stays answerable for a retry, holding its
/// snapshot or collection copy (README, Cursor lifetime); the janitor drops
/// it within one of its ticks after that.
pub const RETRY_WINDOW: Duration = Duration::from_secs(10);
/// The retry window of a server started with [`ServerOpts::quick_retry`].
pub const QUICK_RETRY_WINDOW: Duration = Duration::from_secs(2);
const START_TIMEOUT: Duration = Duration::from_secs(10);
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
const SAVE_TIMEOUT: Duration = Duration::from_secs(60);
const PORT_ATTEMPTS: usize = 5;
/// How a start failure where the process exited begins.
const EXITED: &str = "server exited with";

/// How to start a server. `ServerOpts::new()` loads the module; `default()` does not.
#[derive(Debug, Default, Clone)]
pub struct ServerOpts {
    pub load_module: bool,
    pub module_args: Vec<String>,
    /// Extra `--name value` options, e.g. `("hash-max-listpack-entries", "4")`.
    pub extra_config: Vec<(String, String)>,
    /// Start as a replica of the server on 127.0.0.1:<port>.
    pub replica_of: Option<u16>,
    /// Other modules (`path`, `args`), loaded in this order before snapscan (`before`) or after it.
    pub extra_modules: Vec<ExtraModule>,
    /// A config file, read before the command-line options.
    pub config_file: Option<PathBuf>,
    /// Environment variables of the server process.
    pub env: Vec<(String, String)>,
}

/// A module other than snapscan for [`ServerOpts::extra_modules`].
#[derive(Debug, Clone)]
pub struct ExtraModule {
    pub path: PathBuf,
    pub args: Vec<String>,
    /// Loaded before snapscan (else after it).
    pub before: bool,
}

impl ServerOpts {
    pub fn new() -> Self {
        ServerOpts {
            load_module: true,
            ..Default::default()
        }
    }
    pub fn without_module() -> Self {
        ServerOpts::default()
    }
    pub fn module_args(mut self, args: &[&str]) -> Self {
        self.module_args.extend(args.iter().map(|s| s.to_string()));
        self
    }
    pub fn config(mut self, name: &str, value: &str) -> Self {
        self.extra_config
            .push((name.to_string(), value.to_string()));
        self
    }
    /// Starts the server with the config file at `path` (its first argument).
    pub fn config_file(mut self, path: &Path) -> Self {
        self.config_file = Some(path.to_path_buf());
        self
    }
    /// Sets an environment variable of the server process.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_string(), value.to_string()));
        self
    }
    /// The module's test hooks on, with used cursors answerable for
    /// [`QUICK_RETRY_WINDOW`] instead of [`RETRY_WINDOW`]: for tests of
    /// what is released once the window passed.
    pub fn quick_retry(self) -> Self {
        let ms = QUICK_RETRY_WINDOW.as_millis().to_string();
        self.env("SNAPSCAN_TEST_HOOKS", "1")
            .env("SNAPSCAN_TEST_RETRY_MS", &ms)
    }
    pub fn replica_of(mut self, port: u16) -> Self {
        self.replica_of = Some(port);
        self
    }
    /// Loads the module at `path` with `args` before snapscan (in call order).
    pub fn module_before(mut self, path: &Path, args: &[&str]) -> Self {
        self.extra_modules.push(ExtraModule::new(path, args, true));
        self
    }
    /// Loads the module at `path` with `args` after snapscan (in call order).
    pub fn module_after(mut self, path: &Path, args: &[&str]) -> Self {
        self.extra_modules.push(ExtraModule::new(path, args, false));
        self
    }
}

impl ExtraModule {
    fn new(path: &Path, args: &[&str], before: bool) -> Self {
        ExtraModule {
            path: path.to_path_buf(),
            args: args.iter().map(|s| s.to_string()).collect(),
            before,
        }
    }
}

pub struct Server {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
    opts: ServerOpts,
    info: OnceLock<(bool, (u32, u32, u32))>,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(ServerOpts::new())
    }

    /// Starts a server; panics with its log's tail if it does not answer.
    pub fn start_with(opts: ServerOpts) -> Server {
        let mut server = Server::stopped(opts);
        if let Err(why) = server.launch() {
            server.fail_start(&why)
        }
        server
    }

    /// Starts a server that may refuse to start: `Err(its whole log)` if it
    /// exits before answering PING (panics if it neither answers nor exits).
    pub fn try_start_with(opts: ServerOpts) -> Result<Server, String> {
        let mut server = Server::stopped(opts);
        match server.launch() {
            Ok(()) => Ok(server),
            Err(why) if why.starts_with(EXITED) => Err(server.log_text()),
            Err(why) => server.fail_start(&why),
        }
    }

    /// A server not started yet, with its temporary directory.
    fn stopped(opts: ServerOpts) -> Server {
        let dir = tempfile::Builder::new()
            .prefix("snapscan-test-")
            .tempdir()
            .expect("tempdir");
        Server {
            child: None,
            port: 0,
            dir,
            opts,
            info: OnceLock::new(),
        }
    }

    /// Spawns on a free port, retrying another when one is taken.
    fn launch(&mut self) -> Result<(), String> {
        for attempt in 1..=PORT_ATTEMPTS {
            self.port = free_port();
            match self.spawn() {
                // Someone took the port between our probe and the server's bind: try another.
                Err(log) if log.contains("Address already in use") && attempt < PORT_ATTEMPTS => {}
                done => return done,
            }
        }
        unreachable!()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Process id of the running server (e.g. to inspect `/proc/<pid>/task`).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server not running").id()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir().join("server.log")
    }

    /// A new connection with read/write timeouts of [`CLIENT_TIMEOUT`].
    pub fn client(&self) -> Connection {
        self.try_client(CLIENT_TIMEOUT)
            .unwrap_or_else(|e| panic!("connecting to 127.0.0.1:{}: {e}", self.port))
    }

    fn try_client(&self, timeout: Duration) -> RedisResult<Connection> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?;
        let con = client.get_connection_with_timeout(timeout)?;
        con.set_read_timeout(Some(timeout))?;
        con.set_write_timeout(Some(timeout))?;
        Ok(con)
    }

    /// `SNAPSCAN_SERVER_NAME`, else the server binary's file name.
    pub fn server_name() -> String {
        std::env::var("SNAPSCAN_SERVER_NAME").unwrap_or_else(|_| {
            server_binary()
                .file_name()
                .map_or("server".into(), |n| n.to_string_lossy().into())
        })
    }

    pub fn is_valkey(&self) -> bool {
        self.server_info().0
    }

    /// From INFO server: `valkey_version` on Valkey (which also reports a fake
    /// `redis_version:7.2.4`), else `redis_version`.
    pub fn version(&self) -> (u32, u32, u32) {
        self.server_info().1
    }

    fn server_info(&self) -> (bool, (u32, u32, u32)) {
        *self.info.get_or_init(|| {
            let info = cmd_str(&mut self.client(), &["INFO", "server"]);
            let valkey = info_field(&info, "valkey_version");
            let version = valkey
                .clone()
                .or_else(|| info_field(&info, "redis_version"));
            let version = version.expect("no version in INFO server");
            let mut parts = version.split('.').map(|p| p.parse().unwrap_or(0));
            let mut next = || parts.next().unwrap_or(0);
            (valkey.is_some(), (next(), next(), next()))
        })
    }

    /// `MODULE LOAD <module path> args...`
    pub fn module_load(&self, args: &[&str]) -> RedisResult<()> {
        let path = module_path();
        redis::cmd("MODULE")
            .arg("LOAD")
            .arg(path.as_os_str().as_encoded_bytes())
            .arg(args)
            .query(&mut self.client())
    }

    /// `SHUTDOWN SAVE`, then start again on the same port and dir (loading dump.rdb).
    /// A module loaded with [`Server::module_load`] is not reloaded; use `opts.load_module`.
    pub fn restart(&mut self) {
        let reply: RedisResult<Value> =
            redis::cmd("SHUTDOWN").arg("SAVE").query(&mut self.client());
        if let Err(e) = &reply {
            if !e.is_io_error() && !e.is_connection_dropped() && !e.is_unrecoverable_error() {
                panic!("SHUTDOWN SAVE refused: {e}");
            }
        }
        let mut child = self.child.take().expect("server not running");
        if !wait_exit(&mut child, SAVE_TIMEOUT) {
            let _ = child.kill();
            let _ = child.wait();
            self.fail_start("server did not exit after SHUTDOWN SAVE");
        }
        self.info = OnceLock::new();
        // The old socket may linger briefly; the port is ours, so retry it.
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(log) if log.contains("Address already in use") && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(log) => self.fail_start(&log),
            }
        }
    }

    /// Starts the process on `self.port` and waits for PONG; on failure returns the log tail.
    fn spawn(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let mut cmd = Command::new(server_binary());
        if let Some(conf) = &self.opts.config_file {
            cmd.arg(conf);
        }
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1"]);
        cmd.arg("--dir")
            .arg(self.dir.path())
            .args(["--save", "", "--appendonly", "no"]);
        cmd.args([
            "--daemonize",
            "no",
            "--enable-debug-command",
            "yes",
            "--enable-module-command",
            "yes",
            // Replicas sync at once instead of after a 5 s wait for more replicas.
            "--repl-diskless-sync-delay",
            "0",
        ]);
        for m in self.opts.extra_modules.iter().filter(|m| m.before) {
            cmd.arg("--loadmodule").arg(&m.path).args(&m.args);
        }
        if self.opts.load_module {
            cmd.arg("--loadmodule")
                .arg(module_path())
                .args(&self.opts.module_args);
        }
        for m in self.opts.extra_modules.iter().filter(|m| !m.before) {
            cmd.arg("--loadmodule").arg(&m.path).args(&m.args);
        }
        for (k, v) in &self.opts.extra_config {
            cmd.arg(format!("--{k}")).arg(v);
        }
        if let Some(p) = self.opts.replica_of {
            cmd.args(["--replicaof", "127.0.0.1"]).arg(p.to_string());
        }
        for (k, v) in &self.opts.env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {:?}: {e}", server_binary()));
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("{EXITED} {status}\n{}", self.log_tail(40)));
            }
            // PING answers -LOADING until the RDB is loaded. Then make sure the server
            // that answered is ours, not another one that won the race for the port.
            let ready = self
                .try_client(Duration::from_millis(500))
                .and_then(|mut c| {
                    let pong: String = redis::cmd("PING").query(&mut c)?;
                    let info: String = redis::cmd("INFO").arg("server").query(&mut c)?;
                    Ok((pong, info_field(&info, "process_id")))
                });
            if let Ok((pong, pid)) = ready {
                if pong == "PONG" && pid == Some(child.id().to_string()) {
                    self.child = Some(child);
                    return Ok(());
                }
                if pong == "PONG" {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err("Address already in use (by another server)".into());
                }
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "no PONG within {START_TIMEOUT:?}\n{}",
                    self.log_tail(40)
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn fail_start(&self, why: &str) -> ! {
        panic!(
            "starting {} ({:?}) on port {} failed: {why}",
            Server::server_name(),
            server_binary(),
            self.port
        )
    }

    /// The server's whole log.
    pub fn log_text(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(self.log_path()).unwrap_or_default()).into_owned()
    }

    /// The last `n` lines of the server's log, or for a crash the `n` lines that end
    /// 30 lines into the crash report (its stack trace; the rest is memory-test noise).
    pub fn log_tail(&self, n: usize) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        let end = lines
            .iter()
            .position(|l| l.contains("BUG REPORT START"))
            .map_or(lines.len(), |i| (i + 30).min(lines.len()));
        lines[end.saturating_sub(n)..end].join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(mut con) = self.try_client(Duration::from_secs(1)) {
            let _: RedisResult<Value> = redis::cmd("SHUTDOWN")
                .arg("NOSAVE")
                .arg("NOW")
                .query(&mut con);
        }
        if !wait_exit(&mut child, STOP_TIMEOUT) {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "--- {} log (port {}), last lines ---\n{}",
                Server::server_name(),
                self.port,
                self.log_tail(30)
            );
        }
    }
}

fn wait_exit(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("binding a free port")
        .port()
}

/// `SNAPSCAN_MODULE`, else `<target>/release/libsnapscan.so` (target: CARGO_TARGET_DIR or
/// `<crate>/target`). `cargo test --release` rebuilds `release/deps/libsnapscan.so` but does
/// not copy it up, so the newer of the two is used: tests never run a stale module.
pub fn module_path() -> PathBuf {
    if let Some(p) = std::env::var_os("SNAPSCAN_MODULE") {
        let path = PathBuf::from(p);
        assert!(path.is_file(), "SNAPSCAN_MODULE={path:?}: no such file");
        return path;
    }
    let release = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
        .join("release");
    let built = [
        release.join("libsnapscan.so"),
        release.join("deps/libsnapscan.so"),
    ];
    built
        .into_iter()
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p)
        .unwrap_or_else(|| {
            let want = release.join("libsnapscan.so");
            panic!(
                "no module at {}: run `cargo build --release`",
                want.display()
            )
        })
}

/// `SNAPSCAN_SERVER`, else `redis-server` from PATH.
pub fn server_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("SNAPSCAN_SERVER") {
        return PathBuf::from(p);
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("redis-server"))
                .find(|p| p.is_file())
        })
        .expect(
            "no server: set SNAPSCAN_SERVER (see scripts/servers.sh) or put redis-server on PATH",
        )
}

/// Polls `f` every 10 ms until it returns true; panics naming `what` after `timeout`.
pub fn wait_until<F: FnMut() -> bool>(what: &str, timeout: Duration, f: F) {
    wait_until_or(what, timeout, f, String::new);
}

/// [`wait_until`], the panic also saying what `describe` finds then.
pub fn wait_until_or<F: FnMut() -> bool>(
    what: &str,
    timeout: Duration,
    mut f: F,
    describe: impl FnOnce() -> String,
) {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "timed out after {timeout:?} waiting for {what}\n{}",
                describe()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `args` as one command and converts the reply.
pub fn query<T: FromRedisValue>(con: &mut Connection, args: &[&str]) -> RedisResult<T> {
    redis::cmd(args[0]).arg(&args[1..]).query(con)
}

/// Runs `args`, panicking with the server's error line if it fails.
pub fn ok(con: &mut Connection, args: &[&str]) -> Value {
    query(con, args).unwrap_or_else(|e| panic!("{args:?}: {}", err_text(&e)))
}

/// The server's clock (`TIME`), Unix ms.
pub fn server_ms(con: &mut Connection) -> i64 {
    let (s, us): (i64, i64) = query(con, &["TIME"]).expect("TIME");
    s * 1000 + us / 1000
}

/// How the error for a cursor that cannot be continued ends.
pub const UNKNOWN_TAIL: &str =
    "is unknown, already used or expired; restart the scan from cursor 0";

/// The error for cursor `c` when it cannot be continued.
pub fn unknown_cursor(c: &str) -> String {
    format!("ERR cursor {c} {UNKNOWN_TAIL}")
}

/// Runs `args`, panicking on error, and returns the reply as strings.
pub fn cmd_strs(con: &mut Connection, args: &[&str]) -> Vec<String> {
    query(con, args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Runs `args`, panicking on error, and returns the reply as one string.
pub fn cmd_str(con: &mut Connection, args: &[&str]) -> String {
    query(con, args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// A field of an INFO reply (`name:value` lines).
pub fn info_field(info: &str, name: &str) -> Option<String> {
    info.lines().find_map(|l| {
        l.strip_prefix(name)?
            .strip_prefix(':')
            .map(|v| v.trim().to_string())
    })
}

/// A numeric field of `INFO <section>` (e.g. `stats`, `evicted_keys`), or
/// `None` where the reply has no such line; panics if it is not a number.
pub fn info_opt_u64(con: &mut Connection, section: &str, name: &str) -> Option<u64> {
    let info = cmd_str(con, &["INFO", section]);
    info_field(&info, name).map(|v| {
        v.parse()
            .unwrap_or_else(|e| panic!("INFO {section} {name}={v}: {e}"))
    })
}

/// A numeric field of an INFO reply (to read several from one reply);
/// panics, with the reply, if it is missing or not a number.
pub fn info_num(info: &str, name: &str) -> u64 {
    info_field(info, name)
        .unwrap_or_else(|| panic!("no {name} in INFO:\n{info}"))
        .parse()
        .unwrap_or_else(|e| panic!("INFO {name}: {e}"))
}

/// A numeric field of `INFO <section>`; panics, with the section, if it is
/// missing or not a number.
pub fn info_section_u64(con: &mut Connection, section: &str, name: &str) -> u64 {
    info_num(&cmd_str(con, &["INFO", section]), name)
}

/// A numeric field of `INFO snapshot` (`snapshot_...`); panics, with the
/// section, if it is missing or not a number.
pub fn info_u64(con: &mut Connection, name: &str) -> u64 {
    info_section_u64(con, "snapshot", name)
}

/// `snapshot_index_keys_db<db>`. INFO lists only the non-empty databases
/// (README, INFO snapshot), so a database without a line holds 0 keys.
pub fn index_keys_db(con: &mut Connection, db: u32) -> u64 {
    info_opt_u64(con, "snapshot", &format!("snapshot_index_keys_db{db}")).unwrap_or(0)
}

/// `DBSIZE` of the selected database.
pub fn dbsize(con: &mut Connection) -> u64 {
    query(con, &["DBSIZE"]).expect("DBSIZE")
}

/// `DBSIZE` of database `db`: SELECTs it, then database 0 again.
pub fn dbsize_in(con: &mut Connection, db: u32) -> u64 {
    let _: () = query(con, &["SELECT", &db.to_string()]).expect("SELECT");
    let n = dbsize(con);
    let _: () = query(con, &["SELECT", "0"]).expect("SELECT 0");
    n
}

/// `CONFIG SET name value`; panics with the server's error if it is refused
/// (use [`query`] to test a refusal).
pub fn config_set(con: &mut Connection, name: &str, value: &str) {
    let _: () = query(con, &["CONFIG", "SET", name, value])
        .unwrap_or_else(|e| panic!("CONFIG SET {name} {value}: {}", err_text(&e)));
}

/// Fills collection `key` with `cmd key args(0).. args(1).. ...` for `0..n`, 500
/// elements a command (e.g. `HSET` with `|i| vec![field, value]`).
pub fn populate(
    con: &mut Connection,
    cmd: &str,
    key: &str,
    n: usize,
    args: impl Fn(usize) -> Vec<String>,
) {
    for start in (0..n).step_by(500) {
        let mut c = redis::cmd(cmd);
        c.arg(key);
        for i in start..(start + 500).min(n) {
            c.arg(args(i));
        }
        let _: i64 = c
            .query(con)
            .unwrap_or_else(|e| panic!("{cmd} {key}: {}", err_text(&e)));
    }
}

/// Names of the loaded modules (Redis 8.2 also lists `vectorset`, Valkey 9.1 `lua`).
pub fn module_names(con: &mut Connection) -> Vec<String> {
    let modules: Vec<Vec<Value>> = query(con, &["MODULE", "LIST"]).expect("MODULE LIST");
    modules
        .iter()
        .filter_map(|m| {
            m.chunks(2)
                .find(|kv| String::from_redis_value(&kv[0]).ok().as_deref() == Some("name"))
        })
        .map(|kv| String::from_redis_value(&kv[1]).unwrap())
        .collect()
}

/// Loops a SCAN-like command (`cmd <cursor> extra...`, e.g. `SCAN` or `SNAPSHOT.SCAN`)
/// from cursor "0" until it returns "0"; returns every element of every page.
pub fn full_scan(con: &mut Connection, cmd: &str, extra: &[&str]) -> Vec<Vec<u8>> {
    scan_loop(con, cmd, None::<&str>, extra)
}

/// Like [`full_scan`] for key-scoped scans (`cmd key <cursor> extra...`, e.g. `HSCAN`):
/// returns the flat reply elements (field, value, field, value... unless NOVALUES).
pub fn full_hscan<K: ToRedisArgs>(
    con: &mut Connection,
    cmd: &str,
    key: K,
    extra: &[&str],
) -> Vec<Vec<u8>> {
    scan_loop(con, cmd, Some(key), extra)
}

fn scan_loop<K: ToRedisArgs>(
    con: &mut Connection,
    cmd: &str,
    key: Option<K>,
    extra: &[&str],
) -> Vec<Vec<u8>> {
    const MAX_CALLS: usize = 10_000_000;
    let (mut cursor, mut out) = ("0".to_string(), Vec::new());
    for _ in 0..MAX_CALLS {
        let mut c = redis::cmd(cmd);
        if let Some(k) = &key {
            c.arg(k);
        }
        let (next, page): (String, Vec<Vec<u8>>) = c
            .arg(&cursor)
            .arg(extra)
            .query(con)
            .unwrap_or_else(|e| panic!("{cmd} {cursor} {extra:?}: {e}"));
        out.extend(page);
        if next == "0" {
            return out;
        }
        cursor = next;
    }
    panic!("{cmd} did not finish within {MAX_CALLS} calls");
}

/// Sorted copy, for order-insensitive comparisons of scan results.
pub fn sorted<T: Ord + Clone>(v: &[T]) -> Vec<T> {
    let mut v = v.to_vec();
    v.sort();
    v
}

/// The server's error line (`CODE detail`) behind a failed reply.
pub fn err_text(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => format!("(not a server error) {e}"),
    }
}

/// Runs `args` and returns the error line; panics if the command succeeded.
pub fn expect_err(con: &mut Connection, args: &[&str]) -> String {
    match query::<Value>(con, args) {
        Ok(v) => panic!("{args:?} succeeded with {v:?}, expected an error"),
        Err(e) => err_text(&e),
    }
}

/// Printable form of a binary key or field.
pub fn show(k: &[u8]) -> String {
    k.iter()
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect()
}

/// SplitMix64: a small, seeded, deterministic generator for test data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
}

/// Opens `rounds` SNAPSHOT.SCAN iterations (`COUNT 1`, left open), each
/// pinning its own version: before each, `per_round` `PEXPIRE`s on random
/// keys `key:0..keys` (as `DEBUG POPULATE` names them) change the expiry of
/// keys all over the keyspace, so the live tree copies most leaves away
/// from the previous version. Returns the cursors, oldest first.
pub fn pin_versions(
    con: &mut Connection,
    keys: u64,
    rounds: usize,
    per_round: usize,
    seed: u64,
) -> Vec<String> {
    let mut rng = Rng(seed);
    let mut cursors = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let mut p = redis::pipe();
        for _ in 0..per_round {
            p.cmd("PEXPIRE")
                .arg(format!("key:{}", rng.below(keys)))
                .arg(1_000_000_000)
                .ignore();
        }
        let _: () = p.query(con).unwrap();
        // Near the limit a new iteration is refused (TRYAGAIN): the open
        // ones go on.
        match query::<(String, Vec<String>)>(con, &["SNAPSHOT.SCAN", "0", "COUNT", "1"]) {
            Ok((c, _)) => cursors.push(c),
            Err(e) if err_text(&e).starts_with("TRYAGAIN snapscan: old versions hold") => {}
            Err(e) => panic!("SNAPSHOT.SCAN 0: {}", err_text(&e)),
        }
    }
    cursors
}

/// The error of an iteration ended to bound the memory old versions hold,
/// naming the `setting` that decided (`snapshot.max-retained-bytes`,
/// `snapshot.max-retained-percent`, or its floor: [`PERCENT_FLOOR`]).
pub fn ended_for_memory(cursor: &str, setting: &str) -> String {
    format!("ERR cursor {cursor}: snapscan: iteration ended to bound snapshot memory ({setting}); restart the scan from cursor 0")
}

/// Glob with `*` and `?` only, on bytes: the expected side of the patterns
/// tests use (the module's own matcher is what they check).
pub fn glob(p: &[u8], s: &[u8]) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => glob(&p[1..], s) || (!s.is_empty() && glob(p, &s[1..])),
        (Some(b'?'), Some(_)) => glob(&p[1..], &s[1..]),
        (Some(a), Some(b)) if a == b => glob(&p[1..], &s[1..]),
        _ => false,
    }
}
