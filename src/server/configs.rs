//! Registers a table of numeric module configs (the module's is
//! `config::CONFIGS`) with the server, so CONFIG GET/SET and the config
//! file's `<prefix><name> value` lines work with the table's ranges. The
//! table, its prefix, the value that holds the configs (each row names its
//! atomic field by accessor) and what to do after a runtime change are
//! handed in.
//!
//! Owns: no global state. What the server's callbacks need (the row, its
//! atomic, whether the config file is being applied) is in each row's
//! `privdata`, made at registration and never freed.

use super::{api, Ctx};
use redis_module::raw;
use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_longlong, c_void};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// How a value is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A decimal integer.
    Integer,
    /// Bytes: a decimal integer with an optional unit as the server's own
    /// memory configs take it (`b`, `k`, `kb`, `m`, `mb`, `g`, `gb`, any case:
    /// `k` = 1000, `kb` = 1024).
    Memory,
    /// Flags by name ([`Spec::names`]), registered as a flags config.
    Flags,
}

/// One config: `snapshot.<name>`, its value a field of a `C`.
pub struct Spec<C> {
    /// Name without the module prefix.
    pub name: &'static str,
    /// The value's field in `C`. Two rows may share one field (an alias): a
    /// value given for either name applies to both.
    pub var: for<'a> fn(&'a C) -> &'a AtomicI64,
    pub default: i64,
    /// Inclusive range, enforced at load, in the config file and on CONFIG SET.
    pub min: i64,
    pub max: i64,
    pub kind: Kind,
    /// [`Kind::Flags`]: each name with its value (`none`, `all` and the
    /// single flags); empty for numbers.
    pub names: &'static [(&'static str, i64)],
}

/// What the server's callbacks for one row get as `privdata`: made once
/// per row at registration and never freed (the module never unloads).
struct Row<C: 'static> {
    spec: &'static Spec<C>,
    /// The row's atomic, in the value handed to `register`.
    var: &'static AtomicI64,
    /// The value the row was registered with (its `loadmodule` argument or
    /// default).
    registered: i64,
    /// Set while the server applies the config file (inside `register`).
    /// The server then sets every row, to the file's value or to the
    /// registered one; a set to the registered value is skipped, so that a
    /// row sharing its atomic with another (an alias) does not undo the
    /// other's file value, and nothing acts on a change (`register`'s
    /// caller reads the values once it returns).
    loading: AtomicBool,
    /// Called (main thread) after the value changed at runtime.
    on_change: fn(&'static Spec<C>, i64),
}

/// The row behind a callback's `privdata`.
fn row<C: 'static>(privdata: *mut c_void) -> &'static Row<C> {
    // SAFETY: the server hands back the privdata `register::<C>` gave the
    // callbacks instantiated for the same `C`: a leaked `Row<C>` that is
    // never freed (its only mutable part is an atomic).
    unsafe { &*(privdata as *const Row<C>) }
}

extern "C" fn get_numeric<C: 'static>(_name: *const c_char, privdata: *mut c_void) -> c_longlong {
    row::<C>(privdata).var.load(Ordering::Relaxed)
}

extern "C" fn get_enum<C: 'static>(_name: *const c_char, privdata: *mut c_void) -> c_int {
    row::<C>(privdata).var.load(Ordering::Relaxed) as c_int
}

extern "C" fn set_enum<C: 'static>(
    name: *const c_char,
    val: c_int,
    privdata: *mut c_void,
    err: *mut *mut raw::RedisModuleString,
) -> c_int {
    set_numeric::<C>(name, c_longlong::from(val), privdata, err)
}

