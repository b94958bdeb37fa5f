//! Keeping the index true, key by key: what a keyspace notification or a
//! FlushDB/SwapDB/Loading event means for the index, read from the server
//! and recorded in the index's operation log (the tree itself is updated
//! off the main thread).
//!
//! A notification only says "something happened to this key": the module
//! re-reads the key (exists? type? expiry?) and records that truth. Two
//! kinds of events are special: deletions ("del", "expired", "evicted"),
//! which some servers fire just before unlinking the key, and MOVE/COPY ...
//! DB, which some servers fire from a context selected on another database,
//! so the key is re-read in every database.
//!
//! Owns the pending-key protocol (a key a command created, or a string SET
//! parked until the same command's `expire` event) and truth recording (also used by the
//! index build, `backfill`). May touch: the index (through `state`), the
//! server layer, and the other keyspace subsystems.

use super::clientdb::RestoreDb;
use crate::index::{Key, Meta, Op, TypeNames};
use crate::server::locked::{LockedCell, ServerLock};
use crate::server::subscribe::{self as sub, event_name};
use crate::server::thread_ctx::Detached;
use crate::server::{self, keys, Ctx};
use crate::state::Shared;
use redis_module::raw;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// A key whose "new" event was seen but not yet read: the command that
/// created it fires its own event for the same key right after (a "set",
/// an "hset"...), which reads it once instead of twice, and logs this very
/// `Key` (no second copy of the name) under the hash computed here (no
/// second hash). Only DEBUG POPULATE fires "new" alone; a pending key is
/// read when any other event arrives, and before anything reads the index
/// ([`settle`]). Main thread (server lock) only: no mutex, no locked
/// instruction per event.
///
/// Also a key a string SET overwrote that must be read (the index may hold
/// it with an expiry or another type): a SET ... EX fires "expire" for the
/// same key right after "set", and that event reads it once for both. The
/// truth is always read from the server, only later in the same command
/// (or at the next event, or before the index is read).
struct Pending {
    db: usize,
    key: Key,
    hash: u64,
    /// The key existed before the command (a string SET over a key the
    /// index may hold otherwise than as a plain string, parked so that the
    /// "expire" event a SET ... EX fires right after reads it once for
    /// both); `false`: the command created it ("new").
    existed: bool,
    /// The name as the server handed it (parked SETs only): read later
    /// without a copy into a new server string.
    held: Option<server::HeldString>,
    /// The command created the key and SET it: a string without expiry,
    /// logged as such without a read unless an event about the key comes
    /// first (the "expire" of a SET ... EX then reads it once, and the key
    /// is logged once, with its expiry) or a `Key` event deletes it.
    plain: bool,
    /// Parked by an "expire" event on a server that cannot open a key
    /// without expiring it (see `on_keyspace_event`): `existed` is about
    /// the command that parked it, maybe an earlier one, and the key's
    /// expiry is unknown until it is read.
    unread_expiry: bool,
    /// [`Shared::bulk_ops`] when parked: a flush, swap or slot purge
    /// recorded since (which change keys without an event about each)
    /// turns a `plain` park into a read.
    bulk_at: u64,
}

impl Pending {
    /// The key of the running event, parked to be read later: its copy if
    /// it was pending (else one is made from `name`), and the server's
    /// string `held` for that read.
    fn to_read(
        db: usize,
        (owned, name, server_name): (Option<Key>, &[u8], *mut raw::RedisModuleString),
        hash: u64,
        (existed, unread_expiry): (bool, bool),
    ) -> Self {
        Pending {
            db,
            key: owned.unwrap_or_else(|| Key::new(name)),
            hash,
            existed,
            held: server::HeldString::hold(server_name),
            plain: false,
            unread_expiry,
            bulk_at: 0,
        }
    }
}

