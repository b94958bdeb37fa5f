//! MULTI/EXEC, EVAL, FCALL.

use super::*;

const LIB: &str = "#!lua name=sslib\n\
redis.register_function('sscan', function(keys, args) return redis.call('SNAPSHOT.SCAN', args[1], 'COUNT', args[2]) end)\n\
redis.register_function{function_name='sscan_ro', callback=function(keys, args) return redis.call('SNAPSHOT.SCAN', args[1], 'COUNT', args[2]) end, flags={'no-writes'}}";

const SCRIPT: &str = "return redis.call('SNAPSHOT.SCAN', ARGV[1], 'COUNT', ARGV[2])";

#[derive(Debug, Clone, Copy)]
enum Path {
    Blocking,
    Multi,
    Eval,
    Fcall,
    FcallRo,
}

fn page_via(con: &mut Connection, path: Path, cursor: &str, count: &str) -> (String, Vec<String>) {
    let r: RedisResult<(String, Vec<String>)> = match path {
        Path::Blocking => try_page(con, cursor, &["COUNT", count]),
        Path::Multi => redis::pipe()
            .atomic()
            .cmd("SNAPSHOT.SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(count)
            .query::<((String, Vec<String>),)>(con)
            .map(|(r,)| r),
        Path::Eval => redis::cmd("EVAL")
            .arg(SCRIPT)
            .arg(0)
            .arg(cursor)
            .arg(count)
            .query(con),
        Path::Fcall | Path::FcallRo => {
            let (cmd, f) = match path {
                Path::Fcall => ("FCALL", "sscan"),
                _ => ("FCALL_RO", "sscan_ro"),
            };
            redis::cmd(cmd)
                .arg(f)
                .arg(0)
                .arg(cursor)
                .arg(count)
                .query(con)
        }
    };
    r.unwrap_or_else(|e| panic!("{path:?} {cursor}: {}", err_text(&e)))
}

/// A full iteration driven entirely through `path`; returns (keys, calls).
fn full_via(con: &mut Connection, path: Path, count: &str) -> (Vec<String>, u64) {
    let (mut cursor, mut out, mut calls) = ("0".to_string(), Vec::new(), 0);
    loop {
        let (next, items) = page_via(con, path, &cursor, count);
        calls += 1;
        out.extend(items);
        if next == "0" {
            return (out, calls);
        }
        assert!(calls < 10_000, "{path:?} does not finish");
        cursor = next;
    }
}

#[rstest]
#[case::multi(Path::Multi)]
#[case::eval(Path::Eval)]
#[case::fcall(Path::Fcall)]
#[case::fcall_ro(Path::FcallRo)]
fn inline_paths_match_the_blocking_path(#[case] path: Path) {
    let server = Server::start();
    let mut con = server.client();
    let _: String = query(&mut con, &["FUNCTION", "LOAD", LIB]).expect("FUNCTION LOAD");
    let keys = fill(&mut con, "k", 95);

    let (blocking, _) = full_via(&mut con, Path::Blocking, "7");
    assert_eq!(blocking, keys);
    let inline0 = info_u64(&mut con, "snapshot_scans_served_inline");
    let served0 = info_u64(&mut con, "snapshot_scans_served");
    let (got, calls) = full_via(&mut con, path, "7");
    assert_eq!(got, blocking, "{path:?}");
    assert_eq!(calls, 14, "ceil(95/7) calls");
    assert_eq!(
        info_u64(&mut con, "snapshot_scans_served_inline") - inline0,
        calls
    );
    assert_eq!(info_u64(&mut con, "snapshot_scans_served") - served0, calls);

    // Cursors cross paths: start blocking, continue inline, finish blocking.
    let (c1, p1) = page_via(&mut con, Path::Blocking, "0", "40");
    let (c2, p2) = page_via(&mut con, path, &c1, "40");
    let (c3, p3) = page_via(&mut con, Path::Blocking, &c2, "40");
    assert_eq!(c3, "0");
    assert_eq!([p1, p2, p3].concat(), keys);
    // A cursor sent again returns the same page inline too (README,
    // Cursor lifetime: the retry window), and its new next cursor goes on
    // to the same end.
    let (c2b, p2b) = page_via(&mut con, path, &c1, "40");
    assert_eq!(p2b, keys[40..80], "{path:?}: the same page again");
    let (c3b, p3b) = page_via(&mut con, path, &c2b, "40");
    assert_eq!((c3b.as_str(), p3b), ("0", keys[80..].to_vec()), "{path:?}");
    // The last cursor too: its page again, the iteration complete again.
    let (c3c, p3c) = page_via(&mut con, path, &c2, "40");
    assert_eq!((c3c.as_str(), p3c), ("0", keys[80..].to_vec()), "{path:?}");

    // An empty snapshot inline: ["0", []].
    let _: () = query(&mut con, &["SELECT", "3"]).unwrap();
    assert_eq!(page_via(&mut con, path, "0", "10"), ("0".into(), vec![]));
}
