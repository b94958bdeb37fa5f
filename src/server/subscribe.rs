//! Subscribing to keyspace notifications and server events, and reading
//! the payloads the server hands to their callbacks: the raw side of
//! `events.rs`. [`Subscriptions`] holds the router's callbacks
//! ([`Routes`]) and subscribes them: every event at OnLoad, the `Key`
//! event off and back on around a load, the event loop's turns on first
//! use.

use super::{api, host, log, Ctx};
use redis_module::raw;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// A server event callback (the router's `entry::server_event::<E>`).
pub type EventCallback = raw::RedisModuleEventCallback;

/// A post-notification job callback (the router's `entry::post_job::<J>`).
pub type JobCallback = raw::RedisModulePostNotificationJobFunc;

/// The router's callbacks (`events::ROUTES`), one per subscription.
#[derive(Clone, Copy)]
pub struct Routes {
    pub notification: raw::RedisModuleNotificationFunc,
    pub flushdb: EventCallback,
    pub swapdb: EventCallback,
    pub loading: EventCallback,
    pub cron: EventCallback,
    pub async_load: EventCallback,
    pub slot_migration: EventCallback,
    pub redis_slot_migration: EventCallback,
    pub redis_slot_trim: EventCallback,
    pub key_unlinked: EventCallback,
    pub loop_turn: EventCallback,
    pub client_db_filter: raw::RedisModuleCommandFilterFunc,
    /// Reads the pending key at the end of the execution unit that parked
    /// it (cluster mode: `keyspace::tracking`).
    pub settle_job: JobCallback,
}

/// The module's subscriptions (a field of `keyspace::Keyspace`): the
/// router's callbacks, kept from OnLoad for the subscriptions made later,
/// whether the `Key` event is on, whether the event loop's turns are
/// followed. The server keeps one subscription per event and module, so
/// no event subscribed here may be subscribed elsewhere in the crate.
///
/// Locking: the callbacks are set once at OnLoad; the flags are relaxed
/// atomics, written at OnLoad and on the main thread.
#[derive(Default)]
pub struct Subscriptions {
    routes: OnceLock<Routes>,
    /// Whether the server has the `Key` event (Redis 7.2+, Valkey) and
    /// accepted the subscription at OnLoad.
    key_event: AtomicBool,
    /// Whether the event loop's turns are followed (see
    /// [`Subscriptions::follow_loop_turns`]).
    loop_turns: AtomicBool,
}

impl Subscriptions {
    /// Subscribes `routes` to notifications and server events (OnLoad).
    /// `asm`: the module declared Valkey's atomic slot migration.
    pub fn subscribe(&self, ctx: Ctx, routes: Routes, asm: bool) -> Result<(), String> {
        let routes = *self.routes.get_or_init(|| routes);
        // NOTIFY_ALL covers generic/string/list/set/hash/zset/stream/module and
        // expired/evicted events. LOADED: keys read from an RDB. NEW: every key
        // creation, including DEBUG POPULATE's, which fires nothing else.
        let types = raw::REDISMODULE_NOTIFY_ALL
            | raw::REDISMODULE_NOTIFY_LOADED
            | raw::REDISMODULE_NOTIFY_NEW;
        keyspace_events(ctx, types, routes.notification)?;
        if !has_server_events() {
            return Err("no server event API".into());
        }
        let required = [
            (raw::REDISMODULE_EVENT_FLUSHDB, routes.flushdb),
            (raw::REDISMODULE_EVENT_SWAPDB, routes.swapdb),
            (raw::REDISMODULE_EVENT_LOADING, routes.loading),
        ];
        for (id, cb) in required {
            if server_event(ctx, id, cb) != Some(true) {
                return Err(format!("cannot subscribe to server event {id}"));
            }
        }
        // Cluster and replication support: events this server may not have.
        let mut optional = vec![
            (raw::REDISMODULE_EVENT_CRON_LOOP, routes.cron),
            (raw::REDISMODULE_EVENT_REPL_ASYNC_LOAD, routes.async_load),
        ];
        if asm {
            optional.push((host::EVENT_ATOMIC_SLOT_MIGRATION, routes.slot_migration));
        } else if !host::is_valkey(ctx) {
            // Redis 8.4+: what the module handles is declared by subscribing.
            // Not to `key_trimmed` notifications: without a subscriber, the
            // server keeps its fast background trim, and the trim event names
            // the slots.
            optional.push((
                host::EVENT_REDIS_SLOT_MIGRATION,
                routes.redis_slot_migration,
            ));
            optional.push((host::EVENT_REDIS_SLOT_TRIM, routes.redis_slot_trim));
        }
        for (id, cb) in optional {
            // An unknown event is refused, which is fine.
            if server_event(ctx, id, cb) != Some(true) {
                log(
                    ctx,
                    "notice",
                    &format!("snapscan: no server event {id} here"),
                );
            }
        }
        let on = self.key_event(ctx, true);
        self.key_event.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Subscribes to the `Key` server event (`on`) or unsubscribes; true if
    /// the server accepted.
    fn key_event(&self, ctx: Ctx, on: bool) -> bool {
        let Some(routes) = self.routes.get() else {
            return false;
        };
        // A NULL callback unsubscribes.
        let cb = if on { routes.key_unlinked } else { None };
        server_event(ctx, raw::REDISMODULE_EVENT_KEY, cb) == Some(true)
    }

    /// The Loading event: no `Key` event subscription while a dataset loads.
    /// A merging load (`DEBUG RELOAD NOFLUSH MERGE`) deletes duplicate keys
    /// whose name lives on the server's stack, and the server crashes
    /// retaining it for the event (Redis 8.2, Valkey 9.1). Deletions during a
    /// load need no event: the "loaded" notification re-reads the key.
    /// (Called from the Loading event: the server's iteration over its
    /// listeners then stands on the Loading listener, whose next node is
    /// another of ours subscribed before the Key listener, so removing the
    /// Key listener never frees the node it holds.)
    pub fn on_loading(&self, ctx: Ctx, subevent: u64) {
        if !self.key_event.load(Ordering::Relaxed) {
            return;
        }
        match subevent {
            raw::REDISMODULE_SUBEVENT_LOADING_RDB_START
            | raw::REDISMODULE_SUBEVENT_LOADING_AOF_START
            | raw::REDISMODULE_SUBEVENT_LOADING_REPL_START => {
                self.key_event(ctx, false);
            }
            raw::REDISMODULE_SUBEVENT_LOADING_ENDED | raw::REDISMODULE_SUBEVENT_LOADING_FAILED => {
                self.key_event(ctx, true);
            }
            _ => {}
        }
    }

    /// Follows the event loop's turns from now on (main thread), for a
    /// floor on the frozen clock of scripts (`expiry::LoopTurns`).
    /// Subscribed on first use, so a server that never opens an iteration
    /// inside a script pays nothing per turn; once subscribed, one callback
    /// per turn (two clock reads).
    pub fn follow_loop_turns(&self, ctx: Ctx) {
        let Some(routes) = self.routes.get() else {
            return; // before OnLoad subscribed: no callback to follow them with
        };
        if self.loop_turns.swap(true, Ordering::Relaxed) {
            return;
        }
        if server_event(ctx, raw::REDISMODULE_EVENT_EVENTLOOP, routes.loop_turn) != Some(true) {
            log(ctx, "notice", "snapscan: no event loop event here");
        }
    }

    /// Whether this server runs post-notification jobs (Redis 7.2+,
    /// Valkey).
    pub fn has_post_jobs(&self) -> bool {
        api!(RedisModule_AddPostNotificationJob).is_some()
    }

    /// Asks the server to run the router's settle job at the end of the
    /// running execution unit (a notification callback's `ctx`); false if
    /// it refuses (while loading, on a read-only replica) or has no such
    /// API.
    #[allow(
        clippy::not_unsafe_ptr_arg_deref,
        reason = "ctx is the live context of the running notification callback (server lock held)"
    )]
    pub fn add_settle_job(&self, ctx: Ctx) -> bool {
        let (Some(add), Some(routes)) =
            (api!(RedisModule_AddPostNotificationJob), self.routes.get())
        else {
            return false;
        };
        // SAFETY: ctx is the running callback's context; the job carries no
        // private data (NULL, no free function).
        let rc = unsafe { add(ctx, routes.settle_job, std::ptr::null_mut(), None) };
        rc == raw::REDISMODULE_OK as c_int
    }
}

