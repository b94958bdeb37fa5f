//! SNAPSHOT.UNLINK leaves alone keys that arrive in the database after the
//! call by other ways than a plain write: renamed onto (`RENAME`), copied over
//! from another database (`COPY ... DB 0 REPLACE`) and moved in (`MOVE`), as
//! the README says ("renamed onto or moved into the database after the
//! call's instant").
mod common;

use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const POLL: Duration = Duration::from_secs(30);
/// Keys `key:0`..`key:N-1`, deleted 5 per slice: the deletion takes
/// thousands of turns of the event loop, and reaches `key:999x` last.
const KEYS: usize = 20_000;

#[test]
fn keys_renamed_copied_or_moved_in_after_the_call_are_left_alone() {
    let server = Server::start();
    let mut con = server.client();
    config_set(&mut con, "snapshot.unlink-batch", "5");
    let _: () = query(&mut con, &["DEBUG", "POPULATE", &KEYS.to_string(), "key"]).unwrap();
    wait_until("the index to catch up", POLL, || {
        info_u64(&mut con, "snapshot_index_backlog") == 0
    });
    // Sources that do not match the pattern, in database 0 and database 1.
    let _: () = query(&mut con, &["SET", "src:rename", "renamed"]).unwrap();
    let mut db1 = server.client();
    let _: () = query(&mut db1, &["SELECT", "1"]).unwrap();
    let _: () = query(&mut db1, &["SET", "src:copy", "copied"]).unwrap();

    let mut caller = server.client();
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let h = std::thread::spawn(move || {
        let r: redis::RedisResult<i64> = redis::cmd("SNAPSHOT.UNLINK")
            .arg("key:*")
            .query(&mut caller);
        d.store(true, Ordering::SeqCst);
        r
    });
    wait_until("the deletion to start", POLL, || {
        info_u64(&mut con, "snapshot_unlink_keys_unlinked") > 0
    });
    // Each of key:9997, key:9998, key:9999 existed at the call's instant and
    // sorts after every other key: each is replaced before the deletion
    // gets there.
    let _: () = query(&mut con, &["RENAME", "src:rename", "key:9997"]).unwrap();
    let copied: i64 = query(
        &mut db1,
        &["COPY", "src:copy", "key:9998", "DB", "0", "REPLACE"],
    )
    .unwrap();
    assert_eq!(copied, 1);
    // MOVE needs the name free in the target: key:9999 leaves for database
    // 1, is rewritten there, and moves back in.
    let moved: i64 = query(&mut con, &["MOVE", "key:9999", "1"]).unwrap();
    assert_eq!(moved, 1);
    let _: () = query(&mut db1, &["SET", "key:9999", "moved"]).unwrap();
    let moved: i64 = query(&mut db1, &["MOVE", "key:9999", "0"]).unwrap();
    assert_eq!(moved, 1);
    assert!(
        !done.load(Ordering::SeqCst),
        "the deletion ended before the writes; raise KEYS"
    );
    let n = h.join().expect("thread").expect("reply");
    assert_eq!(n as usize, KEYS - 3, "every other key unlinked");
    assert_eq!(cmd_str(&mut con, &["GET", "key:9997"]), "renamed");
    assert_eq!(cmd_str(&mut con, &["GET", "key:9998"]), "copied");
    assert_eq!(cmd_str(&mut con, &["GET", "key:9999"]), "moved");
    let left: i64 = query(&mut con, &["DBSIZE"]).unwrap();
    assert_eq!(left, 3);
    assert!(info_u64(&mut con, "snapshot_unlink_keys_written_since") >= 3);
}
