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
//! Enabled on Valkey 8 only. The decisions ([`Tracker`]) are pure and
//! unit-tested; the server side (the filter's arguments, client lookups,
//! selecting back) is `server::clientdb`.

use crate::server::clientdb::{self as raw_clientdb, FilterCall};
use crate::server::locked::{LockedCell, ServerLock};
use crate::server::{host, Ctx};
use redis_module::raw;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The workaround's state (a field of `keyspace::Keyspace`). The filter
/// is the event router's (`events.rs`), registered here where the server
/// needs it ([`ClientDb::register`]); it hands each command to
/// [`ClientDb::on_command`].
pub struct ClientDb {
    /// Whether the filter is registered (read by every notification, without
    /// the token: one relaxed load).
    enabled: AtomicBool,
    /// What the filter decided last (main thread, server lock).
    state: LockedCell<State>,
    /// Clients in MULTI (rarely touched: only for the few commands that matter).
    txns: Mutex<Txns>,
}

impl Default for ClientDb {
    fn default() -> Self {
        ClientDb {
            enabled: AtomicBool::new(false),
            state: LockedCell::new(State::NONE),
            txns: Mutex::new(Txns::default()),
        }
    }
}

impl ClientDb {
    /// Whether a server of this Valkey major version needs the workaround.
    pub fn needed(valkey_major: Option<u32>) -> bool {
        valkey_major == Some(8)
    }

    /// Registers the router's `filter` where the server needs the
    /// workaround (OnLoad).
    pub fn register(&self, ctx: Ctx, filter: raw::RedisModuleCommandFilterFunc) {
        if Self::needed(host::valkey_major(ctx)) && raw_clientdb::register_filter(ctx, filter) {
            self.enabled.store(true, Ordering::Relaxed);
        }
    }

    /// The filter: sees a command before it runs.
    pub fn on_command(&self, lock: &ServerLock, call: &FilterCall) {
        let mut t = Tracker {
            state: self.state.get(lock),
            txns: &mut |f| self.with_txns(f),
        };
        t.on_command(call);
        self.state.replace(lock, t.state);
    }

    fn with_txns(&self, f: &mut dyn FnMut(&mut Txns) -> bool) -> bool {
        let mut t = self.txns.lock().unwrap_or_else(|e| e.into_inner());
        if t.cross.len() + t.select.len() > MAX_TXNS {
            *t = Txns::default();
        }
        f(&mut t)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    CrossDb,
    Script,
    Select,
    Exec,
    Discard,
    Other,
}

pub fn kind(name: &[u8]) -> Kind {
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

/// The filter's memory between commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct State {
    /// The executing client to restore (0: none) and its database.
    pub client: u64,
    pub db: u64,
    /// A script's caller is remembered: the script's own commands (from a
    /// client the server does not list) leave the record alone.
    pub in_script: bool,
    /// The database of the running script's own client (its caller's at
    /// the start, then whatever the script SELECTs).
    pub script_db: u64,
}

impl State {
    pub const NONE: State = State {
        client: 0,
        db: 0,
        in_script: false,
        script_db: 0,
    };
}

#[derive(Default)]
pub struct Txns {
    /// Clients in MULTI that queued a command notifying in another db.
    cross: HashSet<u64>,
    /// Clients in MULTI that queued a SELECT.
    select: HashSet<u64>,
}

/// Most clients tracked in MULTI (a client that disconnects mid-MULTI is
/// never removed: the sets are cleared when they reach this).
const MAX_TXNS: usize = 10_000;

/// What the server says about the command a filter sees.
pub trait Command {
    fn name(&self) -> &[u8];
    /// The argument at `i` (empty if missing).
    fn arg(&self, i: usize) -> &[u8];
    fn client_id(&self) -> u64;
    /// The client's database and whether it is in MULTI; `None` for a
    /// client the server does not list (a script's own).
    fn client_state(&self, id: u64) -> Option<(u64, bool)>;
}

/// Runs an update of the clients in MULTI (behind whatever lock keeps them).
pub type WithTxns<'a> = &'a mut dyn FnMut(&mut dyn FnMut(&mut Txns) -> bool) -> bool;

/// The filter's decisions: what to remember of a command about to run.
pub struct Tracker<'a> {
    pub state: State,
    pub txns: WithTxns<'a>,
}

impl Tracker<'_> {
    /// Sees `cmd` before it runs.
    pub fn on_command(&mut self, cmd: &dyn Command) {
        let k = kind(cmd.name());
        let s = &mut self.state;
        if s.in_script {
            let id = cmd.client_id();
            if cmd.client_state(id).is_none() {
                // A command of the running script, on its own client.
                match k {
                    Kind::Select => {
                        let n = cmd.arg(1);
                        if let Some(db) = std::str::from_utf8(n).ok().and_then(|t| t.parse().ok()) {
                            s.script_db = db;
                        }
                    }
                    Kind::CrossDb => {
                        s.db = s.script_db;
                        s.client = id;
                    }
                    _ => {}
                }
                return;
            }
            s.in_script = false;
        }
        if k == Kind::Other {
            s.client = 0;
            return;
        }
        let id = cmd.client_id();
        let Some((db, in_multi)) = cmd.client_state(id) else {
            s.client = 0;
            return;
        };
        let remember = match k {
            // Queued, not run now.
            _ if in_multi && k != Kind::Exec && k != Kind::Discard => {
                (self.txns)(&mut |t| match k {
                    Kind::CrossDb | Kind::Script => t.cross.insert(id),
                    Kind::Select => t.select.insert(id),
                    _ => false,
                });
                return;
            }
            Kind::CrossDb => true,
            Kind::Script => {
                s.script_db = db;
                s.in_script = true;
                true
            }
            Kind::Exec => (self.txns)(&mut |t| t.cross.remove(&id) & !t.select.remove(&id)),
            Kind::Discard => {
                (self.txns)(&mut |t| {
                    t.cross.remove(&id);
                    t.select.remove(&id);
                    false
                });
                false
            }
            _ => false,
        };
        if remember {
            s.db = db;
            s.client = id;
        } else {
            s.client = 0;
        }
    }
}

