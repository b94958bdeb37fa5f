//! The comparisons: what the module answers against the truth the server
//! gives about itself, taken in a Lua script (native SCAN, TYPE,
//! PEXPIRETIME, HGETALL...: the command filter of `snapshot.serve-native`
//! leaves scripts alone). A check returns `Err(what differs)`.
//!
//! Point in time: a snapshot's cursor 0 runs in the same MULTI/EXEC as the
//! truth; the rest of the iteration runs with writes between its pages.
//! Keys (and hash fields) whose expiry falls within [`MARGIN_MS`] of the
//! truth's clock may be on either side: the module's clock is read a
//! moment after the script's.

use crate::common::*;
use crate::step::{quote, Check, Cmd};
use crate::target::{command, raw};
use redis::{Connection, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

pub const MARGIN_MS: i64 = 100;

/// The key of writes drawn for the collection a check picks when it runs.
pub const PLACEHOLDER: &[u8] = b"{coll}";

/// The truth script: the server clock (ms), then key, type, PEXPIRETIME
/// for every key native SCAN finds, except one that its `TYPE` lookup
/// finds gone (Redis 7.0's SCAN can list a key that the lookup right after
/// expires: it was listed as type `none`, expiry -2, and expected).
const TRUTH: &str = "#!lua flags=no-writes,allow-cross-slot-keys\n\
    local t = redis.call('TIME') \
    local out = {tostring(t[1] * 1000 + math.floor(t[2] / 1000))} \
    local c = '0' \
    repeat \
      local r = redis.call('SCAN', c, 'COUNT', 1000) \
      c = r[1] \
      for _, k in ipairs(r[2]) do \
        local ty = redis.call('TYPE', k)['ok'] \
        if ty ~= 'none' then \
          out[#out + 1] = k \
          out[#out + 1] = ty \
          out[#out + 1] = tostring(redis.call('PEXPIRETIME', k)) \
        end \
      end \
    until c == '0' \
    return out";

/// A collection's truth: the clock, then element, value (field value,
/// score; "" for set members), expiry (hash fields where the server has
/// field expiry; else -1).
const COLLECTION: &str = "#!lua flags=no-writes,allow-cross-slot-keys\n\
    local t = redis.call('TIME') \
    local out = {tostring(t[1] * 1000 + math.floor(t[2] / 1000))} \
    local ty = redis.call('TYPE', KEYS[1])['ok'] \
    if ty == 'hash' then \
      local h = redis.call('HGETALL', KEYS[1]) \
      for i = 1, #h, 2 do \
        local e = -1 \
        if ARGV[1] == '1' then e = redis.call('HPEXPIRETIME', KEYS[1], 'FIELDS', 1, h[i])[1] end \
        out[#out + 1] = h[i] out[#out + 1] = h[i + 1] out[#out + 1] = tostring(e) \
      end \
    elseif ty == 'set' then \
      for _, m in ipairs(redis.call('SMEMBERS', KEYS[1])) do \
        out[#out + 1] = m out[#out + 1] = '' out[#out + 1] = '-1' \
      end \
    elseif ty == 'zset' then \
      local z = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES') \
      for i = 1, #z, 2 do out[#out + 1] = z[i] out[#out + 1] = z[i + 1] out[#out + 1] = '-1' end \
    end \
    return out";

/// A script that spins past busy-reply-threshold (15 ms), then returns its
/// clock at the start, a full SNAPSHOT.SCAN iteration, a marker, and a
/// full native SCAN iteration (key, PEXPIRETIME), both at its frozen clock.
const SPIN_SCAN: &str = "#!lua flags=no-writes,allow-cross-slot-keys\n\
    local t = redis.call('TIME') local start = t[1] * 1000000 + t[2] \
    local out = {tostring(math.floor(start / 1000))} \
    while true do local n = redis.call('TIME') if n[1] * 1000000 + n[2] - start > 15000 then break end end \
    local c = '0' \
    repeat local r = redis.call('SNAPSHOT.SCAN', c, 'COUNT', ARGV[1]) c = r[1] \
      for _, k in ipairs(r[2]) do out[#out + 1] = k end until c == '0' \
    out[#out + 1] = '--native--' \
    c = '0' \
    repeat local r = redis.call('SCAN', c, 'COUNT', 1000) c = r[1] \
      for _, k in ipairs(r[2]) do out[#out + 1] = k \
        out[#out + 1] = tostring(redis.call('PEXPIRETIME', k)) end until c == '0' \
    return out";

/// A key's truth.
#[derive(Clone, Debug)]
pub struct KeyTruth {
    pub ty: String,
    /// PEXPIRETIME (-1: none).
    pub expire: i64,
}

pub struct Truth {
    pub now_ms: i64,
    pub keys: BTreeMap<Vec<u8>, KeyTruth>,
}

fn bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) => s.as_bytes().to_vec(),
        Value::Int(i) => i.to_string().into_bytes(),
        other => format!("{other:?}").into_bytes(),
    }
}

