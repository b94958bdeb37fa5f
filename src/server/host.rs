//! Server facts and server-event payloads for cluster and replication
//! support: module options, context flags, `RedisModule_Call` text replies,
//! and the slot ranges of the atomic-slot-migration events (Valkey 9+'s, and
//! Redis 8.4+'s slot-migration and trim events).

use super::call::CallReply;
use super::{api, Ctx};
use crate::slot::SlotSet;
use redis_module::raw;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};

/// `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION` (valkeymodule.h,
/// Valkey 9.0+): the module copes with keys of slots being imported by
/// `CLUSTER MIGRATESLOTS`.
pub const OPTION_HANDLE_ATOMIC_SLOT_MIGRATION: c_int = 1 << 5;

/// `VALKEYMODULE_EVENT_ATOMIC_SLOT_MIGRATION` (Valkey 9.0+; Redis numbers
/// its own events differently, so it is only subscribed on Valkey).
pub const EVENT_ATOMIC_SLOT_MIGRATION: u64 = 19;
pub const ASM_IMPORT_STARTED: u64 = 0;
pub const ASM_EXPORT_STARTED: u64 = 1;
pub const ASM_IMPORT_ABORTED: u64 = 2;
pub const ASM_EXPORT_ABORTED: u64 = 3;
pub const ASM_IMPORT_COMPLETED: u64 = 4;
pub const ASM_EXPORT_COMPLETED: u64 = 5;

/// `ValkeyModuleSlotRange`.
#[repr(C)]
struct SlotRange {
    start: c_int,
    end: c_int,
}

/// `ValkeyModuleAtomicSlotMigrationInfoV1`.
#[repr(C)]
struct AsmInfoV1 {
    version: u64,
    job_name: [c_char; 41],
    slot_ranges: *mut SlotRange,
    num_slot_ranges: u32,
}

/// The slots of an atomic-slot-migration event's payload.
pub fn asm_event_slots(data: *mut c_void) -> SlotSet {
    let mut set = SlotSet::new();
    if data.is_null() {
        return set;
    }
    // SAFETY: for this event (dataver 1) the server passes a live
    // ValkeyModuleAtomicSlotMigrationInfoV1 whose `slot_ranges` points to
    // `num_slot_ranges` ranges, all valid for the callback.
    unsafe {
        let info = &*data.cast::<AsmInfoV1>();
        if info.version < 1 || info.slot_ranges.is_null() {
            return set;
        }
        for i in 0..info.num_slot_ranges as usize {
            let r = &*info.slot_ranges.add(i);
            if r.start >= 0 && r.end >= r.start {
                set.insert_range(r.start as u16, r.end.min(u16::MAX as c_int) as u16);
            }
        }
    }
    set
}

/// `REDISMODULE_EVENT_CLUSTER_SLOT_MIGRATION` (Redis 8.4+; Valkey gives
/// event 18 no such meaning, so these two are only subscribed on Redis).
pub const EVENT_REDIS_SLOT_MIGRATION: u64 = 18;
pub const REDIS_ASM_IMPORT_STARTED: u64 = 0;
pub const REDIS_ASM_IMPORT_FAILED: u64 = 1;
pub const REDIS_ASM_IMPORT_COMPLETED: u64 = 2;
pub const REDIS_ASM_MIGRATE_COMPLETED: u64 = 5;
/// `REDISMODULE_EVENT_CLUSTER_SLOT_MIGRATION_TRIM` (Redis 8.4+): the server
/// deletes the keys of slots this node no longer serves, key by key with
/// `key_trimmed` notifications (STARTED ... COMPLETED) when some module
/// subscribed to them, else all at once in the background (BACKGROUND).
pub const EVENT_REDIS_SLOT_TRIM: u64 = 19;
pub const REDIS_TRIM_STARTED: u64 = 0;
pub const REDIS_TRIM_BACKGROUND: u64 = 2;

/// `RedisModuleSlotRange`.
#[repr(C)]
struct RedisSlotRange {
    start: u16,
    end: u16,
}

/// `RedisModuleSlotRangeArray`: a count followed by the ranges.
#[repr(C)]
struct RedisSlotRangeArray {
    num_ranges: i32,
    ranges: [RedisSlotRange; 0],
}

