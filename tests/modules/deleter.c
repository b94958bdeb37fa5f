/* A test module that deletes keys through RedisModule_DeleteKey, which fires
 * no keyspace notification (valkey-io/valkey#4592).
 *
 *   DELETER.DEL key [key ...]   deletes each existing key; replies how many
 *
 * Built by tests/replication.rs with `cc -shared -fPIC` against the
 * redismodule.h of the redis-module crate. */
#define REDISMODULE_MAIN
#include "redismodule.h"

static int DelCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 2) return RedisModule_WrongArity(ctx);
    long long deleted = 0;
    for (int i = 1; i < argc; i++) {
        RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[i], REDISMODULE_READ | REDISMODULE_WRITE);
        if (RedisModule_KeyType(key) != REDISMODULE_KEYTYPE_EMPTY &&
            RedisModule_DeleteKey(key) == REDISMODULE_OK) {
            deleted++;
        }
        RedisModule_CloseKey(key);
    }
    return RedisModule_ReplyWithLongLong(ctx, deleted);
}

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    REDISMODULE_NOT_USED(argv);
    REDISMODULE_NOT_USED(argc);
    if (RedisModule_Init(ctx, "deleter", 1, REDISMODULE_APIVER_1) == REDISMODULE_ERR) return REDISMODULE_ERR;
    if (RedisModule_CreateCommand(ctx, "deleter.del", DelCommand, "write", 1, -1, 1) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
