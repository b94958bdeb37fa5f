//! KEYS served from snapshots (SNAPSHOT.KEYS, and KEYS under
//! `snapshot.serve-native`) and the server's limits, as the README's
//! "Serving the native commands" and INFO sections say: the client's
//! output-buffer hard limit holds as natively, a walk whose client
//! disconnected stops, and the walks in flight are bounded.
mod common;

use common::*;
use redis::Connection;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A bound on each wait below, not a pace.
const WAIT: Duration = Duration::from_secs(30);

fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend(format!("${}\r\n{a}\r\n", a.len()).into_bytes());
    }
    out
}

fn server_with(mode: &str) -> Server {
    Server::start_with(ServerOpts::new().module_args(&["serve-native", mode]))
}

fn populate(con: &mut Connection, n: usize) {
    let _: () = query(con, &["DEBUG", "POPULATE", &n.to_string()]).unwrap();
    wait_until("the index to hold every key", WAIT, || {
        info_u64(con, "snapshot_index_keys") == n as u64
    });
}

/// A server serving KEYS with one worker thread, and 300,000 keys (a walk
/// of them takes tens of milliseconds).
fn one_worker_with_300k_keys() -> (Server, Connection) {
    let s = server_with("keys");
    let mut c = s.client();
    populate(&mut c, 300_000);
    config_set(&mut c, "snapshot.workers", "1");
    wait_until("one worker", WAIT, || {
        info_u64(&mut c, "snapshot_workers") == 1
    });
    (s, c)
}

/// The server's count of clients closed for their output buffer, where it
/// has one (Redis 7.0+, Valkey).
fn obuf_disconnections(con: &mut Connection) -> Option<u64> {
    info_opt_u64(con, "stats", "client_output_buffer_limit_disconnections")
}

/// Sends `args` on a connection of its own and reads until the server
/// closes it or answers: `true` when it closed the connection.
fn closed_by_server(s: &Server, args: &[&str]) -> bool {
    let mut raw = TcpStream::connect(("127.0.0.1", s.port())).unwrap();
    raw.set_read_timeout(Some(CLIENT_TIMEOUT)).unwrap();
    raw.write_all(&resp(args)).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0usize;
    loop {
        match raw.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => total += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(e) => panic!("{args:?}: read after {total} bytes: {e}"),
        }
        assert!(total < 64 << 20, "{args:?}: more than 64 MiB came back");
    }
}

/// README: a KEYS reply past the client's output-buffer hard limit closes
/// the client, as natively, and the server stays up; a reply under it is
/// answered whole. SNAPSHOT.KEYS likewise.
#[test]
fn keys_past_the_output_buffer_limit_closes_the_client_as_natively() {
    let s = server_with("keys");
    let mut c = s.client();
    populate(&mut c, 1_000_000);
    config_set(&mut c, "client-output-buffer-limit", "normal 65536 0 0");
    // Natively, with the mode off.
    config_set(&mut c, "snapshot.serve-native", "none");
    let before = obuf_disconnections(&mut c);
    assert!(closed_by_server(&s, &["KEYS", "*"]), "native KEYS");
    config_set(&mut c, "snapshot.serve-native", "keys");
    let cut = info_u64(&mut c, "snapshot_keys_over_output_limit");
    assert!(closed_by_server(&s, &["KEYS", "*"]), "served KEYS");
    assert!(
        closed_by_server(&s, &["SNAPSHOT.KEYS", "*"]),
        "SNAPSHOT.KEYS"
    );
    assert_eq!(
        info_u64(&mut c, "snapshot_keys_over_output_limit"),
        cut + 2,
        "both walks stopped at the limit"
    );
    if let Some(b) = before {
        wait_until("3 clients closed for their output buffer", WAIT, || {
            obuf_disconnections(&mut c) == Some(b + 3)
        });
    }
    // Under the limit: the whole reply.
    let mut fresh = s.client();
    let got: Vec<String> = query(&mut fresh, &["KEYS", "key:1999*"]).unwrap();
    assert_eq!(got.len(), 111);
    assert_eq!(cmd_str(&mut c, &["PING"]), "PONG");
    wait_until("no walk in flight", WAIT, || {
        info_u64(&mut c, "snapshot_keys_in_flight") == 0
    });
    // The reply (about 16 MB) is never built whole: the memory peak grows
    // by a slice's worth of keys and the output limit (5-7 MB measured on
    // every server), whatever the keyspace's size.
    let _: () = query(&mut c, &["CONFIG", "RESETSTAT"]).unwrap();
    let used = info_section_u64(&mut c, "memory", "used_memory");
    assert!(closed_by_server(&s, &["KEYS", "*"]), "served KEYS again");
    let grew = info_section_u64(&mut c, "memory", "used_memory_peak").saturating_sub(used);
    assert!(grew < 8 << 20, "used_memory_peak grew by {grew} bytes");
}

