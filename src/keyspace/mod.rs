//! Keeping the index true to the keyspace: what each server event means for
//! it ([`tracking`]: notifications, flushes, swaps, loads; [`deleted`]: the
//! `Key` event), building it from the data at load ([`backfill`]),
//! dropping it while unused ([`idle`]), replicas' async loads
//! ([`replication`]) and the slots this node serves ([`cluster`]).
//!
//! May touch: the index (through `state`), the server layer, the config;
//! never the command handlers nor the event router above it.

pub mod backfill;
pub mod clientdb;
pub mod cluster;
pub mod deleted;
pub mod idle;
pub mod replication;
pub mod tracking;

use crate::server::locked::ServerLock;
use crate::server::Ctx;

/// The server's cron tick (main thread): the cluster view's refresh and
/// the idle drop of the index.
pub fn on_cron(lock: &ServerLock, ctx: Ctx) {
    cluster::on_cron(lock, ctx);
    if let Some(m) = crate::state::try_get() {
        idle::on_cron(lock, ctx, m);
    }
}
