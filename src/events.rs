//! Every server subscription of the module, in one place: keyspace
//! notifications keep the index current; FlushDB, SwapDB and Loading events
//! replace or exchange whole database indexes in O(1).
//!
//! The server keeps one subscription per event and module, so nothing else
//! in the crate may subscribe.
//!
//! A notification only says "something happened to this key": the module
//! re-reads the key (exists? type? expiry?) and records that truth in the
//! index's operation log; the tree itself is updated off the main thread.
//! Two kinds of events are special: deletions ("del", "expired",
//! "evicted"), which some servers fire just before unlinking the key, and
//! MOVE/COPY ... DB, which some servers fire from a context selected on
//! another database, so the key is re-read in every database.

use crate::backfill;
use crate::ffi::locked::{LockedCell, ServerLock};
use crate::ffi::subscribe::{self as sub, event_name};
use crate::ffi::thread_ctx::Detached;
use crate::ffi::{self, keys, Ctx};
use crate::index::{Key, Meta, Op, TypeNames};
use crate::state::{self, Module};
use redis_module::raw;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

/// The context used to read keys in any database on the main thread. A
/// detached context has a client of its own: selecting a database on it
/// never touches a real client. Only used on the main thread (or a thread
/// holding the server lock), through this mutex.
static PROBE: Mutex<Option<Detached>> = Mutex::new(None);

/// A key whose "new" event was seen but not yet read: the command that
/// created it fires its own event for the same key right after (a "set",
/// an "hset"...), which reads it once instead of twice, and logs this very
/// `Key` (no second copy of the name) under the hash computed here (no
/// second hash). Only DEBUG POPULATE fires "new" alone; a pending key is
/// read when any other event arrives, and before anything reads the index
/// ([`settle`]). Main thread (server lock) only: no mutex, no locked
/// instruction per event.
struct Pending {
    db: usize,
    key: Key,
    hash: u64,
}

static PENDING_NEW: LockedCell<Option<Pending>> = LockedCell::new(None);

/// Forgets the pending new key (the index is being dropped).
pub fn forget_pending(lock: &ServerLock) {
    PENDING_NEW.take(lock);
}

/// Reads the pending new key, if any, in every database (a SWAPDB or a
/// flush may have happened since its event). Call it under the server lock
/// only (command handlers, INFO, server events).
pub fn settle() {
    let pending = PENDING_NEW.take(&ServerLock::in_callback());
    if let (Some(p), Some(m)) = (pending, state::try_get()) {
        refresh_everywhere(m, p.key.as_bytes());
    }
}

/// Takes the pending new key. If it is `name` in `db` (whose event is about
/// to read it anyway), returns it with its hash: the key did not exist
/// before the command that fired the event. Otherwise reads the pending key
/// in its database, and returns `name`'s hash, its filter block and
/// recent-truth slot prefetched (see [`Module::prefetch_truth`]).
fn claim_pending(lock: &ServerLock, m: &Module, db: usize, name: &[u8]) -> (Option<Key>, u64) {
    let Some(p) = PENDING_NEW.take(lock) else {
        return (None, m.prefetch_truth(db, name));
    };
    if p.db == db && p.key.as_bytes() == name {
        return (Some(p.key), p.hash);
    }
    let hash = m.prefetch_truth(db, name);
    let guard = PROBE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(probe) = guard.as_ref() {
        let ctx = probe.ctx();
        if let Some(n) = ffi::OwnedString::new(ctx, p.key.as_bytes()) {
            if ffi::select_db(ctx, p.db) {
                apply(m, p.db, p.key.as_bytes(), keys::probe(ctx, n.ptr()));
            }
        }
    }
    (None, hash)
}

