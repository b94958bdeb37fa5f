//! The `Module` value: the one owner of the module's state. It holds the
//! state every subsystem shares ([`Shared`]: the index, cursors, threads)
//! and one struct per subsystem; the subsystems' state lives in their
//! fields, not in process-wide statics.
//!
//! Only the entry points (`lib.rs`'s OnLoad, the event router, the command
//! handlers, INFO) reach it through [`try_get`]; they hand each subsystem
//! `&Shared` and its own struct. A field is read through the one `&Module`
//! the entry point loaded: no further indirection on the notification path.
//!
//! May touch: every subsystem (it owns them); nothing below it names it.

use crate::keyspace::Keyspace;
use crate::server::expiry::LoopTurns;
use crate::state::Shared;
use std::ops::Deref;
use std::sync::OnceLock;

pub struct Module {
    /// What every subsystem shares (see `state.rs`).
    pub shared: Shared,
    /// Keeping the index true: tracking, backfill, idle drop, replication,
    /// cluster view, the Valkey 8 client-db workaround.
    pub keyspace: Keyspace,
    /// The event loop's turns: a floor on scripts' frozen clock for
    /// SNAPSHOT.SCAN.
    pub loop_turns: LoopTurns,
}

impl Deref for Module {
    type Target = Shared;
    #[inline]
    fn deref(&self) -> &Shared {
        &self.shared
    }
}

/// The module's state. Global because the server calls the module through
/// C callbacks (notifications, events, commands, timers, INFO) that carry
/// no pointer of ours; created once at OnLoad, never dropped (MODULE
/// UNLOAD is refused).
static MODULE: OnceLock<Module> = OnceLock::new();

/// Creates the module's state (idempotent).
pub fn init(databases: usize, seed: u64) -> &'static Module {
    MODULE.get_or_init(|| Module {
        shared: Shared::new(databases, seed),
        keyspace: Keyspace::default(),
        loop_turns: LoopTurns::default(),
    })
}

/// The module's state, once OnLoad created it.
#[inline]
pub fn try_get() -> Option<&'static Module> {
    MODULE.get()
}

/// After a config changed at runtime (main thread): what acts on it.
pub fn on_config_changed(spec: &'static crate::config::Spec, v: i64) {
    if let Some(m) = try_get() {
        m.shared.on_config_changed(spec, v);
    }
}
