/*
 * noopsub: the "no-op subscriber" arm of the write-cost benchmark (scenario 6).
 *
 * It subscribes to exactly the events snapscan subscribes to (src/events.rs,
 * src/server/latency.rs): keyspace events REDISMODULE_NOTIFY_ALL | LOADED | NEW
 * and the server events FlushDB, SwapDB and Loading, plus, where the server
 * has them, CronLoop, ReplAsyncLoad, Config and Key (the last fires for every
 * key deleted, expired, evicted or overwritten, SET over an existing key
 * included), with callbacks that return at once. What the server spends on
 * it is the floor of any design that learns about writes from these events.
 * `NOOPSUB_NO_KEY_EVENT=1` in the environment leaves out the Key event (to
 * measure what that subscription alone costs the server).
 *
 * Built by scripts/bench/lib.py:
 *   cc -O2 -shared -fPIC -I<redis-module-2.0.8>/src/include -o noopsub.so noop_module.c
 */
#include <stdlib.h>

#include "redismodule.h"

static int on_keyspace(RedisModuleCtx *ctx, int type, const char *event, RedisModuleString *key) {
    (void)ctx;
    (void)type;
    (void)event;
    (void)key;
    return REDISMODULE_OK;
}

static void on_server_event(RedisModuleCtx *ctx, RedisModuleEvent e, uint64_t sub, void *data) {
    (void)ctx;
    (void)e;
    (void)sub;
    (void)data;
}

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    if (RedisModule_Init(ctx, "noopsub", 1, REDISMODULE_APIVER_1) == REDISMODULE_ERR) return REDISMODULE_ERR;
    int types = REDISMODULE_NOTIFY_ALL | REDISMODULE_NOTIFY_LOADED | REDISMODULE_NOTIFY_NEW;
    if (RedisModule_SubscribeToKeyspaceEvents(ctx, types, on_keyspace) == REDISMODULE_ERR) return REDISMODULE_ERR;
    if (RedisModule_SubscribeToServerEvent(ctx, RedisModuleEvent_FlushDB, on_server_event) == REDISMODULE_ERR ||
        RedisModule_SubscribeToServerEvent(ctx, RedisModuleEvent_SwapDB, on_server_event) == REDISMODULE_ERR ||
        RedisModule_SubscribeToServerEvent(ctx, RedisModuleEvent_Loading, on_server_event) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    /* Optional events: refused by servers that lack them, which is fine. */
    RedisModule_SubscribeToServerEvent(ctx, RedisModuleEvent_CronLoop, on_server_event);
    RedisModule_SubscribeToServerEvent(ctx, RedisModuleEvent_ReplAsyncLoad, on_server_event);
    RedisModule_SubscribeToServerEvent(ctx, RedisModuleEvent_Config, on_server_event);
    const char *no_key = getenv("NOOPSUB_NO_KEY_EVENT");
    if (!no_key || no_key[0] != '1')
        RedisModule_SubscribeToServerEvent(ctx, RedisModuleEvent_Key, on_server_event);
    return REDISMODULE_OK;
}
