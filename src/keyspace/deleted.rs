//! Keys deleted without a keyspace notification: another module's
//! `RedisModule_DeleteKey` (valkey-io/valkey#4592), or keys the server
//! drops on its own. The `Key` server event (Redis 7.2+, Valkey) fires for
//! every key about to be unlinked (deleted, expired, evicted, overwritten),
//! whoever unlinks it, so it serves as a catch-all: a deleted, expired or
//! evicted key leaves the index (a later notification re-reads any key that
//! is re-created); an overwritten one is re-read by the notification of the
//! write that overwrites it, so only copies of its hash are invalidated.

use super::replication;
use crate::index::{Key, Op};
use crate::server::locked::{LockedCell, ServerLock};
use crate::state;
use redis_module::raw;

/// The last key whose deletion was logged by a `Key` event or by a
/// deletion notification: the other of the two, fired for the same deletion
/// right after, need not log it again. Every other event forgets it (taken
/// at the start of each handler), so it never outlives that pair.
/// Main-thread (server lock) state: no mutex, no locked instruction.
static LAST_GONE: LockedCell<Option<(usize, Key)>> = LockedCell::new(None);

/// Forgets the remembered deletion (the index is being dropped).
pub fn forget_gone(lock: &ServerLock) {
    LAST_GONE.take(lock);
}

/// Takes the remembered deletion; whether it was `name` in `db`.
pub fn take_gone(lock: &ServerLock, db: usize, name: &[u8]) -> bool {
    LAST_GONE
        .take(lock)
        .is_some_and(|(d, k)| d == db && k.as_bytes() == name)
}

/// Logs that `name` in `db` is gone, unless the other event of the same
/// deletion just did (`already`), and remembers it for that other event.
pub fn log_gone(
    lock: &ServerLock,
    m: &crate::state::Module,
    db: usize,
    name: &[u8],
    already: bool,
) {
    if already {
        return;
    }
    let key = Key::new(name);
    LAST_GONE.replace(lock, Some((db, key.clone())));
    m.push(Op::Set(db, key, None));
}

/// A `Key` server event about `name` in `db`.
pub fn on_key_unlinked(lock: &ServerLock, subevent: u64, db: usize, name: &[u8]) {
    // A replica's async load discards keys of its temporary database.
    if replication::async_loading() {
        return;
    }
    let Some(m) = state::try_get() else { return };
    if crate::keyspace::idle::dropped(lock) {
        return m.watches.bump(db, name); // no index to keep
    }
    let already = take_gone(lock, db, name);
    m.watches.bump(db, name);
    match subevent {
        raw::REDISMODULE_SUBEVENT_KEY_DELETED
        | raw::REDISMODULE_SUBEVENT_KEY_EXPIRED
        | raw::REDISMODULE_SUBEVENT_KEY_EVICTED => log_gone(lock, m, db, name, already),
        _ => {}
    }
}
