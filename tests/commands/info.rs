//! INFO.

use super::*;

const INFO_FIELDS: &[&str] = &[
    "snapshot_index_keys",
    "snapshot_index_memory_bytes",
    "snapshot_index_bytes_per_key",
    "snapshot_module_heap_bytes",
    "snapshot_index_backlog",
    "snapshot_open_snapshots",
    "snapshot_retained_versions",
    "snapshot_cursors_evicted",
    "snapshot_cursors_expired",
    "snapshot_events_applied",
    "snapshot_index_changes",
    "snapshot_scans_served",
    "snapshot_scans_served_inline",
    "snapshot_scans_served_small",
    "snapshot_snapshots_opened",
    "snapshot_keys_returned",
    "snapshot_entries_examined",
    "snapshot_workers",
    "snapshot_worker_queue_depth",
    "snapshot_workers_busy",
    "snapshot_backfill_in_progress",
    "snapshot_backfill_percent",
    "snapshot_backfill_keys_scanned",
    "snapshot_backfill_keys_total",
    "snapshot_backfill_runs",
    "snapshot_backfill_longest_lock_hold_us",
];

#[test]
fn info_snapshot_fields_and_counters() {
    let server = Server::start();
    let mut con = server.client();
    let info = info_snapshot(&mut con);
    assert!(info.contains("# snapshot"), "{info}");
    for f in INFO_FIELDS {
        let v = info_field(&info, f).unwrap_or_else(|| panic!("no {f} in\n{info}"));
        v.parse::<u64>()
            .unwrap_or_else(|e| panic!("{f}:{v} is not a number: {e}"));
    }
    assert_eq!(
        info_field(&info, "snapshot_index_keys").as_deref(),
        Some("0")
    );
    assert!(!info.contains("snapshot_index_keys_db"), "{info}");
    assert_eq!(
        info_field(&info, "snapshot_backfill_in_progress").as_deref(),
        Some("0")
    );
    assert_eq!(
        info_field(&info, "snapshot_backfill_percent").as_deref(),
        Some("100")
    );

    // Keys in db0 and db5.
    let keys = fill(&mut con, "k", 120);
    let _: () = query(&mut con, &["SELECT", "5"]).unwrap();
    fill(&mut con, "five", 7);
    let dbsize5: u64 = query(&mut con, &["DBSIZE"]).unwrap();
    let _: () = query(&mut con, &["SELECT", "0"]).unwrap();
    let dbsize0: u64 = query(&mut con, &["DBSIZE"]).unwrap();
    wait_applied(&mut con);
    let info = info_snapshot(&mut con);
    let get = |f: &str| -> u64 {
        info_field(&info, f)
            .unwrap_or_else(|| panic!("no {f} in\n{info}"))
            .parse()
            .unwrap()
    };
    assert_eq!(get("snapshot_index_keys"), dbsize0 + dbsize5);
    assert_eq!(get("snapshot_index_keys_db0"), 120);
    assert_eq!(get("snapshot_index_keys_db5"), 7);
    assert!(info_field(&info, "snapshot_index_keys_db1").is_none());
    assert!(get("snapshot_index_memory_bytes") > 0);
    assert!(get("snapshot_index_bytes_per_key") > 0);
    // Measured by the allocator: at least the 127 keys' slots.
    assert!(get("snapshot_module_heap_bytes") >= get("snapshot_index_memory_bytes"));
    assert!(get("snapshot_index_memory_bytes") >= 127 * 32);
    assert_eq!(get("snapshot_index_backlog"), 0);
    assert!(get("snapshot_events_applied") >= 127);

    // A known scan: 120 keys, COUNT 25 -> 5 calls, 1 snapshot, 120 keys returned.
    let served0 = get("snapshot_scans_served");
    let opened0 = get("snapshot_snapshots_opened");
    let returned0 = get("snapshot_keys_returned");
    let examined0 = get("snapshot_entries_examined");
    let inline0 = get("snapshot_scans_served_inline");
    assert_eq!(
        to_strings(full_scan(&mut con, "SNAPSHOT.SCAN", &["COUNT", "25"])),
        keys
    );
    // And one MATCH call that returns the 10 keys k000100..k000109.
    let (c, items) = page(&mut con, "0", &["MATCH", "k00010*", "COUNT", "1000"]);
    assert_eq!(c, "0");
    assert_eq!(items, keys[100..110]);
    assert_eq!(info_u64(&mut con, "snapshot_scans_served") - served0, 6);
    assert_eq!(info_u64(&mut con, "snapshot_snapshots_opened") - opened0, 2);
    assert_eq!(
        info_u64(&mut con, "snapshot_keys_returned") - returned0,
        130
    );
    // The literal prefix "k00010" limits the MATCH walk to its 10 keys.
    assert_eq!(
        info_u64(&mut con, "snapshot_entries_examined") - examined0,
        130
    );
    assert_eq!(
        info_u64(&mut con, "snapshot_scans_served_inline"),
        inline0,
        "blocking scans are not inline"
    );
    // Open cursors are counted.
    let (c, _) = page(&mut con, "0", &["COUNT", "1"]);
    let _: () = query(&mut con, &["SELECT", "5"]).unwrap();
    page(&mut con, "0", &["COUNT", "1"]);
    assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), 2);
    let _: () = query(&mut con, &["SELECT", "0"]).unwrap();
    page(&mut con, &c, &["COUNT", "1000"]);
    assert_eq!(info_u64(&mut con, "snapshot_open_snapshots"), 1);
    assert_eq!(info_u64(&mut con, "snapshot_worker_queue_depth"), 0);
}
