//! Cluster mode: which slots' keys `SNAPSHOT.SCAN` shows, and keeping the
//! index exact when slots move.
//!
//! - A snapshot shows only keys of the slots the node *serves* at its
//!   cursor-0 instant: slots it (or, for a replica, its primary) owns, plus
//!   slots it imports the legacy way (`CLUSTER SETSLOT ... IMPORTING`, whose
//!   keys `SCAN` shows), minus slots being imported by an atomic slot
//!   migration (Valkey 9+'s `CLUSTER MIGRATESLOTS`, Redis 8.4+'s `CLUSTER
//!   MIGRATION IMPORT`, whose keys `SCAN` hides until the import completes).
//! - Redis 8.4+ (whose `SCAN` hides the keys of slots the node does not
//!   serve): the visible slots are read from the server's memory at every
//!   cursor 0, and the owned ones at every `SNAPSHOT.UNLINK` slice
//!   ([`host::accessible_slots`], [`host::local_slots`]), so a change made
//!   earlier in the same turn of the event loop (a pipelined or `MULTI`
//!   `CLUSTER DELSLOTS`, a bus message read just before) is seen as `SCAN`
//!   sees it.
//! - Other servers' `SCAN` shows every key the node holds (but an atomic
//!   import's), whoever owns its slot: an ownership change does not change
//!   what a snapshot shows there, only which keys SNAPSHOT.UNLINK may
//!   delete. The served slots are read from `CLUSTER NODES` when the
//!   server's cluster configuration file (`nodes.conf`) changed since the
//!   last read: the server rewrites it after every change of slot
//!   ownership or role (ADDSLOTS, DELSLOTS, SETSLOT, failover, an update
//!   from another node), in `beforeSleep`, so before it next waits for
//!   clients, though not before it replies to commands of the same turn.
//!   Its `stat` is checked at every cursor 0 (`SNAPSHOT.SCAN`), every
//!   `SNAPSHOT.UNLINK` slice and every cron tick, a few microseconds each; a
//!   stamp taken within [`RACY`] of the file's modification time is not
//!   trusted (a change in the same clock tick keeps it): the next check
//!   reads again. A paced read at cron (at least [`MIN_PAUSE`] apart, at
//!   most 1/[`COST_SHARE`] of the main thread) remains as a safety net.
//! - Atomic slot migration events change the view at once: Valkey 9+'s
//!   (import started/completed/aborted, export completed) and Redis 8.4+'s
//!   (slot migration and trim events).
//! - Keys of slots the server empties are purged from the index by the
//!   indexer thread (off the main thread): Redis 7.0 deletes the keys of a
//!   slot another node took without any notification (purged when the
//!   slot is lost and `CLUSTER COUNTKEYSINSLOT` says it is empty: after
//!   `DELSLOTS` the node keeps them, whoever takes the slot), Redis 8.4+
//!   trims in the background (its trim events purge). Valkey and Redis 7.2+
//!   send a `del` notification for each key they delete.
//! - A cancelled or failed atomic import purges the slots it imported.

use crate::index::Op;
use crate::server::locked::{LockedCell, ServerLock};
use crate::server::{self, host, Ctx};
use crate::slot::{served_from_nodes, SlotSet};
use crate::state::Shared;
use std::os::raw::c_void;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The cluster view (a field of `keyspace::Keyspace`).
///
/// Locking: the slot sets behind a mutex (written and read on the main
/// thread), the server's facts in atomics set at OnLoad, the refresh
/// pacing under the server lock.
#[derive(Default)]
pub struct ClusterView {
    /// Whether the server runs in cluster mode (known after [`ClusterView::init`](Self::init)).
    enabled: AtomicBool,
    /// The cluster configuration file (`cluster-config-file`), relative to
    /// the server's working directory (the process's, as the server's
    /// writes are).
    config_file: OnceLock<PathBuf>,
    view: Mutex<View>,
    /// Whether the server's `SCAN` hides the keys of slots this node does
    /// not serve (Redis 8.4+, e.g. after `CLUSTER DELSLOTS`, which keeps
    /// them). Elsewhere `SCAN` shows every key the node holds, whatever its
    /// slot, but those of an atomic import under way.
    hides_unowned: AtomicBool,
    /// Whether the server deletes a lost slot's keys without notifications
    /// (Redis 7.0, see [`host::notifies_slot_deletions`]): then the module
    /// purges the slots it loses once the server emptied them.
    silent_slot_deletions: AtomicBool,
    /// When the next safety-net refresh may run (main thread only).
    next_refresh: LockedCell<Option<Instant>>,
}

