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
//! lookup is made only for those few commands.
//!
//! A transaction that queues a `SELECT` changes its database inside `EXEC`,
//! where the filter sees nothing: the filter replays the queued `SELECT`s
//! to learn the database each queued `COPY ... DB` and `DEBUG` starts from
//! (a [`Plan`]), and during `EXEC` a notification of one of them selects
//! that database back (the running command's name tells which kind runs;
//! its key, which one). A `MOVE` needs no plan: its `move_from` event,
//! fired in its source database right before `move_to`, names it.
//!
//! Enabled on Valkey 8 only. The decisions ([`Tracker`]) are pure and
//! unit-tested; the server side (the filter's arguments, client lookups,
//! selecting back) is `server::clientdb`.

use crate::server::clientdb::{self as raw_clientdb, FilterCall};
use crate::server::locked::{LockedCell, ServerLock};
use crate::server::subscribe::event_name;
use crate::server::{self, host, Ctx};
use redis_module::raw;
use std::collections::{HashMap, VecDeque};
use std::os::raw::c_char;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// The transaction being executed, when it queued a `SELECT` and a
    /// command notifying in another database (main thread, server lock).
    plan: LockedCell<Option<Plan>>,
    /// The last `MOVE`'s `move_from` (main thread, server lock).
    moves: LockedCell<MovePair>,
    /// Clients in MULTI (rarely touched: only for the few commands that matter).
    txns: Mutex<Txns>,
    /// The server's `databases` (a queued `SELECT` beyond it fails).
    databases: AtomicU64,
}

impl Default for ClientDb {
    fn default() -> Self {
        ClientDb {
            enabled: AtomicBool::new(false),
            state: LockedCell::new(State::NONE),
            plan: LockedCell::new(None),
            moves: LockedCell::new(MovePair { from: None }),
            txns: Mutex::new(Txns::default()),
            databases: AtomicU64::new(0),
        }
    }
}

impl ClientDb {
    /// Whether a server of this Valkey major version needs the workaround.
    pub fn needed(valkey_major: Option<u32>) -> bool {
        valkey_major == Some(8)
    }

    /// Registers the router's `filter` where the server needs the
    /// workaround (OnLoad); `databases`: the server's.
    pub fn register(&self, ctx: Ctx, filter: raw::RedisModuleCommandFilterFunc, databases: u64) {
        self.databases.store(databases, Ordering::Relaxed);
        if Self::needed(host::valkey_major(ctx)) && raw_clientdb::register_filter(ctx, filter) {
            self.enabled.store(true, Ordering::Relaxed);
        }
    }

    /// The filter: sees a command before it runs.
    pub fn on_command(&self, lock: &ServerLock, call: &FilterCall) {
        let mut t = Tracker {
            state: self.state.get(lock),
            plan: self.plan.take(lock),
            databases: self.databases.load(Ordering::Relaxed),
            txns: &mut |f| self.with_txns(f),
        };
        t.on_command(call);
        self.state.replace(lock, t.state);
        self.plan.replace(lock, t.plan);
    }

