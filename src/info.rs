//! The `snapshot` and `snapshot_iterations` INFO sections.

use crate::keyspace::backfill;
use crate::server::entry::{info, Info};
use crate::server::info::{self as ffi_info, field, InfoCtx};
use crate::server::locked::ServerLock;
use crate::server::Ctx;
use crate::state;
use std::os::raw::c_int;
use std::sync::atomic::Ordering;

/// Registers the INFO callback (replacing redismodule-rs's default one).
pub fn register(ctx: Ctx) -> Result<(), String> {
    ffi_info::register(ctx, Some(info::<Section>)).map_err(String::from)
}

struct Section;
impl Info for Section {
    fn fill(lock: &ServerLock, ctx: InfoCtx, for_crash_report: c_int) {
        // A crash report may be written while this thread holds our locks:
        // report nothing rather than risk a deadlock there.
        if for_crash_report != 0 {
            return;
        }
        let _ = std::panic::catch_unwind(|| fill(lock, ctx));
    }
}

fn fill(lock: &ServerLock, ctx: InfoCtx) {
    let Some(m) = crate::module::try_get() else {
        return;
    };
    // Each section only when requested.
    if ffi_info::add_module_section(ctx) {
        fill_main(lock, ctx, m);
    }
    if ffi_info::add_named_section(ctx, c"iterations") {
        fill_iterations(ctx, m);
    }
}

/// Open iterations the `snapshot_iterations` section lists at most.
pub const LISTED_ITERATIONS: usize = 16;

/// The open keyspace iterations (SNAPSHOT.SCAN, served SCAN) that began
/// first, oldest first: database, age, pages served, and the bytes of old
/// values only that iteration still reads (what ending it would free, as of
/// the collector's last full pass over the undo log).
fn fill_iterations(ctx: InfoCtx, m: &'static crate::module::Module) {
    let now = crate::server::now_ms();
    field(ctx, "iterations_open", m.cursors.stats().open as u64);
    let listed = m.cursors.oldest_open(LISTED_ITERATIONS, |e| {
        (e.db, e.pages, e.value.snap.alone_bytes())
    });
    field(ctx, "iterations_listed", listed.len() as u64);
    for (i, (at, (db, pages, alone))) in listed.iter().enumerate() {
        let age = now.saturating_sub(*at).max(0);
        ffi_info::field_str(
            ctx,
            &format!("iteration{i}"),
            &format!("db={db},age_ms={age},pages={pages},alone_bytes={alone}"),
        );
    }
}