fn text(v: &Value) -> String {
    String::from_utf8_lossy(&bytes(v)).into_owned()
}

fn array(v: Value) -> Result<Vec<Value>, String> {
    match v {
        Value::Array(a) => Ok(a),
        Value::Set(a) => Ok(a),
        other => Err(format!("not an array: {other:?}")),
    }
}

pub fn parse_truth(v: Value) -> Result<Truth, String> {
    let a = array(v)?;
    let now_ms = text(&a[0]).parse().map_err(|_| "truth clock")?;
    let mut keys = BTreeMap::new();
    for t in a[1..].chunks(3) {
        keys.insert(
            bytes(&t[0]),
            KeyTruth {
                ty: text(&t[1]),
                expire: text(&t[2]).parse().unwrap_or(-1),
            },
        );
    }
    Ok(Truth { now_ms, keys })
}

fn truth_cmd() -> redis::Cmd {
    let mut c = redis::cmd("EVAL");
    c.arg(TRUTH).arg(0);
    c
}

pub fn truth(con: &mut Connection) -> Result<Truth, String> {
    parse_truth(truth_cmd().query(con).map_err(|e| e.to_string())?)
}

/// How long a check retries a call answered TRYAGAIN (README: a call
/// that cannot block, in MULTI or a script, when the index has more
/// recorded changes to apply than the main thread may apply for it).
const TRYAGAIN_FOR: Duration = Duration::from_secs(10);

/// `f` again while it answers TRYAGAIN, for at most [`TRYAGAIN_FOR`].
fn retry_busy_index<T>(mut f: impl FnMut() -> redis::RedisResult<T>) -> redis::RedisResult<T> {
    let deadline = Instant::now() + TRYAGAIN_FOR;
    loop {
        match f() {
            Err(e) if e.kind() == redis::ErrorKind::TryAgain && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2));
            }
            r => return r,
        }
    }
}

/// `truth` and `then` in one MULTI/EXEC (the same instant), retried while
/// `then` answers TRYAGAIN.
fn truth_then(
    con: &mut Connection,
    truth: redis::Cmd,
    then: redis::Cmd,
) -> redis::RedisResult<(Value, Value)> {
    retry_busy_index(|| {
        redis::pipe()
            .atomic()
            .add_command(truth.clone())
            .add_command(then.clone())
            .query(con)
    })
}

/// A page of a SCAN-like reply: the next cursor and its elements.
fn page(v: Value) -> Result<(String, Vec<Vec<u8>>), String> {
    let a = array(v)?;
    if a.len() != 2 {
        return Err(format!("not a SCAN page: {a:?}"));
    }
    let cursor = text(&a[0]);
    let items = array(a[1].clone())?.iter().map(bytes).collect();
    Ok((cursor, items))
}

fn show(k: &[u8]) -> String {
    quote(k)
}

fn show_set<'a>(it: impl Iterator<Item = &'a Vec<u8>>) -> String {
    let v: Vec<String> = it.take(20).map(|k| show(k)).collect();
    v.join(" ")
}