    fn with_txns(&self, f: &mut dyn FnMut(&mut Txns) -> bool) -> bool {
        let mut t = self.txns.lock().unwrap_or_else(|e| e.into_inner());
        if t.queued.len() > MAX_TXNS {
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
    /// Clients in MULTI that queued a SELECT, a script or a command
    /// notifying in another database, and what they queued.
    queued: HashMap<u64, Queued>,
}

/// What a client in MULTI queued that matters here.
#[derive(Debug)]
struct Queued {
    /// The database the transaction will be on at this point of `EXEC`
    /// (the queued `SELECT`s replayed).
    db: u64,
    /// A `SELECT` was queued.
    select: bool,
    /// A command notifying in another database (or a script) was queued.
    cross: bool,
    /// The queued `COPY ... DB` and `DEBUG`, with the database each starts
    /// from.
    cmds: Vec<CrossCmd>,
    /// More than [`MAX_QUEUED`] of them: no plan.
    overflow: bool,
}

/// Most clients tracked in MULTI (a client that disconnects mid-MULTI is
/// never removed: the map is cleared when it reaches this).
const MAX_TXNS: usize = 10_000;

/// Most `COPY ... DB` and `DEBUG` commands remembered per transaction.
const MAX_QUEUED: usize = 1024;

/// A queued command that notifies in another database and leaves no event
/// in its own (`MOVE` does: see [`Plan::after_event`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrossCmd {
    pub kind: CrossKind,
    /// The database it starts from.
    pub src: u64,
    /// `COPY`: its destination database.
    pub dst: u64,
    /// The keys its events are about (`COPY`: source and destination).
    pub keys: [Vec<u8>; 2],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrossKind {
    Copy,
    Debug,
}

impl Queued {
    fn new(db: u64) -> Self {
        Queued {
            db,
            select: false,
            cross: false,
            cmds: vec![],
            overflow: false,
        }
    }

    /// Records a queued command of kind `k` (`databases`: the server's, 0
    /// if unknown).
    fn queue(&mut self, k: Kind, cmd: &dyn Command, databases: u64) {
        match k {
            Kind::Select => {
                self.select = true;
                let n = std::str::from_utf8(cmd.arg(1))
                    .ok()
                    .and_then(|t| t.parse::<u64>().ok());
                // A SELECT beyond the databases fails in EXEC: no change.
                if let Some(n) = n.filter(|&n| databases == 0 || n < databases) {
                    self.db = n;
                }
            }
            Kind::Script => self.cross = true,
            Kind::CrossDb => {
                self.cross = true;
                let name = cmd.name();
                let (kind, dst) = if name.eq_ignore_ascii_case(b"copy") {
                    let mut args = (3..).map(|i| cmd.arg(i)).take_while(|a| !a.is_empty());
                    let dst = args
                        .by_ref()
                        .find(|a| a.eq_ignore_ascii_case(b"db"))
                        .and(args.next())
                        .and_then(|a| std::str::from_utf8(a).ok())
                        .and_then(|t| t.parse::<u64>().ok());
                    match dst {
                        Some(dst) => (CrossKind::Copy, dst),
                        None => return, // in its own database, or fails
                    }
                } else if name.eq_ignore_ascii_case(b"debug") {
                    (CrossKind::Debug, self.db)
                } else {
                    return; // MOVE: see MovePair
                };
                if self.cmds.len() >= MAX_QUEUED {
                    self.overflow = true;
                    return;
                }
                self.cmds.push(CrossCmd {
                    kind,
                    src: self.db,
                    dst,
                    keys: [cmd.arg(1).to_vec(), cmd.arg(2).to_vec()],
                });
            }
            _ => {}
        }
    }
}

/// The transaction being executed by `client`, which queued a `SELECT`:
/// what a notification during its `EXEC` must select back.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    pub client: u64,
    /// The queued `COPY ... DB` and `DEBUG` not yet seen to end.
    pub cmds: VecDeque<CrossCmd>,
}

/// `MOVE` fires `move_from` in its source database right before `move_to`
/// in its destination, and nothing after: whoever ran it (a client, a
/// script's own client, inside a transaction or not), `move_to` selects
/// back on the same client the database `move_from` named. (Its earlier
/// events in the destination, a lazily expired key or "new", come before
/// these two and do not matter: MOVE works on its two databases, not the
/// client's.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MovePair {
    /// The client and database of the last `move_from`.
    from: Option<(u64, u64)>,
}

impl MovePair {
    /// After `event` in database `db` on `client`: the database to select
    /// back on it, if any.
    pub fn after_event(&mut self, client: u64, event: &[u8], db: u64) -> Option<u64> {
        match event {
            b"move_from" => {
                self.from = Some((client, db));
                None
            }
            b"move_to" => self
                .from
                .take()
                .filter(|&(c, _)| c == client)
                .map(|(_, db)| db),
            _ => None,
        }
    }
}