/// `RedisModuleClusterSlotMigrationInfoV1`.
#[repr(C)]
struct RedisAsmInfoV1 {
    version: u64,
    source_node_id: [c_char; 41],
    destination_node_id: [c_char; 41],
    task_id: *const c_char,
    slots: *mut RedisSlotRangeArray,
}

/// `RedisModuleClusterSlotMigrationTrimInfoV1`.
#[repr(C)]
struct RedisTrimInfoV1 {
    version: u64,
    slots: *mut RedisSlotRangeArray,
}

/// The slots of a `RedisModuleSlotRangeArray` (empty for NULL).
///
/// # Safety
/// `arr` is NULL or a live array of `num_ranges` ranges.
// SAFETY: callers pass what the server handed to the event (see # Safety).
unsafe fn redis_ranges(arr: *const RedisSlotRangeArray) -> SlotSet {
    let mut set = SlotSet::new();
    if arr.is_null() {
        return set;
    }
    // SAFETY: the caller guarantees `arr` is live with `num_ranges` ranges
    // laid out right after the count.
    unsafe {
        let n = usize::try_from((*arr).num_ranges).unwrap_or(0);
        let first = std::ptr::addr_of!((*arr).ranges).cast::<RedisSlotRange>();
        for i in 0..n {
            let r = &*first.add(i);
            if r.end >= r.start {
                set.insert_range(r.start, r.end);
            }
        }
    }
    set
}

/// The slots of a Redis slot-migration event's payload.
pub fn redis_asm_event_slots(data: *mut c_void) -> SlotSet {
    if data.is_null() {
        return SlotSet::new();
    }
    // SAFETY: for this event (dataver 1) the server passes a live
    // RedisModuleClusterSlotMigrationInfoV1 whose `slots` is NULL or a live
    // range array, valid for the callback.
    unsafe { redis_ranges((*data.cast::<RedisAsmInfoV1>()).slots) }
}

/// The slots of a Redis trim event's payload.
pub fn redis_trim_event_slots(data: *mut c_void) -> SlotSet {
    if data.is_null() {
        return SlotSet::new();
    }
    // SAFETY: for this event (dataver 1) the server passes a live
    // RedisModuleClusterSlotMigrationTrimInfoV1 whose `slots` is NULL or a
    // live range array, valid for the callback.
    unsafe { redis_ranges((*data.cast::<RedisTrimInfoV1>()).slots) }
}

/// Whether the server has Redis 8.4+'s atomic slot migration (known by its
/// `RedisModule_ClusterGetLocalSlotRanges` and
/// `RedisModule_ClusterCanAccessKeysInSlot`, which came with it).
pub fn has_redis_slot_migration() -> bool {
    api!(RedisModule_ClusterGetLocalSlotRanges).is_some()
        && api!(RedisModule_ClusterFreeSlotRanges).is_some()
        && api!(RedisModule_ClusterCanAccessKeysInSlot).is_some()
}

/// Redis 8.4+: the slots whose keys the server's `SCAN` shows now, read
/// from its memory (`RedisModule_ClusterCanAccessKeysInSlot`, the very test
/// `SCAN`, `KEYS` and `RANDOMKEY` apply): slots this node (a replica: its
/// primary) owns, plus legacy imports (`SETSLOT ... IMPORTING`); not those
/// of an atomic import under way. `None` on other servers. 16,384 calls of
/// about 4 ns: about 70 µs in all (Redis 8.6.3).
pub fn accessible_slots() -> Option<SlotSet> {
    let can = api!(RedisModule_ClusterCanAccessKeysInSlot)?;
    let mut set = SlotSet::new();
    let mut run: Option<u16> = None;
    for slot in 0..=crate::slot::SLOTS as u16 {
        // SAFETY: takes a slot number and reads server state; the server
        // lock is held by every caller (main-thread callbacks).
        let yes = slot < crate::slot::SLOTS as u16 && unsafe { can(c_int::from(slot)) } != 0;
        match (yes, run) {
            (true, None) => run = Some(slot),
            (false, Some(first)) => {
                set.insert_range(first, slot - 1);
                run = None;
            }
            _ => {}
        }
    }
    Some(set)
}

