//! RedisModule_SetCommandInfo from a [`Doc`] entry: builds the C structures
//! (argument arrays end with a zeroed entry), keeps them alive for the call
//! (the server copies what it keeps).

use super::{api, Ctx};
use redis_module::raw;
use std::ffi::CStr;
use std::ffi::CString;
use std::os::raw::c_int;

/// The type of an argument (RedisModuleCommandArgType).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgType {
    String,
    Integer,
    /// A key name (the command's key spec 0).
    Key,
    Pattern,
    /// A bare keyword (the token alone).
    PureToken,
}

pub struct Arg {
    pub name: &'static CStr,
    pub kind: ArgType,
    /// The keyword before the value (`MATCH pattern`), or the keyword itself
    /// for a pure token.
    pub token: Option<&'static CStr>,
    pub summary: &'static CStr,
    pub optional: bool,
    pub multiple: bool,
}

/// How the command touches its key (first argument), if it has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeySpec {
    None,
    /// The key at argv position 1, read without modification.
    ReadAt1,
}

pub struct Doc {
    pub name: &'static str,
    pub summary: &'static CStr,
    pub since: &'static CStr,
    pub complexity: &'static CStr,
    /// As in COMMAND INFO: negative = at least that many (command name included).
    pub arity: i32,
    /// Space-separated command tips.
    pub tips: &'static CStr,
    /// (version, change) pairs.
    pub history: &'static [(&'static CStr, &'static CStr)],
    pub key: KeySpec,
    pub args: &'static [Arg],
}

fn zeroed_arg() -> raw::RedisModuleCommandArg {
    // SAFETY: a plain C struct of pointers and integers: all-zero is its
    // list terminator (null name).
    unsafe { std::mem::zeroed() }
}

fn c_arg(a: &Arg) -> raw::RedisModuleCommandArg {
    let type_ = match a.kind {
        ArgType::String => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
        ArgType::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
        ArgType::Key => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
        ArgType::Pattern => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PATTERN,
        ArgType::PureToken => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
    };
    let mut flags = raw::REDISMODULE_CMD_ARG_NONE;
    if a.optional {
        flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL;
    }
    if a.multiple {
        flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE;
    }
    raw::RedisModuleCommandArg {
        name: a.name.as_ptr(),
        type_,
        key_spec_index: if a.kind == ArgType::Key { 0 } else { -1 },
        token: a.token.map_or(std::ptr::null(), |t| t.as_ptr()),
        summary: a.summary.as_ptr(),
        since: std::ptr::null(),
        flags: flags as c_int,
        deprecated_since: std::ptr::null(),
        subargs: std::ptr::null_mut(),
        display_text: std::ptr::null(),
    }
}

fn key_spec_at_1() -> raw::RedisModuleCommandKeySpec {
    raw::RedisModuleCommandKeySpec {
        notes: std::ptr::null(),
        flags: u64::from(raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS),
        begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
        bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
            index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 1 },
        },
        find_keys_type: raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE,
        fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
            range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
                lastkey: 0,
                keystep: 1,
                limit: 0,
            },
        },
    }
}

/// Sets `doc` on the registered command of that name. `Ok(false)` when no
/// such command is registered or this server lacks the API (Redis < 7.0).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the OnLoad context the server passed to the module, live for this call"
)]
pub fn set(ctx: Ctx, doc: &Doc) -> Result<bool, String> {
    let (Some(get), Some(set_info)) = (
        api!(RedisModule_GetCommand),
        api!(RedisModule_SetCommandInfo),
    ) else {
        return Ok(false);
    };
    let name = CString::new(doc.name).map_err(|e| e.to_string())?;
    // SAFETY: OnLoad context; a valid C string.
    let cmd = unsafe { get(ctx, name.as_ptr()) };
    if cmd.is_null() {
        return Ok(false);
    }
    let mut args: Vec<raw::RedisModuleCommandArg> = doc.args.iter().map(c_arg).collect();
    args.push(zeroed_arg());
    let mut history: Vec<raw::RedisModuleCommandHistoryEntry> = doc
        .history
        .iter()
        .map(|(since, changes)| raw::RedisModuleCommandHistoryEntry {
            since: since.as_ptr(),
            changes: changes.as_ptr(),
        })
        .collect();
    history.push(raw::RedisModuleCommandHistoryEntry {
        since: std::ptr::null(),
        changes: std::ptr::null(),
    });
    // SAFETY: all-zero is the key-spec list terminator (see zeroed_arg).
    let end: raw::RedisModuleCommandKeySpec = unsafe { std::mem::zeroed() };
    let mut specs = match doc.key {
        KeySpec::None => vec![end],
        KeySpec::ReadAt1 => vec![key_spec_at_1(), end],
    };
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: doc.summary.as_ptr(),
        complexity: doc.complexity.as_ptr(),
        since: doc.since.as_ptr(),
        history: if doc.history.is_empty() {
            std::ptr::null_mut()
        } else {
            history.as_mut_ptr()
        },
        tips: doc.tips.as_ptr(),
        arity: doc.arity,
        key_specs: if doc.key == KeySpec::None {
            std::ptr::null_mut()
        } else {
            specs.as_mut_ptr()
        },
        args: args.as_mut_ptr(),
    };
    // SAFETY: cmd is the live command; `info` and everything it points to
    // (args, history, specs, static strings) outlive the call.
    if unsafe { set_info(cmd, &info) } != raw::REDISMODULE_OK as c_int {
        return Err(format!(
            "the server refused the command info of {}",
            doc.name
        ));
    }
    Ok(true)
}
