//! The module commands the filter routes the native commands to
//! (`snapshot.native-scan`, `-hscan`, `-sscan`, `-zscan`; KEYS goes to
//! SNAPSHOT.KEYS, see [`super::keys`]).

use super::mode::Native;
use super::plan::{self, Plan, SMALL_COLLECTION};
use super::Outcome;
use crate::args::CmdError;
use crate::collections::Kind;
use crate::scan::{collection, keyspace as scan};
use crate::server::blocked::Fallback;
use crate::server::locked::ServerLock;
use crate::server::{self, keys, Ctx};

/// `snapshot.native-<cmd> <the native command's arguments>`: what SCAN,
/// HSCAN, SSCAN, ZSCAN become under `snapshot.serve-native`.
///
/// Served from a snapshot when the cursor is 0 or one snapscan issued;
/// run by the native command (same arguments, its own reply) when the
/// client cannot block (MULTI, Lua, functions), the cursor is not one
/// snapscan issued, the arguments are refused, or a collection is small
/// enough to come back whole natively. An issued cursor whose iteration is
/// gone (idle timeout, eviction, restart, failover) restarts natively at 0.
pub fn run(lock: &ServerLock, ctx: Ctx, args: &[&[u8]], n: Native) -> Result<(), CmdError> {
    let native_args = args.get(1..).unwrap_or_default();
    let Some(m) = crate::module::try_get() else {
        return native(ctx, n, native_args, Outcome::Native);
    };
    // Where the filter could not check the caller's ACL (Redis 7.0), a
    // user who may not run the native command gets its NOPERM, worded as
    // Redis 7.0 words it, and its ACL LOG entry.
    if !server::native::filter_knows_client()
        && server::native::caller_refused_logged(ctx, n.name().as_bytes(), native_args)
            == Some(true)
    {
        super::count(&m.native, n, Outcome::Native);
        return Err(CmdError::msg(format!(
            "NOPERM this user has no permissions to run the '{}' command",
            n.name()
        )));
    }
    if server::blocking_denied(ctx) {
        return native_or_restart(ctx, n, native_args);
    }
    let has = plan::Options::from_bits(m.native.options.load(std::sync::atomic::Ordering::Relaxed));
    let p = plan::plan(n, native_args, has, |t| m.type_names().lookup(t).is_some());
    let Plan::Snapshot {
        args: sargs,
        cursor,
        key,
    } = p
    else {
        return native_or_restart(ctx, n, native_args);
    };
    if cursor == 0 {
        if let Some(k) = key {
            if small(ctx, &k) {
                return native(ctx, n, native_args, Outcome::Native);
            }
        }
        // Near the old versions' limit a new keyspace iteration runs
        // natively, so that those already open can finish.
        if n == Native::Scan && crate::state::refuse_opening(m).is_some() {
            return native(ctx, n, native_args, Outcome::Native);
        }
    }
    let refs: Vec<&[u8]> = sargs.iter().map(Vec::as_slice).collect();
    let fb = || Some(fallback(n, native_args, cursor));
    let served = match n {
        Native::Scan => scan::run_with(lock, ctx, &refs, fb()),
        // Too many walks in flight: KEYS itself answered.
        Native::Keys => match super::keys::run_as(lock, ctx, &refs, true) {
            Ok(true) => {
                super::count(&m.native, n, Outcome::Native);
                return Ok(());
            }
            other => other.map(|_| ()),
        },
        Native::Hscan => collection::run_with(ctx, &refs, Kind::Hash, fb()),
        Native::Sscan => collection::run_with(ctx, &refs, Kind::Set, fb()),
        Native::Zscan => collection::run_with(ctx, &refs, Kind::Zset, fb()),
    };
    match served {
        Ok(()) => {
            super::count(&m.native, n, Outcome::Served);
            Ok(())
        }
        // Already answered (a blocked client gets its reply from the worker).
        Err(e) if server::blocked::blocked_now() => Err(e),
        // The snapshot cannot serve this call (an iteration that is gone,
        // the index still loading, a type error...): the native command
        // answers, from cursor 0 when the cursor was snapscan's.
        Err(_) if cursor != 0 => {
            let again = plan::restart(n, native_args);
            let refs: Vec<&[u8]> = again.iter().map(Vec::as_slice).collect();
            native(ctx, n, &refs, Outcome::Restarted)
        }
        Err(_) => native(ctx, n, native_args, Outcome::Native),
    }
}

