//! Workaround for a Valkey 8 server bug (valkey-io/valkey#4024, fixed
//! upstream): when any module subscribes to keyspace events, the server
//! selects the event's database on the *executing client* before calling the
//! module and never selects it back, so `MOVE`, `COPY ... DB`, `DEBUG RELOAD`
//! (and the same inside scripts, and a replica applying them) leave the
//! client on another database.
//!
//! A command filter remembers, for the commands that can notify in another
//! database, the executing client and its database when the command starts;
//! after each notification the module selects that database back on that
//! client. The filter costs one argument comparison per command; the client
//! lookup is made only for those few commands. A transaction that queues a
//! `SELECT` is left alone (the database changes inside it).
//!
//! Enabled on Valkey 8 only. The same filter (one callback per command
//! for the whole module) first routes the native scan commands when
//! `snapshot.serve-native` asks for it (see `ffi::native::route`); it is
//! registered on every server.

use super::{api, Ctx};
use redis_module::raw;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

static ENABLED: AtomicBool = AtomicBool::new(false);
/// The executing client to restore (0: none) and its database.
static CLIENT: AtomicU64 = AtomicU64::new(0);
static DB: AtomicU64 = AtomicU64::new(0);
/// A script's caller is remembered: the script's own commands (from a
/// client the server does not list) leave the record alone.
static IN_SCRIPT: AtomicBool = AtomicBool::new(false);
/// The database of the running script's own client (its caller's at the
/// start, then whatever the script SELECTs).
static SCRIPT_DB: AtomicU64 = AtomicU64::new(0);

#[derive(Default)]
struct Txns {
    /// Clients in MULTI that queued a command notifying in another db.
    cross: HashSet<u64>,
    /// Clients in MULTI that queued a SELECT.
    select: HashSet<u64>,
}

/// Most clients tracked in MULTI (a client that disconnects mid-MULTI is
/// never removed: the sets are cleared when they reach this).
const MAX_TXNS: usize = 10_000;

static TXNS: Mutex<Option<Txns>> = Mutex::new(None);

/// Registers the filter (OnLoad); the database restore is enabled when
/// `valkey_major` is 8.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the OnLoad context the server passed to the module, live for this call"
)]
pub fn init(ctx: Ctx, valkey_major: Option<u32>) {
    let Some(register) = api!(RedisModule_RegisterCommandFilter) else {
        return;
    };
    super::native::init();
    let restore = valkey_major == Some(8)
        && api!(RedisModule_CommandFilterGetClientId).is_some()
        && api!(RedisModule_GetClientInfoById).is_some();
    // SAFETY: ctx is the OnLoad context; the callback is a valid extern fn
    // that lives as long as the module (which is never unloaded).
    let f = unsafe {
        register(
            ctx,
            Some(on_command),
            raw::REDISMODULE_CMDFILTER_NOSELF as i32,
        )
    };
    if !f.is_null() && restore {
        ENABLED.store(true, Ordering::Relaxed);
    }
}

#[derive(PartialEq)]
enum Kind {
    CrossDb,
    Script,
    Select,
    Exec,
    Discard,
    Other,
}

fn kind(name: &[u8]) -> Kind {
    if name.eq_ignore_ascii_case(b"move")
        || name.eq_ignore_ascii_case(b"copy")
        || name.eq_ignore_ascii_case(b"debug")
    {
        Kind::CrossDb
    } else if [
        &b"eval"[..],
        b"evalsha",
        b"eval_ro",
        b"evalsha_ro",
        b"fcall",
        b"fcall_ro",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n))
    {
        Kind::Script
    } else if name.eq_ignore_ascii_case(b"select") {
        Kind::Select
    } else if name.eq_ignore_ascii_case(b"exec") {
        Kind::Exec
    } else if name.eq_ignore_ascii_case(b"discard") {
        Kind::Discard
    } else {
        Kind::Other
    }
}

/// The client's database and whether it is in MULTI.
fn client_state(id: u64) -> Option<(u64, bool)> {
    let get = api!(RedisModule_GetClientInfoById)?;
    let mut ci = raw::RedisModuleClientInfo {
        version: 1,
        flags: 0,
        id: 0,
        addr: [0; 46],
        port: 0,
        db: 0,
    };
    // SAFETY: `ci` is a V1 client info structure owned by us; the server
    // fills it for client `id` (on the main thread, in a command filter).
    let ok = unsafe { get((&mut ci as *mut raw::RedisModuleClientInfo).cast(), id) };
    (ok == raw::REDISMODULE_OK as i32).then_some((
        u64::from(ci.db),
        ci.flags & u64::from(raw::REDISMODULE_CLIENTINFO_FLAG_MULTI) != 0,
    ))
}