#[derive(Default)]
struct View {
    /// Slots served as of the last refresh (`None` before the first).
    served: Option<SlotSet>,
    /// Slots being imported by an atomic slot migration.
    importing: SlotSet,
    /// `served - importing`, shared by the snapshots opened meanwhile.
    visible: Option<Arc<SlotSet>>,
    /// Slots owned (a replica: by its primary) as of the last refresh:
    /// `served` without legacy imports, whose keys the server refuses to
    /// let a module's `RM_Call` write (SNAPSHOT.UNLINK skips them).
    owned: Option<Arc<SlotSet>>,
    /// The cluster configuration file's [`Stamp`] as of the last
    /// successful read of `CLUSTER NODES` (taken before the read).
    stamp: Option<Stamp>,
    /// Whether that stamp was taken within [`RACY`] of the file's last
    /// change: a change in the same clock tick may keep the stamp, so the
    /// next check reads `CLUSTER NODES` again.
    racy: bool,
}

/// How close to the file's modification time a stamp must be taken to be
/// trusted (the racy-git rule): file times advance in clock ticks (about 4
/// ms), a rewrite in place keeps the inode and a failover often the size.
pub const RACY: Duration = Duration::from_millis(20);

/// What `stat` says of the cluster configuration file: the server replaces
/// it (a new file renamed over the old) or rewrites it at every topology
/// change, so any change of the file changes this.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

fn config_stamp(file: Option<&PathBuf>) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(file?).ok()?;
    Some(Stamp {
        dev: md.dev(),
        ino: md.ino(),
        size: md.size(),
        mtime: (md.mtime(), md.mtime_nsec()),
        ctime: (md.ctime(), md.ctime_nsec()),
    })
}

impl Stamp {
    /// Whether a stamp taken at `now` (seconds, nanoseconds since the
    /// epoch) may miss a change made in the same clock tick: the file
    /// changed (mtime or ctime) less than [`RACY`] before `now`, or after it.
    fn racy_at(&self, now: (i64, i64)) -> bool {
        let ns = |(s, n): (i64, i64)| i128::from(s) * 1_000_000_000 + i128::from(n);
        let latest = ns(self.mtime).max(ns(self.ctime));
        ns(now) - latest < RACY.as_nanos() as i128
    }
}

/// The wall clock as file times count it (seconds, nanoseconds).
fn wall_now() -> (i64, i64) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs() as i64, i64::from(d.subsec_nanos()))
}

impl View {
    /// `hides_unowned`: see [`ClusterView::hides_unowned`].
    fn recompute(&mut self, hides_unowned: bool) {
        self.visible = if hides_unowned {
            self.served
                .as_ref()
                .map(|s| Arc::new(s.minus(&self.importing)))
        } else if self.importing.is_empty() {
            None
        } else {
            let mut all = SlotSet::new();
            all.insert_range(0, SLOT_COUNT - 1);
            Some(Arc::new(all.minus(&self.importing)))
        };
    }
}

const SLOT_COUNT: u16 = 16384;

/// Module options for cluster support: atomic slot migration where the
/// server knows the option (Valkey 9+).
pub fn module_options(ctx: Ctx) -> std::os::raw::c_int {
    let asm = host::OPTION_HANDLE_ATOMIC_SLOT_MIGRATION;
    if host::module_options_known() & asm != 0 && host::is_valkey(ctx) {
        asm
    } else {
        0
    }
}

/// `set` in `cache` (kept, and shared, if it did not change).
fn shared(cache: &mut Option<Arc<SlotSet>>, set: SlotSet) -> Arc<SlotSet> {
    match cache {
        Some(c) if **c == set => c.clone(),
        _ => cache.insert(Arc::new(set)).clone(),
    }
}

/// The main thread's time the safety-net refresh may take is
/// 1/`COST_SHARE`: after a refresh that took `t`, the next waits at least
/// `t * COST_SHARE`.
pub const COST_SHARE: u32 = 1000;