/// The tracking's state (a field of `keyspace::Keyspace`).
#[derive(Default)]
pub struct Tracking {
    /// The context used to read keys in any database on the main thread. A
    /// detached context has a client of its own: selecting a database on it
    /// never touches a real client. Only used on the main thread (or a thread
    /// holding the server lock), through this mutex.
    probe: Mutex<Option<Detached>>,
    /// See [`Pending`].
    pending_new: LockedCell<Option<Pending>>,
    /// Cluster mode on a server with per-slot dictionaries and
    /// post-notification jobs: a pending key is read by the end of the
    /// execution unit that parked it (see [`park`]). Set at OnLoad.
    per_unit: AtomicBool,
    /// The server cannot open a key without expiring it (no `NOEXPIRE`:
    /// Redis 7.0): the key of an "expire" event is parked, not read (see
    /// `on_keyspace_event`). Set at OnLoad.
    defer_expire: AtomicBool,
    /// A settle job is scheduled (see [`on_settle_job`]).
    job: LockedCell<bool>,
}

impl Tracking {
    /// Makes the context that reads pending keys and keys of MOVE/COPY in
    /// any database (OnLoad).
    /// `per_unit`, `defer_expire`: see the fields.
    pub fn init(&self, per_unit: bool, defer_expire: bool) -> Result<(), String> {
        let probe = Detached::new().ok_or("no thread-safe context")?;
        *self.probe.lock().unwrap_or_else(|e| e.into_inner()) = Some(probe);
        self.per_unit.store(per_unit, Ordering::Relaxed);
        self.defer_expire.store(defer_expire, Ordering::Relaxed);
        Ok(())
    }

    /// A `Key` event deleted `name` in `db`: if it is the pending key
    /// parked as a created plain string, it must be read, not logged as
    /// one (the deletion's own notification may return before claiming
    /// it, see `on_keyspace_event`).
    pub fn key_deleted(&self, lock: &ServerLock, db: usize, name: &[u8]) {
        if let Some(mut p) = self.pending_new.take(lock) {
            if p.db == db && p.key.as_bytes() == name {
                p.plain = false;
            }
            self.pending_new.replace(lock, Some(p));
        }
    }

    /// Forgets the pending key (the index is being dropped).
    pub fn forget_pending(&self, lock: &ServerLock) {
        self.pending_new.take(lock);
    }
}

/// Reads the pending key, if any, before the index is read. Call it under
/// the server lock only (command handlers, INFO). The key is where its
/// event left it: any later event, flush or swap would have read it.
pub fn settle(lock: &ServerLock, m: &Shared, ks: &super::Keyspace) {
    let t = &ks.tracking;
    if let Some(p) = t.pending_new.take(lock) {
        read_pending(lock, m, t, p, None);
    }
}

/// The settle job (cluster mode): the execution unit that parked the
/// pending key has ended, so the key is read now, while no command's slot
/// stands for the key's (see [`park`]).
pub fn on_settle_job(lock: &ServerLock, m: &Shared, ks: &super::Keyspace) {
    ks.tracking.job.replace(lock, false);
    settle(lock, m, ks);
}

/// Parks `p` as the pending key. In cluster mode (`per_unit`) a key may be
/// read only while the running command's slot is the key's own: servers
/// with per-slot dictionaries look a key up in the slot of the command
/// being executed, not the key's (`getKeySlot`), so a key parked by one
/// command and read during another command on another slot would be
/// missed, and logged as deleted. There the key is read by the end of the
/// execution unit that parked it, by a post-notification job (which runs
/// after the command, when no slot stands for the key's); when the server
/// refuses the job (loading, a read-only replica), or a key of another slot
/// already waits for its job, the key is read now.
fn park(lock: &ServerLock, m: &Shared, ks: &super::Keyspace, ctx: Ctx, p: Pending) {
    let t = &ks.tracking;
    if t.per_unit.load(Ordering::Relaxed) {
        if let Some(other) = t.pending_new.take(lock) {
            // Kept by `claim_pending`: another slot's key, its job pending.
            t.pending_new.replace(lock, Some(other));
            let db = server::selected_db(ctx);
            return read_pending(lock, m, t, p, Some((ctx, db)));
        }
        if !t.job.get(lock) {
            if !ks.subscriptions.add_settle_job(ctx) {
                let db = server::selected_db(ctx);
                return read_pending(lock, m, t, p, Some((ctx, db)));
            }
            t.job.replace(lock, true);
        }
    }
    t.pending_new.replace(lock, Some(p));
}