/// Subscribes to notifications and server events.
pub fn subscribe(ctx: Ctx) -> Result<(), String> {
    let probe = Detached::new().ok_or("no thread-safe context")?;
    *PROBE.lock().unwrap_or_else(|e| e.into_inner()) = Some(probe);
    // NOTIFY_ALL covers generic/string/list/set/hash/zset/stream/module and
    // expired/evicted events. LOADED: keys read from an RDB. NEW: every key
    // creation, including DEBUG POPULATE's, which fires nothing else.
    let types =
        raw::REDISMODULE_NOTIFY_ALL | raw::REDISMODULE_NOTIFY_LOADED | raw::REDISMODULE_NOTIFY_NEW;
    sub::keyspace_events(ctx, types, Some(on_keyspace_event))?;
    if !sub::has_server_events() {
        return Err("no server event API".into());
    }
    let events: [(u64, raw::RedisModuleEventCallback); 3] = [
        (raw::REDISMODULE_EVENT_FLUSHDB, Some(on_flushdb)),
        (raw::REDISMODULE_EVENT_SWAPDB, Some(on_swapdb)),
        (raw::REDISMODULE_EVENT_LOADING, Some(on_loading)),
    ];
    for (id, cb) in events {
        if sub::server_event(ctx, id, cb) != Some(true) {
            return Err(format!("cannot subscribe to server event {id}"));
        }
    }
    // Cluster and replication support: events this server may not have.
    let mut optional: Vec<(u64, raw::RedisModuleEventCallback)> =
        vec![(raw::REDISMODULE_EVENT_CRON_LOOP, Some(on_cron))];
    optional.push((raw::REDISMODULE_EVENT_REPL_ASYNC_LOAD, Some(on_async_load)));
    if crate::cluster::module_options(ctx) != 0 {
        optional.push((
            ffi::server::EVENT_ATOMIC_SLOT_MIGRATION,
            Some(on_slot_migration),
        ));
    } else if !ffi::server::is_valkey(ctx) {
        // Redis 8.4+: what the module handles is declared by subscribing.
        // Not to `key_trimmed` notifications: without a subscriber, the
        // server keeps its fast background trim, and the trim event names
        // the slots.
        optional.push((
            ffi::server::EVENT_REDIS_SLOT_MIGRATION,
            Some(on_redis_slot_migration),
        ));
        optional.push((ffi::server::EVENT_REDIS_SLOT_TRIM, Some(on_redis_slot_trim)));
    }
    for (id, cb) in optional {
        // An unknown event is refused, which is fine.
        if sub::server_event(ctx, id, cb) != Some(true) {
            ffi::log(
                ctx,
                "notice",
                &format!("snapscan: no server event {id} here"),
            );
        }
    }
    KEY_EVENT.store(
        subscribe_key_event(ctx, true),
        std::sync::atomic::Ordering::Relaxed,
    );
    Ok(())
}

