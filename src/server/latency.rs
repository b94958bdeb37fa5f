//! Reports main-thread slices to the server's LATENCY framework, so
//! `LATENCY LATEST` / `LATENCY HISTORY <event>` show them beside the
//! server's own events.
//!
//! The server's `RedisModule_LatencyAddSample` records a sample whenever it
//! reaches `latency-monitor-threshold`, also when the threshold is 0 (the
//! monitor off), so the threshold is checked here first. It is read once at
//! load and again after every CONFIG SET (the server's config-change
//! event), never per slice, into a [`Latency`] that the module's state
//! owns (`state::Shared::latency`); the event finds it through [`Owner`].

use super::call::{self, CallReply};
use super::{api, Ctx};
use redis_module::raw;
use std::ffi::CStr;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

/// The server's `latency-monitor-threshold` as last read.
#[derive(Default)]
pub struct Latency {
    /// In milliseconds (0: the monitor is off).
    threshold_ms: AtomicI64,
}

/// Who holds the [`Latency`] the config-change event refreshes: the event
/// carries no pointer of ours, so its callback asks.
pub trait Owner {
    /// The module's `Latency`, once its state exists.
    fn latency() -> Option<&'static Latency>;
}

/// What a main-thread slice was doing: one LATENCY event name each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A slice of the index build after MODULE LOAD.
    Backfill,
    /// A slice (or a one-go copy) of a collection snapshot (SNAPSHOT.HSCAN...).
    Copy,
    /// A SNAPSHOT.* call answered entirely on the main thread (small pages,
    /// MULTI/EXEC, scripts), the whole call.
    Inline,
    /// A slice of SNAPSHOT.UNLINK's deletions.
    Unlink,
}

impl Event {
    pub fn name(self) -> &'static CStr {
        match self {
            Event::Backfill => c"snapshot-backfill",
            Event::Copy => c"snapshot-copy",
            Event::Inline => c"snapshot-inline",
            Event::Unlink => c"snapshot-unlink",
        }
    }
}

impl Latency {
    /// The cached threshold in milliseconds (0 when the monitor is off).
    pub fn threshold_ms(&self) -> i64 {
        self.threshold_ms.load(Ordering::Relaxed)
    }

    /// Reports a main-thread slice that started at `started` and ends now,
    /// if it lasted at least the server's threshold. Main thread only.
    pub fn report(&self, event: Event, started: Instant) {
        self.report_duration(event, started.elapsed());
    }

    /// Like [`report`](Self::report), for a measured duration.
    pub fn report_duration(&self, event: Event, took: Duration) {
        let threshold = self.threshold_ms();
        let ms = i64::try_from(took.as_millis()).unwrap_or(i64::MAX);
        if threshold <= 0 || ms < threshold {
            return;
        }
        if let Some(add) = api!(RedisModule_LatencyAddSample) {
            // SAFETY: main thread (the latency tables are the server's, unlocked);
            // the event name is a static C string the server copies.
            unsafe { add(event.name().as_ptr(), ms) };
        }
    }
}

/// Reads `latency-monitor-threshold` with CONFIG GET on `ctx` into `l`
/// (main thread).
fn refresh(l: &Latency, ctx: Ctx) {
    let Some(f) = api!(RedisModule_Call) else {
        return;
    };
    // SAFETY: ctx is live on the main thread; "c" consumes exactly one C
    // string. The reply is owned (and freed) by CallReply.
    let reply = CallReply::new(unsafe {
        f(
            ctx,
            c"CONFIG".as_ptr(),
            c"cc".as_ptr(),
            c"GET".as_ptr(),
            c"latency-monitor-threshold".as_ptr(),
        )
    });
    let Some(reply) = reply else { return };
    if call::reply_type(reply.0) != raw::REDISMODULE_REPLY_ARRAY || call::reply_len(reply.0) < 2 {
        return;
    }
    let v = call::bytes(call::element(reply.0, 1));
    if let Some(n) = std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
    {
        l.threshold_ms.store(n.max(0), Ordering::Relaxed);
    }
}

extern "C" fn on_config_change<O: Owner>(
    ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut c_void,
) {
    // Any CONFIG SET (rare): re-read rather than parse the changed names.
    let _ = std::panic::catch_unwind(|| {
        if let Some(l) = O::latency() {
            refresh(l, ctx);
        }
    });
}

/// Reads the threshold into `l` (`O`'s) and follows its changes. OnLoad
/// only; without the config-change event (servers before 7.0) the value
/// read at load stays.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the OnLoad context the server passed to the module, live for this call"
)]
pub fn init<O: Owner>(ctx: Ctx, l: &Latency) {
    refresh(l, ctx);
    if let Some(sub) = api!(RedisModule_SubscribeToServerEvent) {
        let ev = raw::RedisModuleEvent {
            id: raw::REDISMODULE_EVENT_CONFIG,
            dataver: 1,
        };
        // SAFETY: OnLoad context; the callback is a valid extern fn.
        let rc = unsafe { sub(ctx, ev, Some(on_config_change::<O>)) };
        if rc != raw::REDISMODULE_OK as c_int {
            super::log(
                ctx,
                "warning",
                "snapscan: no config-change event; latency-monitor-threshold is read at load only",
            );
        }
    }
}
