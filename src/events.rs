//! The router: every server callback of the module, each handing its event
//! to the subsystem that owns the work: keyspace notifications, FlushDB,
//! SwapDB, Loading to `keyspace::tracking` (keeps the index true); the `Key`
//! event to `keyspace::deleted`; cron to `keyspace`; replication's async
//! load to `keyspace::replication`; slot migration and trim (Valkey 9's,
//! Redis 8.4's) to `keyspace::cluster`; the event loop's turns to
//! `server::expiry::LoopTurns`; the post-notification job that reads a parked
//! key (cluster mode) to `keyspace::tracking`; the Valkey 8 command filter to
//! `keyspace::clientdb`.
//!
//! Each loads the `Module` once (`module::try_get`), keeps panics from
//! crossing into the server, and hands the subsystem its struct and the
//! shared state. Owns only the callbacks ([`ROUTES`]); `keyspace::subscribe`
//! subscribes them (`server::subscribe::Subscriptions`).

use crate::keyspace::{self, deleted, replication, tracking, Keyspace};
use crate::module::{self, Module};
use crate::server::clientdb::FilterCall;
use crate::server::entry::{
    command_filter, guarded, keyspace_event, post_job, server_event, CommandFilter, KeyspaceEvent,
    PostJob, ServerEvent,
};
use crate::server::locked::ServerLock;
use crate::server::subscribe::Routes;
use crate::server::Ctx;
use redis_module::raw;
use std::os::raw::{c_char, c_int, c_void};

/// The router's callbacks, one per subscription.
pub const ROUTES: Routes = Routes {
    notification: Some(keyspace_event::<Notification>),
    flushdb: Some(server_event::<FlushDb>),
    swapdb: Some(server_event::<SwapDb>),
    loading: Some(server_event::<Loading>),
    cron: Some(server_event::<Cron>),
    async_load: Some(server_event::<AsyncLoad>),
    slot_migration: Some(server_event::<SlotMigration>),
    redis_slot_migration: Some(server_event::<RedisSlotMigration>),
    redis_slot_trim: Some(server_event::<RedisSlotTrim>),
    key_unlinked: Some(server_event::<KeyUnlinked>),
    loop_turn: Some(server_event::<LoopTurn>),
    client_db_filter: Some(command_filter::<ClientDbFilter>),
    settle_job: Some(post_job::<SettleJob>),
};

/// Hands the `Module` and its `Keyspace` to `f`, a panic in it logged as
/// `what`'s.
#[inline(always)]
fn route(ctx: Ctx, what: &str, f: impl FnOnce(&'static Module, &'static Keyspace)) {
    if let Some(m) = module::try_get() {
        guarded(ctx, what, || f(m, &m.keyspace));
    }
}

// One type per server callback, each one line handing the event on.

struct Notification;
impl KeyspaceEvent for Notification {
    #[inline(always)]
    fn on(
        lock: &ServerLock,
        ctx: Ctx,
        ty: c_int,
        ev: *const c_char,
        key: *mut raw::RedisModuleString,
    ) {
        route(ctx, "keyspace event", |m, ks| {
            tracking::on_keyspace_event(lock, ctx, ty, ev, key, m, ks)
        });
    }
}

struct SettleJob;
impl PostJob for SettleJob {
    fn run(lock: &ServerLock, ctx: Ctx) {
        route(ctx, "settle job", |m, ks| {
            tracking::on_settle_job(lock, m, ks)
        });
    }
}

struct KeyUnlinked;
impl ServerEvent for KeyUnlinked {
    fn on(lock: &ServerLock, ctx: Ctx, subevent: u64, data: *mut c_void) {
        route(ctx, "key unlink", |m, ks| {
            deleted::on_key_event(lock, m, ks, subevent, data)
        });
    }
}

struct FlushDb;
impl ServerEvent for FlushDb {
    fn on(lock: &ServerLock, ctx: Ctx, subevent: u64, data: *mut c_void) {
        route(ctx, "flushdb", |m, ks| {
            tracking::on_flushdb(lock, m, ks, subevent, data)
        });
    }
}

struct SwapDb;
impl ServerEvent for SwapDb {
    fn on(lock: &ServerLock, ctx: Ctx, _subevent: u64, data: *mut c_void) {
        route(ctx, "swapdb", |m, ks| {
            tracking::on_swapdb(lock, m, ks, data)
        });
    }
}

struct Loading;
impl ServerEvent for Loading {
    fn on(lock: &ServerLock, ctx: Ctx, subevent: u64, _data: *mut c_void) {
        route(ctx, "loading", |m, ks| {
            tracking::on_loading(lock, ctx, m, ks, subevent)
        });
    }
}

struct Cron;
impl ServerEvent for Cron {
    fn on(lock: &ServerLock, ctx: Ctx, _subevent: u64, _data: *mut c_void) {
        route(ctx, "cron", |m, ks| keyspace::on_cron(lock, ctx, m, ks));
    }
}

struct AsyncLoad;
impl ServerEvent for AsyncLoad {
    fn on(lock: &ServerLock, ctx: Ctx, subevent: u64, _data: *mut c_void) {
        route(ctx, "async load", |m, ks| {
            replication::on_async_load(lock, ctx, m, ks, subevent)
        });
    }
}

struct SlotMigration;
impl ServerEvent for SlotMigration {
    fn on(lock: &ServerLock, ctx: Ctx, subevent: u64, data: *mut c_void) {
        route(ctx, "slot migration", |m, ks| {
            keyspace::before_slot_event(lock, m, ks).on_slot_migration(ctx, m, subevent, data)
        });
    }
}

struct RedisSlotMigration;
impl ServerEvent for RedisSlotMigration {
    fn on(lock: &ServerLock, ctx: Ctx, subevent: u64, data: *mut c_void) {
        route(ctx, "slot migration", |m, ks| {
            keyspace::before_slot_event(lock, m, ks).on_redis_slot_migration(ctx, m, subevent, data)
        });
    }
}

struct RedisSlotTrim;
impl ServerEvent for RedisSlotTrim {
    fn on(lock: &ServerLock, ctx: Ctx, subevent: u64, data: *mut c_void) {
        route(ctx, "slot trim", |m, ks| {
            keyspace::before_slot_event(lock, m, ks).on_redis_slot_trim(ctx, m, subevent, data)
        });
    }
}

struct LoopTurn;
impl ServerEvent for LoopTurn {
    fn on(lock: &ServerLock, ctx: Ctx, subevent: u64, _data: *mut c_void) {
        route(ctx, "loop turn", |m, _| {
            m.loop_turns.on_event(lock, subevent)
        });
    }
}

struct ClientDbFilter;
impl CommandFilter for ClientDbFilter {
    fn on(lock: &ServerLock, call: &FilterCall) {
        if let Some(m) = module::try_get() {
            m.keyspace.clientdb.on_command(lock, call);
        }
    }
}
