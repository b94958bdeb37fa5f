//! Serving the native commands from snapshots (`snapshot.serve-native`).
//!
//! Owns: the mode's flags ([`mode`]), the decision of how one call is
//! served ([`plan`]), the module commands the filter routes SCAN, KEYS,
//! HSCAN, SSCAN and ZSCAN to and SNAPSHOT.KEYS ([`serve`], [`keys`]), and
//! their state ([`Serving`], a field of `state::Module`: counters, and
//! whether the mode was ever on).
//!
//! May touch: the SNAPSHOT.* machinery (`commands::scan`,
//! `commands::collection`), the module state, and the FFI wrappers of
//! `ffi::native` (the filter step and the native call). The filter itself
//! is the module's one command filter (`ffi::clientdb`); the config row is
//! `config::SERVE_NATIVE`. [`mode`] and [`plan`] are pure.
//!
//! The rules (README, "Serving the native commands"): a call is served from
//! a snapshot when its cursor is 0 or one snapscan issued (every such
//! cursor lies in `[2^62, 2^63)`, see `cursor::ISSUED_BIT`); any other
//! cursor, arguments the native command refuses, MULTI, scripts and
//! functions run the native command. An issued cursor whose iteration is
//! gone restarts the iteration with the native command at cursor 0.

pub mod keys;
pub mod mode;
pub mod plan;
pub mod serve;

use mode::Native;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Per native command: calls served from a snapshot, calls run by the
/// native command, iterations restarted natively; and whether the mode was
/// ever on (from then on the filter routes continuations of the
/// iterations it served whatever the mode, see `mode::route`).
///
/// Locking: atomics only, relaxed (figures and a one-way flag).
#[derive(Default)]
pub struct Serving {
    ever_on: AtomicBool,
    served: [AtomicU64; 5],
    native: [AtomicU64; 5],
    restarted: [AtomicU64; 5],
}

/// What became of one routed call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Served,
    Native,
    Restarted,
}

impl Serving {
    /// Whether the filter should look at routable commands with mode
    /// `bits` now (one relaxed load while the mode was never on).
    pub fn watching(&self, bits: i64) -> bool {
        if bits != 0 {
            if !self.ever_on.load(Ordering::Relaxed) {
                self.ever_on.store(true, Ordering::Relaxed);
            }
            return true;
        }
        self.ever_on.load(Ordering::Relaxed)
    }

    pub fn count(&self, n: Native, o: Outcome) {
        let a = match o {
            Outcome::Served => &self.served,
            Outcome::Native => &self.native,
            Outcome::Restarted => &self.restarted,
        };
        a[n.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// INFO fields: `native_<cmd>_served|native|restarted`.
    pub fn figures(&self) -> Vec<(String, u64)> {
        let mut v = Vec::with_capacity(15);
        for n in Native::ALL {
            let i = n.index();
            v.push((
                format!("native_{}_served", n.name()),
                self.served[i].load(Ordering::Relaxed),
            ));
            v.push((
                format!("native_{}_native", n.name()),
                self.native[i].load(Ordering::Relaxed),
            ));
            v.push((
                format!("native_{}_restarted", n.name()),
                self.restarted[i].load(Ordering::Relaxed),
            ));
        }
        v
    }
}