/// Redis 8.4+: the slots this node (a replica: its primary) owns now, read
/// from the server's memory (`RedisModule_ClusterGetLocalSlotRanges`): the
/// slots whose keys a command may write. `None` on other servers.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is a live context of the calling thread with the server lock held"
)]
pub fn local_slots(ctx: Ctx) -> Option<SlotSet> {
    let (get, free) = (
        api!(RedisModule_ClusterGetLocalSlotRanges)?,
        api!(RedisModule_ClusterFreeSlotRanges)?,
    );
    // SAFETY: the server lock is held; the array returned is owned by us
    // until freed below with the same context (never NULL in cluster mode,
    // checked anyway); it is a count followed by that many ranges.
    unsafe {
        let arr = get(ctx);
        if arr.is_null() {
            return None;
        }
        let set = redis_ranges(arr.cast::<RedisSlotRangeArray>());
        free(ctx, arr);
        Some(set)
    }
}

/// `CLUSTER COUNTKEYSINSLOT slot` (the server keeps the count: O(1));
/// `None` if the call fails.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is a live context of the calling thread with the server lock held"
)]
pub fn count_keys_in_slot(ctx: Ctx, slot: u16) -> Option<i64> {
    let call = api!(RedisModule_Call)?;
    let int = api!(RedisModule_CallReplyInteger)?;
    // SAFETY: the server lock is held; "cl" consumes one C string and one
    // long long. The reply is owned (and freed) by CallReply.
    let reply = CallReply::new(unsafe {
        call(
            ctx,
            c"CLUSTER".as_ptr(),
            c"cl".as_ptr(),
            c"COUNTKEYSINSLOT".as_ptr(),
            std::os::raw::c_longlong::from(slot),
        )
    })?;
    if super::call::reply_type(reply.0) != raw::REDISMODULE_REPLY_INTEGER {
        return None;
    }
    // SAFETY: an integer reply, alive while `reply` is.
    Some(unsafe { int(reply.0) })
}

/// Whether the server sends a `del` keyspace notification for each key it
/// deletes from a slot another node took (`delKeysInSlot`): Valkey and
/// Redis 7.2+; Redis 7.0 deletes them silently.
pub fn notifies_slot_deletions(ctx: Ctx) -> bool {
    if is_valkey(ctx) {
        return true;
    }
    let Some(info) = call_text(ctx, c"INFO", c"server") else {
        return true;
    };
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("");
    let mut parts = version.trim().split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (7, 2),
        _ => true,
    }
}

/// The value of a configuration parameter (`CONFIG GET name`); `None` if
/// the server does not have it.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is a live context of the calling thread with the server lock held"
)]
pub fn config_get(ctx: Ctx, name: &CStr) -> Option<Vec<u8>> {
    let call = api!(RedisModule_Call)?;
    // SAFETY: the server lock is held; "cc" consumes exactly two C strings.
    // The reply is owned (and freed) by CallReply.
    let reply = CallReply::new(unsafe {
        call(
            ctx,
            c"CONFIG".as_ptr(),
            c"cc".as_ptr(),
            c"GET".as_ptr(),
            name.as_ptr(),
        )
    })?;
    if super::call::reply_type(reply.0) != raw::REDISMODULE_REPLY_ARRAY
        || super::call::reply_len(reply.0) < 2
    {
        return None;
    }
    Some(super::call::bytes(super::call::element(reply.0, 1)).to_vec())
}

/// Sets the module's options (the whole set: the server keeps the last).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the OnLoad context the server passed to the module, live for this call"
)]
pub fn set_module_options(ctx: Ctx, options: c_int) {
    if let Some(f) = api!(RedisModule_SetModuleOptions) {
        // SAFETY: ctx is the OnLoad context.
        unsafe { f(ctx, options) };
    }
}

/// Every module option this server knows (0 where it cannot tell).
pub fn module_options_known() -> c_int {
    match api!(RedisModule_GetModuleOptionsAll) {
        // SAFETY: takes no arguments.
        Some(f) => unsafe { f() },
        None => 0,
    }
}

/// The context flags (`REDISMODULE_CTX_FLAGS_*`).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is a live context of the calling callback"
)]
pub fn context_flags(ctx: Ctx) -> u32 {
    match api!(RedisModule_GetContextFlags) {
        // SAFETY: ctx is a live context of the current callback.
        Some(f) => (unsafe { f(ctx) }) as u32,
        None => 0,
    }
}