impl Command for FilterCall {
    fn name(&self) -> &[u8] {
        self.arg(0)
    }
    fn arg(&self, i: usize) -> &[u8] {
        FilterCall::arg(self, i)
    }
    fn client_id(&self) -> u64 {
        FilterCall::client_id(self)
    }
    fn client_state(&self, id: u64) -> Option<(u64, bool)> {
        raw_clientdb::client_state(id)
    }
}

/// Selects the remembered database back on the executing client when it
/// goes out of scope (create it at the start of a notification callback).
pub struct RestoreDb<'a> {
    lock: &'a ServerLock,
    ctx: Ctx,
    db: &'a ClientDb,
}

impl<'a> RestoreDb<'a> {
    pub fn new(lock: &'a ServerLock, ctx: Ctx, db: &'a ClientDb) -> Option<Self> {
        db.enabled
            .load(Ordering::Relaxed)
            .then_some(RestoreDb { lock, ctx, db })
    }
}

impl Drop for RestoreDb<'_> {
    fn drop(&mut self) {
        let s = self.db.state.get(self.lock);
        if s.client != 0 {
            raw_clientdb::select_back(self.ctx, s.client, s.db as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

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

    /// A fake server: clients by id (database, in MULTI); a missing id is a
    /// script's own client.
    struct Cmd<'a> {
        args: Vec<&'a [u8]>,
        id: u64,
        clients: &'a HashMap<u64, (u64, bool)>,
    }

    impl Command for Cmd<'_> {
        fn name(&self) -> &[u8] {
            self.args.first().copied().unwrap_or(b"")
        }
        fn arg(&self, i: usize) -> &[u8] {
            self.args.get(i).copied().unwrap_or(b"")
        }
        fn client_id(&self) -> u64 {
            self.id
        }
        fn client_state(&self, id: u64) -> Option<(u64, bool)> {
            self.clients.get(&id).copied()
        }
    }

    /// Runs `(client id, command)` steps through one tracker; returns the
    /// client and database to restore after each.
    fn run(clients: &HashMap<u64, (u64, bool)>, steps: &[(u64, &str)]) -> Vec<(u64, u64)> {
        let mut txns = Txns::default();
        let mut with = |f: &mut dyn FnMut(&mut Txns) -> bool| f(&mut txns);
        let mut t = Tracker {
            state: State::NONE,
            txns: &mut with,
        };
        steps
            .iter()
            .map(|(id, cmd)| {
                let args: Vec<&[u8]> = cmd.split(' ').map(str::as_bytes).collect();
                t.on_command(&Cmd {
                    args,
                    id: *id,
                    clients,
                });
                (t.state.client, t.state.db)
            })
            .collect()
    }

    #[test]
    fn a_cross_db_command_remembers_its_client_and_database() {
        let clients = HashMap::from([(7, (3, false))]);
        assert_eq!(
            run(
                &clients,
                &[(7, "MOVE k 1"), (7, "GET k"), (7, "COPY a b DB 2")]
            ),
            [(7, 3), (0, 3), (7, 3)]
        );
    }

    #[test]
    fn a_script_keeps_its_caller_and_follows_its_own_select() {
        // 9 is the script's own client (not listed by the server).
        let clients = HashMap::from([(7, (2, false))]);
        assert_eq!(
            run(
                &clients,
                &[
                    (7, "EVAL s 0"),
                    (9, "SELECT 5"),
                    (9, "MOVE k 1"),
                    (7, "GET k")
                ]
            ),
            [(7, 2), (7, 2), (9, 5), (0, 5)]
        );
    }

    #[test]
    fn multi_restores_at_exec_unless_a_select_was_queued() {
        let clients = HashMap::from([(7, (1, true)), (8, (4, true))]);
        assert_eq!(
            run(
                &clients,
                &[
                    (7, "MOVE k 2"),
                    (7, "EXEC"),
                    (8, "MOVE k 2"),
                    (8, "SELECT 3"),
                    (8, "EXEC")
                ]
            ),
            [(0, 0), (7, 1), (7, 1), (7, 1), (0, 1)]
        );
    }

    #[test]
    fn discard_forgets_what_was_queued() {
        let clients = HashMap::from([(7, (1, true))]);
        assert_eq!(
            run(&clients, &[(7, "MOVE k 2"), (7, "DISCARD"), (7, "EXEC")]),
            [(0, 0), (0, 0), (0, 0)]
        );
    }
}