fn with_txns<T>(f: impl FnOnce(&mut Txns) -> T) -> T {
    let mut g = TXNS.lock().unwrap_or_else(|e| e.into_inner());
    let t = g.get_or_insert_with(Txns::default);
    if t.cross.len() + t.select.len() > MAX_TXNS {
        *t = Txns::default();
    }
    f(t)
}

extern "C" fn on_command(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    let _ = std::panic::catch_unwind(|| {
        super::native::on_command(fctx);
        if !ENABLED.load(Ordering::Relaxed) {
            return;
        }
        let (Some(arg), Some(client_id)) = (
            api!(RedisModule_CommandFilterArgGet),
            api!(RedisModule_CommandFilterGetClientId),
        ) else {
            return;
        };
        // SAFETY: fctx is the live filter context of this callback.
        let name = super::string_bytes(unsafe { arg(fctx, 0) });
        let k = kind(name);
        if IN_SCRIPT.load(Ordering::Relaxed) {
            // SAFETY: as above.
            let id = unsafe { client_id(fctx) };
            if client_state(id).is_none() {
                // A command of the running script, on its own client.
                match k {
                    Kind::Select => {
                        // SAFETY: as above; a missing argument is NULL.
                        let n = super::string_bytes(unsafe { arg(fctx, 1) });
                        if let Some(db) = std::str::from_utf8(n).ok().and_then(|t| t.parse().ok()) {
                            SCRIPT_DB.store(db, Ordering::Relaxed);
                        }
                    }
                    Kind::CrossDb => {
                        DB.store(SCRIPT_DB.load(Ordering::Relaxed), Ordering::Relaxed);
                        CLIENT.store(id, Ordering::Relaxed);
                    }
                    _ => {}
                }
                return;
            }
            IN_SCRIPT.store(false, Ordering::Relaxed);
        }
        if k == Kind::Other {
            CLIENT.store(0, Ordering::Relaxed);
            return;
        }
        // SAFETY: as above.
        let id = unsafe { client_id(fctx) };
        let Some((db, in_multi)) = client_state(id) else {
            CLIENT.store(0, Ordering::Relaxed);
            return;
        };
        let remember = match k {
            // Queued, not run now.
            _ if in_multi && k != Kind::Exec && k != Kind::Discard => {
                with_txns(|t| match k {
                    Kind::CrossDb | Kind::Script => t.cross.insert(id),
                    Kind::Select => t.select.insert(id),
                    _ => false,
                });
                return;
            }
            Kind::CrossDb => true,
            Kind::Script => {
                SCRIPT_DB.store(db, Ordering::Relaxed);
                IN_SCRIPT.store(true, Ordering::Relaxed);
                true
            }
            Kind::Exec => with_txns(|t| t.cross.remove(&id) & !t.select.remove(&id)),
            Kind::Discard => {
                with_txns(|t| {
                    t.cross.remove(&id);
                    t.select.remove(&id);
                });
                false
            }
            _ => false,
        };
        if remember {
            DB.store(db, Ordering::Relaxed);
            CLIENT.store(id, Ordering::Relaxed);
        } else {
            CLIENT.store(0, Ordering::Relaxed);
        }
    });
}

/// Selects the remembered database back on the executing client when it
/// goes out of scope (create it at the start of a notification callback).
pub struct RestoreDb {
    ctx: Ctx,
}

impl RestoreDb {
    pub fn new(ctx: Ctx) -> Option<Self> {
        ENABLED.load(Ordering::Relaxed).then_some(RestoreDb { ctx })
    }
}

impl Drop for RestoreDb {
    fn drop(&mut self) {
        let id = CLIENT.load(Ordering::Relaxed);
        if id == 0 {
            return;
        }
        let Some(get_id) = api!(RedisModule_GetClientId) else {
            return;
        };
        // SAFETY: ctx is the live context of the notification callback.
        if unsafe { get_id(self.ctx) } != id {
            return;
        }
        let db = DB.load(Ordering::Relaxed) as usize;
        if super::selected_db(self.ctx) != db {
            super::select_db(self.ctx, db);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_classified_case_insensitively() {
        assert!(kind(b"MoVe") == Kind::CrossDb);
        assert!(kind(b"copy") == Kind::CrossDb);
        assert!(kind(b"DEBUG") == Kind::CrossDb);
        assert!(kind(b"select") == Kind::Select);
        assert!(kind(b"EVALSHA") == Kind::Script);
        assert!(kind(b"fcall_ro") == Kind::Script);
        assert!(kind(b"EXEC") == Kind::Exec);
        assert!(kind(b"discard") == Kind::Discard);
        assert!(kind(b"set") == Kind::Other);
        assert!(kind(b"") == Kind::Other);
    }
}
