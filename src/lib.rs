//! snapscan: point-in-time `SNAPSHOT.SCAN` for Valkey and Redis, served by
//! worker threads from a notification-maintained, versioned shadow index.
//!
//! This file holds the module declaration and initialisation only.

#[cfg_attr(test, allow(dead_code))]
mod alloc;
pub mod args;
pub mod collections;
pub mod commands;
pub mod config;
pub mod cursor;
pub mod events;
pub mod glob;
pub mod index;
#[cfg_attr(test, allow(dead_code))]
mod info;
pub mod keyspace;
#[cfg(test)]
mod layering;
pub mod module;
#[cfg_attr(test, allow(dead_code))]
pub mod native;
pub mod runtime;
pub mod scan;
pub mod server;
pub mod slot;
pub mod state;
pub mod unlink;

#[cfg(not(test))]
mod onload {
    use crate::keyspace::{self, backfill, cluster, replication};
    use crate::{commands, config, events, info, module, server, state};
    use redis_module::{redis_module, Context, RedisString, Status};

    fn databases(ctx: &Context) -> usize {
        ctx.call("CONFIG", &["GET", "databases"])
            .ok()
            .and_then(|v| match v {
                redis_module::RedisValue::Array(a) => a.get(1).cloned(),
                _ => None,
            })
            .and_then(|v| match v {
                redis_module::RedisValue::SimpleString(s)
                | redis_module::RedisValue::BulkString(s) => s.parse::<usize>().ok(),
                redis_module::RedisValue::BulkRedisString(s) => s.to_string().parse::<usize>().ok(),
                redis_module::RedisValue::StringBuffer(b) => {
                    std::str::from_utf8(&b).ok().and_then(|s| s.parse().ok())
                }
                _ => None,
            })
            .unwrap_or(16)
    }

    /// Whether the server knows HEXPIRE (hash-field expiry).
    fn has_hash_field_ttl(ctx: &Context) -> bool {
        match ctx.call("COMMAND", &["INFO", "hexpire"]) {
            Ok(redis_module::RedisValue::Array(a)) => a
                .first()
                .is_some_and(|v| !matches!(v, redis_module::RedisValue::Null)),
            _ => true,
        }
    }

    /// After a config changed at runtime (main thread): the subsystems
    /// that act on it.
    fn on_config_changed(spec: &'static crate::config::Spec, v: i64) {
        if let Some(m) = module::try_get() {
            m.shared.on_config_changed(spec, v);
            crate::native::on_config_changed(m, spec, v);
        }
    }

    /// The config-change event's way to the module's `Latency`.
    struct ModuleLatency;
    impl server::latency::Owner for ModuleLatency {
        fn latency() -> Option<&'static server::latency::Latency> {
            module::try_get().map(|m| &m.latency)
        }
    }

    fn init(ctx: &Context, args: &[RedisString]) -> Status {
        // Arguments first: a refused load must leave nothing behind (no
        // thread, no timer, no subscription).
        let args: Vec<&[u8]> = args.iter().map(RedisString::as_slice).collect();
        let given = match config::parse_args(&args) {
            Ok(given) => given,
            Err(e) => {
                ctx.log_warning(&format!("snapscan: refusing to load: {e}"));
                return Status::Err;
            }
        };
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()).rotate_left(32);
        let dbs = databases(ctx);
        // The configs' values are fields of the module's state: made first
        // (no thread yet), then registered with the server, which applies
        // the config file to them.
        let m = module::init(dbs, seed);
        let table = (config::CONFIGS, config::PREFIX);
        if let Err(e) =
            server::configs::register(ctx.ctx, table, &m.config, &given, on_config_changed)
        {
            ctx.log_warning(&format!("snapscan: refusing to load: {e}"));
            return Status::Err;
        }
        server::latency::init::<ModuleLatency>(ctx.ctx, &m.latency);
        commands::testhook::at_load(m);
        m.hash_field_ttl.store(
            has_hash_field_ttl(ctx),
            std::sync::atomic::Ordering::Relaxed,
        );
        m.scan_expires_any_type.store(
            !server::host::is_valkey(ctx.ctx),
            std::sync::atomic::Ordering::Relaxed,
        );
        // Never switch a server feature off: declare what the module copes with.
        let options = cluster::module_options(ctx.ctx) | replication::module_options();
        server::host::set_module_options(ctx.ctx, options);
        m.keyspace.cluster.init(ctx.ctx, m);
        m.keyspace
            .clientdb
            .register(ctx.ctx, events::ROUTES.client_db_filter, dbs as u64);
        server::native::init(ctx.ctx);
        crate::native::init(m);
        if let Err(e) = keyspace::subscribe(ctx.ctx, &m.keyspace, events::ROUTES)
            .and_then(|_| commands::register(ctx.ctx))
        {
            ctx.log_warning(&format!("snapscan: {e}"));
            return Status::Err;
        }
        if let Err(e) = info::register(ctx.ctx) {
            ctx.log_warning(&format!("snapscan: {e}"));
            return Status::Err;
        }
        // Threads last: every step that can refuse the load is behind us (a
        // refused load is unloaded by the server while its threads would
        // still run module code).
        m.start_runtime();
        state::start_indexer(m);
        state::start_janitor(m);
        if backfill::needed(ctx.ctx, dbs) {
            server::log(
                ctx.ctx,
                "notice",
                "snapscan: data present at load, building the index in the background",
            );
            m.keyspace.backfill.start(ctx.ctx, m);
        }
        Status::Ok
    }

    fn deinit(_ctx: &Context) -> Status {
        // Worker threads and blocked clients may reference module code:
        // refuse MODULE UNLOAD.
        Status::Err
    }

    redis_module! {
        name: "snapshot",
        version: 1,
        allocator: (crate::alloc::CountingAlloc, crate::alloc::CountingAlloc),
        data_types: [],
        init: init,
        deinit: deinit,
        commands: [],
    }
}
