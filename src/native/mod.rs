//! Serving the native commands from snapshots (`snapshot.serve-native`).
//!
//! Owns: the mode's flags ([`mode`]), the decision of how one call is
//! served ([`plan`]), the module commands the filter routes SCAN, KEYS,
//! HSCAN, SSCAN and ZSCAN to and SNAPSHOT.KEYS ([`serve`], [`keys`]), and
//! their state (`state::NativeServing`, a field of `state::Shared`:
//! counters, whether the mode was ever on, whether the filter is
//! registered), the command filter ([`filter`]).
//!
//! May touch: the SNAPSHOT.* machinery (`scan::keyspace`,
//! `scan::collection`), the module state, the configs, and the server
//! layer's `server::native` (registering the filter, reading and
//! rewriting the call, the ACL check, the native call). The config's value
//! is `config::Config::serve_native`. [`mode`] and [`plan`] are pure.
//!
//! The rules (README, "Serving the native commands"): a call is served from
//! a snapshot when its cursor is 0 or one snapscan issued (every such
//! cursor lies in `[2^52, 2^53)`, see `cursor::ISSUED_BIT`); any other
//! cursor, arguments the native command refuses, MULTI, scripts and
//! functions run the native command. An issued cursor whose iteration is
//! gone restarts the iteration with the native command at cursor 0, and so
//! does one the native command would run (MULTI, scripts, the mode off):
//! the filter is registered whatever the mode.

pub mod filter;
pub mod keys;
pub mod mode;
pub mod plan;
pub mod serve;

use crate::state::{NativeServing, Shared};
use mode::Native;
use std::sync::atomic::Ordering;

/// What became of one routed call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Served,
    Native,
    Restarted,
}

/// Counts a call of `n` as `o`.
pub fn count(s: &NativeServing, n: Native, o: Outcome) {
    let a = match o {
        Outcome::Served => &s.served,
        Outcome::Native => &s.native,
        Outcome::Restarted => &s.restarted,
    };
    a[n.index()].fetch_add(1, Ordering::Relaxed);
}

/// Takes back the count of a call of `n` counted as served whose client
/// was answered by the native command after all (see `serve::fallback`).
pub fn uncount_served(s: &NativeServing, n: Native) {
    s.served[n.index()].fetch_sub(1, Ordering::Relaxed);
}

/// Whether the filter should look at routable commands with mode `bits`
/// now (one relaxed load while the mode was never on).
pub fn watching(s: &NativeServing, bits: i64) -> bool {
    if bits != 0 {
        if !s.ever_on.load(Ordering::Relaxed) {
            s.ever_on.store(true, Ordering::Relaxed);
        }
        return true;
    }
    s.ever_on.load(Ordering::Relaxed)
}

/// INFO fields: `native_<cmd>_served|native|restarted`.
pub fn figures(s: &NativeServing) -> Vec<(String, u64)> {
    let mut v = Vec::with_capacity(15);
    for n in Native::ALL {
        let i = n.index();
        for (what, a) in [
            ("served", &s.served),
            ("native", &s.native),
            ("restarted", &s.restarted),
        ] {
            v.push((
                format!("native_{}_{what}", n.name()),
                a[i].load(Ordering::Relaxed),
            ));
        }
    }
    v
}

/// OnLoad: registers the filter whatever the mode: a cursor snapscan
/// issued must never reach the native command as it is, also where the
/// mode is off (see `filter::restart_issued`). With the mode off, the
/// filter costs each command a look at its name.
pub fn init(m: &Shared) {
    filter::register(&m.native);
}

/// After a runtime config change: registers the filter if the load could
/// not (it is registered once).
pub fn on_config_changed(m: &Shared, spec: &'static crate::config::Spec, v: i64) {
    if m.config.is(spec, &m.config.serve_native) && v != 0 {
        filter::register(&m.native);
    }
}
