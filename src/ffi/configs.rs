//! Registers the rows of [`crate::config::CONFIGS`] with the server as
//! numeric module configs (`snapshot.<name>`), so CONFIG GET/SET and the
//! config file's `snapshot.<name> value` lines work with the table's ranges.

use super::{api, Ctx};
use crate::config::{Kind, CONFIGS, PREFIX};
use redis_module::raw;
use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_longlong, c_void};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

/// While the server applies the config file (inside `register`): the value
/// each row was registered with (its `loadmodule` argument or default).
/// The server then sets every row, to the file's value or to that default;
/// a set to the registered default is skipped, so that a row sharing its
/// atomic with another (an alias) does not undo the other's file value.
static LOADING: Mutex<Vec<i64>> = Mutex::new(Vec::new());

fn loading_default(i: usize) -> Option<i64> {
    LOADING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(i)
        .copied()
}

extern "C" fn get_numeric(_name: *const c_char, privdata: *mut c_void) -> c_longlong {
    crate::config::value(privdata as usize)
}

extern "C" fn get_enum(_name: *const c_char, privdata: *mut c_void) -> c_int {
    crate::config::value(privdata as usize) as c_int
}

extern "C" fn set_enum(
    name: *const c_char,
    val: c_int,
    privdata: *mut c_void,
    err: *mut *mut raw::RedisModuleString,
) -> c_int {
    set_numeric(name, c_longlong::from(val), privdata, err)
}

extern "C" fn set_numeric(
    _name: *const c_char,
    val: c_longlong,
    privdata: *mut c_void,
    err: *mut *mut raw::RedisModuleString,
) -> c_int {
    let i = privdata as usize;
    let outcome = std::panic::catch_unwind(|| {
        let s = CONFIGS.get(i).ok_or("no such config")?;
        if val < s.min || val > s.max {
            return Err("argument must be between the config's minimum and maximum");
        }
        if loading_default(i) == Some(val) {
            return Ok(());
        }
        if s.var.swap(val, Ordering::Relaxed) != val {
            if let Some(f) = s.on_change {
                f(val);
            }
        }
        Ok(())
    });
    match outcome {
        Ok(Ok(())) => raw::REDISMODULE_OK as c_int,
        Ok(Err(msg)) => {
            if let (Some(create), false) = (api!(RedisModule_CreateString), err.is_null()) {
                // SAFETY: err is the server's out-pointer for this call; it
                // takes ownership of the string created here (no context).
                unsafe { *err = create(std::ptr::null_mut(), msg.as_ptr().cast(), msg.len()) };
            }
            raw::REDISMODULE_ERR as c_int
        }
        Err(_) => raw::REDISMODULE_ERR as c_int,
    }
}

/// Registers row `i` as a flags config with the names of
/// `native::mode::names` (`none`, `all`, one per command).
fn register_flags(ctx: Ctx, name: &CString, default: i64, i: usize) -> Result<(), String> {
    let reg = api!(RedisModule_RegisterEnumConfig).ok_or("this server has no enum configs")?;
    let names = crate::native::mode::names();
    let cnames: Vec<CString> = names
        .iter()
        .map(|(n, _)| CString::new(*n).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let mut ptrs: Vec<*const c_char> = cnames.iter().map(|c| c.as_ptr()).collect();
    let values: Vec<c_int> = names.iter().map(|&(_, v)| v as c_int).collect();
    // SAFETY: OnLoad context; name and the value names are valid C strings
    // and the arrays hold `names.len()` entries each, all alive for the
    // call (the server copies them); the callbacks live as long as the
    // module; privdata is the row index, never dereferenced.
    let rc = unsafe {
        reg(
            ctx,
            name.as_ptr(),
            default as c_int,
            raw::REDISMODULE_CONFIG_BITFLAGS,
            ptrs.as_mut_ptr(),
            values.as_ptr(),
            names.len() as c_int,
            Some(get_enum),
            Some(set_enum),
            None,
            i as *mut c_void,
        )
    };
    if rc != raw::REDISMODULE_OK as c_int {
        return Err(format!(
            "cannot register config {PREFIX}{}",
            name.to_string_lossy()
        ));
    }
    Ok(())
}

/// Stores the `loadmodule` arguments (`given`: row, value), registers every
/// row (each with its argument, else its default, as default) and has the
/// server apply the config file's `snapshot.*` lines. OnLoad only. An error
/// names what was refused (the server has logged the details too).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the OnLoad context the server passed to the module, live for this call"
)]
pub fn register(ctx: Ctx, given: &[(usize, i64)]) -> Result<(), String> {
    let reg = api!(RedisModule_RegisterNumericConfig).ok_or("this server has no module configs")?;
    let load = api!(RedisModule_LoadConfigs).ok_or("this server has no module configs")?;
    // From the table, not from what an earlier, refused load may have left.
    for s in CONFIGS {
        s.var.store(s.default, Ordering::Relaxed);
    }
    for &(i, v) in given {
        CONFIGS[i].var.store(v, Ordering::Relaxed);
    }
    let defaults: Vec<i64> = CONFIGS
        .iter()
        .map(|s| s.var.load(Ordering::Relaxed))
        .collect();
    for (i, s) in CONFIGS.iter().enumerate() {
        let name = CString::new(s.name).map_err(|e| e.to_string())?;
        let flags = match s.kind {
            Kind::Integer => raw::REDISMODULE_CONFIG_DEFAULT,
            Kind::Memory => raw::REDISMODULE_CONFIG_MEMORY,
            Kind::Flags => {
                register_flags(ctx, &name, defaults[i], i)?;
                continue;
            }
        };
        // SAFETY: OnLoad context; name is a valid C string (the server
        // copies it); the callbacks are valid for the life of the module;
        // privdata is the row index, never dereferenced.
        let rc = unsafe {
            reg(
                ctx,
                name.as_ptr(),
                defaults[i],
                flags,
                s.min,
                s.max,
                Some(get_numeric),
                Some(set_numeric),
                None,
                i as *mut c_void,
            )
        };
        if rc != raw::REDISMODULE_OK as c_int {
            return Err(format!("cannot register config {PREFIX}{}", s.name));
        }
    }
    *LOADING.lock().unwrap_or_else(|e| e.into_inner()) = defaults;
    // SAFETY: OnLoad context, after every config was registered.
    let rc = unsafe { load(ctx) };
    LOADING.lock().unwrap_or_else(|e| e.into_inner()).clear();
    if rc != raw::REDISMODULE_OK as c_int {
        return Err(format!(
            "a {PREFIX}* value of the config file or of MODULE LOADEX ... CONFIG was refused (see the server's line above)"
        ));
    }
    Ok(())
}