fn fill_main(lock: &ServerLock, ctx: InfoCtx, m: &'static crate::module::Module) {
    crate::keyspace::tracking::settle(lock, m, &m.keyspace);
    state::ensure_threads(m);
    // Never applies the log here: the figures are those of the applied
    // position, and index_backlog says how far behind (normally 0 within
    // the indexer's 2 ms poll).
    let f = m.live().figures();
    let backlog = m.pushed().saturating_sub(f.applied);
    let (sizes, total, mem, versions) = (f.sizes, f.total, f.memory_estimate, f.versions);
    field(ctx, "index_keys", total as u64);
    for (db, n) in sizes {
        field(ctx, &format!("index_keys_db{db}"), n as u64);
    }
    // Measured, not estimated: what the module's allocator holds, less
    // the hash copies (the rest is the tree, old versions kept alive by
    // open snapshots, the log and the cursors). The structure-size estimate
    // is used only where the counting allocator is not installed.
    let heap = crate::alloc::heap_bytes();
    let measured = heap.saturating_sub(m.watches.budget.bytes_held());
    let mem = if heap == 0 { mem } else { measured };
    field(ctx, "index_memory_bytes", mem as u64);
    field(ctx, "module_heap_bytes", heap as u64);
    field(
        ctx,
        "index_bytes_per_key",
        mem.checked_div(total).unwrap_or(0) as u64,
    );
    let c = m.cursors.stats();
    field(ctx, "open_snapshots", c.open as u64);
    // Distinct past versions pinned by open iterations (the live version
    // costs nothing extra), counted by the registry as cursors come and
    // go: O(databases), whatever the number of cursors.
    field(
        ctx,
        "retained_versions",
        m.cursors.groups_except(&versions) as u64,
    );
    field(ctx, "retained_bytes", state::retained_bytes(m) as u64);
    field(ctx, "history_entries", f.history_entries as u64);
    field(ctx, "history_in_place", f.history_in_place as u64);
    field(ctx, "history_bytes", f.history_bytes as u64);
    let (limit, source) = state::retained_limit(m);
    field(ctx, "retained_limit_bytes", limit as u64);
    ffi_info::field_str(ctx, "retained_limit_source", source.name());
    field(
        ctx,
        "retained_index_peak_bytes",
        state::index_peak(m) as u64,
    );
    // The open SNAPSHOT.SCAN (or served SCAN/KEYS) iteration that began
    // first: how long ago, and the pages it was served (0 and 0: none).
    let (age, pages) = c.oldest.map_or((0, 0), |(at, pages)| {
        let now = crate::server::now_ms();
        (now.saturating_sub(at).max(0) as u64, pages)
    });
    field(ctx, "oldest_iteration_age_ms", age);
    field(ctx, "oldest_iteration_pages", pages);
    let alone = m.cursors.oldest_open(1, |e| e.value.snap.alone_bytes());
    field(
        ctx,
        "oldest_iteration_alone_bytes",
        alone.first().map_or(0, |(_, b)| *b as u64),
    );
    field(ctx, "cursors_evicted", c.evicted);
    field(ctx, "cursors_expired", c.expired);
    field(ctx, "cursors_evicted_memory", c.evicted_memory);
    let st = &m.stats;
    field(ctx, "events_applied", st.events.load(Ordering::Relaxed));
    field(ctx, "events_unchanged_skipped", m.live().skipped());
    field(ctx, "filter_bytes", m.live().filter_bytes() as u64);
    field(ctx, "index_changes", m.live().changes());
    field(ctx, "index_backlog", backlog);
    // Every call served from a snapshot: SNAPSHOT.SCAN and SNAPSHOT.KEYS,
    // SNAPSHOT.HSCAN/SSCAN/ZSCAN, and the native commands served by them.
    field(
        ctx,
        "scans_served",
        st.scans.load(Ordering::Relaxed) + st.hash_scans.load(Ordering::Relaxed),
    );
    field(
        ctx,
        "scans_served_inline",
        st.scans_sync.load(Ordering::Relaxed),
    );
    field(
        ctx,
        "scans_served_small",
        st.scans_small.load(Ordering::Relaxed),
    );
    field(
        ctx,
        "snapshots_opened",
        st.snapshots_opened.load(Ordering::Relaxed),
    );
    field(
        ctx,
        "keys_returned",
        st.keys_returned.load(Ordering::Relaxed),
    );
    field(
        ctx,
        "entries_examined",
        st.entries_examined.load(Ordering::Relaxed),
    );
    field(
        ctx,
        "scans_refused_busy",
        st.scans_busy.load(Ordering::Relaxed),
    );
    field(
        ctx,
        "opens_refused_memory",
        st.opens_refused_memory.load(Ordering::Relaxed),
    );
    field(
        ctx,
        "keys_abandoned",
        st.keys_abandoned.load(Ordering::Relaxed),
    );
    field(
        ctx,
        "keys_over_output_limit",
        st.keys_over_output_limit.load(Ordering::Relaxed),
    );
    field(
        ctx,
        "keys_refused_busy",
        st.keys_refused_busy.load(Ordering::Relaxed),
    );
    field(
        ctx,
        "keys_in_flight",
        m.keys_in_flight.load(Ordering::Relaxed) as u64,
    );
    field(ctx, "thread_restarts", m.threads.restarts());
    field(ctx, "thread_failures", m.threads.failures());
    field(ctx, "threads_down", state::threads_down(m));
    field(ctx, "workers", m.pool.threads() as u64);
    field(ctx, "worker_queue_depth", m.pool.queued() as u64);
    field(ctx, "workers_busy", m.pool.busy() as u64);
    field(
        ctx,
        "blocked_clients",
        st.blocked_clients.load(Ordering::Relaxed),
    );
    for (name, v) in crate::native::figures(&m.native) {
        field(ctx, &name, v);
    }
    // Collection snapshot figures, then SNAPSHOT.UNLINK's.
    let collections = crate::scan::collection::info_figures(m);
    for (name, v) in collections
        .into_iter()
        .chain(crate::unlink::info_figures(m))
    {
        field(ctx, name, v);
    }
    let dropped = m.keyspace.idle.dropped(lock);
    field(ctx, "index_dropped", dropped as u64);
    field(ctx, "index_drops", m.keyspace.idle.drops());
    let p = m.keyspace.backfill.progress();
    field(ctx, "backfill_in_progress", p.running as u64);
    let pct = if p.running {
        backfill::percent(&p)
    } else {
        100
    };
    field(ctx, "backfill_percent", pct);
    field(ctx, "backfill_keys_scanned", p.scanned);
    field(ctx, "backfill_keys_total", p.total);
    field(ctx, "backfill_runs", p.runs);
    field(ctx, "backfill_longest_lock_hold_us", p.longest_hold_us);
}