/// What a flush or a swap did to the databases (see [`settle_after_bulk`]).
enum Bulk {
    /// One database emptied, or every one (`None`).
    Flush(Option<usize>),
    Swap(usize, usize),
}

/// The pending key, if any, after a FlushDB or SwapDB event (the database
/// of its event may have been emptied or swapped). Where reading a key has
/// no side effect, it is read now in every database. On a server whose
/// reads expire keys (Redis 7.0), a read now, in the middle of the
/// `FLUSHDB` or `SWAPDB`, would delete a key whose TTL has passed and put
/// its `DEL` ahead of the command in the replication stream: a replica
/// would apply it to the database of that name before the swap, and keep
/// the key for good. There the key stays pending, where the command left
/// it: gone with its database, or in the database it was swapped to.
fn settle_after_bulk(lock: &ServerLock, m: &Shared, ks: &super::Keyspace, bulk: Bulk) {
    let t = &ks.tracking;
    let Some(mut p) = t.pending_new.take(lock) else {
        return;
    };
    if !t.defer_expire.load(Ordering::Relaxed) {
        return refresh_everywhere(lock, m, t, p.key.as_bytes());
    }
    match bulk {
        Bulk::Flush(None) => {}
        Bulk::Flush(Some(db)) if db == p.db => {}
        Bulk::Flush(Some(_)) => {
            t.pending_new.replace(lock, Some(p));
        }
        Bulk::Swap(a, b) => {
            if p.db == a {
                p.db = b;
            } else if p.db == b {
                p.db = a;
            }
            t.pending_new.replace(lock, Some(p));
        }
    }
}

/// Reads the pending key `p` and logs its truth: through `here` (the running
/// notification's context and its database) when the key is in that
/// database and its name is held, else through the probe context.
fn read_pending(
    lock: &ServerLock,
    m: &Shared,
    t: &Tracking,
    p: Pending,
    here: Option<(Ctx, usize)>,
) {
    let Pending {
        db,
        key,
        hash,
        existed,
        held,
        plain,
        bulk_at,
        ..
    } = p;
    if plain && bulk_at == m.bulk_ops() {
        let truth = Some(Meta::plain(crate::index::meta::STRING));
        m.push_owned_truth(lock, db, (key, hash), truth, false);
        return;
    }
    if let (Some(h), Some((ctx, here_db))) = (held.as_ref(), here) {
        if here_db == db {
            let found = keys::probe(ctx, h.ptr(), &m.named_types);
            let name = server::string_bytes(h.ptr());
            return record(lock, m, db, (name, Some(key)), hash, found, existed);
        }
    }
    let guard = t.probe.lock().unwrap_or_else(|e| e.into_inner());
    let Some(probe) = guard.as_ref() else { return };
    let ctx = probe.ctx();
    if !server::select_db(ctx, db) {
        return;
    }
    let found = match held.as_ref() {
        Some(h) => keys::probe(ctx, h.ptr(), &m.named_types),
        None => match server::OwnedString::new(ctx, key.as_bytes()) {
            Some(n) => keys::probe(ctx, n.ptr(), &m.named_types),
            None => return,
        },
    };
    let name = key.clone();
    record(
        lock,
        m,
        db,
        (name.as_bytes(), Some(key)),
        hash,
        found,
        existed,
    );
}