/// Whether the server has the `Key` server event (Redis 7.2+, Valkey).
static KEY_EVENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Subscribes to the `Key` server event (`on`) or unsubscribes; true if the
/// server accepted.
fn subscribe_key_event(ctx: Ctx, on: bool) -> bool {
    let cb: raw::RedisModuleEventCallback = if on { Some(on_key_unlinked) } else { None };
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
fn key_event_during_load(ctx: Ctx, subevent: u64) {
    if !KEY_EVENT.load(std::sync::atomic::Ordering::Relaxed) {
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

extern "C" fn on_cron(
    ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut c_void,
) {
    guarded(ctx, "cron", || {
        crate::cluster::on_cron(ctx);
        if let Some(m) = state::try_get() {
            crate::idle::on_cron(ctx, m);
        }
    });
}

extern "C" fn on_key_unlinked(
    ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    // Every SET over an existing key fires an overwrite: it only matters to
    // watched copies and running deletions, so most return here, before
    // asking the server for the key's name.
    if subevent == raw::REDISMODULE_SUBEVENT_KEY_OVERWRITTEN
        && !state::try_get().is_some_and(|m| m.watches.any())
    {
        return;
    }
    guarded(ctx, "key unlink", || {
        ffi::server::with_key_event_target(data, |db, name| {
            crate::unlink::on_key_unlinked(subevent, db, name)
        });
    });
}

extern "C" fn on_async_load(
    ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    guarded(ctx, "async load", || {
        crate::replication::on_async_load(ctx, subevent)
    });
}

extern "C" fn on_slot_migration(
    ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    guarded(ctx, "slot migration", || {
        crate::cluster::on_slot_migration(ctx, subevent, ffi::server::asm_event_slots(data))
    });
}

extern "C" fn on_redis_slot_migration(
    ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    guarded(ctx, "slot migration", || {
        crate::cluster::on_redis_slot_migration(
            ctx,
            subevent,
            ffi::server::redis_asm_event_slots(data),
        )
    });
}

extern "C" fn on_redis_slot_trim(
    ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    guarded(ctx, "slot trim", || {
        crate::cluster::on_redis_slot_trim(ctx, subevent, ffi::server::redis_trim_event_slots(data))
    });
}

/// Runs `f` so that a panic never unwinds into the server.
fn guarded(ctx: Ctx, what: &str, f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        ffi::log(
            ctx,
            "warning",
            &format!("snapscan: internal error in {what} handler"),
        );
    }
}

/// Converts a probe result into index metadata, interning module type names.
pub fn to_meta(found: keys::Found, names: &mut TypeNames) -> Meta {
    let ty = match found.kind {
        keys::Kind::Builtin(t) => t,
        keys::Kind::Named(n) => names.intern(&n).unwrap_or(u8::MAX),
    };
    Meta::new(ty, found.expire)
}

/// Records what the server says about `key` in `db` (`found`). The module
/// type names are locked only for keys of module types.
pub fn apply(m: &Module, db: usize, key: &[u8], found: Option<keys::Found>) {
    let hash = crate::index::filter::hash(key);
    record(m, db, (key, None), hash, found, false);
}

/// [`apply`] for a key whose hash is `hash`, and which existed before the
/// command that fired the event (`existed`): its truth is not even logged
/// when it cannot change the index (see `Live::push_truth`). `owned`: the
/// key already copied, to be logged as is.
fn record(
    m: &Module,
    db: usize,
    key: (&[u8], Option<Key>),
    hash: u64,
    found: Option<keys::Found>,
    existed: bool,
) {
    let truth = found.map(|f| match f.kind {
        keys::Kind::Builtin(t) => Meta::new(t, f.expire),
        keys::Kind::Named(_) => to_meta(f, &mut m.type_names()),
    });
    m.push_truth(db, key, hash, truth, existed);
}

/// Logs that the key `name` (copied as `key`, hashed as `hash`) in `db`,
/// which the running command created, is a string without expiry.
fn record_plain(m: &Module, db: usize, (name, key): (&[u8], Key), hash: u64) {
    let plain = Meta::plain(crate::index::meta::STRING);
    m.push_truth(db, (name, Some(key)), hash, Some(plain), false);
}

/// Re-reads `key` in every database through the probe context (MOVE and
/// COPY ... DB: some servers fire them from a context selected on another
/// database than the key's).
fn refresh_everywhere(m: &Module, key: &[u8]) {
    let guard = PROBE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(probe) = guard.as_ref() else { return };
    let ctx = probe.ctx();
    let Some(name) = ffi::OwnedString::new(ctx, key) else {
        return;
    };
    for db in 0..m.databases {
        if ffi::select_db(ctx, db) {
            apply(m, db, key, keys::probe(ctx, name.ptr()));
        }
    }
}

extern "C" fn on_keyspace_event(
    ctx: *mut raw::RedisModuleCtx,
    type_: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    let _restore = ffi::clientdb::RestoreDb::new(ctx); // Valkey 8 bug, see clientdb.rs
    guarded(ctx, "keyspace event", || {
        let lock = ServerLock::in_callback();
        let Some(m) = state::try_get() else { return };
        if crate::idle::dropped(&lock) {
            // No index to keep: only running copies and deletions watch keys.
            if m.watches.any() {
                let name = ffi::string_bytes(key);
                match event_name(event) {
                    b"move_from" | b"move_to" | b"copy_to" => m.watches.bump_moved(name),
                    _ => m.watches.bump(ffi::selected_db(ctx), name),
                }
            }
            return;
        }
        // Only callbacks under the server lock count this: no locked add.
        let n = m.stats.events.load(Ordering::Relaxed);
        m.stats.events.store(n + 1, Ordering::Relaxed);
        let db = ffi::selected_db(ctx);
        let name = ffi::string_bytes(key);
        // A deletion the `Key` event just logged (see unlink.rs); taken by
        // every notification, so it never outlives the pair.
        let gone = crate::unlink::take_gone(&lock, db, name);
        if type_ & raw::REDISMODULE_NOTIFY_LOADED != 0 {
            // RDB loading: no execution units, and the name may live on the
            // server's stack; read the key now through a heap copy.
            m.watches.bump(db, name);
            if crate::replication::async_loading() {
                return; // a temporary database's key (see replication.rs)
            }
            return apply(m, db, name, keys::probe_copy(ctx, key));
        }
        let new = type_ & raw::REDISMODULE_NOTIFY_NEW != 0;
        let event: &[u8] = if new { b"new" } else { event_name(event) };
        // Gone, whatever the server still shows: these are fired just
        // before the key is unlinked on some servers. (By name: field
        // events such as "hexpired" share the EXPIRED class on some servers
        // but leave the key in place.)
        let deleted = !new && matches!(event, b"del" | b"expired" | b"evicted");
        if deleted && gone {
            // Logged by the `Key` event of the same deletion: nothing to
            // read or log (a pending new key waits for the next event).
            return m.watches.bump(db, name);
        }
        // The key's hash; its filter block and recent-truth slot, which its
        // record will read, are being fetched meanwhile.
        let (created, hash) = claim_pending(&lock, m, db, name);
        if new {
            m.watches.bump(db, name);
            let key = created.unwrap_or_else(|| Key::new(name));
            PENDING_NEW.replace(&lock, Some(Pending { db, key, hash }));
            return;
        }
        if matches!(event, b"move_from" | b"move_to" | b"copy_to") {
            // Fired from the caller's database on some servers: any copy of
            // a hash with this name may be stale.
            m.watches.bump_moved(name);
        } else {
            m.watches.bump(db, name);
        }
        match event {
            _ if deleted => crate::unlink::log_gone(&lock, m, db, name, gone),
            b"move_from" | b"move_to" | b"copy_to" => refresh_everywhere(m, name),
            // A string SET: the key is now a string. Its expiry is none,
            // or kept (KEEPTTL), or set by the "expire" event that the SET
            // fires right after this one, which reads the key: so a key the
            // command created is a string without expiry here, and one that
            // was such a string stays one. Neither needs reading.
            b"set" if type_ == raw::REDISMODULE_NOTIFY_STRING as c_int => match created {
                Some(k) => record_plain(m, db, (name, k), hash),
                None if m.skip_if_plain_h(&lock, hash) => {}
                None => record(m, db, (name, None), hash, keys::probe(ctx, key), true),
            },
            _ => {
                let existed = created.is_none();
                let found = keys::probe(ctx, key);
                record(m, db, (name, created), hash, found, existed)
            }
        }
    });
    raw::REDISMODULE_OK as c_int
}

extern "C" fn on_flushdb(
    ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    guarded(ctx, "flushdb", || {
        let Some(m) = state::try_get() else { return };
        if subevent != raw::REDISMODULE_SUBEVENT_FLUSHDB_END {
            return;
        }
        let Some(dbnum) = sub::flush_dbnum(data) else {
            return;
        };
        m.watches.bump_all();
        m.push(if dbnum < 0 {
            Op::FlushAll
        } else {
            Op::Flush(dbnum as usize)
        });
        // A pending new key is read as things are now, after the flush.
        settle();
    });
}

extern "C" fn on_swapdb(
    ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    _subevent: u64,
    data: *mut c_void,
) {
    guarded(ctx, "swapdb", || {
        let Some(m) = state::try_get() else { return };
        let Some((first, second)) = sub::swapdb_dbs(data) else {
            return;
        };
        if first < 0 || second < 0 {
            return;
        }
        let (a, b) = (first as usize, second as usize);
        m.push(Op::Swap(a, b));
        // A pending new key is read as things are now, after the swap.
        settle();
        m.watches.bump_all();
        backfill::topology_changed();
    });
}

extern "C" fn on_loading(
    ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    guarded(ctx, "loading", || {
        key_event_during_load(ctx, subevent);
        let Some(m) = state::try_get() else { return };
        match subevent {
            raw::REDISMODULE_SUBEVENT_LOADING_RDB_START
            | raw::REDISMODULE_SUBEVENT_LOADING_AOF_START
            | raw::REDISMODULE_SUBEVENT_LOADING_REPL_START => {
                // A load that replaces the dataset empties it first, which
                // fires FlushDB (handled above); a merging load (DEBUG
                // RELOAD NOFLUSH MERGE) keeps what is there. Either way the
                // "loaded" notifications upsert the keys as they arrive.
                m.watches.bump_all();
                backfill::topology_changed();
            }
            // An aborted async load leaves the old dataset (replication.rs).
            raw::REDISMODULE_SUBEVENT_LOADING_FAILED if crate::replication::owns_failed_load() => {}
            raw::REDISMODULE_SUBEVENT_LOADING_FAILED => {
                // Whatever is in memory now is the truth: forget what the
                // partial load indexed and rebuild from memory (unless the
                // index is dropped: its next use rebuilds it).
                m.push(Op::FlushAll);
                m.watches.bump_all();
                if !crate::idle::dropped(&ServerLock::in_callback()) {
                    backfill::start(ctx);
                }
            }
            _ => {}
        }
    });
}
