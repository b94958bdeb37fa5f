//! Long jobs that need the server's data (building the index, copying a
//! big hash) run on the main thread in small steps, one per turn of the
//! event loop, through 0 ms module timers: every client waiting in between
//! is served first, and no background thread ever competes with the main
//! thread for the server lock (a lock that is not fair: a thread that
//! relocks at once starves the main thread).

use super::locked::ServerLock;
use super::{api, Ctx};
use redis_module::raw;
use std::os::raw::c_void;

/// What a step asks for after it ran.
pub enum Next {
    Done,
    /// Run again on the next turn of the event loop.
    Again,
    /// Run again after this many milliseconds (waiting for something that
    /// is not the main thread's to do).
    After(i64),
}

/// One step of a task: does a bounded amount of work on the main thread.
pub type Step = Box<dyn FnMut(&ServerLock, Ctx) -> Next>;

/// Schedules `step` to run on the next turn of the event loop, and again as
/// long as it asks to. Must be called on the main thread (or with the
/// server lock held). If the server refuses the timer the step is dropped,
/// which must leave nothing waiting (owners of blocked clients answer them
/// in `Drop`).
pub fn run_in_steps(ctx: Ctx, step: Step) {
    schedule(ctx, step, 0);
}

fn schedule(ctx: Ctx, step: Step, after_ms: i64) {
    let Some(create) = api!(RedisModule_CreateTimer) else {
        return;
    };
    let data = Box::into_raw(Box::new(step));
    // SAFETY: ctx is live on the main thread; `data` is a leaked Box that
    // `on_timer` takes back exactly once.
    unsafe { create(ctx, after_ms.max(0), Some(on_timer), data.cast()) };
}

extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: `data` is the Box leaked by `run_in_steps` for this timer;
    // each timer fires once, so it is reclaimed exactly once.
    let mut step: Box<Step> = unsafe { Box::from_raw(data.cast()) };
    let next = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: a module timer: the server runs it on its main thread,
        // holding its lock.
        let lock = unsafe { ServerLock::new_unchecked() };
        step(&lock, ctx)
    }))
    .unwrap_or(Next::Done);
    match next {
        Next::Done => {}
        Next::Again => schedule(ctx, *step, 0),
        Next::After(ms) => schedule(ctx, *step, ms),
    }
}
