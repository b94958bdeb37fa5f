//! Every server subscription of the module, in one place: keyspace
//! notifications keep the index current; FlushDB, SwapDB and Loading events
//! replace or exchange whole database indexes in O(1).
//!
//! The server keeps one subscription per event and module, so nothing else
//! in the crate may subscribe.

use crate::backfill;
use crate::ffi::{self, api, keys, Ctx};
use crate::index::{Meta, TypeNames};
use crate::state::{self, Module};
use redis_module::raw;
use std::os::raw::{c_char, c_int, c_void};

/// Subscribes to notifications and server events.
pub fn subscribe(ctx: Ctx) -> Result<(), String> {
    let sub = api!(RedisModule_SubscribeToKeyspaceEvents).ok_or("no keyspace event API")?;
    // NOTIFY_ALL covers generic/string/list/set/hash/zset/stream/module and
    // expired/evicted events; LOADED (keys read from an RDB) is separate.
    let types = raw::REDISMODULE_NOTIFY_ALL | raw::REDISMODULE_NOTIFY_LOADED;
    // SAFETY: ctx is the OnLoad context; the callback is a valid extern fn.
    if unsafe { sub(ctx, types, Some(on_keyspace_event)) } != raw::REDISMODULE_OK as c_int {
        return Err("cannot subscribe to keyspace events".into());
    }
    let server = api!(RedisModule_SubscribeToServerEvent).ok_or("no server event API")?;
    let events: [(u64, raw::RedisModuleEventCallback); 3] = [
        (raw::REDISMODULE_EVENT_FLUSHDB, Some(on_flushdb)),
        (raw::REDISMODULE_EVENT_SWAPDB, Some(on_swapdb)),
        (raw::REDISMODULE_EVENT_LOADING, Some(on_loading)),
    ];
    for (id, cb) in events {
        let ev = raw::RedisModuleEvent { id, dataver: 1 };
        // SAFETY: ctx is the OnLoad context; ev names a server event.
        if unsafe { server(ctx, ev, cb) } != raw::REDISMODULE_OK as c_int {
            return Err(format!("cannot subscribe to server event {id}"));
        }
    }
    let filter = api!(RedisModule_RegisterCommandFilter).ok_or("no command filter API")?;
    // SAFETY: ctx is the OnLoad context; the callback is a valid extern fn.
    let f = unsafe {
        filter(
            ctx,
            Some(on_command),
            raw::REDISMODULE_CMDFILTER_NOSELF as c_int,
        )
    };
    if f.is_null() {
        return Err("cannot register the command filter".into());
    }
    Ok(())
}

/// Sees every command before it runs. Only `DEBUG POPULATE` matters: it
/// creates keys without any keyspace notification, so it schedules a
/// backfill, which takes the server lock after the command completes.
extern "C" fn on_command(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    let _ = std::panic::catch_unwind(|| {
        let (Some(count), Some(arg)) = (
            api!(RedisModule_CommandFilterArgsCount),
            api!(RedisModule_CommandFilterArgGet),
        ) else {
            return;
        };
        // SAFETY: fctx is the live filter context of this callback; the
        // argument strings it returns live for the callback.
        unsafe {
            if count(fctx) >= 2
                && ffi::string_bytes(arg(fctx, 0)).eq_ignore_ascii_case(b"debug")
                && ffi::string_bytes(arg(fctx, 1)).eq_ignore_ascii_case(b"populate")
            {
                backfill::start(std::ptr::null_mut());
            }
        }
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

/// Applies the truth about one key (probed in `db` on `ctx`) to the index.
/// `stack_name`: the server may have put the name on its stack (LOADED).
pub fn refresh_key(
    m: &Module,
    ctx: Ctx,
    db: usize,
    key: *mut raw::RedisModuleString,
    gone: bool,
    stack_name: bool,
) {
    let found = match (gone, stack_name) {
        (true, _) => None,
        (false, true) => keys::probe_copy(ctx, key),
        (false, false) => keys::probe(ctx, key),
    };
    let name = ffi::string_bytes(key);
    m.watches.bump(db, name);
    let mut ks = m.index();
    let truth = found.map(|f| to_meta(f, &mut ks.type_names));
    let change = ks.apply(db, name, truth);
    drop(ks);
    if change != crate::index::Change::Unchanged {
        Module::bump(&m.stats.index_changes, 1);
    }
}

extern "C" fn on_keyspace_event(
    ctx: *mut raw::RedisModuleCtx,
    type_: c_int,
    _event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    guarded(ctx, "keyspace event", || {
        let Some(m) = state::try_get() else { return };
        Module::bump(&m.stats.events, 1);
        let db = ffi::selected_db(ctx);
        // An expired or evicted key is gone even if the server fires the
        // event just before unlinking it; for every other event the key
        // itself tells the truth (exists? which type? which TTL?).
        let gone = type_ & (raw::REDISMODULE_NOTIFY_EXPIRED | raw::REDISMODULE_NOTIFY_EVICTED) != 0;
        let loaded = type_ & raw::REDISMODULE_NOTIFY_LOADED != 0;
        refresh_key(m, ctx, db, key, gone, loaded);
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
        if subevent != raw::REDISMODULE_SUBEVENT_FLUSHDB_END || data.is_null() {
            return;
        }
        m.watches.bump_all();
        // SAFETY: for FlushDB events the server passes a RedisModuleFlushInfo.
        let dbnum = unsafe { (*data.cast::<raw::RedisModuleFlushInfo>()).dbnum };
        let mut ks = m.index();
        if dbnum < 0 {
            let old = ks.flush_all();
            drop(ks);
            m.reaper.dispose(old);
        } else {
            let old = ks.flush(dbnum as usize);
            drop(ks);
            m.reaper.dispose(old);
        }
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
        if data.is_null() {
            return;
        }
        // SAFETY: for SwapDB events the server passes a RedisModuleSwapDbInfo.
        let info = unsafe { &*data.cast::<raw::RedisModuleSwapDbInfo>() };
        if info.dbnum_first < 0 || info.dbnum_second < 0 {
            return;
        }
        m.index()
            .swap(info.dbnum_first as usize, info.dbnum_second as usize);
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
        let Some(m) = state::try_get() else { return };
        match subevent {
            raw::REDISMODULE_SUBEVENT_LOADING_RDB_START
            | raw::REDISMODULE_SUBEVENT_LOADING_AOF_START
            | raw::REDISMODULE_SUBEVENT_LOADING_REPL_START => {
                // The dataset is about to be replaced: start from empty and
                // let the "loaded" notifications (or replayed AOF commands)
                // rebuild the index as keys arrive.
                let old = m.index().flush_all();
                m.reaper.dispose(old);
                m.watches.bump_all();
                backfill::topology_changed();
            }
            raw::REDISMODULE_SUBEVENT_LOADING_FAILED => {
                // Whatever is in memory now is the truth: rebuild from it.
                backfill::start(ctx);
            }
            _ => {}
        }
    });
}