/// What the snapshot must hold: `(sure, maybe)`: keys that must be
/// returned, and keys that may be (expiring within the margin).
fn expected(
    t: &Truth,
    pattern: Option<&[u8]>,
    ty: Option<&str>,
) -> (BTreeSet<Vec<u8>>, BTreeSet<Vec<u8>>) {
    let (mut sure, mut maybe) = (BTreeSet::new(), BTreeSet::new());
    for (k, kt) in &t.keys {
        if pattern.is_some_and(|p| !glob(p, k)) || ty.is_some_and(|ty| kt.ty != ty) {
            continue;
        }
        if kt.expire >= 0 && kt.expire <= t.now_ms + MARGIN_MS {
            maybe.insert(k.clone());
        } else {
            sure.insert(k.clone());
        }
    }
    (sure, maybe)
}

/// Compares `got` (in reply order) with `(sure, maybe)`: byte order, each
/// once, nothing missing, nothing extra.
fn compare_keys(
    got: &[Vec<u8>],
    sure: &BTreeSet<Vec<u8>>,
    maybe: &BTreeSet<Vec<u8>>,
    ordered: bool,
) -> Result<(), String> {
    if ordered {
        if let Some(w) = got.windows(2).find(|w| w[0] >= w[1]) {
            return Err(format!(
                "not in byte order or repeated: {} then {}",
                show(&w[0]),
                show(&w[1])
            ));
        }
    }
    let set: BTreeSet<Vec<u8>> = got.iter().cloned().collect();
    let missing: Vec<&Vec<u8>> = sure.difference(&set).collect();
    let extra: Vec<&Vec<u8>> = set
        .iter()
        .filter(|k| !sure.contains(*k) && !maybe.contains(*k))
        .collect();
    if missing.is_empty() && extra.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} missing [{}], {} extra [{}] ({} expected, {} returned)",
        missing.len(),
        show_set(missing.into_iter()),
        extra.len(),
        show_set(extra.into_iter()),
        sure.len(),
        set.len()
    ))
}

/// Writes between pages: `between[i]`, after page `i`, through `write`.
fn between_pages(between: &[Vec<Cmd>], i: usize, write: &mut dyn FnMut(&Cmd)) {
    if let Some(ws) = between.get(i) {
        for w in ws {
            write(w);
        }
    }
}

fn select(con: &mut Connection, db: u64) -> Result<(), String> {
    raw(con, &[b"SELECT".to_vec(), db.to_string().into_bytes()]).map(|_| ())
}

/// A full SNAPSHOT.SCAN iteration of `db` against the truth.
pub fn scan(con: &mut Connection, c: &Check, write: &mut dyn FnMut(&Cmd)) -> Result<(), String> {
    let Check::Scan {
        db,
        count,
        pattern,
        ty,
        between,
    } = c
    else {
        unreachable!()
    };
    select(con, *db)?;
    let mut first = redis::cmd("SNAPSHOT.SCAN");
    first.arg(0).arg("COUNT").arg(*count);
    if let Some(p) = pattern {
        first.arg("MATCH").arg(p.as_slice());
    }
    if let Some(t) = ty {
        first.arg("TYPE").arg(*t);
    }
    let expired_before = expired_keys(con)?;
    let (tv, pv) =
        truth_then(con, truth_cmd(), first).map_err(|e| format!("truth + cursor 0: {e}"))?;
    // Keys the server expired meanwhile: where the transaction's clock (the
    // snapshot's instant) is earlier than the script's (Redis 7.0), a key
    // expiring in between is in the snapshot and absent from the truth,
    // which cannot list it: at most this many such extras are accepted.
    let expired_during = expired_keys(con)?.saturating_sub(expired_before);
    let truth = parse_truth(tv)?;
    let (mut cursor, mut got) = page(pv)?;
    let mut i = 0;
    while cursor != "0" {
        between_pages(between, i, write);
        i += 1;
        let mut next = redis::cmd("SNAPSHOT.SCAN");
        next.arg(cursor.as_str()).arg("COUNT").arg(*count);
        if let Some(p) = pattern {
            next.arg("MATCH").arg(p.as_slice());
        }
        if let Some(t) = ty {
            next.arg("TYPE").arg(*t);
        }
        let (c2, keys) = page(next.query(con).map_err(|e| format!("page {i}: {e}"))?)?;
        got.extend(keys);
        cursor = c2;
        if i > 100_000 {
            return Err("the iteration does not end".into());
        }
    }
    let (sure, maybe) = expected(&truth, pattern.as_deref(), *ty);
    compare_keys(&got, &sure, &maybe, true).or_else(|e| {
        let set: BTreeSet<Vec<u8>> = got.iter().cloned().collect();
        let extra = set
            .iter()
            .filter(|k| !sure.contains(*k) && !maybe.contains(*k))
            .count() as u64;
        let missing = sure.difference(&set).count();
        if missing == 0
            && extra <= expired_during
            && !truth
                .keys
                .keys()
                .any(|k| set.contains(k) && !sure.contains(k) && !maybe.contains(k))
        {
            Ok(())
        } else {
            let missing: Vec<String> = sure
                .difference(&set)
                .take(5)
                .filter_map(|k| truth.keys.get(k).map(|t| (k, t)))
                .map(|(k, t)| format!("{} {} expire {}", show(k), t.ty, t.expire))
                .collect();
            Err(format!(
                "{e}; {expired_during} keys expired meanwhile; truth at {}: {}",
                truth.now_ms,
                missing.join(", ")
            ))
        }
    })
}

