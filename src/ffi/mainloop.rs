//! Long jobs that need the server's data (building the index, copying a
//! big hash) run on the main thread in small steps, one per turn of the
//! event loop, through 0 ms module timers: every client waiting in between
//! is served first, and no background thread ever competes with the main
//! thread for the server lock (a lock that is not fair: a thread that
//! relocks at once starves the main thread).

use super::{api, Ctx};
use redis_module::raw;
use std::os::raw::c_void;

/// One step of a task: does a bounded amount of work on the main thread,
/// returns `true` to be called again on the next turn of the event loop.
pub type Step = Box<dyn FnMut(Ctx) -> bool>;

/// Schedules `step` to run on the next turn of the event loop, and again
/// after every call that returns `true`. Must be called on the main thread
/// (or with the server lock held). If the server refuses the timer the
/// step is dropped, which must leave nothing waiting (owners of blocked
/// clients answer them in `Drop`).
pub fn run_in_steps(ctx: Ctx, step: Step) {
    let Some(create) = api!(RedisModule_CreateTimer) else {
        return;
    };
    let data = Box::into_raw(Box::new(step));
    // SAFETY: ctx is live on the main thread; `data` is a leaked Box that
    // `on_timer` takes back exactly once.
    unsafe { create(ctx, 0, Some(on_timer), data.cast()) };
}

extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: `data` is the Box leaked by `run_in_steps` for this timer;
    // each timer fires once, so it is reclaimed exactly once.
    let mut step: Box<Step> = unsafe { Box::from_raw(data.cast()) };
    let more =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| step(ctx))).unwrap_or(false);
    if more {
        run_in_steps(ctx, *step);
    }
}
