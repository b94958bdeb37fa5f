//! The module loads into the server under test and registers its command.
mod common;

use common::*;

#[test]
fn module_loads_and_registers_snapshot_scan() {
    let server = Server::start();
    let mut con = server.client();

    let modules = module_names(&mut con);
    assert!(
        modules.iter().any(|m| m == "snapshot"),
        "module `snapshot` not in MODULE LIST on {}: {modules:?}",
        Server::server_name()
    );

    let info: Vec<redis::Value> = query(&mut con, &["COMMAND", "INFO", "snapshot.scan"]).unwrap();
    assert!(
        matches!(info.first(), Some(redis::Value::Array(a)) if !a.is_empty()),
        "COMMAND INFO snapshot.scan is empty on {}: {info:?}",
        Server::server_name()
    );
}

#[test]
fn server_is_the_one_named() {
    let server = Server::start_with(ServerOpts::without_module());
    let (major, minor, _) = server.version();
    let name = Server::server_name();
    eprintln!(
        "{name}: valkey={} version={:?}",
        server.is_valkey(),
        server.version()
    );
    assert!(
        (major, minor) >= (7, 0),
        "{name}: version {:?} is older than 7.0",
        server.version()
    );
    // Names from scripts/servers.sh look like `valkey-9.1`; check them when given.
    if let Some((kind, ver)) = name.split_once('-') {
        let numeric = ver.split('.').all(|p| p.parse::<u32>().is_ok());
        if matches!(kind, "redis" | "valkey") && numeric {
            assert_eq!(
                server.is_valkey(),
                kind == "valkey",
                "{name}: INFO server says otherwise"
            );
            assert_eq!(
                ver,
                format!("{major}.{minor}"),
                "{name}: INFO server reports {:?}",
                server.version()
            );
        }
    }
}