/// `expired_keys` of `INFO stats`.
fn expired_keys(con: &mut Connection) -> Result<u64, String> {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query(con)
        .map_err(|e| e.to_string())?;
    info_field(&info, "expired_keys")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| "no expired_keys in INFO stats".to_string())
}

/// The collections the truth lists (hash, set, zset), in key order.
pub fn collections(t: &Truth) -> Vec<(Vec<u8>, String)> {
    t.keys
        .iter()
        .filter(|(_, kt)| matches!(kt.ty.as_str(), "hash" | "set" | "zset"))
        .map(|(k, kt)| (k.clone(), kt.ty.clone()))
        .collect()
}

/// A collection's elements: element -> (value, expiry).
type Elements = BTreeMap<Vec<u8>, (Vec<u8>, i64)>;

fn collection_truth_cmd(key: &[u8], field_expiry: bool) -> redis::Cmd {
    let mut c = redis::cmd("EVAL");
    c.arg(COLLECTION)
        .arg(1)
        .arg(key)
        .arg(if field_expiry { "1" } else { "0" });
    c
}

fn parse_elements(v: Value) -> Result<(i64, Elements), String> {
    let a = array(v)?;
    let now = text(&a[0]).parse().map_err(|_| "collection clock")?;
    let mut m = BTreeMap::new();
    for t in a[1..].chunks(3) {
        m.insert(
            bytes(&t[0]),
            (bytes(&t[1]), text(&t[2]).parse().unwrap_or(-1)),
        );
    }
    Ok((now, m))
}

fn same_value(ty: &str, a: &[u8], b: &[u8]) -> bool {
    if ty == "zset" {
        let (x, y) = (String::from_utf8_lossy(a), String::from_utf8_lossy(b));
        return x.parse::<f64>().ok() == y.parse::<f64>().ok();
    }
    a == b
}