/// The shortest pause between two safety-net refreshes: changes are seen
/// at once through the configuration file's stamp and the server's events.
pub const MIN_PAUSE: Duration = Duration::from_secs(1);

/// The longest pause between two safety-net refreshes, whatever they cost.
pub const MAX_PAUSE: Duration = Duration::from_secs(10);

/// How long after a refresh that took `cost` (main-thread CPU time: a
/// preempted thread does not count the wait) the next safety-net refresh
/// may start: a 20 µs read (a few nodes) once a second, a 5 ms one
/// (hundreds of nodes) every 5 s, and none waits longer than [`MAX_PAUSE`].
pub fn refresh_pause(cost: Duration) -> Duration {
    cost.saturating_mul(COST_SHARE).clamp(MIN_PAUSE, MAX_PAUSE)
}

impl ClusterView {
    /// Whether the server runs in cluster mode (known after [`ClusterView::init`](Self::init)).
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Detects cluster mode and reads the served slots (OnLoad).
    pub fn init(&self, ctx: Ctx, m: &Shared) {
        if host::cluster_mode(ctx) {
            self.enabled.store(true, Ordering::Relaxed);
            self.hides_unowned
                .store(host::has_redis_slot_migration(), Ordering::Relaxed);
            self.silent_slot_deletions
                .store(!host::notifies_slot_deletions(ctx), Ordering::Relaxed);
            if let Some(name) = host::config_get(ctx, c"cluster-config-file") {
                use std::os::unix::ffi::OsStrExt;
                let _ = self
                    .config_file
                    .set(PathBuf::from(std::ffi::OsStr::from_bytes(&name)));
            }
            self.refresh(ctx, m);
        }
    }

    /// The slots a snapshot opened now shows: `None` (every key) outside
    /// cluster mode, or where nothing is hidden. Main thread.
    pub fn visible_slots(&self, ctx: Ctx, m: &Shared) -> Option<Arc<SlotSet>> {
        if !self.enabled() {
            return None;
        }
        self.catch_up(ctx, m);
        if self.hides_unowned.load(Ordering::Relaxed) {
            if let Some(now) = host::accessible_slots() {
                return self.with_view(|v| {
                    let visible = now.minus(&v.importing);
                    Some(shared(&mut v.visible, visible))
                });
            }
        }
        self.with_view(|v| v.visible.clone())
    }

    /// The slots this node owns now (see `View::owned`): `None` outside
    /// cluster mode or before the first refresh. Main thread.
    pub fn owned_slots(&self, ctx: Ctx, m: &Shared) -> Option<Arc<SlotSet>> {
        if !self.enabled() {
            return None;
        }
        self.catch_up(ctx, m);
        if self.hides_unowned.load(Ordering::Relaxed) {
            if let Some(now) = host::local_slots(ctx) {
                return self.with_view(|v| Some(shared(&mut v.owned, now)));
            }
        }
        self.with_view(|v| v.owned.clone())
    }

    /// Re-reads `CLUSTER NODES` if the cluster configuration file changed since
    /// the last successful read, or if that read's stamp was racy; true if it
    /// read. Main thread.
    fn catch_up(&self, ctx: Ctx, m: &Shared) -> bool {
        let now = config_stamp(self.config_file.get());
        if now.is_none() || self.with_view(|v| v.stamp == now && !v.racy) {
            return false;
        }
        self.refresh(ctx, m);
        true
    }

