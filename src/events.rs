//! Every server subscription of the module, in one place: keyspace
//! notifications keep the index current; FlushDB, SwapDB and Loading events
//! replace or exchange whole database indexes in O(1).
//!
//! The server keeps one subscription per event and module, so nothing else
//! in the crate may subscribe.
//!
//! A notification only says "something happened to this key". Servers fire
//! some of them before the change is complete (a hash whose last field
//! expired is reported deleted before it is unlinked, for instance), and
//! some from contexts whose selected database is not the key's (MOVE/COPY
//! inside MULTI on some versions). So the key is not looked at inside the
//! callback: it is queued, and one post-notification job per execution unit
//! re-reads every queued key once the unit has finished (servers without
//! post-notification jobs, Redis 7.0, re-read at once). Commands that read
//! the index first drain the queue, so a client always reads its writes,
//! also inside MULTI and scripts.

use crate::backfill;
use crate::ffi::thread_ctx::Detached;
use crate::ffi::{self, api, keys, Ctx};
use crate::index::{Change, Key, Meta, TypeNames};
use crate::state::{self, Module};
use redis_module::raw;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// A key to re-read.
struct Pending {
    db: usize,
    key: Key,
    /// Expired or evicted: gone whatever the server still shows.
    gone: bool,
    /// MOVE/COPY: re-read the key in every database.
    all_dbs: bool,
}

static PENDING: Mutex<Vec<Pending>> = Mutex::new(Vec::new());
static JOB_SCHEDULED: AtomicBool = AtomicBool::new(false);

/// The context used to read keys in any database on the main thread. A
/// detached context has a client of its own: selecting a database on it
/// never touches a real client.
struct ProbeCtx(Detached);
// SAFETY: only used on the main thread (or a thread holding the server
// lock) through the PROBE mutex, never concurrently.
unsafe impl Sync for ProbeCtx {}
static PROBE: Mutex<Option<ProbeCtx>> = Mutex::new(None);

/// Subscribes to notifications and server events.
pub fn subscribe(ctx: Ctx) -> Result<(), String> {
    let probe = Detached::new().ok_or("no thread-safe context")?;
    *PROBE.lock().unwrap_or_else(|e| e.into_inner()) = Some(ProbeCtx(probe));
    let sub = api!(RedisModule_SubscribeToKeyspaceEvents).ok_or("no keyspace event API")?;
    // NOTIFY_ALL covers generic/string/list/set/hash/zset/stream/module and
    // expired/evicted events. LOADED: keys read from an RDB. NEW: every key
    // creation, including DEBUG POPULATE's, which fires nothing else.
    let types =
        raw::REDISMODULE_NOTIFY_ALL | raw::REDISMODULE_NOTIFY_LOADED | raw::REDISMODULE_NOTIFY_NEW;
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
    Ok(())
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

/// Records what the server says about `key` in `db` (`found`).
fn apply(m: &Module, db: usize, key: &[u8], found: Option<keys::Found>) {
    let mut ks = m.index();
    let truth = found.map(|f| to_meta(f, &mut ks.type_names));
    let change = ks.apply(db, key, truth);
    drop(ks);
    if change != Change::Unchanged {
        Module::bump(&m.stats.index_changes, 1);
    }
}

/// Re-reads one queued key through the probe context.
fn resolve(m: &Module, probe: Ctx, p: &Pending) {
    if p.gone {
        return apply(m, p.db, p.key.as_bytes(), None);
    }
    let Some(name) = ffi::OwnedString::new(probe, p.key.as_bytes()) else {
        return;
    };
    let dbs = if p.all_dbs {
        0..m.index().databases()
    } else {
        p.db..p.db + 1
    };
    for db in dbs {
        if ffi::select_db(probe, db) {
            apply(m, db, p.key.as_bytes(), keys::probe(probe, name.ptr()));
        }
    }
}

/// Applies every queued key. Must run on the main thread or with the
/// server lock held. Called by the post-notification job and before any
/// command reads the index.
pub fn drain() {
    let Some(m) = state::try_get() else { return };
    loop {
        let batch = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|e| e.into_inner()));
        if batch.is_empty() {
            return;
        }
        let guard = PROBE.lock().unwrap_or_else(|e| e.into_inner());
        let Some(probe) = guard.as_ref() else { return };
        let ctx = probe.0.ctx();
        for p in &batch {
            resolve(m, ctx, p);
        }
    }
}

extern "C" fn run_pending(ctx: *mut raw::RedisModuleCtx, _pd: *mut c_void) {
    JOB_SCHEDULED.store(false, Ordering::SeqCst);
    guarded(ctx, "post-notification", drain);
}

/// Queues a key; makes sure a job will drain the queue after this unit.
fn enqueue(ctx: Ctx, p: Pending) {
    {
        let mut q = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        let same = q.last().is_some_and(|l| {
            l.db == p.db && l.key == p.key && l.gone == p.gone && l.all_dbs == p.all_dbs
        });
        if !same {
            q.push(p);
        }
    }
    if JOB_SCHEDULED.swap(true, Ordering::SeqCst) {
        return;
    }
    let scheduled = api!(RedisModule_AddPostNotificationJob).is_some_and(|add| {
        // SAFETY: ctx is the live notification context; the job callback is
        // a valid extern fn and needs no private data.
        (unsafe { add(ctx, Some(run_pending), std::ptr::null_mut(), None) })
            == raw::REDISMODULE_OK as c_int
    });
    if !scheduled {
        // No post-notification jobs on this server: apply right away.
        JOB_SCHEDULED.store(false, Ordering::SeqCst);
        drain();
    }
}

extern "C" fn on_keyspace_event(
    ctx: *mut raw::RedisModuleCtx,
    type_: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    guarded(ctx, "keyspace event", || {
        let Some(m) = state::try_get() else { return };
        Module::bump(&m.stats.events, 1);
        let db = ffi::selected_db(ctx);
        let name = ffi::string_bytes(key);
        m.watches.bump(db, name);
        if type_ & raw::REDISMODULE_NOTIFY_LOADED != 0 {
            // RDB loading: no execution units, and the name may live on the
            // server's stack; read the key now through a heap copy.
            return apply(m, db, name, keys::probe_copy(ctx, key));
        }
        // SAFETY: the server passes a NUL-terminated event name.
        let event = if event.is_null() {
            c""
        } else {
            unsafe { std::ffi::CStr::from_ptr(event) }
        };
        let event = event.to_bytes();
        let p = Pending {
            db,
            key: Key::new(name),
            // By name: field-level events ("hexpired") share the EXPIRED
            // class on some servers but leave the key in place.
            gone: matches!(event, b"expired" | b"evicted"),
            all_dbs: matches!(event, b"move_from" | b"move_to" | b"copy_to"),
        };
        enqueue(ctx, p);
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
        let old = if dbnum < 0 {
            ks.flush_all()
        } else {
            vec![ks.flush(dbnum as usize)]
        };
        drop(ks);
        m.reaper.dispose(old);
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
        let (a, b) = (info.dbnum_first as usize, info.dbnum_second as usize);
        m.index().swap(a, b);
        // Keys queued before the swap now live in the other database.
        for p in PENDING.lock().unwrap_or_else(|e| e.into_inner()).iter_mut() {
            if p.db == a {
                p.db = b;
            } else if p.db == b {
                p.db = a;
            }
        }
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
                // A load that replaces the dataset empties it first, which
                // fires FlushDB (handled above); a merging load (DEBUG
                // RELOAD NOFLUSH MERGE) keeps what is there. Either way the
                // "loaded" notifications upsert the keys as they arrive.
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