impl Plan {
    /// After a notification `event` about `key` in database `db`, fired
    /// while the plan's client runs `cmd` (the server selected `db` on
    /// it): the database to select back, if any.
    ///
    /// - `MOVE`: see [`MovePair`], for every client.
    /// - `COPY ... DB`: the database it started from, that of the first
    ///   queued `COPY` to `key` in `db` whose source key `exists` there
    ///   (a COPY before it to the same key fired nothing: it failed, its
    ///   source missing, or its destination taken, which fails the later
    ///   one too); its events in its source database need nothing.
    ///   `copy_to` is its last event.
    /// - `DEBUG` (RELOAD: every key's "loaded" event): the database it
    ///   started from. (Two in one transaction with a `SELECT` between
    ///   them: the first's.)
    /// - Any other command notifies in its own database only.
    pub fn after_event(
        &mut self,
        (cmd, event): (&[u8], &[u8]),
        (key, db): (&[u8], u64),
        exists: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) -> Option<u64> {
        let at = if cmd.eq_ignore_ascii_case(b"copy") {
            self.cmds.iter().position(|c| {
                c.kind == CrossKind::Copy
                    && c.dst == db
                    && c.keys[1] == key
                    && exists(c.src, &c.keys[0])
            })?
        } else if cmd.eq_ignore_ascii_case(b"debug") {
            self.cmds.iter().position(|c| c.kind == CrossKind::Debug)?
        } else {
            return None;
        };
        // Those before it have run (and fired nothing here).
        self.cmds.drain(..at);
        let src = self.cmds.front()?.src;
        if event == b"copy_to" {
            self.cmds.pop_front();
        }
        Some(src)
    }
}

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
    /// The transaction under way (see [`Plan`]): it lasts until the next
    /// command of a client the server lists (a script's own commands run
    /// inside it).
    pub plan: Option<Plan>,
    /// The server's `databases` (0: unknown).
    pub databases: u64,
    pub txns: WithTxns<'a>,
}