    /// Re-reads the served slots from `CLUSTER NODES`; slots no longer served
    /// are purged from the index. Main thread.
    pub fn refresh(&self, ctx: Ctx, m: &Shared) {
        if !self.enabled() {
            return;
        }
        // Taken before the read (a change after it is seen by the next check),
        // recorded only once the read succeeded (a failed one is retried at
        // the next check).
        let (stamp, taken) = (config_stamp(self.config_file.get()), wall_now());
        let Some(text) = host::call_text(ctx, c"CLUSTER", c"NODES") else {
            return;
        };
        let Some(served) = served_from_nodes(&text) else {
            return;
        };
        let owned = crate::slot::owned_from_nodes(&text);
        let lost = self.with_view(|v| {
            v.stamp = stamp;
            v.racy = stamp.is_some_and(|s| s.racy_at(taken));
            if v.owned.as_deref() != owned.as_ref() {
                v.owned = owned.map(Arc::new);
            }
            let lost = v.served.as_ref().map(|old| old.minus(&served));
            if v.served.as_ref() != Some(&served) {
                v.served = Some(served);
                self.recompute(v);
            }
            lost
        });
        if !self.silent_slot_deletions.load(Ordering::Relaxed) {
            return;
        }
        // Redis 7.0 deletes the keys of a slot another node took, without
        // notifications. The node keeps them after DELSLOTS, though, even once
        // another node took the slot (its dirty-slot deletion runs only while
        // it owns the slot): only slots the server emptied are purged.
        let Some(lost) = lost.filter(|l| !l.is_empty()) else {
            return;
        };
        let mut emptied = SlotSet::new();
        for slot in (0..SLOT_COUNT).filter(|&s| lost.contains(s)) {
            if host::count_keys_in_slot(ctx, slot) == Some(0) {
                emptied.insert(slot);
            }
        }
        if !emptied.is_empty() {
            self.purge(ctx, m, emptied, "emptied by the server");
        }
    }

    fn purge(&self, ctx: Ctx, m: &Shared, slots: SlotSet, why: &str) {
        server::log(
            ctx,
            "verbose",
            &format!(
                "snapscan: slots {} {why}: purging their keys from the index",
                slots.ranges_text()
            ),
        );
        m.watches.bump_all();
        m.push(Op::PurgeSlots(Arc::new(slots)));
    }

    /// Server cron tick (`CronLoop` event): a refresh if the configuration
    /// file changed, else the paced safety net.
    pub fn on_cron(&self, lock: &ServerLock, ctx: Ctx, m: &Shared) {
        if !self.enabled() {
            return;
        }
        let now = Instant::now();
        if self.catch_up(ctx, m) || self.next_refresh.get(lock).is_some_and(|next| now < next) {
            return;
        }
        let cpu = server::deletion::thread_cpu_us();
        self.refresh(ctx, m);
        let cost = Duration::from_micros(server::deletion::thread_cpu_us().saturating_sub(cpu));
        self.next_refresh
            .replace(lock, Some(now + refresh_pause(cost)));
    }

    /// An atomic-slot-migration event (Valkey 9+; `data` names the slots).
    pub fn on_slot_migration(&self, ctx: Ctx, m: &Shared, subevent: u64, data: *mut c_void) {
        let slots = host::asm_event_slots(data);
        match subevent {
            host::ASM_IMPORT_STARTED => self.import_started(slots),
            host::ASM_IMPORT_COMPLETED => self.import_completed(slots),
            host::ASM_IMPORT_ABORTED => self.import_aborted(ctx, m, slots, true),
            host::ASM_EXPORT_COMPLETED => self.refresh(ctx, m),
            _ => {}
        }
    }

    /// A slot-migration event (Redis 8.4+; `data` names the slots).
    pub fn on_redis_slot_migration(&self, ctx: Ctx, m: &Shared, subevent: u64, data: *mut c_void) {
        let slots = host::redis_asm_event_slots(data);
        match subevent {
            host::REDIS_ASM_IMPORT_STARTED => self.import_started(slots),
            host::REDIS_ASM_IMPORT_COMPLETED => self.import_completed(slots),
            // The server trims what the import brought (a trim event follows,
            // which purges): no second walk of the index.
            host::REDIS_ASM_IMPORT_FAILED => self.import_aborted(ctx, m, slots, false),
            host::REDIS_ASM_MIGRATE_COMPLETED => self.gone(ctx, m, slots, "migrated away"),
            _ => {}
        }
    }

    /// A trim event (Redis 8.4+; `data` names the slots): the server deletes
    /// the keys of slots this node does not serve, either key by key
    /// (`key_trimmed` notifications, which the module does not ask for) or in
    /// the background without any notification. Either way they leave the
    /// index now.
    pub fn on_redis_slot_trim(&self, ctx: Ctx, m: &Shared, subevent: u64, data: *mut c_void) {
        let slots = host::redis_trim_event_slots(data);
        if matches!(
            subevent,
            host::REDIS_TRIM_STARTED | host::REDIS_TRIM_BACKGROUND
        ) {
            self.gone(ctx, m, slots, "trimmed by the server");
        }
    }