/// Subscribes `cb` to the keyspace notifications in `types` (OnLoad only).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the OnLoad context the server passed to the module, live for this call"
)]
pub fn keyspace_events(
    ctx: Ctx,
    types: c_int,
    cb: raw::RedisModuleNotificationFunc,
) -> Result<(), &'static str> {
    let sub = api!(RedisModule_SubscribeToKeyspaceEvents).ok_or("no keyspace event API")?;
    // SAFETY: ctx is the OnLoad context; the callback is a valid extern fn.
    if unsafe { sub(ctx, types, cb) } != raw::REDISMODULE_OK as c_int {
        return Err("cannot subscribe to keyspace events");
    }
    Ok(())
}

/// Whether this server has the server event API.
pub fn has_server_events() -> bool {
    api!(RedisModule_SubscribeToServerEvent).is_some()
}

/// Subscribes `cb` to server event `id` (a `None` callback unsubscribes).
/// `None` without the API; `Some(false)` if the server refuses (an event it
/// does not know).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is a module context live for this call: OnLoad's or a server event callback's"
)]
pub fn server_event(ctx: Ctx, id: u64, cb: raw::RedisModuleEventCallback) -> Option<bool> {
    let server = api!(RedisModule_SubscribeToServerEvent)?;
    let ev = raw::RedisModuleEvent { id, dataver: 1 };
    // SAFETY: ctx is a module context (OnLoad or a server event's); ev names
    // a server event (an unknown one is refused); a NULL callback
    // unsubscribes.
    Some(unsafe { server(ctx, ev, cb) } == raw::REDISMODULE_OK as c_int)
}

/// The event name of a notification ("set", "del", ...).
#[inline]
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "event is the name the server passed to the running notification callback (or NULL), NUL-terminated and live for the callback"
)]
pub fn event_name<'a>(event: *const c_char) -> &'a [u8] {
    if event.is_null() {
        return b"";
    }
    // SAFETY: the server passes a NUL-terminated event name that lives for
    // the callback.
    unsafe { CStr::from_ptr(event) }.to_bytes()
}

/// The database a FlushDB event names (negative: all of them), from the
/// payload the server passed to the running FlushDB callback; `None` for a
/// NULL payload.
pub fn flush_dbnum(data: *mut c_void) -> Option<i32> {
    if data.is_null() {
        return None;
    }
    // SAFETY: for FlushDB events the server passes a RedisModuleFlushInfo.
    Some(unsafe { (*data.cast::<raw::RedisModuleFlushInfo>()).dbnum })
}

/// The two databases a SwapDB event exchanges, from the payload the server
/// passed to the running SwapDB callback; `None` for a NULL payload.
pub fn swapdb_dbs(data: *mut c_void) -> Option<(i32, i32)> {
    if data.is_null() {
        return None;
    }
    // SAFETY: for SwapDB events the server passes a RedisModuleSwapDbInfo.
    let info = unsafe { &*data.cast::<raw::RedisModuleSwapDbInfo>() };
    Some((info.dbnum_first, info.dbnum_second))
}