/// A full SNAPSHOT.[HSZ]SCAN iteration of a collection against its truth,
/// writes to it between pages. `Ok(false)`: no collection to check.
pub fn collection(
    con: &mut Connection,
    c: &Check,
    field_expiry: bool,
    write: &mut dyn FnMut(&Cmd),
) -> Result<bool, String> {
    let Check::Collection {
        db,
        pick,
        count,
        between,
    } = c
    else {
        unreachable!()
    };
    select(con, *db)?;
    let t = truth(con)?;
    let all = collections(&t);
    if all.is_empty() {
        return Ok(false);
    }
    let (key, ty) = &all[(*pick as usize) % all.len()];
    let cmd = match ty.as_str() {
        "hash" => "SNAPSHOT.HSCAN",
        "set" => "SNAPSHOT.SSCAN",
        _ => "SNAPSHOT.ZSCAN",
    };
    let mut first = redis::cmd(cmd);
    first.arg(key.as_slice()).arg(0).arg("COUNT").arg(*count);
    let (tv, pv) = truth_then(con, collection_truth_cmd(key, field_expiry), first)
        .map_err(|e| format!("{cmd} {}: truth + cursor 0: {e}", show(key)))?;
    let (now, elements) = parse_elements(tv)?;
    if elements.is_empty() {
        return Ok(false); // deleted since the truth listed it
    }
    let (mut cursor, mut got) = page(pv)?;
    let mut i = 0;
    while cursor != "0" {
        // Writes drawn for "the collection" go to this one.
        for w in between.get(i).into_iter().flatten() {
            let w = if w.key == PLACEHOLDER {
                w.rekey(key)
            } else {
                w.clone()
            };
            write(&w);
        }
        i += 1;
        let mut next = redis::cmd(cmd);
        next.arg(key.as_slice())
            .arg(cursor.as_str())
            .arg("COUNT")
            .arg(*count);
        let reply = match next.query(con) {
            // The collection's slot moved (a migration's last step reaching
            // this node late): as natively, the keyed command is redirected;
            // nothing to compare.
            Err(e) if matches!(e.kind(), redis::ErrorKind::Moved | redis::ErrorKind::Ask) => {
                return Ok(false);
            }
            r => r.map_err(|e| format!("{cmd} page {i}: {e}"))?,
        };
        let (c2, items) = page(reply)?;
        got.extend(items);
        cursor = c2;
        if i > 100_000 {
            return Err(format!("{cmd}: the iteration does not end"));
        }
    }
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = if ty == "set" {
        got.into_iter().map(|m| (m, vec![])).collect()
    } else {
        got.chunks(2)
            .map(|p| (p[0].clone(), p.get(1).cloned().unwrap_or_default()))
            .collect()
    };
    let mut seen = BTreeSet::new();
    let mut problems = vec![];
    for (e, v) in &pairs {
        if !seen.insert(e.clone()) {
            problems.push(format!("{} twice", show(e)));
            continue;
        }
        match elements.get(e) {
            None => problems.push(format!("extra {}", show(e))),
            Some((want, exp)) => {
                let expiring = *exp >= 0 && *exp <= now + MARGIN_MS;
                if !same_value(ty, want, v) && !expiring {
                    problems.push(format!(
                        "{}: {} instead of {}",
                        show(e),
                        show(v),
                        show(want)
                    ));
                }
            }
        }
    }
    for (e, (_, exp)) in &elements {
        let maybe = *exp >= 0 && *exp <= now + MARGIN_MS;
        if !seen.contains(e) && !maybe {
            problems.push(format!("missing {}", show(e)));
        }
    }
    if problems.is_empty() {
        return Ok(true);
    }
    problems.truncate(20);
    Err(format!(
        "{cmd} {} ({} elements): {}",
        show(key),
        elements.len(),
        problems.join(", ")
    ))
}

/// `snapshot_index_keys_db<N>` against DBSIZE in every database of `dbs`,
/// polled (bounded): the index is updated by a background thread.
pub fn count(con: &mut Connection, dbs: u64) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut diff = vec![];
        for db in 0..dbs {
            select(con, db)?;
            let before: u64 = redis::cmd("DBSIZE").query(con).map_err(|e| e.to_string())?;
            let index = index_keys_db(con, db as u32);
            let after: u64 = redis::cmd("DBSIZE").query(con).map_err(|e| e.to_string())?;
            if before != after || index != after {
                diff.push(format!("db{db}: index {index}, DBSIZE {before}/{after}"));
            }
        }
        if diff.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            // Which keys: a full iteration against the truth, per database.
            for db in 0..dbs {
                let c = Check::Scan {
                    db,
                    count: 1000,
                    pattern: None,
                    ty: None,
                    between: vec![],
                };
                if let Err(e) = scan(con, &c, &mut |_| {}) {
                    diff.push(format!("db{db}: {e}"));
                }
                select(con, db)?;
                let missing: Result<Vec<Vec<u8>>, _> = redis::cmd("SNAPSHOT.TESTHOOK")
                    .arg("MISSING")
                    .arg(0)
                    .query(con);
                match missing {
                    Ok(keys) if keys.is_empty() => {}
                    Ok(keys) => {
                        let names: Vec<String> = keys.iter().map(|k| show(k)).collect();
                        let now = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| d.as_millis());
                        let role: String = redis::cmd("ROLE")
                            .query::<Vec<Value>>(con)
                            .ok()
                            .and_then(|r| r.first().cloned())
                            .and_then(|v| redis::from_redis_value::<String>(&v).ok())
                            .unwrap_or_default();
                        diff.push(format!(
                            "db{db}: not in the index ({role}, now {now}): {}",
                            names.join(" ")
                        ));
                    }
                    Err(e) => diff.push(format!("db{db}: SNAPSHOT.TESTHOOK MISSING: {e}")),
                }
            }
            return Err(diff.join("; "));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Each node's role and `INFO keyspace` (keys, keys with an expiry), for
