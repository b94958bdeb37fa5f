//! Command registration and dispatch. Handlers are plain Rust functions
//! `fn(&ServerLock, Ctx, &[&[u8]]) -> Result<(), CmdError>` that either
//! reply themselves (or block the client) and return `Ok`, or return the
//! error to reply. No panic crosses into the server: it becomes an error
//! reply. The server-lock token comes from the entry trampoline
//! (`server::entry::command`).
//!
//! Owns: the command table and docs. May touch: every handler (`scan`,
//! `unlink`), the module state, the server layer.

pub mod docs;
pub mod testhook;

use crate::args::CmdError;
use crate::scan::{hscan, keyspace as scan, sscan, zscan};
use crate::server::entry::{command, Command};
use crate::server::locked::ServerLock;
use crate::server::{self, reply::Reply, Ctx};
use crate::unlink;
use redis_module::raw;
use std::ffi::CString;
use std::os::raw::c_int;

type Handler = fn(&ServerLock, Ctx, &[&[u8]]) -> Result<(), CmdError>;

fn dispatch(
    lock: &ServerLock,
    ctx: Ctx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    handler: Handler,
) -> c_int {
    let args = server::command::args(argv, argc);
    server::blocked::take_blocked_flag();
    let started = std::time::Instant::now();
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(lock, ctx, &args)));
    // A client blocked by the handler is answered by its BlockedReply only
    // (also when the handler panicked after blocking it).
    let blocked = server::blocked::take_blocked_flag();
    if let (false, Some(m)) = (blocked, crate::module::try_get()) {
        m.latency.report(server::latency::Event::Inline, started);
    }
    let r = Reply::new(ctx);
    match outcome {
        Ok(Ok(())) => {}
        _ if blocked => {}
        Ok(Err(CmdError::WrongArity)) => r.wrong_arity(),
        Ok(Err(CmdError::Msg(m))) => r.error(&m),
        Err(_) => r.error("ERR snapscan: internal error (the request was not served)"),
    }
    raw::REDISMODULE_OK as c_int
}

/// The entry of each command: hands its arguments to the handler.
macro_rules! command {
    ($name:ident, $handler:path) => {
        struct $name;
        impl Command for $name {
            fn call(
                lock: &ServerLock,
                ctx: Ctx,
                argv: *mut *mut raw::RedisModuleString,
                argc: c_int,
            ) -> c_int {
                dispatch(lock, ctx, argv, argc, $handler)
            }
        }
    };
}

command!(SnapshotScan, scan::run);
command!(SnapshotHscan, hscan::run);
command!(SnapshotSscan, sscan::run);
command!(SnapshotZscan, zscan::run);
command!(SnapshotUnlink, unlink::run);
command!(SnapshotTesthook, testhook::run);
command!(SnapshotKeys, crate::native::keys::run);
// What SCAN, KEYS, HSCAN, SSCAN, ZSCAN become under snapshot.serve-native.
command!(NativeScan, crate::native::serve::scan);
command!(NativeKeys, crate::native::serve::keys);
command!(NativeHscan, crate::native::serve::hscan);
command!(NativeSscan, crate::native::serve::sscan);
command!(NativeZscan, crate::native::serve::zscan);

struct Spec {
    name: &'static str,
    func: raw::RedisModuleCmdFunc,
    flags: &'static str,
    keys: (c_int, c_int, c_int),
    acl: &'static str,
}

const COMMANDS: &[Spec] = &[
    Spec {
        name: "snapshot.scan",
        func: Some(command::<SnapshotScan>),
        flags: "readonly",
        keys: (0, 0, 0),
        acl: "keyspace read slow",
    },
    Spec {
        name: "snapshot.hscan",
        func: Some(command::<SnapshotHscan>),
        flags: "readonly",
        keys: (1, 1, 1),
        acl: "read hash slow",
    },
    Spec {
        name: "snapshot.sscan",
        func: Some(command::<SnapshotSscan>),
        flags: "readonly",
        keys: (1, 1, 1),
        acl: "read set slow",
    },
    Spec {
        name: "snapshot.zscan",
        func: Some(command::<SnapshotZscan>),
        flags: "readonly",
        keys: (1, 1, 1),
        acl: "read sortedset slow",
    },
    Spec {
        name: "snapshot.unlink",
        func: Some(command::<SnapshotUnlink>),
        // No "denyoom": deleting is how memory is freed.
        flags: "write",
        keys: (0, 0, 0),
        acl: "keyspace write slow",
    },
    Spec {
        name: "snapshot.keys",
        func: Some(command::<SnapshotKeys>),
        flags: "readonly",
        keys: (0, 0, 0),
        acl: "keyspace read slow dangerous",
    },
    // What SCAN, KEYS, HSCAN, SSCAN, ZSCAN become under
    // snapshot.serve-native: the native command's flags and ACL categories.
    Spec {
        name: "snapshot.native-scan",
        func: Some(command::<NativeScan>),
        flags: "readonly",
        keys: (0, 0, 0),
        acl: "keyspace read slow",
    },
    Spec {
        name: "snapshot.native-keys",
        func: Some(command::<NativeKeys>),
        flags: "readonly",
        keys: (0, 0, 0),
        acl: "keyspace read slow dangerous",
    },
    Spec {
        name: "snapshot.native-hscan",
        func: Some(command::<NativeHscan>),
        flags: "readonly",
        keys: (1, 1, 1),
        acl: "read hash slow",
    },
    Spec {
        name: "snapshot.native-sscan",
        func: Some(command::<NativeSscan>),
        flags: "readonly",
        keys: (1, 1, 1),
        acl: "read set slow",
    },
    Spec {
        name: "snapshot.native-zscan",
        func: Some(command::<NativeZscan>),
        flags: "readonly",
        keys: (1, 1, 1),
        acl: "read sortedset slow",
    },
];

/// Test-only fault injection (see `testhook`).
const TESTHOOK: Spec = Spec {
    name: "snapshot.testhook",
    func: Some(command::<SnapshotTesthook>),
    flags: "admin",
    keys: (0, 0, 0),
    acl: "admin dangerous",
};

/// Registers every command. ACL categories are set where the server
/// supports them (Redis 7.2+/Valkey); on Redis 7.0 commands get none.
pub fn register(ctx: Ctx) -> Result<(), String> {
    let hooks = testhook::enabled().then_some(&TESTHOOK);
    for c in COMMANDS.iter().chain(hooks) {
        let name = CString::new(c.name).map_err(|e| e.to_string())?;
        let flags = CString::new(c.flags).map_err(|e| e.to_string())?;
        server::command::create(ctx, &name, c.func, &flags, c.keys)?;
        let acl = CString::new(c.acl).map_err(|e| e.to_string())?;
        if server::command::set_acl_categories(ctx, &name, &acl) == Some(false) {
            server::log(
                ctx,
                "warning",
                &format!("snapscan: cannot set ACL categories of {}", c.name),
            );
        }
    }
    set_docs(ctx);
    Ok(())
}

/// COMMAND DOCS / COMMAND INFO for every registered command that has an
/// entry in [`docs::DOCS`] (summary, arguments, tips, key specs, arity).
fn set_docs(ctx: Ctx) {
    for d in docs::DOCS {
        if let Err(e) = server::cmdinfo::set(ctx, d) {
            server::log(ctx, "warning", &format!("snapscan: {e}"));
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_command_has_docs() {
        for c in super::COMMANDS {
            assert!(super::docs::doc(c.name).is_some(), "{} has no docs", c.name);
        }
    }
}