extern "C" fn set_numeric<C: 'static>(
    _name: *const c_char,
    val: c_longlong,
    privdata: *mut c_void,
    err: *mut *mut raw::RedisModuleString,
) -> c_int {
    let outcome = std::panic::catch_unwind(|| {
        let r = row::<C>(privdata);
        let s = r.spec;
        if val < s.min || val > s.max {
            return Err("argument must be between the config's minimum and maximum");
        }
        if r.loading.load(Ordering::Relaxed) {
            if val != r.registered {
                r.var.store(val, Ordering::Relaxed);
            }
            return Ok(());
        }
        if r.var.swap(val, Ordering::Relaxed) != val {
            (r.on_change)(s, val);
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

/// Registers `s` as a flags config with its names.
fn register_flags<C: 'static>(
    ctx: Ctx,
    name: &CString,
    s: &Spec<C>,
    default: i64,
    privdata: *mut c_void,
    prefix: &str,
) -> Result<(), String> {
    let reg = api!(RedisModule_RegisterEnumConfig).ok_or("this server has no enum configs")?;
    let cnames: Vec<CString> = s
        .names
        .iter()
        .map(|(n, _)| CString::new(*n).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let mut ptrs: Vec<*const c_char> = cnames.iter().map(|c| c.as_ptr()).collect();
    let values: Vec<c_int> = s.names.iter().map(|&(_, v)| v as c_int).collect();
    // The arrays hold `names.len()` entries each, alive for the call (the
    // server copies them); privdata is a leaked `Row`, valid forever.
    // SAFETY: OnLoad context; name and the value names are valid C strings;
    // the callbacks live as long as the module (see [`row`] and above).
    let rc = unsafe {
        reg(
            ctx,
            name.as_ptr(),
            default as c_int,
            raw::REDISMODULE_CONFIG_BITFLAGS,
            ptrs.as_mut_ptr(),
            values.as_ptr(),
            s.names.len() as c_int,
            Some(get_enum::<C>),
            Some(set_enum::<C>),
            None,
            privdata,
        )
    };
    if rc != raw::REDISMODULE_OK as c_int {
        return Err(format!("cannot register config {prefix}{}", s.name));
    }
    Ok(())
}

/// Stores the defaults and the `loadmodule` arguments (`given`: row, value)
/// in `values`, registers every row of `table` as `<prefix><name>` (each
/// with its argument, else its default, as default) and has the server
/// apply the config file's `<prefix>*` lines to `values`. `on_change` runs
/// after a value changed at runtime (not while the file is applied).
/// OnLoad only. An error names what was refused (the server has logged
/// the details too).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the OnLoad context the server passed to the module, live for this call"
)]
pub fn register<C: Sync + 'static>(
    ctx: Ctx,
    (table, prefix): (&'static [Spec<C>], &str),
    values: &'static C,
    given: &[(usize, i64)],
    on_change: fn(&'static Spec<C>, i64),
) -> Result<(), String> {
    let reg = api!(RedisModule_RegisterNumericConfig).ok_or("this server has no module configs")?;
    let load = api!(RedisModule_LoadConfigs).ok_or("this server has no module configs")?;
    // From the table, not from what an earlier, refused load may have left.
    for s in table {
        (s.var)(values).store(s.default, Ordering::Relaxed);
    }
    for &(i, v) in given {
        if let Some(s) = table.get(i) {
            (s.var)(values).store(v, Ordering::Relaxed);
        }
    }
    let defaults: Vec<i64> = table
        .iter()
        .map(|s| (s.var)(values).load(Ordering::Relaxed))
        .collect();
    let mut rows: Vec<&'static Row<C>> = Vec::with_capacity(table.len());
    for (i, s) in table.iter().enumerate() {
        let r: &'static Row<C> = Box::leak(Box::new(Row {
            spec: s,
            var: (s.var)(values),
            registered: defaults[i],
            loading: AtomicBool::new(true),
            on_change,
        }));
        rows.push(r);
        let privdata: *const Row<C> = r;
        let name = CString::new(s.name).map_err(|e| e.to_string())?;
        let flags = match s.kind {
            Kind::Integer => raw::REDISMODULE_CONFIG_DEFAULT,
            Kind::Memory => raw::REDISMODULE_CONFIG_MEMORY,
            Kind::Flags => {
                register_flags(
                    ctx,
                    &name,
                    s,
                    defaults[i],
                    privdata.cast_mut().cast(),
                    prefix,
                )?;
                continue;
            }
        };
        // SAFETY: OnLoad context; name is a valid C string (the server
        // copies it); the callbacks are valid for the life of the module;
        // privdata is a leaked `Row`, valid forever (see [`row`]).
        let rc = unsafe {
            reg(
                ctx,
                name.as_ptr(),
                defaults[i],
                flags,
                s.min,
                s.max,
                Some(get_numeric::<C>),
                Some(set_numeric::<C>),
                None,
                privdata.cast_mut().cast(),
            )
        };
        if rc != raw::REDISMODULE_OK as c_int {
            return Err(format!("cannot register config {prefix}{}", s.name));
        }
    }
    // SAFETY: OnLoad context, after every config was registered.
    let rc = unsafe { load(ctx) };
    for r in rows {
        r.loading.store(false, Ordering::Relaxed);
    }
    if rc != raw::REDISMODULE_OK as c_int {
        return Err(format!(
            "a {prefix}* value of the config file or of MODULE LOADEX ... CONFIG was refused (see the server's line above)"
        ));
    }
    Ok(())
}