/// README: the KEYS walk of a client that disconnected stops (counted in
/// `snapshot_keys_abandoned`); the walks before it answer in full.
#[test]
fn the_walk_of_a_disconnected_client_stops() {
    let (s, mut c) = one_worker_with_300k_keys();
    let abandoned = info_u64(&mut c, "snapshot_keys_abandoned");
    let connected = info_section_u64(&mut c, "clients", "connected_clients");
    // A long walk first, then one whose client leaves at once.
    let mut busy = s.client();
    let mut raw = TcpStream::connect(("127.0.0.1", s.port())).unwrap();
    let long = std::thread::spawn(move || {
        let keys: Vec<Vec<u8>> = query(&mut busy, &["KEYS", "*"]).unwrap();
        keys.len()
    });
    wait_until("the long walk in flight", WAIT, || {
        info_u64(&mut c, "snapshot_keys_in_flight") == 1
    });
    raw.write_all(&resp(&["KEYS", "*"])).unwrap();
    drop(raw);
    wait_until("the walk of the client that left to stop", WAIT, || {
        info_u64(&mut c, "snapshot_keys_abandoned") == abandoned + 1
    });
    assert_eq!(long.join().unwrap(), 300_000, "the walk before it, in full");
    wait_until("the client that left to be gone", WAIT, || {
        info_section_u64(&mut c, "clients", "connected_clients") <= connected + 1
    });
    wait_until("no walk in flight", WAIT, || {
        info_u64(&mut c, "snapshot_keys_in_flight") == 0
    });
}

/// README: at most 4 KEYS walks per worker are queued or running; beyond,
/// SNAPSHOT.KEYS answers TRYAGAIN and a served KEYS runs natively.
#[test]
fn walks_in_flight_are_bounded() {
    let (s, mut c) = one_worker_with_300k_keys();
    // Four walks, their replies never read until the end.
    let mut held: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut raw = TcpStream::connect(("127.0.0.1", s.port())).unwrap();
            raw.write_all(&resp(&["SNAPSHOT.KEYS", "*"])).unwrap();
            raw
        })
        .collect();
    let refused = info_u64(&mut c, "snapshot_keys_refused_busy");
    let native = info_u64(&mut c, "snapshot_native_keys_native");
    // (Each walk of 300,000 keys takes tens of milliseconds on the one
    // worker: the four are submitted long before the first ends.)
    wait_until("four walks in flight", WAIT, || {
        info_u64(&mut c, "snapshot_keys_in_flight") == 4
    });
    let e = expect_err(&mut c, &["SNAPSHOT.KEYS", "key:1*"]);
    assert_eq!(
        e,
        "TRYAGAIN snapscan: 4 KEYS walks in flight (4 per worker); retry later"
    );
    let got: Vec<String> = query(&mut c, &["KEYS", "key:1999*"]).unwrap();
    assert_eq!(got.len(), 111, "a served KEYS, answered natively");
    assert_eq!(info_u64(&mut c, "snapshot_keys_refused_busy"), refused + 2);
    assert_eq!(info_u64(&mut c, "snapshot_native_keys_native"), native + 1);
    for raw in &mut held {
        raw.set_read_timeout(Some(Duration::from_millis(1)))
            .unwrap();
    }
    drop(held);
    wait_until("no walk in flight", WAIT, || {
        info_u64(&mut c, "snapshot_keys_in_flight") == 0
    });
}
