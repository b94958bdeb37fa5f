//! The router: every server subscription of the module, in one place, each
//! callback handing its event to the subsystem that owns the work. The
//! server keeps one subscription per event and module, so nothing else in
//! the crate may subscribe.
//!
//! - keyspace notifications, FlushDB, SwapDB, Loading: `keyspace::tracking`
//!   (keeps the index true);
//! - the `Key` event (a key unlinked or overwritten): `keyspace::deleted`;
//! - cron: `keyspace` (cluster view refresh, idle drop);
//! - replication's async load: `keyspace::replication`;
//! - atomic slot migration (Valkey), slot migration and trim (Redis 8.4+):
//!   `keyspace::cluster`;
//! - the event loop's turns (subscribed on first use, by an iteration
//!   opened inside a script): `server::expiry` (a floor on scripts' clock).
//!
//! - the Valkey 8 client-database workaround's command filter:
//!   `keyspace::clientdb`.
//!
//! Each callback loads the `Module` once (`module::try_get`) and hands the
//! subsystem its struct and the shared state. Owns only the subscriptions
//! (and whether the `Key` event is on).

use crate::keyspace::clientdb::{ClientDb, RestoreDb};
use crate::keyspace::{self, cluster, deleted, replication, tracking};
use crate::module;
use crate::server::clientdb::FilterCall;
use crate::server::entry::{
    guarded, keyspace_event, server_event, CommandFilter, KeyspaceEvent, ServerEvent,
};
use crate::server::locked::ServerLock;
use crate::server::subscribe as sub;
use crate::server::{self, Ctx};
use redis_module::raw;
use std::os::raw::{c_char, c_int, c_void};

/// Subscribes to notifications and server events.
pub fn subscribe(ctx: Ctx, m: &module::Module) -> Result<(), String> {
    m.keyspace.tracking.init()?;
    // NOTIFY_ALL covers generic/string/list/set/hash/zset/stream/module and
    // expired/evicted events. LOADED: keys read from an RDB. NEW: every key
    // creation, including DEBUG POPULATE's, which fires nothing else.
    let types =
        raw::REDISMODULE_NOTIFY_ALL | raw::REDISMODULE_NOTIFY_LOADED | raw::REDISMODULE_NOTIFY_NEW;
    sub::keyspace_events(ctx, types, Some(keyspace_event::<Notification>))?;
    if !sub::has_server_events() {
        return Err("no server event API".into());
    }
    let events: [(u64, raw::RedisModuleEventCallback); 3] = [
        (
            raw::REDISMODULE_EVENT_FLUSHDB,
            Some(server_event::<FlushDb>),
        ),
        (raw::REDISMODULE_EVENT_SWAPDB, Some(server_event::<SwapDb>)),
        (
            raw::REDISMODULE_EVENT_LOADING,
            Some(server_event::<Loading>),
        ),
    ];
    for (id, cb) in events {
        if sub::server_event(ctx, id, cb) != Some(true) {
            return Err(format!("cannot subscribe to server event {id}"));
        }
    }
    // Cluster and replication support: events this server may not have.
    let mut optional: Vec<(u64, raw::RedisModuleEventCallback)> =
        vec![(raw::REDISMODULE_EVENT_CRON_LOOP, Some(server_event::<Cron>))];
    optional.push((
        raw::REDISMODULE_EVENT_REPL_ASYNC_LOAD,
        Some(server_event::<AsyncLoad>),
    ));
    if cluster::module_options(ctx) != 0 {
        optional.push((
            server::host::EVENT_ATOMIC_SLOT_MIGRATION,
            Some(server_event::<SlotMigration>),
        ));
    } else if !server::host::is_valkey(ctx) {
        // Redis 8.4+: what the module handles is declared by subscribing.
        // Not to `key_trimmed` notifications: without a subscriber, the
        // server keeps its fast background trim, and the trim event names
        // the slots.
        optional.push((
            server::host::EVENT_REDIS_SLOT_MIGRATION,
            Some(server_event::<RedisSlotMigration>),
        ));
        optional.push((
            server::host::EVENT_REDIS_SLOT_TRIM,
            Some(server_event::<RedisSlotTrim>),
        ));
    }
    for (id, cb) in optional {
        // An unknown event is refused, which is fine.
        if sub::server_event(ctx, id, cb) != Some(true) {
            server::log(
                ctx,
                "notice",
                &format!("snapscan: no server event {id} here"),
            );
        }
    }
    m.keyspace
        .deleted
        .set_key_event(subscribe_key_event(ctx, true));
    Ok(())
}