/// a failed count check.
pub fn keyspaces(nodes: &[&crate::common::Server]) -> String {
    let mut out = vec![];
    for (i, s) in nodes.iter().enumerate() {
        let mut con = s.client();
        let role: String = redis::cmd("ROLE")
            .query::<Vec<Value>>(&mut con)
            .ok()
            .and_then(|r| r.first().cloned())
            .and_then(|v| redis::from_redis_value::<String>(&v).ok())
            .unwrap_or_default();
        let info: String = redis::cmd("INFO")
            .arg("keyspace")
            .query(&mut con)
            .unwrap_or_default();
        let dbs: Vec<&str> = info.lines().filter(|l| l.starts_with("db")).collect();
        out.push(format!("node {i} {role} [{}]", dbs.join(" ")));
    }
    out.join(", ")
}

/// `CONFIG SET snapshot.serve-native <mode>` (a refusal shows in the check
/// that follows).
fn set_serve_native(con: &mut Connection, mode: &str) {
    let _ = redis::cmd("CONFIG")
        .arg("SET")
        .arg("snapshot.serve-native")
        .arg(mode)
        .query::<Value>(con);
}

/// The served native commands against truths taken before and after (no
/// writes meanwhile): every key in both is returned, none in neither; an
/// iteration served throughout returns each key once. `flip`: the mode is
/// turned off after the first page and back on at the end.
pub fn served(con: &mut Connection, c: &Check, field_expiry: bool) -> Result<(), String> {
    let Check::Served { db, count, flip } = c else {
        unreachable!()
    };
    select(con, *db)?;
    set_serve_native(con, "all");
    let before = truth(con)?;
    // SCAN
    let mut got = vec![];
    let mut cursor = "0".to_string();
    let mut served_all = true;
    let mut pages = 0;
    loop {
        let reply = command(&[
            b"SCAN".to_vec(),
            cursor.clone().into_bytes(),
            b"COUNT".to_vec(),
            count.to_string().into_bytes(),
        ])
        .query(con)
        .map_err(|e| format!("SCAN: {e}"))?;
        let (c2, keys) = page(reply)?;
        got.extend(keys);
        pages += 1;
        if c2 != "0" && c2.parse::<u64>().map_or(true, |n| n >> 52 != 1) {
            served_all = false;
        }
        if *flip && pages == 1 {
            set_serve_native(con, "none");
        }
        cursor = c2;
        if cursor == "0" || pages > 1_000_000 {
            break;
        }
    }
    if *flip {
        set_serve_native(con, "all");
    }
    let keys_reply = command(&[b"KEYS".to_vec(), b"*".to_vec()])
        .query(con)
        .map_err(|e| format!("KEYS: {e}"))?;
    let keys: Vec<Vec<u8>> = array(keys_reply)?.iter().map(bytes).collect();
    let after = truth(con)?;
    let stable: BTreeSet<Vec<u8>> = before
        .keys
        .iter()
        .filter(|(k, kt)| {
            after.keys.contains_key(*k) && (kt.expire < 0 || kt.expire > after.now_ms + MARGIN_MS)
        })
        .map(|(k, _)| k.clone())
        .collect();
    let any: BTreeSet<Vec<u8>> = before
        .keys
        .keys()
        .chain(after.keys.keys())
        .cloned()
        .collect();
    for (what, list, once) in [
        ("served SCAN", &got, served_all && !*flip),
        ("served KEYS", &keys, true),
    ] {
        let set: BTreeSet<Vec<u8>> = list.iter().cloned().collect();
        if once && set.len() != list.len() {
            return Err(format!(
                "{what}: {} keys returned twice",
                list.len() - set.len()
            ));
        }
        let missing: Vec<&Vec<u8>> = stable.difference(&set).collect();
        let extra: Vec<&Vec<u8>> = set.difference(&any).collect();
        if !missing.is_empty() || !extra.is_empty() {
            return Err(format!(
                "{what}: {} missing [{}], {} extra [{}]",
                missing.len(),
                show_set(missing.into_iter()),
                extra.len(),
                show_set(extra.into_iter())
            ));
        }
    }
    // HSCAN/SSCAN/ZSCAN of every collection.
    for (key, ty) in collections(&before) {
        let cmd = match ty.as_str() {
            "hash" => "HSCAN",
            "set" => "SSCAN",
            _ => "ZSCAN",
        };
        let (_, want) = parse_elements(
            collection_truth_cmd(&key, field_expiry)
                .query(con)
                .map_err(|e| e.to_string())?,
        )?;
        let mut cursor = "0".to_string();
        let mut got = BTreeSet::new();
        for _ in 0..100_000 {
            let mut c = redis::cmd(cmd);
            c.arg(key.as_slice())
                .arg(cursor.as_str())
                .arg("COUNT")
                .arg(*count);
            let (c2, items) = page(c.query(con).map_err(|e| format!("{cmd}: {e}"))?)?;
            let step = if ty == "set" { 1 } else { 2 };
            for e in items.iter().step_by(step) {
                got.insert(e.clone());
            }
            cursor = c2;
            if cursor == "0" {
                break;
            }
        }
        let (_, again) = parse_elements(
            collection_truth_cmd(&key, field_expiry)
                .query(con)
                .map_err(|e| e.to_string())?,
        )?;
        let stable: Vec<&Vec<u8>> = want
            .iter()
            .filter(|(e, (_, exp))| again.contains_key(*e) && *exp < 0)
            .map(|(e, _)| e)
            .filter(|e| !got.contains(*e))
            .collect();
        let extra: Vec<&Vec<u8>> = got
            .iter()
            .filter(|e| !want.contains_key(*e) && !again.contains_key(*e))
            .collect();
        if !stable.is_empty() || !extra.is_empty() {
            return Err(format!(
                "served {cmd} {}: {} missing [{}], {} extra [{}]",
                show(&key),
                stable.len(),
                show_set(stable.into_iter()),
                extra.len(),
                show_set(extra.into_iter())
            ));
        }
    }
    Ok(())
}