impl Tracker<'_> {
    /// Sees `cmd` before it runs.
    pub fn on_command(&mut self, cmd: &dyn Command) {
        let k = kind(cmd.name());
        if self.plan.is_some() && cmd.client_state(cmd.client_id()).is_some() {
            self.plan = None;
        }
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
        // A script's own command (a client the server does not list) run
        // by the remembered client's EXEC leaves the record alone: the
        // EXEC's later commands still need their database back. (Looked up
        // only while a client is remembered.)
        let inside = |s: &State, cmd: &dyn Command| {
            s.client != 0
                && cmd.client_id() != s.client
                && cmd.client_state(cmd.client_id()).is_none()
        };
        if k == Kind::Other {
            if !inside(s, cmd) {
                s.client = 0;
            }
            return;
        }
        let id = cmd.client_id();
        let Some((db, in_multi)) = cmd.client_state(id) else {
            if !inside(s, cmd) {
                s.client = 0;
            }
            return;
        };
        let remember = match k {
            // Queued, not run now.
            _ if in_multi && k != Kind::Exec && k != Kind::Discard => {
                let databases = self.databases;
                (self.txns)(&mut |t| {
                    t.queued
                        .entry(id)
                        .or_insert_with(|| Queued::new(db))
                        .queue(k, cmd, databases);
                    false
                });
                return;
            }
            Kind::CrossDb => true,
            Kind::Script => {
                s.script_db = db;
                s.in_script = true;
                true
            }
            Kind::Exec => {
                let mut queued = None;
                (self.txns)(&mut |t| {
                    queued = t.queued.remove(&id);
                    false
                });
                match queued {
                    // The database changes inside: a plan, nothing to
                    // remember.
                    Some(q) if q.select => {
                        if q.cross && !q.overflow {
                            self.plan = Some(Plan {
                                client: id,
                                cmds: q.cmds.into(),
                            });
                        }
                        false
                    }
                    Some(q) => q.cross,
                    None => false,
                }
            }
            Kind::Discard => {
                (self.txns)(&mut |t| {
                    t.queued.remove(&id);
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
    /// The notification's event and key (read only under a [`Plan`]).
    event: *const c_char,
    key: *mut raw::RedisModuleString,
    /// The database the server selected for the notification.
    event_db: usize,
}

impl<'a> RestoreDb<'a> {
    pub fn new(
        lock: &'a ServerLock,
        ctx: Ctx,
        db: &'a ClientDb,
        event: *const c_char,
        key: *mut raw::RedisModuleString,
    ) -> Option<Self> {
        db.enabled.load(Ordering::Relaxed).then(|| RestoreDb {
            lock,
            ctx,
            db,
            event,
            key,
            event_db: server::selected_db(ctx),
        })
    }
}

impl Drop for RestoreDb<'_> {
    fn drop(&mut self) {
        if let Some(mut plan) = self.db.plan.take(self.lock) {
            if raw_clientdb::client_of(self.ctx) == plan.client {
                let cmd = raw_clientdb::current_command(self.ctx);
                let event = event_name(self.event);
                let key = server::string_bytes(self.key);
                let ctx = self.ctx;
                // A lookup selects its database on the client: selected
                // back, to the event's if nothing else.
                let mut looked = false;
                let mut exists = |db: u64, key: &[u8]| {
                    looked = true;
                    raw_clientdb::exists_in(ctx, db, key)
                };
                let at = (key, self.event_db as u64);
                let back = plan.after_event((&cmd, event), at, &mut exists);
                let back = back.or(looked.then_some(self.event_db as u64));
                if let Some(db) = back {
                    raw_clientdb::select_back(self.ctx, plan.client, db as usize);
                }
            }
            self.db.plan.replace(self.lock, Some(plan));
        }
        let s = self.db.state.get(self.lock);
        if s.client != 0 {
            raw_clientdb::select_back(self.ctx, s.client, s.db as usize);
        }
        let event = event_name(self.event);
        if matches!(event, b"move_from" | b"move_to") {
            let mut moves = self.db.moves.get(self.lock);
            let client = raw_clientdb::client_of(self.ctx);
            if let Some(db) = moves.after_event(client, event, self.event_db as u64) {
                raw_clientdb::select_back(self.ctx, client, db as usize);
            }
            self.db.moves.replace(self.lock, moves);
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
        run_with_plan(clients, steps).0
    }

    /// [`run`], and the plan after the last step.
    fn run_with_plan(
        clients: &HashMap<u64, (u64, bool)>,
        steps: &[(u64, &str)],
    ) -> (Vec<(u64, u64)>, Option<Plan>) {
        let mut txns = Txns::default();
        let mut with = |f: &mut dyn FnMut(&mut Txns) -> bool| f(&mut txns);
        let mut t = Tracker {
            state: State::NONE,
            plan: None,
            databases: 16,
            txns: &mut with,
        };
        let after = steps
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
            .collect();
        (after, t.plan)
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

    /// Runs `steps` through one tracker; the plan after the last.
    fn plan_after(clients: &HashMap<u64, (u64, bool)>, steps: &[(u64, &str)]) -> Option<Plan> {
        run_with_plan(clients, steps).1
    }

    fn copy(src: u64, from: &str, to: &str) -> CrossCmd {
        CrossCmd {
            kind: CrossKind::Copy,
            src,
            dst: 0,
            keys: [from.as_bytes().to_vec(), to.as_bytes().to_vec()],
        }
    }

    #[test]
    fn a_transaction_that_selects_gets_a_plan_of_its_copies() {
        // Client 7 in MULTI on database 1.
        let clients = HashMap::from([(7, (1, true))]);
        let plan = plan_after(
            &clients,
            &[
                (7, "COPY a b DB 0"),
                (7, "SELECT 3"),
                (7, "COPY c d db 0 REPLACE"),
                (7, "COPY e f"),
                (7, "SELECT 99"),
                (7, "MOVE g 2"),
                (7, "SELECT 2"),
                (7, "DEBUG RELOAD"),
                (7, "EXEC"),
            ],
        )
        .expect("a plan");
        assert_eq!(plan.client, 7);
        let debug = CrossCmd {
            kind: CrossKind::Debug,
            src: 2,
            dst: 2,
            keys: [b"RELOAD".to_vec(), vec![]],
        };
        assert_eq!(
            Vec::from(plan.cmds),
            [copy(1, "a", "b"), copy(3, "c", "d"), debug]
        );
    }

    #[test]
    fn no_plan_without_a_select_or_without_a_cross_db_command() {
        let clients = HashMap::from([(7, (1, true))]);
        let steps = [(7, "COPY a b DB 0"), (7, "EXEC")];
        assert_eq!(plan_after(&clients, &steps), None);
        let steps = [(7, "SELECT 2"), (7, "SET a b"), (7, "EXEC")];
        assert_eq!(plan_after(&clients, &steps), None);
    }

    #[test]
    fn the_plan_ends_with_the_next_command_of_a_listed_client() {
        // 9 is a script's own client, 8 another connection.
        let clients = HashMap::from([(7, (1, true)), (8, (0, false))]);
        let steps = [
            (7, "SELECT 2"),
            (7, "MOVE a 1"),
            (7, "EXEC"),
            (9, "SET x 1"),
        ];
        assert!(plan_after(&clients, &steps).is_some());
        let steps = [(7, "SELECT 2"), (7, "MOVE a 1"), (7, "EXEC"), (8, "GET x")];
        assert_eq!(plan_after(&clients, &steps), None);
    }

    #[test]
    fn events_select_back_where_each_command_started() {
        let mut p = Plan {
            client: 7,
            cmds: VecDeque::from([copy(1, "a", "b"), copy(3, "a", "b"), copy(5, "c", "d")]),
        };
        // Source keys: `a` in databases 1 and 3, `c` in 5.
        let mut exists = |db: u64, k: &[u8]| matches!((db, k), (1 | 3, b"a") | (5, b"c"));
        let mut ev = |p: &mut Plan, cmd: &str, event: &str, key: &str, db: u64| {
            p.after_event(
                (cmd.as_bytes(), event.as_bytes()),
                (key.as_bytes(), db),
                &mut exists,
            )
        };
        // Another command's event: its own database, nothing to do.
        assert_eq!(ev(&mut p, "set", "set", "a", 1), None);
        // A MOVE: its own pair (MovePair).
        assert_eq!(ev(&mut p, "move", "move_to", "m", 4), None);
        // The first COPY of a to b: an event in its source database, then
        // its new and copy_to events.
        assert_eq!(ev(&mut p, "copy", "expired", "a", 1), None);
        assert_eq!(ev(&mut p, "COPY", "new", "b", 0), Some(1));
        assert_eq!(ev(&mut p, "copy", "copy_to", "b", 0), Some(1));
        // The second COPY of a to b failed (no event); the third's events
        // skip it.
        assert_eq!(ev(&mut p, "copy", "copy_to", "d", 0), Some(5));
        assert!(p.cmds.is_empty());
        assert_eq!(ev(&mut p, "copy", "copy_to", "d", 0), None);
    }

    #[test]
    fn a_move_goes_back_where_its_move_from_fired() {
        let mut m = MovePair::default();
        // Client 7 (a script's own, say): new in 4, move_from in 2, move_to in 4.
        assert_eq!(m.after_event(7, b"new", 4), None);
        assert_eq!(m.after_event(7, b"move_from", 2), None);
        assert_eq!(m.after_event(7, b"move_to", 4), Some(2));
        // Once only; another client's move_to is not this pair's.
        assert_eq!(m.after_event(7, b"move_to", 4), None);
        assert_eq!(m.after_event(7, b"move_from", 1), None);
        assert_eq!(m.after_event(8, b"move_to", 3), None);
    }

    #[test]
    fn a_copy_whose_source_is_missing_failed() {
        // COPY x y DB 0 from database 0 (no x there: fails), then from 3.
        let mut p = Plan {
            client: 7,
            cmds: VecDeque::from([copy(0, "x", "y"), copy(3, "x", "y")]),
        };
        let mut exists = |db: u64, k: &[u8]| db == 3 && k == b"x";
        let at = (&b"y"[..], 0);
        assert_eq!(p.after_event((b"copy", b"new"), at, &mut exists), Some(3));
        assert_eq!(
            p.after_event((b"copy", b"copy_to"), at, &mut exists),
            Some(3)
        );
        assert!(p.cmds.is_empty());
    }

    #[test]
    fn a_scripts_commands_inside_exec_keep_the_exec_clients_record() {
        // 7 runs MULTI; EVAL ...; COPY a b DB 2; EXEC on database 1; 9 is
        // the script's own client (not listed), 8 another connection.
        let clients = HashMap::from([(7, (1, true)), (8, (0, false))]);
        assert_eq!(
            run(
                &clients,
                &[
                    (7, "EVAL s 0"),
                    (7, "COPY a b DB 2"),
                    (7, "EXEC"),
                    (9, "INCR k"),
                    (9, "SELECT 4"),
                    (9, "MOVE k 3"),
                    (8, "GET x")
                ]
            ),
            [(0, 0), (0, 0), (7, 1), (7, 1), (7, 1), (7, 1), (0, 1)]
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