/// Whether the server runs in cluster mode.
pub fn cluster_mode(ctx: Ctx) -> bool {
    context_flags(ctx) & raw::REDISMODULE_CTX_FLAGS_CLUSTER != 0
}

/// The text reply of `cmd arg` (e.g. `CLUSTER NODES`, `INFO server`) run
/// through RedisModule_Call; `None` on an error reply.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is a live context of the calling thread with the server lock held (a main-thread callback's or a locked thread-safe one)"
)]
pub fn call_text(ctx: Ctx, cmd: &CStr, arg: &CStr) -> Option<String> {
    let call = api!(RedisModule_Call)?;
    // SAFETY: the server lock is held; "c" consumes exactly one C string.
    // The reply is owned (and freed) by CallReply.
    let reply = CallReply::new(unsafe { call(ctx, cmd.as_ptr(), c"c".as_ptr(), arg.as_ptr()) })?;
    reply
        .string()
        .map(|t| String::from_utf8_lossy(t).into_owned())
}

/// Whether the server is Valkey (`valkey_version` in `INFO server`).
pub fn is_valkey(ctx: Ctx) -> bool {
    valkey_major(ctx).is_some()
}

/// The major version of a Valkey server (`None` on Redis).
pub fn valkey_major(ctx: Ctx) -> Option<u32> {
    let info = call_text(ctx, c"INFO", c"server")?;
    let v = info
        .lines()
        .find_map(|l| l.strip_prefix("valkey_version:"))?;
    v.trim().split('.').next()?.parse().ok()
}

/// Calls `f` with the database and name of the key of a `Key` server event
/// (Redis 7.2+, Valkey): the key about to be unlinked.
pub fn with_key_event_target(data: *mut c_void, f: impl FnOnce(usize, &[u8])) -> Option<()> {
    let (name_of, db_of) = (
        api!(RedisModule_GetKeyNameFromModuleKey)?,
        api!(RedisModule_GetDbIdFromModuleKey)?,
    );
    if data.is_null() {
        return None;
    }
    // SAFETY: for Key events (dataver 1) the server passes a live
    // RedisModuleKeyInfoV1 whose `key` is an open key, valid for the
    // callback; its name string lives as long as the key.
    unsafe {
        let info = &*data.cast::<raw::RedisModuleKeyInfoV1>();
        if info.key.is_null() {
            return None;
        }
        let db = db_of(info.key);
        let name = name_of(info.key);
        if db < 0 || name.is_null() {
            return None;
        }
        f(db as usize, super::string_bytes(name));
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `RedisModuleSlotRangeArray` as the server lays it out: the count,
    /// then the ranges.
    #[repr(C)]
    struct Ranges<const N: usize> {
        num_ranges: i32,
        ranges: [RedisSlotRange; N],
    }

    #[test]
    fn redis_event_payloads_give_their_slot_ranges() {
        let mut arr = Ranges {
            num_ranges: 3,
            ranges: [
                RedisSlotRange { start: 0, end: 99 },
                RedisSlotRange {
                    start: 500,
                    end: 500,
                },
                RedisSlotRange { start: 9, end: 3 }, // malformed: ignored
            ],
        };
        let slots = std::ptr::addr_of_mut!(arr).cast::<RedisSlotRangeArray>();
        let mut trim = RedisTrimInfoV1 { version: 1, slots };
        let got = redis_trim_event_slots(std::ptr::addr_of_mut!(trim).cast());
        assert_eq!(got.ranges_text(), "0-99 500");
        let mut asm = RedisAsmInfoV1 {
            version: 1,
            source_node_id: [0; 41],
            destination_node_id: [0; 41],
            task_id: std::ptr::null(),
            slots,
        };
        let got = redis_asm_event_slots(std::ptr::addr_of_mut!(asm).cast());
        assert_eq!(got.ranges_text(), "0-99 500");
        assert!(redis_asm_event_slots(std::ptr::null_mut()).is_empty());
        trim.slots = std::ptr::null_mut();
        assert!(redis_trim_event_slots(std::ptr::addr_of_mut!(trim).cast()).is_empty());
    }
}
