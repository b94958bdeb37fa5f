//! Expiry inside a script that runs past `busy-reply-threshold`: the server
//! judges expiry at the script's frozen start time while its cached clock
//! moves on. A SNAPSHOT.SCAN iteration opened inside such a script, with its
//! later pages continued outside it, returns exactly what a native `SCAN` in
//! the same script returns, including keys whose TTL passed by the wall clock
//! during the spin but not by the script's clock.
mod common;

use common::*;
use redis::Connection;
use std::collections::BTreeSet;
use std::time::Duration;

/// The spinning keys' TTL (shorter than the spin) and how long the script
/// spins.
const TTL_MS: &str = "400";
const SPIN_MS: &str = "1000";

/// Sets the spinning keys `KEYS` with a TTL of `ARGV[3]` ms (from the
/// script's frozen clock: alive by it whatever the machine's load), spins
/// for `ARGV[1]` ms by the wall clock (calling PING, past
/// busy-reply-threshold: the keys' TTL passes by the wall clock), then
/// returns the first page of `SNAPSHOT.SCAN 0 COUNT ARGV[2]` and a native
/// `SCAN 0 COUNT 100000`, both judged at the script's frozen clock.
const SPIN_THEN_SCAN: &str = "
for _, k in ipairs(KEYS) do redis.call('SET', k, 'v', 'PX', ARGV[3]) end
local function now() local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000) end
local t0 = now()
local n = 0
while now() - t0 < tonumber(ARGV[1]) and n < 50000000 do redis.call('PING') n = n + 1 end
local first = redis.call('SNAPSHOT.SCAN', '0', 'COUNT', ARGV[2])
local native = redis.call('SCAN', '0', 'COUNT', '100000')
return {first, native[2], now() - t0}
";

const SPINNING: [&str; 3] = ["k:000:spin", "k:020:spin", "k:039:spin"];

/// The server's clock, Unix ms.
fn server_ms(con: &mut Connection) -> u64 {
    let (s, us): (u64, u64) = query(con, &["TIME"]).unwrap();
    s * 1000 + us / 1000
}

/// Keys without a TTL around the ones that matter (so a small first page
/// meets none of them or only some).
fn populate(con: &mut Connection) {
    let _: () = query(con, &["FLUSHALL"]).unwrap();
    for i in 0..40 {
        let _: () = query(con, &["SET", &format!("k:{i:03}"), "v"]).unwrap();
    }
    // Expired before the script starts (by the server's clock, waited
    // for): in neither reply.
    let _: () = query(con, &["SET", "k:015:gone", "v", "PX", "1"]).unwrap();
    let set_at = server_ms(con);
    wait_until("k:015:gone's TTL passed", Duration::from_secs(5), || {
        server_ms(con) > set_at + 1
    });
    // Alive at every clock involved.
    let _: () = query(con, &["SET", "k:030:long", "v", "PX", "600000"]).unwrap();
    // Set before the script with a TTL shorter than the spin: alive or not
    // at the script's clock depending on how soon the script starts (the
    // expectations come from the script's own native SCAN).
    let _: () = query(con, &["SET", "k:010:early", "v", "PX", "300"]).unwrap();
}

fn set_of(v: Vec<String>) -> BTreeSet<String> {
    v.into_iter().collect()
}

#[test]
fn iteration_opened_in_a_busy_script_matches_native_scan_in_that_script() {
    let server = Server::start();
    let mut con = server.client();
    config_set(&mut con, "busy-reply-threshold", "50");
    let exact = server.is_valkey() || server.version() >= (7, 2, 0);
    for count in ["1", "3", "10", "25", "50"] {
        populate(&mut con);
        let mut eval = vec!["EVAL", SPIN_THEN_SCAN, "3"];
        eval.extend(SPINNING);
        eval.extend([SPIN_MS, count, TTL_MS]);
        let ((cursor, first), native, spun): ((String, Vec<String>), Vec<String>, i64) =
            query(&mut con, &eval).unwrap();
        assert!(spun >= 1000, "the script spun {spun} ms");
        let native = set_of(native);
        // The script's clock: the spinning keys were alive in it.
        for k in SPINNING.into_iter().chain(["k:030:long"]) {
            assert!(
                native.contains(k),
                "COUNT {count}: native SCAN in the script has {k}"
            );
        }
        assert!(!native.contains("k:015:gone"));
        // The rest of the iteration, continued outside the script.
        let mut seen = first.clone();
        let mut cursor = cursor;
        let mut pages = 0;
        while cursor != "0" {
            let (next, keys): (String, Vec<String>) =
                query(&mut con, &["SNAPSHOT.SCAN", &cursor, "COUNT", "7"]).unwrap();
            seen.extend(keys);
            cursor = next;
            pages += 1;
            assert!(pages < 100, "COUNT {count}: the iteration ends");
        }
        let n = seen.len();
        let seen = set_of(seen);
        assert_eq!(n, seen.len(), "COUNT {count}: each key once");
        if exact {
            assert_eq!(
                seen, native,
                "COUNT {count}: the iteration opened in the script is what the script's SCAN saw"
            );
        } else {
            // Redis 7.0: no side-effect-free key open and no way to read the
            // script's clock (README): keys the frozen clock decides are
            // judged by the wall clock; every other key is exact.
            let spin: BTreeSet<String> = native
                .iter()
                .filter(|k| k.ends_with(":spin") || *k == "k:010:early")
                .cloned()
                .collect();
            let rest: BTreeSet<String> = native.difference(&spin).cloned().collect();
            let early: BTreeSet<String> = ["k:010:early".to_string()].into();
            assert_eq!(
                seen.difference(&spin)
                    .cloned()
                    .collect::<BTreeSet<_>>()
                    .difference(&early)
                    .cloned()
                    .collect::<BTreeSet<_>>(),
                rest
            );
        }
        // After the script every spinning key is gone for everyone.
        let after = set_of(
            full_scan(&mut con, "SCAN", &["COUNT", "1000"])
                .into_iter()
                .map(|k| String::from_utf8(k).unwrap())
                .collect(),
        );
        assert!(after
            .iter()
            .all(|k| !k.ends_with(":spin") && k != "k:015:gone" && k != "k:010:early"));
    }
}
