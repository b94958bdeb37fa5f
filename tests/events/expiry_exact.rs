//! Exact expiries: after every command form that sets, keeps or removes a
//! key's TTL, the index holds the key's absolute expiry in milliseconds
//! exactly as the server does (`PEXPIRETIME`, read back through the
//! test-only `SNAPSHOT.TESTHOOK META`), over a new key, a plain string, a
//! string with a TTL and a hash with a TTL; run plainly, in MULTI, in a Lua
//! script, and on a replica applying the primary's stream.

use super::*;

#[derive(Debug, Clone, Copy)]
enum Via {
    Plain,
    Multi,
    Lua,
    /// Run plainly on the primary; the replica's index is checked.
    Replica,
}

/// `{k}` is the key, `{s}` / `{ms}` an absolute time 1,000 s ahead.
const FORMS: &[&str] = &[
    "SET {k} v EX 1000",
    "SET {k} v PX 1000000",
    "SET {k} v EXAT {s}",
    "SET {k} v PXAT {ms}",
    "SET {k} v",
    "SET {k} v KEEPTTL",
    "SET {k} v GET EX 1000",
    "SET {k} v NX EX 1000",
    "SET {k} v XX PX 1000000",
    "SETEX {k} 1000 v",
    "PSETEX {k} 1000000 v",
    "GETEX {k} EX 1000",
    "GETEX {k} PXAT {ms}",
    "GETEX {k} PERSIST",
    "EXPIRE {k} 1000",
    "PEXPIRE {k} 1000000",
    "EXPIREAT {k} {s}",
    "PEXPIREAT {k} {ms}",
    "EXPIRE {k} 100000 GT",
    "PEXPIRE {k} 2000000 LT",
    "EXPIRE {k} 1000 NX",
    "PERSIST {k}",
    "MSET {k} v",
];

/// Starting states: a name and how to set the key up (`;`-separated).
const STARTS: &[(&str, &str)] = &[
    ("new", ""),
    ("plain", "SET {k} old"),
    ("ttl", "SET {k} old PX 50000000"),
    ("hash", "HSET {k} f v; PEXPIRE {k} 50000000"),
];

fn words(form: &str, key: &str, s: i64, ms: i64) -> Vec<String> {
    form.split_whitespace()
        .map(|w| match w {
            "{k}" => key.to_string(),
            "{s}" => s.to_string(),
            "{ms}" => ms.to_string(),
            w => w.to_string(),
        })
        .collect()
}

/// Runs `args`; an error reply (WRONGTYPE on a hash...) is part of the case.
fn run(con: &mut Connection, args: &[String]) {
    let mut c = redis::cmd(&args[0]);
    for a in &args[1..] {
        c.arg(a);
    }
    let _: redis::RedisResult<Value> = c.query(con);
}

/// What the index holds for `key` (selected db): its expiry, -1 for none,
/// -2 when it does not hold the key.
fn index_expiry(con: &mut Connection, key: &str) -> i64 {
    let v: Value = query(con, &["SNAPSHOT.TESTHOOK", "META", key]).expect("TESTHOOK META");
    match v {
        Value::Int(n) => n,
        Value::Array(a) => match a.get(1) {
            Some(Value::Int(n)) => *n,
            other => panic!("TESTHOOK META {key}: {other:?}"),
        },
        other => panic!("TESTHOOK META {key}: {other:?}"),
    }
}

const LUA: &str = "for _, k in ipairs(KEYS) do local a = {} for i, x in ipairs(ARGV) do \
                   if x == '{k}' then a[i] = k else a[i] = x end end redis.pcall(unpack(a)) end \
                   return 1";

#[rstest]
fn index_expiry_equals_server(#[values(Via::Plain, Via::Multi, Via::Lua, Via::Replica)] via: Via) {
    std::env::set_var("SNAPSCAN_TEST_HOOKS", "1");
    let primary = Server::start();
    let mut con = primary.client();
    let replica = matches!(via, Via::Replica).then(|| start_replica(&primary));
    let now = server_ms(&mut con);
    let (s, ms) = (now / 1000 + 1000, now + 1_000_000);
    let key = |f: usize, st: &str| format!("f{f}:{st}");
    for f in 0..FORMS.len() {
        for (st, setup) in STARTS {
            for step in setup.split(';').filter(|x| !x.trim().is_empty()) {
                run(&mut con, &words(step, &key(f, st), s, ms));
            }
        }
    }
    for (f, form) in FORMS.iter().enumerate() {
        let keys: Vec<String> = STARTS.iter().map(|(st, _)| key(f, st)).collect();
        match via {
            Via::Plain | Via::Replica => {
                for k in &keys {
                    run(&mut con, &words(form, k, s, ms));
                }
            }
            Via::Multi => {
                let _: () = query(&mut con, &["MULTI"]).unwrap();
                for k in &keys {
                    run(&mut con, &words(form, k, s, ms));
                }
                // An error reply of one command (WRONGTYPE) surfaces as an
                // error here; only an aborted transaction is a failure.
                if let Err(e) = query::<Value>(&mut con, &["EXEC"]) {
                    assert!(e.code() != Some("EXECABORT"), "{form}: {e}");
                }
            }
            Via::Lua => {
                let mut c = redis::cmd("EVAL");
                c.arg(LUA).arg(keys.len()).arg(&keys);
                c.arg(words(form, "{k}", s, ms));
                let _: i64 = c.query(&mut con).unwrap();
            }
        }
    }
    let check = |con: &mut Connection, side: &str| {
        let mut wrong = Vec::new();
        for (f, form) in FORMS.iter().enumerate() {
            for (st, _) in STARTS {
                let k = key(f, st);
                let server: i64 = query(con, &["PEXPIRETIME", &k]).unwrap();
                let index = index_expiry(con, &k);
                if server != index {
                    wrong.push(format!("{form} over {st}: server {server}, index {index}"));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "{via:?}, {side}: the index's expiry differs from PEXPIRETIME:\n{}",
            wrong.join("\n")
        );
    };
    check(&mut con, "primary");
    assert_index_matches(&mut con, &[0]);
    if let Some((_replica, mut r)) = replica {
        let target = repl_offset(&mut con);
        wait_until("the replica to apply the stream", WAIT, || {
            info_section_u64(&mut r, "replication", "slave_repl_offset") >= target
        });
        check(&mut r, "replica");
        assert_index_matches(&mut r, &[0]);
    }
}
