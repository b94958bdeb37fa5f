//! Client killed mid-scan.

use super::*;

fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend(format!("${}\r\n{a}\r\n", a.len()).into_bytes());
    }
    out
}

#[test]
fn client_killed_while_its_scan_is_in_flight() {
    let server = Server::start();
    let mut con = server.client();
    let keys = fill(&mut con, "key:", 50_000);
    let mut caught_blocked = 0;
    for round in 0..3 {
        let mut raw = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
        raw.set_read_timeout(Some(CLIENT_TIMEOUT)).unwrap();
        raw.write_all(&resp(&["CLIENT", "ID"])).unwrap();
        let mut buf = [0u8; 64];
        let n = raw.read(&mut buf).unwrap();
        let line = std::str::from_utf8(&buf[..n]).unwrap();
        let id: u64 = line
            .trim()
            .strip_prefix(':')
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("CLIENT ID reply {line:?}"));
        // Pipelined full-database scans, never read: the client stays blocked
        // on one of them while the rest wait in its query buffer.
        let mut burst = Vec::new();
        for _ in 0..20 {
            burst.extend(resp(&["SNAPSHOT.SCAN", "0", "COUNT", "100000"]));
        }
        raw.write_all(&burst).unwrap();
        let id_s = id.to_string();
        // Kill it while blocked if we catch it so (bounded polling), else anyway.
        for _ in 0..2000 {
            let list: String = query(&mut con, &["CLIENT", "LIST", "ID", &id_s]).unwrap();
            let blocked = list
                .split_whitespace()
                .find_map(|f| f.strip_prefix("flags="))
                .is_some_and(|f| f.contains('b'));
            if blocked {
                caught_blocked += 1;
                break;
            }
        }
        let killed: i64 = query(&mut con, &["CLIENT", "KILL", "ID", &id_s]).unwrap();
        assert_eq!(
            killed, 1,
            "round {round}: client {id} was not there to kill"
        );
        drop(raw);
        let pong: String = query(&mut con, &["PING"]).unwrap();
        assert_eq!(pong, "PONG");
    }
    eprintln!("killed while blocked in {caught_blocked} of 3 rounds");
    wait_until("no busy workers", POLL, || {
        info_u64(&mut con, "snapshot_workers_busy") == 0
            && info_u64(&mut con, "snapshot_worker_queue_depth") == 0
    });
    let pong: String = query(&mut con, &["PING"]).unwrap();
    assert_eq!(pong, "PONG");
    assert_eq!(
        to_strings(full_scan(&mut con, "SNAPSHOT.SCAN", &["COUNT", "100000"])),
        keys
    );
    assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), 0);
}
