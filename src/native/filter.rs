//! The command filter of `snapshot.serve-native`: rewrites SCAN, KEYS,
//! HSCAN, SSCAN, ZSCAN to the module commands that serve them (see
//! `mode::route` for which calls), unless the client is in MULTI, is a
//! script's or a module's own client, or its user may not run the module
//! command (then the native command runs, with the server's own ACL check
//! and replies). Where the server cannot tell the filter which client runs
//! the command (Redis 7.0), every routed call is rewritten: the module
//! command falls back to the native one inside MULTI and scripts itself.

use super::mode;
use crate::server::clientdb::{client_state, FilterCall};
use crate::server::entry::CommandFilter;
use crate::server::locked::ServerLock;
use crate::server::native as raw_native;
use crate::state::NativeServing;
use std::sync::atomic::Ordering;

/// Registers the filter once (main thread); `s` remembers that it is.
pub fn register(s: &NativeServing) {
    if !s.filter_registered.load(Ordering::Relaxed) && raw_native::register_filter::<Filter>() {
        s.filter_registered.store(true, Ordering::Relaxed);
    }
}

pub struct Filter;

impl CommandFilter for Filter {
    fn on(_lock: &ServerLock, call: &FilterCall) {
        let Some(m) = crate::module::try_get() else {
            return;
        };
        let bits = m.config.serve_native.load(Ordering::Relaxed);
        if !super::watching(&m.native, bits) {
            return;
        }
        let Some(n) = mode::route(bits, true, call.arg(0), |i| call.arg(i)) else {
            return;
        };
        if call.len() < n.min_args() {
            return;
        }
        if raw_native::filter_knows_client() {
            let id = call.client_id();
            match client_state(id) {
                // A script's or a module's own client, or one in MULTI.
                None | Some((_, true)) => return,
                Some(_) => {}
            }
            if call.acl_allows_as(id, n.internal().as_bytes()) != Some(true) {
                return;
            }
        }
        call.replace(0, n.internal().as_bytes());
    }
}
