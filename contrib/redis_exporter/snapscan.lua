#!lua flags=no-writes,allow-stale
-- snapscan's figures for redis_exporter's -script option (redis_exporter 1.45,
-- Debian 12's prometheus-redis-exporter, and later releases).
--
--   prometheus-redis-exporter -redis.addr redis://HOST:PORT \
--       -script /path/to/snapscan.lua -include-config-metrics
--
-- The exporter runs this script with EVAL at each scrape and exports each
-- name/value pair it returns as the gauge redis_script_values{key="<name>"}
-- (later releases add a filename label). It reads one INFO section and
-- returns a fixed set of its fields: O(1) for the server, whatever the number
-- of keys, cursors or collections (the section's cost does not grow with them).
--
-- The names are the INFO fields' own (README: "INFO snapshot") and are stable:
-- a name is only ever added. A field the server does not report (the module is
-- not loaded, or an older version) is left out, never reported as 0, so a
-- missing figure shows as a missing series; the script never fails the scrape
-- (a script error would set redis_up to 0). README, "Monitoring with
-- Prometheus", lists them with their meaning and when to alert.
--
-- The shebang flags: no-writes (it writes nothing, so it also runs when the
-- server is over maxmemory, on read-only replicas and with EVAL_RO) and
-- allow-stale (a replica whose link to its primary is down still reports).

local FIELDS = {
    -- the index
    "snapshot_index_keys",
    "snapshot_index_bytes_per_key",
    "snapshot_index_memory_bytes",
    "snapshot_module_heap_bytes",
    "snapshot_index_backlog",
    "snapshot_index_dropped",
    "snapshot_index_drops",
    "snapshot_backfill_in_progress",
    "snapshot_backfill_percent",
    -- iterations and the memory they keep alive
    "snapshot_open_snapshots",
    "snapshot_retained_versions",
    "snapshot_retained_bytes",
    "snapshot_retained_limit_bytes",
    "snapshot_cursors_evicted",
    "snapshot_cursors_expired",
    "snapshot_cursors_evicted_memory",
    -- calls
    "snapshot_scans_served",
    "snapshot_scans_served_inline",
    "snapshot_scans_refused_busy",
    -- threads
    "snapshot_workers",
    "snapshot_workers_busy",
    "snapshot_blocked_clients",
    "snapshot_worker_queue_depth",
    "snapshot_thread_restarts",
    "snapshot_thread_failures",
    "snapshot_threads_down",
    -- hash, set and sorted-set copies
    "snapshot_hash_cursors_open",
    "snapshot_hash_snapshots_open",
    "snapshot_hash_snapshot_bytes",
    "snapshot_hash_copies_made",
    "snapshot_hash_copy_retries",
    "snapshot_hash_copy_fallbacks",
    "snapshot_hash_longest_lock_hold_us",
    -- the native commands served from snapshots (snapshot.serve-native)
    "snapshot_native_scan_served",
    "snapshot_native_scan_native",
    "snapshot_native_scan_restarted",
    "snapshot_native_keys_served",
    "snapshot_native_keys_native",
    "snapshot_native_keys_restarted",
    "snapshot_native_hscan_served",
    "snapshot_native_hscan_native",
    "snapshot_native_hscan_restarted",
    "snapshot_native_sscan_served",
    "snapshot_native_sscan_native",
    "snapshot_native_sscan_restarted",
    "snapshot_native_zscan_served",
    "snapshot_native_zscan_native",
    "snapshot_native_zscan_restarted",
    -- SNAPSHOT.UNLINK
    "snapshot_unlink_calls",
    "snapshot_unlink_keys_unlinked",
    "snapshot_unlink_keys_denied",
    "snapshot_unlink_stopped_early",
    "snapshot_unlink_longest_slice_us",
}

local wanted = {}
for _, name in ipairs(FIELDS) do
    wanted[name] = true
end

local result = {}
local info = redis.pcall("INFO", "snapshot")
if type(info) ~= "string" then
    return result -- an error reply: export nothing rather than fail the scrape
end
for name, value in string.gmatch(info, "\n(snapshot_[%w_]+):(%d+)\r") do
    if wanted[name] then
        -- Strings, not numbers: the exporter reads the reply as a map of strings
        -- (and a Lua number would be truncated to an integer reply anyway).
        table.insert(result, name)
        table.insert(result, value)
        wanted[name] = nil -- once each
    end
end
return result
