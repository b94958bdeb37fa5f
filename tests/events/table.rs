//! The case table: every way a command can create, retype, move or remove a key.

use super::*;

#[rstest]
// Overwrites and deletes.
#[case::set_over_hash("HSET k f v; SET k x", "0: @bg0 k; 3: @bg3")]
#[case::set_over_stream(
    "XADD k * f v; ! SET k x GET; SET k x; SET bg0:list x; SET bg0:zset y",
    "0: @bg0 k; 3: @bg3"
)]
#[case::string_commands_create(
    "INCR n; APPEND a x; SETRANGE r 3 x; PFADD hll a; SETBIT b 7 1; GETSET g v; MSET m1 1 m2 2; =0 MSETNX m2 1 m3 1; SETNX m3 1",
    "0: @bg0 n a r hll b g m1 m2 m3; 3: @bg3"
)]
// A string SET is logged without reading the key when it created it or
// the key was a plain string; any other key is read.
#[case::string_sets(
    "SET a 1; BITOP OR b a nosuch; MSET c 1 d 2; SET a 2 KEEPTTL; SET bg0:hash x KEEPTTL; SET bg0:list x EX 100000; SET bg0:ttl x",
    "0: @bg0 a b c d; 3: @bg3"
)]
#[case::del("SET a 1; RPUSH l x; =2 DEL a l nosuch; =0 DEL a", "0: @bg0; 3: @bg3")]
#[case::del_background(
    "=3 DEL bg0:str bg0:hash bg0:stream",
    "0: @bg0 -bg0:str -bg0:hash -bg0:stream; 3: @bg3"
)]
#[case::unlink(
    "SADD s m; ZADD z 1 m; =3 UNLINK s z bg0:list",
    "0: @bg0 -bg0:list; 3: @bg3"
)]
#[case::hdel_last_field(
    "HSET h f v g w; =2 HDEL h f g; =1 HDEL bg0:hash f",
    "0: @bg0 -bg0:hash; 3: @bg3"
)]
#[case::hgetdel_last_field(
    "REQUIRE HGETDEL; HSET h f v g w; HGETDEL h FIELDS 2 f g",
    "0: @bg0; 3: @bg3"
)]
#[case::hash_creators(
    "HINCRBY h f 1; HSETNX h2 f v; HINCRBYFLOAT h3 f 1.5",
    "0: @bg0 h h2 h3; 3: @bg3"
)]
#[case::lpop_last(
    "RPUSH l a b; LPOP l; LPOP l; =nil LPOP l; LPOP bg0:list 5",
    "0: @bg0 -bg0:list; 3: @bg3"
)]
#[case::rpop_last(
    "RPUSH l a; RPOP l; RPOP bg0:list; RPOP bg0:list",
    "0: @bg0 -bg0:list; 3: @bg3"
)]
#[case::blpop_last(
    "RPUSH l a; BLPOP l 1; BRPOP bg0:list 1; BRPOP bg0:list 1",
    "0: @bg0 -bg0:list; 3: @bg3"
)]
#[case::lmpop_last("RPUSH l a; LMPOP 2 nosuch l LEFT COUNT 10", "0: @bg0; 3: @bg3")]
#[case::lrem_last(
    "RPUSH l a a; =2 LREM l 0 a; LREM bg0:list 0 a; LREM bg0:list 0 b",
    "0: @bg0 -bg0:list; 3: @bg3"
)]
#[case::ltrim_to_empty(
    "RPUSH l a b c; LTRIM l 1 0; LTRIM bg0:list 5 10",
    "0: @bg0 -bg0:list; 3: @bg3"
)]
#[case::lmove_last(
    "RPUSH l a; LMOVE l l2 LEFT RIGHT; RPOPLPUSH bg0:list l2; BLMOVE bg0:list l3 LEFT LEFT 1",
    "0: @bg0 -bg0:list l2 l3; 3: @bg3"
)]
#[case::srem_last(
    "SADD s a b; =2 SREM s a b; SREM bg0:set m",
    "0: @bg0 -bg0:set; 3: @bg3"
)]
#[case::spop_last("SADD s a b c; SPOP s 10; SPOP bg0:set", "0: @bg0 -bg0:set; 3: @bg3")]
#[case::smove_last_member(
    "SADD s1 m; =1 SMOVE s1 s2 m; =1 SMOVE bg0:set s2 m",
    "0: @bg0 -bg0:set s2; 3: @bg3"
)]
#[case::set_stores(
    "SET dst x; SADD s a; =0 SINTERSTORE dst s nosuch; =0 SDIFFSTORE d2 s s; SUNIONSTORE u s bg0:set",
    "0: @bg0 s u; 3: @bg3"
)]
#[case::zrem_last(
    "ZADD z 1 a 2 b; =2 ZREM z a b; ZREM bg0:zset m",
    "0: @bg0 -bg0:zset; 3: @bg3"
)]
#[case::zpop_last(
    "ZADD z 1 a; ZPOPMIN z; ZPOPMAX bg0:zset 5",
    "0: @bg0 -bg0:zset; 3: @bg3"
)]
#[case::bzpop_zmpop_last(
    "ZADD z 1 a; BZPOPMIN z 1; ZADD y 1 a 2 b; ZMPOP 1 y MIN COUNT 5; BZMPOP 1 1 bg0:zset MAX",
    "0: @bg0 -bg0:zset; 3: @bg3"
)]
#[case::zremrange_to_empty(
    "ZADD z 1 a 2 b; ZREMRANGEBYSCORE z -inf +inf; ZREMRANGEBYRANK bg0:zset 0 -1",
    "0: @bg0 -bg0:zset; 3: @bg3"
)]
#[case::zstores(
    "ZADD src 1 a; SET dst x; =0 ZRANGESTORE dst src 5 10; ZRANGESTORE d2 src 0 -1; SET d3 x; =0 ZINTERSTORE d3 1 nosuch; ZUNIONSTORE d4 2 src bg0:zset",
    "0: @bg0 src d2 d4; 3: @bg3"
)]
#[case::geo("GEOADD g 13.36 38.11 a; ZREM g a; GEOADD g2 13.36 38.11 b; SET dst x; =0 GEOSEARCHSTORE dst g2 FROMLONLAT 0 0 BYRADIUS 1 km", "0: @bg0 g2; 3: @bg3")]
#[case::xdel_keeps_empty_stream(
    "XADD st 1-1 f v; =1 XDEL st 1-1; =1 XDEL bg0:stream 1-1; =0 XLEN st",
    "0: @bg0 st; 3: @bg3"
)]
#[case::xtrim_keeps_empty_stream(
    "XADD st 1-1 f v; XTRIM st MAXLEN 0; XTRIM bg0:stream MAXLEN 0",
    "0: @bg0 st; 3: @bg3"
)]
#[case::xgroup_mkstream("XGROUP CREATE nst g $ MKSTREAM", "0: @bg0 nst; 3: @bg3")]
#[case::sort_store(
    "RPUSH l 3 1 2; SORT l STORE s1; SET s2 x; =0 SORT nosuch STORE s2",
    "0: @bg0 l s1; 3: @bg3"
)]
#[case::bitop_empty_deletes_dest(
    "SET d x; =0 BITOP AND d nosuch1 nosuch2; BITOP OR d2 bg0:str",
    "0: @bg0 d2; 3: @bg3"
)]
// Renames, moves, copies, DUMP/RESTORE. Commands that write a key in another
// db (MOVE, COPY ... DB, DEBUG RELOAD) are followed by SELECT 0: on valkey-8.1
// they move the caller to that db (see client_db_survives_cross_db_notifications).
#[case::rename(
    "SET a 1; RENAME a b; RENAME bg0:hash a",
    "0: @bg0 -bg0:hash a b; 3: @bg3"
)]
#[case::rename_onto_other_type(
    "HSET a f v; RPUSH b x; RENAME a b; RENAME bg0:stream bg0:str",
    "0: @bg0 -bg0:stream b; 3: @bg3"
)]
#[case::rename_to_itself("SET a 1; RENAME a a", "0: @bg0 a; 3: @bg3")]
#[case::rename_missing_source("! RENAME nosuch x; ! RENAMENX nosuch x", "0: @bg0; 3: @bg3")]
#[case::renamenx_success("SET a 1; =1 RENAMENX a b", "0: @bg0 b; 3: @bg3")]
#[case::renamenx_failure(
    "SET a 1; RPUSH b x; =0 RENAMENX a b; =0 RENAMENX bg0:set bg0:zset",
    "0: @bg0 a b; 3: @bg3"
)]
#[case::rename_keeps_ttl(
    "SET a 1 EX 100000; RENAME a b; RENAME bg0:ttl c",
    "0: @bg0 -bg0:ttl b c; 3: @bg3"
)]
#[case::move_to_other_db(
    "SET a 1; =1 MOVE a 3; SELECT 0; MOVE bg0:zset 3; SELECT 3; MOVE bg3:list 0",
    "0: @bg0 -bg0:zset bg3:list; 3: @bg3 -bg3:list a bg0:zset"
)]
#[case::move_fails_when_target_exists(
    "SET a 1; SELECT 3; SET a 2; SELECT 0; =0 MOVE a 3; ! MOVE a 0",
    "0: @bg0 a; 3: @bg3 a"
)]
#[case::move_to_db5(
    "HSET a f v; MOVE a 5; SELECT 0; MOVE bg0:ttl 5",
    "0: @bg0 -bg0:ttl; 3: @bg3; 5: a bg0:ttl"
)]
#[case::copy(
    "SET a 1; =1 COPY a b; COPY bg0:stream s2; COPY bg0:ttl t2",
    "0: @bg0 a b s2 t2; 3: @bg3"
)]
#[case::copy_to_db(
    "HSET a f v; =1 COPY a a DB 3; SELECT 0; =0 COPY bg0:set bg3:set DB 3; =1 COPY bg0:set bg3:list DB 3 REPLACE",
    "0: @bg0 a; 3: @bg3 a"
)]
#[case::copy_replace(
    "SET a 1; RPUSH b x; =0 COPY a b; =1 COPY a b REPLACE; COPY bg0:hash bg0:str REPLACE",
    "0: @bg0 a b; 3: @bg3"
)]
#[case::dump_restore(
    "SET a 1; DUMP a; =OK RESTORE b 0 @last; DUMP bg0:stream; RESTORE s2 0 @last",
    "0: @bg0 a b s2; 3: @bg3"
)]
#[case::restore_replace(
    "HSET a f v; DUMP a; ! RESTORE bg0:str 0 @last; RESTORE bg0:str 0 @last REPLACE",
    "0: @bg0 a; 3: @bg3"
)]
#[case::restore_with_ttl(
    "SET a 1; DUMP a; RESTORE b 100000000 @last; RESTORE c @ms+100000000 @last ABSTTL; RESTORE bg0:list 100000000 @last REPLACE",
    "0: @bg0 a b c; 3: @bg3"
)]
#[case::restore_with_past_ttl(
    "SET a 1; DUMP a; RESTORE bg0:str @ms-1000 @last ABSTTL REPLACE; RESTORE x @ms-1000 @last ABSTTL",
    "0: @bg0 -bg0:str a; 3: @bg3"
)]
#[case::expire_in_the_past_deletes(
    "SET a 1; EXPIRE a 0; PEXPIRE bg0:hash -5; SET b 1 EX 100000; EXPIREAT b 1; PEXPIREAT bg0:ttl 1",
    "0: @bg0 -bg0:hash -bg0:ttl; 3: @bg3"
)]
#[case::getdel_getex(
    "SET a 1; GETDEL a; GETDEL bg0:str; GETEX bg0:ttl PERSIST; ! GETEX bg0:list",
    "0: @bg0 -bg0:str; 3: @bg3"
)]
// Flushes and swaps.
#[case::flushdb("SET a 1; FLUSHDB", "0: ; 3: @bg3")]
#[case::flushdb_async("FLUSHDB ASYNC; SET a 1", "0: a; 3: @bg3")]
#[case::flushdb_other_db("SELECT 3; FLUSHDB SYNC; SET z 1", "0: @bg0; 3: z")]
#[case::flushall("SELECT 3; SET a 1; FLUSHALL; SET b 1", "0: ; 3: b")]
#[case::flushall_async(
    "SELECT 5; SET x 1; FLUSHALL ASYNC; SELECT 0; SET b 1",
    "0: b; 3: ; 5: "
)]
#[case::swapdb("SET a 1; SWAPDB 0 3", "0: @bg3; 3: @bg0 a")]
#[case::swapdb_then_write(
    "SWAPDB 0 3; SET a 1; DEL bg3:str; SELECT 3; DEL bg0:list",
    "0: @bg3 -bg3:str a; 3: @bg0 -bg0:list"
)]
#[case::swapdb_twice("SWAPDB 0 3; SWAPDB 3 0; SET a 1", "0: @bg0 a; 3: @bg3")]
// DEBUG POPULATE fires only "new"; the last key is read when the next event
// arrives: a SWAPDB or FLUSHDB in the same transaction must not misplace it.
#[case::populate_then_swap_in_multi(
    "MULTI; DEBUG POPULATE 3 pp; SWAPDB 0 3; EXEC",
    "0: @bg3; 3: @bg0 pp:0 pp:1 pp:2"
)]
#[case::populate_then_flush_in_multi("MULTI; DEBUG POPULATE 3 pp; FLUSHDB; EXEC", "0: ; 3: @bg3")]
#[case::swapdb_with_empty_db(
    "SWAPDB 0 5; SET a 1; SELECT 5; DEL bg0:str",
    "0: a; 3: @bg3; 5: @bg0 -bg0:str"
)]
// Transactions, scripts, functions.
#[case::multi_exec(
    "MULTI; SET a 1; HSET h f v; DEL bg0:str; RENAME bg0:list l2; SREM bg0:set m; =[OK,1,1,OK,1] EXEC",
    "0: @bg0 -bg0:str -bg0:list -bg0:set a h l2; 3: @bg3"
)]
#[case::multi_select(
    "MULTI; SELECT 3; SET x 1; DEL bg3:str; SELECT 0; SET y 1; EXEC; SET z 1",
    "0: @bg0 y z; 3: @bg3 -bg3:str x"
)]
#[case::multi_runtime_error("MULTI; SET a 1; LPUSH a x; SET b 2; EXEC", "0: @bg0 a b; 3: @bg3")]
#[case::multi_discard("MULTI; SET a 1; DEL bg0:str; DISCARD", "0: @bg0; 3: @bg3")]
#[case::multi_flush_swap(
    "MULTI; SET a 1; SWAPDB 0 3; SET b 1; FLUSHDB; SET c 1; EXEC",
    "0: c; 3: @bg0 a"
)]
#[case::eval_writes(
    "EVAL \"redis.call('SET',KEYS[1],ARGV[1]); redis.call('HSET',KEYS[2],'f',ARGV[1]); redis.call('DEL',KEYS[3]); return 1\" 3 a h bg0:str v",
    "0: @bg0 -bg0:str a h; 3: @bg3"
)]
#[case::eval_select_other_db(
    "EVAL \"redis.call('SELECT','3'); redis.call('SET',KEYS[1],'v'); redis.call('DEL','bg3:hash'); return 1\" 1 k; SET after 1",
    "0: @bg0 after; 3: @bg3 -bg3:hash k"
)]
#[case::eval_rename_move_expire(
    "EVAL \"redis.call('RENAME','bg0:str','r'); redis.call('MOVE','r','3'); redis.call('SELECT','0'); redis.call('SET','t','v','EX','100000'); redis.call('PEXPIRE','bg0:hash','0'); return 1\" 0",
    "0: @bg0 -bg0:str -bg0:hash t; 3: @bg3 r"
)]
#[case::fcall_writes(
    "FUNCTION LOAD REPLACE \"#!lua name=evlib%0Aredis.register_function('setf', function(keys, args) return redis.call('SET', keys[1], args[1]) end)%0Aredis.register_function('delf', function(keys, args) return redis.call('DEL', keys[1]) end)%0Aredis.register_function('hsetf', function(keys, args) return redis.call('HSET', keys[1], 'f', args[1]) end)\"; FCALL setf 1 a v; =1 FCALL delf 1 bg0:hash; FCALL setf 1 bg0:list x; FCALL hsetf 1 h v",
    "0: @bg0 -bg0:hash a h; 3: @bg3"
)]
// Binary-safe names.
#[case::binary_key_names(
    "SET %00 v; SET a%00b v; SET %FF%FE%FD v; SET %0D%0A v; SET \"%20sp ace%20\" v; SET \"\" empty; HSET %00%FF f v; RPUSH *?[ x; DEL a%00b; RENAME %0D%0A x%00y%0D%0A; MOVE %FF%FE%FD 3",
    "0: @bg0 %00 \"%20sp ace%20\" \"\" %00%FF *?[ x%00y%0D%0A; 3: @bg3 %FF%FE%FD"
)]
// Reloads.
#[case::debug_reload(
    "SET a 1 EX 100000; HSET h f v; SELECT 3; RPUSH l x; SELECT 0; DEBUG RELOAD; SELECT 0; DEL bg0:str; SET after 1",
    "0: @bg0 -bg0:str a h after; 3: @bg3 l"
)]
#[case::debug_reload_nosave_forgets_unsaved_writes(
    "SAVE; SET b 1; SELECT 3; DEL bg3:str; SELECT 0; DEBUG RELOAD NOSAVE",
    "0: @bg0; 3: @bg3"
)]
fn index_follows_keyspace(#[case] script: &str, #[case] expect: &str) {
    let expect = parse_expect(expect);
    assert!(
        expect.contains_key(&0) && expect.contains_key(&3),
        "every case states dbs 0 and 3"
    );
    let dbs = dbs_of(&expect);
    let (_server, mut con, mut chk) = server_with_bg();
    assert_index_matches(&mut chk, &dbs);
    if !run_script(&mut con, &mut chk, script, &dbs, true) {
        return;
    }
    assert_keyspace(&mut chk, &expect, script);
    assert_index_matches(&mut chk, &dbs);
    assert_index_sizes(&mut chk, &dbs);
}