    fn import_started(&self, slots: SlotSet) {
        if !self.enabled() {
            return;
        }
        self.with_view(|v| {
            v.importing = v.importing.union(&slots);
            self.recompute(v);
        });
    }

    /// The slots are this node's now: shown at once, whether or not the
    /// topology already says so (the next refresh confirms).
    fn import_completed(&self, slots: SlotSet) {
        if !self.enabled() {
            return;
        }
        self.with_view(|v| {
            v.importing = v.importing.minus(&slots);
            v.served = Some(v.served.take().unwrap_or_default().union(&slots));
            let owned = v.owned.as_deref().cloned().unwrap_or_default();
            v.owned = Some(Arc::new(owned.union(&slots)));
            self.recompute(v);
        });
    }

    /// An import that will not complete: its slots are no longer hidden as
    /// importing; those the node does not serve are purged if `purge`.
    fn import_aborted(&self, ctx: Ctx, m: &Shared, slots: SlotSet, purge_unserved: bool) {
        if !self.enabled() {
            return;
        }
        let gone = self.with_view(|v| {
            v.importing = v.importing.minus(&slots);
            self.recompute(v);
            slots.minus(v.served.as_ref().unwrap_or(&SlotSet::new()))
        });
        if purge_unserved && !gone.is_empty() {
            self.purge(ctx, m, gone, "import cancelled");
        }
    }

    /// `slots` are no longer this node's (migrated away, or trimmed): hidden at
    /// once and purged from the index.
    fn gone(&self, ctx: Ctx, m: &Shared, slots: SlotSet, why: &str) {
        if !self.enabled() || slots.is_empty() {
            return;
        }
        self.with_view(|v| {
            v.importing = v.importing.minus(&slots);
            if let Some(served) = v.served.take() {
                v.served = Some(served.minus(&slots));
            }
            if let Some(owned) = v.owned.take() {
                v.owned = Some(Arc::new(owned.minus(&slots)));
            }
            self.recompute(v);
        });
        self.purge(ctx, m, slots, why);
    }

    fn with_view<T>(&self, f: impl FnOnce(&mut View) -> T) -> T {
        f(&mut self.view.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn recompute(&self, v: &mut View) {
        v.recompute(self.hides_unowned.load(Ordering::Relaxed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(20, 1_000)]
    #[case(1_000, 1_000)]
    #[case(5_000, 5_000)]
    #[case(10_000, 10_000)]
    #[case(50_000, 10_000)]
    fn a_safety_net_refresh_waits_a_thousand_times_what_it_took_from_1_to_10_s(
        #[case] took_us: u64,
        #[case] pause_ms: u64,
    ) {
        let pause = refresh_pause(Duration::from_micros(took_us));
        assert_eq!(pause, Duration::from_millis(pause_ms));
    }

    fn stamp(mtime: (i64, i64), ctime: (i64, i64)) -> Stamp {
        Stamp {
            dev: 1,
            ino: 2,
            size: 3,
            mtime,
            ctime,
        }
    }

    /// A stamp is trusted only when taken at least 20 ms after the file's
    /// last change (mtime or ctime): a change in the same clock tick
    /// (about 4 ms) can keep every field of it.
    #[rstest]
    #[case((100, 0), (100, 0), (100, 19_999_999), true)]
    #[case((100, 0), (100, 0), (100, 20_000_000), false)]
    #[case((99, 990_000_000), (99, 990_000_000), (100, 5_000_000), true)]
    #[case((99, 0), (100, 0), (100, 1_000_000), true)] // ctime later
    #[case((100, 0), (100, 0), (99, 0), true)] // the clock went back
    #[case((90, 0), (90, 0), (100, 0), false)]
    fn a_stamp_taken_within_20_ms_of_the_files_change_is_racy(
        #[case] mtime: (i64, i64),
        #[case] ctime: (i64, i64),
        #[case] now: (i64, i64),
        #[case] racy: bool,
    ) {
        assert_eq!(stamp(mtime, ctime).racy_at(now), racy);
    }

    #[test]
    fn an_absurd_cost_saturates_instead_of_overflowing() {
        assert_eq!(refresh_pause(Duration::MAX), MAX_PAUSE);
    }
}
