//! Keys deleted without a keyspace notification: another module's
//! `RedisModule_DeleteKey` (valkey-io/valkey#4592), or keys the server
//! drops on its own. The `Key` server event (Redis 7.2+, Valkey) fires for
//! every key about to be unlinked (deleted, expired, evicted, overwritten),
//! whoever unlinks it, so it serves as a catch-all: a deleted, expired or
//! evicted key leaves the index (a later notification re-reads any key that
//! is re-created); an overwritten one is re-read by the notification of the
//! write that overwrites it, so only copies of its hash are invalidated.

use crate::index::{Key, Op};
use crate::server::host;
use crate::server::locked::{LockedCell, ServerLock};
use crate::state::Shared;
use redis_module::raw;
use std::os::raw::c_void;

/// The last key whose deletion was logged by a `Key` event or by a
/// deletion notification: the other of the two, fired for the same deletion
/// right after, need not log it again. Every other keyspace event forgets
/// it (taken at the start of each handler), and a flush, swap or slot purge
/// recorded since voids it ([`Shared::bulk_ops`]: server events that take
/// nothing from it), so it never outlives that pair: a failed command fires
/// nothing, and a `SWAPDB` right after a `DEL k` left the next deletion of
/// `k` (another key now, swapped in) unlogged on Redis 7.0, which has no
/// `Key` event (issue 24, found by the fuzzer).
/// Main-thread (server lock) state: no mutex, no locked instruction.
/// (A field of `keyspace::Keyspace`.)
#[derive(Default)]
pub struct Deleted {
    last_gone: LockedCell<Option<(usize, Key, u64)>>,
}

impl Deleted {
    /// Forgets the remembered deletion (the index is being dropped).
    pub fn forget_gone(&self, lock: &ServerLock) {
        self.last_gone.take(lock);
    }

    /// Takes the remembered deletion; whether it was `name` in `db`, with
    /// no flush, swap or slot purge recorded since.
    pub fn take_gone(&self, lock: &ServerLock, m: &Shared, db: usize, name: &[u8]) -> bool {
        self.last_gone
            .take(lock)
            .is_some_and(|(d, k, bulk)| d == db && k.as_bytes() == name && bulk == m.bulk_ops())
    }

    /// Logs that `name` in `db` is gone, unless the other event of the same
    /// deletion just did (`already`), and remembers it for that other event.
    pub fn log_gone(&self, lock: &ServerLock, m: &Shared, db: usize, name: &[u8], already: bool) {
        if already {
            return;
        }
        let key = Key::new(name);
        self.last_gone
            .replace(lock, Some((db, key.clone(), m.bulk_ops())));
        m.push(Op::Set(db, key, None));
    }
}

/// A `Key` server event (`data`: its payload, the key). Every SET over an
/// existing key fires an overwrite: it only matters to watched copies and
/// running deletions, so most return here, before asking the server for
/// the key's name.
#[inline(always)]
pub fn on_key_event(
    lock: &ServerLock,
    m: &Shared,
    ks: &super::Keyspace,
    subevent: u64,
    data: *mut c_void,
) {
    if subevent == raw::REDISMODULE_SUBEVENT_KEY_OVERWRITTEN && !m.watches.any() {
        return;
    }
    host::with_key_event_target(data, |db, name| {
        on_key_unlinked(lock, m, ks, subevent, db, name)
    });
}

/// A `Key` server event about `name` in `db`.
fn on_key_unlinked(
    lock: &ServerLock,
    m: &Shared,
    ks: &super::Keyspace,
    subevent: u64,
    db: usize,
    name: &[u8],
) {
    // A replica's async load discards keys of its temporary database.
    if ks.replication.async_loading() {
        return;
    }
    if ks.idle.dropped(lock) {
        return m.watches.bump(db, name); // no index to keep
    }
    let already = ks.deleted.take_gone(lock, m, db, name);
    ks.tracking.key_deleted(lock, db, name);
    m.watches.bump(db, name);
    match subevent {
        raw::REDISMODULE_SUBEVENT_KEY_DELETED
        | raw::REDISMODULE_SUBEVENT_KEY_EXPIRED
        | raw::REDISMODULE_SUBEVENT_KEY_EVICTED => ks.deleted.log_gone(lock, m, db, name, already),
        _ => {}
    }
}