/// What [`claim_pending`] found about the key of the event.
struct Claim {
    /// The key's copy, if it was pending.
    key: Option<Key>,
    hash: u64,
    /// Whether the key existed before the command that fired the event.
    existed: bool,
    /// The pending key's `unread_expiry`.
    unread_expiry: bool,
}

/// Whether a notification of this name may come from a command acting on
/// another database than its client's (MOVE and COPY ... DB: "new",
/// "move_to", "copy_to" in the destination, and the lazy expiry of the
/// destination key). On Valkey 9.1 the context of such an event inside
/// EXEC (the transaction's own client, flagged MULTI) reads the event's
/// database while `GetSelectedDb` answers the transaction's database: the
/// pending key must not be read through it.
fn maybe_other_db(event: &[u8]) -> bool {
    matches!(
        event,
        b"new" | b"move_to" | b"copy_to" | b"del" | b"expired" | b"evicted"
    )
}

/// Takes the pending key. If it is `name` in `db` (whose event is about to
/// read it anyway), returns it with its hash and whether it existed before
/// the command that fired the event. Otherwise reads the pending key in its
/// database (through the event's context only when `event` cannot come
/// from another database, see [`maybe_other_db`]), and returns `name`'s
/// hash, its filter block and recent-truth slot prefetched (see
/// [`Shared::prefetch_truth`]).
fn claim_pending(
    lock: &ServerLock,
    m: &Shared,
    t: &Tracking,
    (ctx, db): (Ctx, usize),
    (name, event): (&[u8], &[u8]),
) -> Claim {
    let Some(p) = t.pending_new.take(lock) else {
        return Claim {
            key: None,
            hash: m.prefetch_truth(db, name),
            existed: true,
            unread_expiry: false,
        };
    };
    if p.db == db && p.key.as_bytes() == name {
        return Claim {
            key: Some(p.key),
            hash: p.hash,
            existed: p.existed,
            unread_expiry: p.unread_expiry,
        };
    }
    let hash = m.prefetch_truth(db, name);
    if t.per_unit.load(Ordering::Relaxed)
        && crate::slot::key_slot(p.key.as_bytes()) != crate::slot::key_slot(name)
    {
        // Another slot's key (a cross-slot script, a module's calls): the
        // running command's slot may stand for `name`'s, so the pending
        // key is left to its job (see `park`).
        t.pending_new.replace(lock, Some(p));
        return Claim {
            key: None,
            hash,
            existed: true,
            unread_expiry: false,
        };
    }
    let here = (!maybe_other_db(event)).then_some((ctx, db));
    read_pending(lock, m, t, p, here);
    Claim {
        key: None,
        hash,
        existed: true,
        unread_expiry: false,
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
pub fn apply(lock: &ServerLock, m: &Shared, db: usize, key: &[u8], found: Option<keys::Found>) {
    let hash = crate::index::filter::hash(key);
    record(lock, m, db, (key, None), hash, found, false);
}

/// [`apply`] for a key whose hash is `hash`, and which existed before the
/// command that fired the event (`existed`): its truth is not even logged
/// when it cannot change the index (see `Live::push_truth`). `owned`: the
/// key already copied, to be logged as is.
fn record(
    lock: &ServerLock,
    m: &Shared,
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
    m.push_truth(lock, db, key, hash, truth, existed);
}

/// Re-reads `key` in every database through the probe context (MOVE and
/// COPY ... DB: some servers fire them from a context selected on another
/// database than the key's).
fn refresh_everywhere(lock: &ServerLock, m: &Shared, t: &Tracking, key: &[u8]) {
    let guard = t.probe.lock().unwrap_or_else(|e| e.into_inner());
    let Some(probe) = guard.as_ref() else { return };
    let ctx = probe.ctx();
    let Some(name) = server::OwnedString::new(ctx, key) else {
        return;
    };
    for db in 0..m.databases {
        if server::select_db(ctx, db) {
            apply(
                lock,
                m,
                db,
                key,
                keys::probe(ctx, name.ptr(), &m.named_types),
            );
        }
    }
}

/// A keyspace notification: `key` in the database selected on `ctx`.
#[inline(always)]
pub fn on_keyspace_event(
    lock: &ServerLock,
    ctx: Ctx,
    type_: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
    m: &Shared,
    ks: &super::Keyspace,
) {
    // The Valkey 8 bug: the client's database selected back on return (see
    // clientdb.rs).
    let _restore = RestoreDb::new(lock, ctx, &ks.clientdb, event, key);
    if ks.idle.dropped(lock) {
        // No index to keep: only running copies and deletions watch keys.
        if m.watches.any() {
            let name = server::string_bytes(key);
            match event_name(event) {
                b"move_from" | b"move_to" | b"copy_to" => m.watches.bump_moved(name),
                _ => m.watches.bump(server::selected_db(ctx), name),
            }
        }
        return;
    }
    // Only callbacks under the server lock count this: no locked add.
    let n = m.stats.events.load(Ordering::Relaxed);
    m.stats.events.store(n + 1, Ordering::Relaxed);
    let db = server::selected_db(ctx);
    let name = server::string_bytes(key);
    // A deletion the `Key` event just logged (see unlink.rs); taken by
    // every notification, so it never outlives the pair.
    let gone = ks.deleted.take_gone(lock, m, db, name);
    if type_ & raw::REDISMODULE_NOTIFY_LOADED != 0 {
        // RDB loading: no execution units, and the name may live on the
        // server's stack; read the key now through a heap copy. (A `DEBUG
        // RELOAD` inside MULTI on Valkey 9.1 reports every key's database as
        // the transaction's: the event's own is asked for.)
        let db = server::event_db(ctx);
        m.watches.bump(db, name);
        if ks.replication.async_loading() {
            return; // a temporary database's key (see replication.rs)
        }
        return apply(
            lock,
            m,
            db,
            name,
            keys::probe_copy(ctx, key, &m.named_types),
        );
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
    let Claim {
        key: owned,
        hash,
        existed,
        unread_expiry,
    } = claim_pending(lock, m, &ks.tracking, (ctx, db), (name, event));
    if new {
        m.watches.bump(db, name);
        let key = owned.unwrap_or_else(|| Key::new(name));
        let p = Pending {
            db,
            key,
            hash,
            existed: false,
            held: None,
            plain: false,
            unread_expiry: false,
            bulk_at: 0,
        };
        return park(lock, m, ks, ctx, p);
    }
    if matches!(event, b"move_from" | b"move_to" | b"copy_to") {
        // Fired from the caller's database on some servers: any copy of
        // a hash with this name may be stale.
        m.watches.bump_moved(name);
    } else {
        m.watches.bump(db, name);
    }
    match event {
        _ if deleted => ks.deleted.log_gone(lock, m, db, name, gone),
        b"move_from" | b"move_to" | b"copy_to" => refresh_everywhere(lock, m, &ks.tracking, name),
        // A string SET: the key is now a string. Its expiry is none,
        // or kept (KEEPTTL), or set by the "expire" event that the SET
        // fires right after this one, which reads the key: so a key the
        // command created is a string without expiry here, and one that
        // was such a string stays one. Neither needs reading. A created
        // key is parked as such: logged without a read at the next event
        // about another key (or before the index is read), or read once
        // by the "expire" event of a SET ... EX, which then logs it once.
        //
        // A key that existed and that the index may hold otherwise (with
        // an expiry, or as another type) must be read: parked, it is read
        // by the "expire" event that a SET ... EX fires right after, once
        // for both events (or by the next event, or before the index is
        // read, when the SET carried no expiry).
        b"set" if type_ == raw::REDISMODULE_NOTIFY_STRING as c_int => match owned {
            Some(k) if !existed && !unread_expiry => {
                let p = Pending {
                    db,
                    key: k,
                    hash,
                    existed: false,
                    held: None,
                    plain: true,
                    unread_expiry: false,
                    bulk_at: m.bulk_ops(),
                };
                park(lock, m, ks, ctx, p);
            }
            _ if existed && m.skip_if_plain_h(lock, hash) => {}
            k => {
                let p = Pending::to_read(db, (k, name, key), hash, (existed, unread_expiry));
                park(lock, m, ks, ctx, p);
            }
        },
        // A server that cannot open a key without expiring it (Redis 7.0):
        // an "expire" event may give the key an expiry already passed at
        // the command's time (SET ... PXAT <past>, which the server keeps
        // until it expires it). Read now, the key would be deleted and its
        // DEL propagated ahead of the command that wrote it, so a replica
        // would keep the key for good (issue 24, fuzz redis-7.0 replica
        // seed 400000). Parked like a SET: read once this command is over
        // (at the next event, or before the index is read), when the
        // server's own lazy expiry propagates after it.
        b"expire" if ks.tracking.defer_expire.load(Ordering::Relaxed) => {
            let p = Pending::to_read(db, (owned, name, key), hash, (existed, true));
            park(lock, m, ks, ctx, p);
        }
        _ => {
            let found = keys::probe(ctx, key, &m.named_types);
            record(lock, m, db, (name, owned), hash, found, existed)
        }
    }
}

/// The FlushDB event.
pub fn on_flushdb(
    lock: &ServerLock,
    m: &Shared,
    ks: &super::Keyspace,
    subevent: u64,
    data: *mut c_void,
) {
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
    // A pending key is read as things are now, after the flush, or kept
    // pending (see `settle_after_bulk`).
    let flushed = (dbnum >= 0).then_some(dbnum as usize);
    settle_after_bulk(lock, m, ks, Bulk::Flush(flushed));
}

/// The SwapDB event.
pub fn on_swapdb(lock: &ServerLock, m: &Shared, ks: &super::Keyspace, data: *mut c_void) {
    let Some((first, second)) = sub::swapdb_dbs(data) else {
        return;
    };
    if first < 0 || second < 0 {
        return;
    }
    let (a, b) = (first as usize, second as usize);
    m.push(Op::Swap(a, b));
    // A pending key is read as things are now, after the swap, or kept
    // pending in its new database (see `settle_after_bulk`).
    settle_after_bulk(lock, m, ks, Bulk::Swap(a, b));
    m.watches.bump_all();
    ks.backfill.topology_changed();
}

/// The Loading event (the `Key` event is off while a dataset loads: see
/// `Subscriptions::on_loading`).
pub fn on_loading(
    lock: &ServerLock,
    ctx: Ctx,
    m: &'static Shared,
    ks: &'static super::Keyspace,
    subevent: u64,
) {
    ks.subscriptions.on_loading(ctx, subevent);
    match subevent {
        raw::REDISMODULE_SUBEVENT_LOADING_RDB_START
        | raw::REDISMODULE_SUBEVENT_LOADING_AOF_START
        | raw::REDISMODULE_SUBEVENT_LOADING_REPL_START => {
            // A load that replaces the dataset empties it first, which
            // fires FlushDB (handled above); a merging load (DEBUG
            // RELOAD NOFLUSH MERGE) keeps what is there. Either way the
            // "loaded" notifications upsert the keys as they arrive.
            m.watches.bump_all();
            ks.backfill.topology_changed();
        }
        // An aborted async load leaves the old dataset (replication.rs).
        raw::REDISMODULE_SUBEVENT_LOADING_FAILED if ks.replication.owns_failed_load() => {}
        raw::REDISMODULE_SUBEVENT_LOADING_FAILED => {
            // Whatever is in memory now is the truth: forget what the
            // partial load indexed and rebuild from memory (unless the
            // index is dropped: its next use rebuilds it).
            m.push(Op::FlushAll);
            m.watches.bump_all();
            if !ks.idle.dropped(lock) {
                ks.backfill.start(ctx, m);
            }
        }
        _ => {}
    }
}
