//! The command filter of `snapshot.serve-native`: rewrites SCAN, KEYS,
//! HSCAN, SSCAN, ZSCAN to the module commands that serve them (see
//! `mode::route` for which calls), unless the client is in MULTI, is a
//! script's or a module's own client, or its user may not run the native
//! command or the module command (then the native command runs, with the
//! server's own ACL check, replies and ACL LOG entry). Where the server cannot tell the filter which client runs
//! the command (Redis 7.0), every routed call is rewritten: the module
//! command falls back to the native one inside MULTI and scripts itself.
//! A command renamed or removed by `rename-command` is never routed: the
//! server answers its old name as unknown, and its new name natively.
//! A script's call is known by the server's context flags as well as by
//! its client: Valkey 9 runs scripts on pooled temporary clients that may
//! carry the id of a live client (see `script_or_exec_running`).

use super::mode::{self, Native};
use super::plan;
use crate::server::clientdb::{client_state, FilterCall};
use crate::server::entry::CommandFilter;
use crate::server::locked::ServerLock;
use crate::server::native as raw_native;
use crate::state::NativeServing;
use std::sync::atomic::Ordering;

/// Registers the filter once (main thread); `s` remembers that it is.
pub fn register(s: &NativeServing) {
    if s.filter_registered.load(Ordering::Relaxed) {
        return;
    }
    // rename-command is read before modules load: what exists now stays.
    let present = Native::ALL
        .into_iter()
        .filter(|n| raw_native::command_exists(n.c_name()))
        .fold(0, |bits, n| bits | n.bit());
    s.present.store(present, Ordering::Relaxed);
    let options = plan::Options {
        novalues: raw_native::command_has_token(c"HSCAN", b"NOVALUES"),
        noscores: raw_native::command_has_token(c"ZSCAN", b"NOSCORES"),
    };
    s.options.store(options.bits(), Ordering::Relaxed);
    if raw_native::register_filter::<Filter>() {
        s.filter_registered.store(true, Ordering::Relaxed);
    }
}

pub struct Filter;

impl CommandFilter for Filter {
    fn on(_lock: &ServerLock, call: &FilterCall) {
        let Some(m) = crate::module::try_get() else {
            return;
        };
        let name = call.arg(0);
        let Some(n) = Native::from_name(name) else {
            return;
        };
        // Only commands the server has under their own names (rename-command).
        let present = m.native.present.load(Ordering::Relaxed);
        if present & n.bit() == 0 {
            return;
        }
        if routed(m, call, n, name, present) {
            call.replace(0, n.internal().as_bytes());
        } else {
            restart_issued(m, call, n);
        }
    }
}

/// Whether the call goes to the module command (see the module docs).
fn routed(
    m: &crate::module::Module,
    call: &FilterCall,
    n: Native,
    name: &[u8],
    present: i64,
) -> bool {
    let bits = m.config.serve_native.load(Ordering::Relaxed);
    if !super::watching(&m.native, bits) {
        return false;
    }
    if mode::route(bits & present, true, name, |i| call.arg(i)).is_none() {
        return false;
    }
    if call.len() < n.min_args() {
        return false;
    }
    if raw_native::filter_knows_client() {
        // A script's or function's call (or one made inside EXEC), which
        // the client id may not show: Valkey 9 runs scripts on pooled
        // clients that keep the id of a live client they served.
        if raw_native::script_or_exec_running() {
            return false;
        }
        let id = call.client_id();
        match client_state(id) {
            // A script's or a module's own client, or one in MULTI.
            None | Some((_, true)) => return false,
            Some(_) => {}
        }
        // Served only when the user may run both the native command (with
        // the call's arguments: key patterns too) and the module command;
        // otherwise the native command runs, with the server's own ACL
        // check, NOPERM reply and ACL LOG entry.
        let names: [&[u8]; 2] = [n.name().as_bytes(), n.internal().as_bytes()];
        if call.acl_allows_all(id, &names) != Some(true) {
            return false;
        }
    }
    true
}

/// A call the native command runs whose cursor snapscan issued: the native
/// command would read it as a position in its table and skip keys without
/// an error, so it restarts the iteration at 0 instead (README, rule 3),
/// whatever the mode, on every server that loaded the module (MULTI,
/// scripts, functions, a user allowed the native command only, the mode
/// off or never on, as after a restart without it or on a replica
/// promoted without it).
fn restart_issued(m: &crate::module::Module, call: &FilterCall, n: Native) {
    let Some(at) = mode::cursor_at(n) else {
        return;
    };
    if at >= call.len() {
        return;
    }
    let issued = crate::args::parse_cursor(call.arg(at)).is_ok_and(crate::cursor::is_issued);
    if issued {
        call.replace(at, b"0");
        super::count(&m.native, n, super::Outcome::Restarted);
    }
}