/// SNAPSHOT.SCAN inside a script spinning past busy-reply-threshold,
/// against native SCAN in the same script (the same frozen clock).
/// `wall_clock`: the server judges expiry in scripts by the wall clock
/// (Redis 7.0, README *Known limitations*): a key expiring within the
/// script's run may be left out.
pub fn script_scan(con: &mut Connection, c: &Check, wall_clock: bool) -> Result<(), String> {
    let Check::ScriptScan { db, count } = c else {
        unreachable!()
    };
    select(con, *db)?;
    let mut spin = redis::cmd("EVAL");
    spin.arg(SPIN_SCAN).arg(0).arg(*count);
    let v: Value =
        retry_busy_index(|| spin.query(con)).map_err(|e| format!("spinning script: {e}"))?;
    let all: Vec<Vec<u8>> = array(v)?.iter().map(bytes).collect();
    let start: i64 = String::from_utf8_lossy(&all[0])
        .parse()
        .map_err(|_| "script clock")?;
    let split = all
        .iter()
        .position(|k| k == b"--native--")
        .ok_or("no marker")?;
    let snap = &all[1..split];
    let (mut sure, mut maybe) = (BTreeSet::new(), BTreeSet::new());
    for kv in all[split + 1..].chunks(2) {
        let exp: i64 = String::from_utf8_lossy(&kv[1]).parse().unwrap_or(-1);
        if wall_clock && exp >= 0 && exp <= start + 2000 {
            maybe.insert(kv[0].clone());
        } else {
            sure.insert(kv[0].clone());
        }
    }
    compare_keys(snap, &sure, &maybe, true)
        .map_err(|e| format!("in a script past busy-reply-threshold: {e}"))
}
