//! MULTI / Lua / functions: the instant a copy is taken at inside them (the
//! iteration inside them, like the blocking path: tests/collections.rs).

use super::*;

/// In one script: a write, cursor 0, more writes; returns [cursor, page].
const WRITE_SCAN_WRITE: &str = "\
redis.call('HSET', KEYS[1], 'zz-before', '1')
local r = redis.call('SNAPSHOT.HSCAN', KEYS[1], '0', 'COUNT', '10')
redis.call('HSET', KEYS[1], 'zz-after', '1')
redis.call('HDEL', KEYS[1], 'f00000')
redis.call('HSET', KEYS[1], 'f00001', 'changed')
return r";

#[rstest]
#[case::multi(true)]
#[case::eval(false)]
fn the_instant_inside_a_transaction_or_script(#[case] multi: bool) {
    let server = Server::start();
    let mut con = server.client();
    fill_hash(&mut con, "h", 3_000, |i| format!("v{i}"));
    let mut want = hgetall(&mut con, "h");
    want.insert(b"zz-before".to_vec(), b"1".to_vec());
    let (c, p): (String, Vec<Bytes>) = if multi {
        let (_, r, _, _, _): (i64, (String, Vec<Bytes>), i64, i64, i64) = redis::pipe()
            .atomic()
            .cmd("HSET")
            .arg("h")
            .arg("zz-before")
            .arg("1")
            .cmd(CMD)
            .arg("h")
            .arg("0")
            .arg("COUNT")
            .arg(10)
            .cmd("HSET")
            .arg("h")
            .arg("zz-after")
            .arg("1")
            .cmd("HDEL")
            .arg("h")
            .arg("f00000")
            .cmd("HSET")
            .arg("h")
            .arg("f00001")
            .arg("changed")
            .query(&mut con)
            .expect("MULTI/EXEC");
        r
    } else {
        redis::cmd("EVAL")
            .arg(WRITE_SCAN_WRITE)
            .arg(1)
            .arg("h")
            .query(&mut con)
            .expect("EVAL")
    };
    let o = Opts::count(10);
    check_page(&p, &o);
    let mut pages = vec![p];
    pages.extend(finish_from(&mut con, "h", &c, &o, |_| {}));
    assert_same(&to_hash(&pages, false), &want, "the cursor-0 instant");
    let now = hgetall(&mut con, "h");
    assert!(now.contains_key(&b"zz-after"[..]) && !now.contains_key(&b"f00000"[..]));
}
