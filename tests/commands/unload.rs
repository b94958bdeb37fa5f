//! MODULE UNLOAD.

use super::*;

#[test]
fn module_unload_is_refused_and_the_module_keeps_working() {
    let server = Server::start();
    let mut con = server.client();
    let keys = fill(&mut con, "k", 30);
    let (c, p1) = page(&mut con, "0", &["COUNT", "10"]);
    let e = expect_err(&mut con, &["MODULE", "UNLOAD", "snapshot"]);
    assert!(e.starts_with("ERR"), "{e}");
    assert!(module_names(&mut con).iter().any(|m| m == "snapshot"));
    // The open iteration continues; new ones work; writes are still indexed.
    let mut got = p1;
    let mut cursor = c;
    while cursor != "0" {
        let (next, items) = page(&mut con, &cursor, &["COUNT", "10"]);
        got.extend(items);
        cursor = next;
    }
    assert_eq!(got, keys);
    let _: () = query(&mut con, &["SET", "zzz", "v"]).unwrap();
    assert_eq!(
        full_scan(&mut con, "SNAPSHOT.SCAN", &["COUNT", "100"]).len(),
        31
    );
    assert_eq!(
        expect_err(&mut con, &["MODULE", "UNLOAD", "snapshot"]),
        e,
        "refused again, same way"
    );
}