/// What answers a call that blocked its client and then failed (a
/// collection copy over `snapshot.collection-memory-limit`, a worker that
/// panicked): the native command, as for a failure before blocking, run on
/// the main thread when the client is unblocked (from cursor 0 when the
/// cursor was snapscan's). The call, counted as served, is counted again
/// as answered natively.
fn fallback(n: Native, native_args: &[&[u8]], cursor: u64) -> Fallback {
    let (args, outcome) = if cursor != 0 {
        (plan::restart(n, native_args), Outcome::Restarted)
    } else {
        (
            native_args.iter().map(|a| a.to_vec()).collect(),
            Outcome::Native,
        )
    };
    Box::new(move |_lock, ctx| {
        if let Some(m) = crate::module::try_get() {
            super::uncount_served(&m.native, n);
        }
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        if let Err(e) = native(ctx, n, &refs, outcome) {
            let msg = match e {
                CmdError::Msg(m) => m,
                CmdError::WrongArity => {
                    format!("ERR wrong number of arguments for '{}' command", n.name())
                }
            };
            server::reply::Reply::new(ctx).error(&msg);
        }
    })
}

/// Whether the collection at `key` is answered natively: kept in a
/// compact encoding (listpack, intset: it comes back whole in one native
/// call), as the server's limits say now, or at most [`SMALL_COLLECTION`]
/// elements whatever its encoding (a missing key counts as small: the
/// native reply is empty).
fn small(ctx: Ctx, key: &[u8]) -> bool {
    match server::OwnedString::new(ctx, key) {
        Some(name) => {
            keys::value_len(ctx, name.ptr()) <= SMALL_COLLECTION
                || keys::compact(ctx, name.ptr()) == Some(true)
        }
        None => false,
    }
}

/// Runs the native command `n` with `args`, from cursor 0 when the cursor
/// is one snapscan issued (the native command would read it as a position
/// in its table and skip keys).
fn native_or_restart(ctx: Ctx, n: Native, args: &[&[u8]]) -> Result<(), CmdError> {
    if plan::continues_issued(n, args) {
        let again = plan::restart(n, args);
        let refs: Vec<&[u8]> = again.iter().map(Vec::as_slice).collect();
        return native(ctx, n, &refs, Outcome::Restarted);
    }
    native(ctx, n, args, Outcome::Native)
}

/// Runs the native command `n` with `args` and counts the call as `o`.
pub(super) fn native(ctx: Ctx, n: Native, args: &[&[u8]], o: Outcome) -> Result<(), CmdError> {
    if let Some(m) = crate::module::try_get() {
        super::count(&m.native, n, o);
    }
    server::native::forward(ctx, n.c_name(), args)
        .map_err(|e| CmdError::msg(format!("ERR snapscan: cannot run {}: {e}", n.name())))
}

/// The entries of the module commands (one per routed native command).
pub fn scan(lock: &ServerLock, ctx: Ctx, args: &[&[u8]]) -> Result<(), CmdError> {
    run(lock, ctx, args, Native::Scan)
}

pub fn keys(lock: &ServerLock, ctx: Ctx, args: &[&[u8]]) -> Result<(), CmdError> {
    run(lock, ctx, args, Native::Keys)
}

pub fn hscan(lock: &ServerLock, ctx: Ctx, args: &[&[u8]]) -> Result<(), CmdError> {
    run(lock, ctx, args, Native::Hscan)
}

pub fn sscan(lock: &ServerLock, ctx: Ctx, args: &[&[u8]]) -> Result<(), CmdError> {
    run(lock, ctx, args, Native::Sscan)
}

pub fn zscan(lock: &ServerLock, ctx: Ctx, args: &[&[u8]]) -> Result<(), CmdError> {
    run(lock, ctx, args, Native::Zscan)
}
