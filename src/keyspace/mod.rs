//! Keeping the index true to the keyspace: what each server event means for
//! it ([`tracking`]: notifications, flushes, swaps, loads; [`deleted`]: the
//! `Key` event), building it from the data at load ([`backfill`]),
//! dropping it while unused ([`idle`]), replicas' async loads
//! ([`replication`]) and the slots this node serves ([`cluster`]).
//!
//! Cross-subsystem orchestration lives here, in one place: subscribing the
//! router's callbacks at OnLoad ([`subscribe`]), the cron tick, dropping
//! the index while idle (and forgetting what the notifications kept for
//! it), rebuilding it when a call needs it.
//!
//! Owns [`Keyspace`], the state of these subsystems (one struct each, and
//! the server subscriptions that feed them), a field of the `Module`
//! value: its entry points are handed it with the shared state (`&Shared`)
//! by the event router and the command handlers.
//!
//! May touch: the shared state (`state`), the server layer, the config;
//! never the command handlers nor the event router above it (the router's
//! callbacks are handed in as `server::subscribe::Routes`).

pub mod backfill;
pub mod clientdb;
pub mod cluster;
pub mod deleted;
pub mod idle;
pub mod replication;
pub mod tracking;

use crate::index::Op;
use crate::server::locked::ServerLock;
use crate::server::subscribe::{Routes, Subscriptions};
use crate::server::Ctx;
use crate::state::Shared;

/// The state of keeping the index true, one struct per subsystem.
#[derive(Default)]
pub struct Keyspace {
    /// Dropping the index while unused.
    pub idle: idle::Idle,
    /// Notifications: the probe context and the pending new key.
    pub tracking: tracking::Tracking,
    /// The `Key` event: the last logged deletion.
    pub deleted: deleted::Deleted,
    /// Building the index from the data.
    pub backfill: backfill::Backfill,
    /// Replicas' async loads.
    pub replication: replication::Replication,
    /// The slots this node serves.
    pub cluster: cluster::ClusterView,
    /// The Valkey 8 client-database workaround.
    pub clientdb: clientdb::ClientDb,
    /// The server subscriptions (the router's callbacks, the `Key` event
    /// around loads, the event loop's turns).
    pub subscriptions: Subscriptions,
}

/// Subscribes the router's callbacks to notifications and server events
/// (OnLoad), once the tracking can read keys.
pub fn subscribe(ctx: Ctx, ks: &Keyspace, routes: Routes) -> Result<(), String> {
    // Cluster mode where keys are looked up per slot: pending keys are
    // read within their execution unit (tracking::park).
    let per_unit = crate::server::host::cluster_mode(ctx) && ks.subscriptions.has_post_jobs();
    // A server without side-effect-free opens: "expire" events are read
    // after their command (tracking::on_keyspace_event).
    let defer_expire = !crate::server::expiry::supported();
    ks.tracking.init(per_unit, defer_expire)?;
    let asm = cluster::module_options(ctx) != 0;
    ks.subscriptions.subscribe(ctx, routes, asm)
}

/// The server's cron tick (main thread): the cluster view's refresh and
/// the idle drop of the index.
/// Before a slot event (migration, trim): the pending key is logged first,
/// so that a purge of its slot, recorded next, removes it (a background
/// trim then deletes the slot's keys without an event about each: a read
/// after the purge would put the key back for good). Returns the cluster
/// view the event is for.
pub fn before_slot_event<'a>(
    lock: &ServerLock,
    m: &Shared,
    ks: &'a Keyspace,
) -> &'a cluster::ClusterView {
    tracking::settle(lock, m, ks);
    &ks.cluster
}

pub fn on_cron(lock: &ServerLock, ctx: Ctx, m: &'static Shared, ks: &'static Keyspace) {
    ks.cluster.on_cron(lock, ctx, m);
    match ks.idle.on_cron(lock, m, ks.backfill.progress().running) {
        idle::Tick::Nothing => {}
        idle::Tick::Drop => drop_index(lock, ctx, m, ks),
        idle::Tick::Rebuild => {
            rebuild_index(lock, ctx, m, ks);
        }
    }
}

/// A SNAPSHOT.SCAN or SNAPSHOT.UNLINK call: the index is in use. If it
/// was dropped and the call needs it (`opening` a snapshot), its rebuild
/// starts here; `Err` if it cannot start (the index stays dropped).
pub fn in_use(
    lock: &ServerLock,
    ctx: Ctx,
    m: &'static Shared,
    ks: &'static Keyspace,
    opening: bool,
) -> Result<(), &'static str> {
    if ks.idle.note_use(lock, m) && opening && !rebuild_index(lock, ctx, m, ks) {
        return Err("ERR snapscan: the index was dropped for want of scans and its rebuild could not start; retry later");
    }
    Ok(())
}

/// Drops the index while nobody scans: what the notifications kept between
/// two events of one command belongs to the index and is forgotten with it,
/// and the indexer frees the trees (open iterations keep their snapshots).
fn drop_index(lock: &ServerLock, ctx: Ctx, m: &Shared, ks: &Keyspace) {
    ks.idle.mark_dropped(lock);
    ks.tracking.forget_pending(lock);
    ks.deleted.forget_gone(lock);
    m.push(Op::FlushAll);
    crate::server::log(
        ctx,
        "notice",
        "snapscan: no scan for snapshot.index-idle-timeout seconds: index dropped until the next SNAPSHOT.SCAN",
    );
}

/// Starts rebuilding a dropped index; false if the walk could not start
/// (then the index stays dropped: an empty index must not be served as
/// complete).
fn rebuild_index(lock: &ServerLock, ctx: Ctx, m: &'static Shared, ks: &'static Keyspace) -> bool {
    if backfill::needed(ctx, m.databases) {
        ks.backfill.start(ctx, m);
        if !ks.backfill.progress().running {
            crate::server::log(
                ctx,
                "warning",
                "snapscan: cannot start rebuilding the index",
            );
            return false;
        }
    }
    ks.idle.mark_rebuilt(lock, m);
    crate::server::log(ctx, "notice", "snapscan: rebuilding the index");
    true
}
