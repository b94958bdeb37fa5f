//! Cluster mode: which slots' keys `SNAPSHOT.SCAN` shows, and keeping the
//! index exact when slots move.
//!
//! - A snapshot shows only keys of the slots the node *serves* at its
//!   cursor-0 instant: slots it (or, for a replica, its primary) owns, plus
//!   slots it imports the legacy way (`CLUSTER SETSLOT ... IMPORTING`, whose
//!   keys `SCAN` shows), minus slots being imported by an atomic slot
//!   migration (`CLUSTER MIGRATESLOTS`, Valkey 9+, whose keys `SCAN` hides
//!   until the import completes).
//! - The served slots are read from `CLUSTER NODES` at every server cron
//!   tick (`hz`, 10 per second by default), paced so that the reads take at
//!   most 1/[`COST_SHARE`] of the main thread (the reply grows with the
//!   number of nodes), and at every slot-migration event. Slots that stop being served are purged from the index by the
//!   indexer thread (off the main thread): some servers delete a lost
//!   slot's keys without any notification (Redis 7.0).
//! - A cancelled or failed atomic import purges the slots it imported.

use crate::index::Op;
use crate::server::locked::{LockedCell, ServerLock};
use crate::server::{self, host, Ctx};
use crate::slot::{served_from_nodes, SlotSet};
use crate::state;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

static CLUSTER: AtomicBool = AtomicBool::new(false);

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
}

static VIEW: Mutex<Option<View>> = Mutex::new(None);

fn with_view<T>(f: impl FnOnce(&mut View) -> T) -> T {
    let mut g = VIEW.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(View::default))
}

impl View {
    fn recompute(&mut self) {
        self.visible = self
            .served
            .as_ref()
            .map(|s| Arc::new(s.minus(&self.importing)));
    }
}

/// Whether the server runs in cluster mode (known after [`init`]).
pub fn enabled() -> bool {
    CLUSTER.load(Ordering::Relaxed)
}

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

/// Detects cluster mode and reads the served slots (OnLoad).
pub fn init(ctx: Ctx) {
    if host::cluster_mode(ctx) {
        CLUSTER.store(true, Ordering::Relaxed);
        refresh(ctx);
    }
}

/// The slots a snapshot opened now shows: `None` (every key) outside
/// cluster mode. Main thread.
pub fn visible_slots() -> Option<Arc<SlotSet>> {
    if !enabled() {
        return None;
    }
    with_view(|v| v.visible.clone())
}

/// The slots this node owns now (see `View::owned`): `None` outside
/// cluster mode or before the first refresh. Main thread.
pub fn owned_slots() -> Option<Arc<SlotSet>> {
    if !enabled() {
        return None;
    }
    with_view(|v| v.owned.clone())
}

/// Re-reads the served slots from `CLUSTER NODES`; slots no longer served
/// are purged from the index. Main thread.
pub fn refresh(ctx: Ctx) {
    if !enabled() {
        return;
    }
    let Some(text) = host::call_text(ctx, c"CLUSTER", c"NODES") else {
        return;
    };
    let Some(served) = served_from_nodes(&text) else {
        return;
    };
    let owned = crate::slot::owned_from_nodes(&text);
    let lost = with_view(|v| {
        if v.owned.as_deref() != owned.as_ref() {
            v.owned = owned.map(Arc::new);
        }
        let lost = v.served.as_ref().map(|old| old.minus(&served));
        if v.served.as_ref() != Some(&served) {
            v.served = Some(served);
            v.recompute();
        }
        lost
    });
    if let Some(lost) = lost.filter(|l| !l.is_empty()) {
        purge(ctx, lost, "no longer served");
    }
}

fn purge(ctx: Ctx, slots: SlotSet, why: &str) {
    let Some(m) = state::try_get() else { return };
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

/// The main thread's time a cron refresh may take is 1/`COST_SHARE`: after
/// a refresh that took `t`, the next waits `t * COST_SHARE`.
pub const COST_SHARE: u32 = 1000;

/// When the next cron refresh may run (main thread only).
static NEXT_REFRESH: LockedCell<Option<Instant>> = LockedCell::new(None);

/// The longest pause between two cron refreshes, whatever they cost.
pub const MAX_PAUSE: Duration = Duration::from_secs(1);

/// How long after a refresh that took `cost` (main-thread CPU time: a
/// preempted thread does not count the wait) the next may start: a 20 µs
/// read (a few nodes) runs at every tick, a 1 ms one (hundreds of nodes)
/// once a second, and none waits longer than [`MAX_PAUSE`].
pub fn refresh_pause(cost: Duration) -> Duration {
    cost.saturating_mul(COST_SHARE).min(MAX_PAUSE)
}

/// Server cron tick (`CronLoop` event).
pub fn on_cron(lock: &ServerLock, ctx: Ctx) {
    if !enabled() {
        return;
    }
    let now = Instant::now();
    if NEXT_REFRESH.get(lock).is_some_and(|next| now < next) {
        return;
    }
    let cpu = server::deletion::thread_cpu_us();
    refresh(ctx);
    let cost = Duration::from_micros(server::deletion::thread_cpu_us().saturating_sub(cpu));
    NEXT_REFRESH.replace(lock, Some(now + refresh_pause(cost)));
}

/// An atomic-slot-migration event (Valkey 9+) about `slots`.
pub fn on_slot_migration(ctx: Ctx, subevent: u64, slots: SlotSet) {
    if !enabled() {
        return;
    }
    match subevent {
        host::ASM_IMPORT_STARTED => with_view(|v| {
            v.importing = v.importing.union(&slots);
            v.recompute();
        }),
        host::ASM_IMPORT_COMPLETED => {
            // The slots are this node's now: shown at once, whether or not
            // the topology already says so (the next refresh confirms).
            with_view(|v| {
                v.importing = v.importing.minus(&slots);
                v.served = Some(v.served.take().unwrap_or_default().union(&slots));
                let owned = v.owned.as_deref().cloned().unwrap_or_default();
                v.owned = Some(Arc::new(owned.union(&slots)));
                v.recompute();
            });
        }
        host::ASM_IMPORT_ABORTED => {
            let gone = with_view(|v| {
                v.importing = v.importing.minus(&slots);
                v.recompute();
                slots.minus(v.served.as_ref().unwrap_or(&SlotSet::new()))
            });
            if !gone.is_empty() {
                purge(ctx, gone, "import cancelled");
            }
        }
        host::ASM_EXPORT_COMPLETED => refresh(ctx),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(20, 20)]
    #[case(100, 100)]
    #[case(1_000, 1_000)]
    #[case(5_000, 1_000)]
    fn a_refresh_waits_a_thousand_times_what_it_took_at_most_a_second(
        #[case] took_us: u64,
        #[case] pause_ms: u64,
    ) {
        let pause = refresh_pause(Duration::from_micros(took_us));
        assert_eq!(pause, Duration::from_millis(pause_ms));
    }

    #[test]
    fn an_absurd_cost_saturates_instead_of_overflowing() {
        assert_eq!(refresh_pause(Duration::MAX), MAX_PAUSE);
    }
}