/// Registers the Valkey 8 client-database workaround's command filter
/// where the server needs it (see `keyspace::clientdb`).
pub fn register_client_db_filter(ctx: Ctx, m: &module::Module) {
    if ClientDb::needed(server::host::valkey_major(ctx))
        && server::clientdb::register_filter::<ClientDbFilter>(ctx)
    {
        m.keyspace.clientdb.enable();
    }
}

/// Whether the event loop's turns are followed (see [`follow_loop_turns`]).
/// Global for now: a candidate for a field of the `Module` (docs/DESIGN.md,
/// "State ownership").
static LOOP_TURNS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Follows the event loop's turns from now on (main thread), for a floor
/// on the frozen clock of scripts (`server::expiry::script_clock_floor_ms`).
/// Subscribed on first use, so a server that never opens an iteration
/// inside a script pays nothing per turn; once subscribed, one callback per
/// turn (two clock reads).
pub fn follow_loop_turns(ctx: Ctx) {
    if LOOP_TURNS.swap(true, std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    if sub::server_event(
        ctx,
        raw::REDISMODULE_EVENT_EVENTLOOP,
        Some(server_event::<LoopTurn>),
    ) != Some(true)
    {
        server::log(ctx, "notice", "snapscan: no event loop event here");
    }
}

/// Subscribes to the `Key` server event (`on`) or unsubscribes; true if the
/// server accepted.
fn subscribe_key_event(ctx: Ctx, on: bool) -> bool {
    let cb: raw::RedisModuleEventCallback = if on {
        Some(server_event::<KeyUnlinked>)
    } else {
        None
    };
    // A NULL callback unsubscribes.
    sub::server_event(ctx, raw::REDISMODULE_EVENT_KEY, cb) == Some(true)
}

/// No `Key` event subscription while a dataset loads: a merging load
/// (`DEBUG RELOAD NOFLUSH MERGE`) deletes duplicate keys whose name lives on
/// the server's stack, and the server crashes retaining it for the event
/// (Redis 8.2, Valkey 9.1). Deletions during a load need no event: the
/// "loaded" notification re-reads the key. (Called from the Loading event:
/// the server's iteration over its listeners then stands on the Loading
/// listener, whose next node is another of ours subscribed before the Key
/// listener, so removing the Key listener never frees the node it holds.)
fn key_event_during_load(ctx: Ctx, m: &module::Module, subevent: u64) {
    if !m.keyspace.deleted.key_event() {
        return;
    }
    match subevent {
        raw::REDISMODULE_SUBEVENT_LOADING_RDB_START
        | raw::REDISMODULE_SUBEVENT_LOADING_AOF_START
        | raw::REDISMODULE_SUBEVENT_LOADING_REPL_START => {
            subscribe_key_event(ctx, false);
        }
        raw::REDISMODULE_SUBEVENT_LOADING_ENDED | raw::REDISMODULE_SUBEVENT_LOADING_FAILED => {
            subscribe_key_event(ctx, true);
        }
        _ => {}
    }
}

// One type per server callback, each one line handing the event on.

struct Cron;
impl ServerEvent for Cron {
    fn on(lock: &ServerLock, ctx: Ctx, _subevent: u64, _data: *mut c_void) {
        let Some(m) = module::try_get() else { return };
        guarded(ctx, "cron", || keyspace::on_cron(lock, ctx, m, &m.keyspace));
    }
}

struct LoopTurn;
impl ServerEvent for LoopTurn {
    fn on(_lock: &ServerLock, _ctx: Ctx, subevent: u64, _data: *mut c_void) {
        if subevent == raw::REDISMODULE_SUBEVENT_EVENTLOOP_AFTER_SLEEP {
            server::expiry::on_loop_turn();
        }
    }
}

struct KeyUnlinked;
impl ServerEvent for KeyUnlinked {
    fn on(lock: &ServerLock, ctx: Ctx, subevent: u64, data: *mut c_void) {
        // Every SET over an existing key fires an overwrite: it only matters
        // to watched copies and running deletions, so most return here,
        // before asking the server for the key's name.
        let Some(m) = module::try_get() else { return };
        if subevent == raw::REDISMODULE_SUBEVENT_KEY_OVERWRITTEN && !m.watches.any() {
            return;
        }
        guarded(ctx, "key unlink", || {
            server::host::with_key_event_target(data, |db, name| {
                deleted::on_key_unlinked(lock, m, &m.keyspace, subevent, db, name)
            });
        });
    }
}

struct AsyncLoad;
impl ServerEvent for AsyncLoad {
    fn on(lock: &ServerLock, ctx: Ctx, subevent: u64, _data: *mut c_void) {
        let Some(m) = module::try_get() else { return };
        guarded(ctx, "async load", || {
            replication::on_async_load(lock, ctx, m, &m.keyspace, subevent)
        });
    }
}

struct SlotMigration;
impl ServerEvent for SlotMigration {
    fn on(_lock: &ServerLock, ctx: Ctx, subevent: u64, data: *mut c_void) {
        let Some(m) = module::try_get() else { return };
        guarded(ctx, "slot migration", || {
            m.keyspace.cluster.on_slot_migration(
                ctx,
                m,
                subevent,
                server::host::asm_event_slots(data),
            )
        });
    }
}

struct RedisSlotMigration;
impl ServerEvent for RedisSlotMigration {
    fn on(_lock: &ServerLock, ctx: Ctx, subevent: u64, data: *mut c_void) {
        let Some(m) = module::try_get() else { return };
        guarded(ctx, "slot migration", || {
            m.keyspace.cluster.on_redis_slot_migration(
                ctx,
                m,
                subevent,
                server::host::redis_asm_event_slots(data),
            )
        });
    }
}

struct RedisSlotTrim;
impl ServerEvent for RedisSlotTrim {
    fn on(_lock: &ServerLock, ctx: Ctx, subevent: u64, data: *mut c_void) {
        let Some(m) = module::try_get() else { return };
        guarded(ctx, "slot trim", || {
            m.keyspace.cluster.on_redis_slot_trim(
                ctx,
                m,
                subevent,
                server::host::redis_trim_event_slots(data),
            )
        });
    }
}

struct Notification;
impl KeyspaceEvent for Notification {
    #[inline(always)]
    fn on(
        lock: &ServerLock,
        ctx: Ctx,
        type_: c_int,
        event: *const c_char,
        key: *mut raw::RedisModuleString,
    ) {
        let Some(m) = module::try_get() else { return };
        let _restore = RestoreDb::new(lock, ctx, &m.keyspace.clientdb); // Valkey 8 bug, see clientdb.rs
        guarded(ctx, "keyspace event", || {
            tracking::on_keyspace_event(lock, ctx, type_, event, key, m, &m.keyspace)
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

struct FlushDb;
impl ServerEvent for FlushDb {
    fn on(lock: &ServerLock, ctx: Ctx, subevent: u64, data: *mut c_void) {
        let Some(m) = module::try_get() else { return };
        guarded(ctx, "flushdb", || {
            tracking::on_flushdb(lock, m, &m.keyspace, subevent, data)
        });
    }
}

struct SwapDb;
impl ServerEvent for SwapDb {
    fn on(lock: &ServerLock, ctx: Ctx, _subevent: u64, data: *mut c_void) {
        let Some(m) = module::try_get() else { return };
        guarded(ctx, "swapdb", || {
            tracking::on_swapdb(lock, m, &m.keyspace, data)
        });
    }
}

struct Loading;
impl ServerEvent for Loading {
    fn on(lock: &ServerLock, ctx: Ctx, subevent: u64, _data: *mut c_void) {
        let Some(m) = module::try_get() else { return };
        guarded(ctx, "loading", || {
            key_event_during_load(ctx, m, subevent);
            tracking::on_loading(lock, ctx, m, &m.keyspace, subevent)
        });
    }
}
