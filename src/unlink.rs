//! Keys deleted without a keyspace notification: another module's
//! `RedisModule_DeleteKey` (valkey-io/valkey#4592), or keys the server
//! drops on its own. The `Key` server event (Redis 7.2+, Valkey) fires for
//! every key about to be unlinked (deleted, expired, evicted, overwritten),
//! whoever unlinks it, so it serves as a catch-all: a deleted, expired or
//! evicted key leaves the index (a later notification re-reads any key that
//! is re-created); an overwritten one is re-read by the notification of the
//! write that overwrites it, so only copies of its hash are invalidated.

use crate::index::{Key, Op};
use crate::{replication, state};
use redis_module::raw;

/// A `Key` server event about `name` in `db`.
pub fn on_key_unlinked(subevent: u64, db: usize, name: &[u8]) {
    // A replica's async load discards keys of its temporary database.
    if replication::async_loading() {
        return;
    }
    let Some(m) = state::try_get() else { return };
    m.watches.bump(db, name);
    match subevent {
        raw::REDISMODULE_SUBEVENT_KEY_DELETED
        | raw::REDISMODULE_SUBEVENT_KEY_EXPIRED
        | raw::REDISMODULE_SUBEVENT_KEY_EVICTED => {
            m.push(Op::Set(db, Key::new(name), None));
        }
        _ => {}
    }
}
