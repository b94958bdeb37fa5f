#!/usr/bin/env bash
# Sets up everything on a fresh machine (scripts/install-deps.sh), builds the module,
# starts a server on 127.0.0.1 with it loaded through module.conf, and shows it working.
#   scripts/demo.sh [--server NAME]     NAME from scripts/servers.sh (default valkey-9.1)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
name=valkey-9.1
[[ ${1:-} == --server ]] && name=${2:?--server needs a NAME}

[[ ${SNAPSCAN_SKIP_INSTALL:-0} == 1 ]] || scripts/install-deps.sh
echo "== building the module (cargo build --release)"
cargo build --release --quiet
server=$(scripts/servers.sh "$name")
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
cli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }
cleanup() { cli SHUTDOWN NOSAVE >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT

echo "== starting $name ($server) on 127.0.0.1:$port with 'include module.conf'"
# No `dir`: the server keeps this checkout as its working directory, which is
# what module.conf's relative loadmodule path expects. Nothing is saved.
printf 'port %s\nbind 127.0.0.1\nsave ""\nappendonly no\nlogfile %s/server.log\ninclude %s/module.conf\n' \
    "$port" "$dir" "$PWD" > "$dir/server.conf"
"$server" "$dir/server.conf" --daemonize yes
for _ in $(seq 100); do cli PING >/dev/null 2>&1 && break; sleep 0.1; done
cli MODULE LIST | grep -q snapshot || { echo "module not loaded"; tail "$dir/server.log"; exit 1; }

echo "== loading 100,000 keys: 10,000 users x 10 keys user:<id>:<n> (redis-cli --pipe)"
python3 - <<'PY' | cli --pipe >/dev/null
import sys
out = sys.stdout
for u in range(10000):
    for n in range(10):
        k = f"user:{u}:{n}"
        out.write(f"*3\r\n$3\r\nSET\r\n${len(k)}\r\n{k}\r\n$1\r\nv\r\n")
PY
cli DBSIZE
run() { echo "> $*"; cli "$@"; }
run SNAPSHOT.SCAN 0 MATCH 'user:42:*' COUNT 100
run SNAPSHOT.SCAN 0 COUNT 5
echo "== a point-in-time iteration: delete keys between pages, every key of the snapshot still comes back once"
cursor=0; total=0
for page in $(seq 1 100000); do
    mapfile -t reply < <(cli SNAPSHOT.SCAN "$cursor" MATCH 'user:7*' COUNT 500)
    cursor=${reply[0]}; total=$((total + ${#reply[@]} - 1))
    [[ $page == 1 ]] && cli DEL user:7:0 user:70:0 user:700:0 user:7000:0 >/dev/null
    [[ $cursor == 0 ]] && break
done
echo "SNAPSHOT.SCAN MATCH user:7* returned $total keys (users 7, 70-79, 700-799, 7000-7999: 1,111 x 10 = 11,110 at the snapshot instant, though 4 were deleted meanwhile)"
echo "== SNAPSHOT.HSCAN honours COUNT on a small (listpack) hash; native HSCAN returns it whole"
cli CONFIG SET hash-max-listpack-entries 4096 >/dev/null
python3 -c 'print("HSET profile " + " ".join(f"field:{i} value:{i}" for i in range(2000)))' | cli >/dev/null
echo "HSCAN profile 0 COUNT 5 -> $(cli HSCAN profile 0 COUNT 5 | tail -n +2 | wc -l) elements in one reply"
echo "SNAPSHOT.HSCAN profile 0 COUNT 5 -> $(cli SNAPSHOT.HSCAN profile 0 COUNT 5 | tail -n +2 | wc -l) elements (5 fields + values)"
echo "== SNAPSHOT.SSCAN and SNAPSHOT.ZSCAN honour COUNT on small (intset/listpack) collections too"
cli SADD small:set 1 2 3 4 5 6 7 8 9 10 >/dev/null
cli ZADD small:zset 1 a 2.5 b 3 c >/dev/null
echo "SSCAN small:set 0 COUNT 3 -> $(cli SSCAN small:set 0 COUNT 3 | tail -n +2 | wc -l) members; SNAPSHOT.SSCAN -> $(cli SNAPSHOT.SSCAN small:set 0 COUNT 3 | tail -n +2 | wc -l)"
run SNAPSHOT.ZSCAN small:zset 0 COUNT 2
echo "== cache invalidation by pattern without blocking the server: SNAPSHOT.UNLINK"
run SNAPSHOT.UNLINK 'user:42:*' DRYRUN
run SNAPSHOT.UNLINK 'user:42:*'
run SNAPSHOT.SCAN 0 MATCH 'user:42:*'
echo "== existing clients, unchanged: redis-cli --scan served from snapshots (snapshot.serve-native)"
counters() { cli INFO snapshot | grep -E '^snapshot_(scans_served|native_[a-z]+_served):' | tr -d '\r' | paste -sd' '; }
run CONFIG GET snapshot.serve-native
native=$(cli --scan --pattern 'user:9*' | sort)
echo "redis-cli --scan --pattern 'user:9*' natively: $(wc -l <<<"$native") keys"
run CONFIG SET snapshot.serve-native all
echo "before: $(counters)"
served=$(cli --scan --pattern 'user:9*' | sort)
echo "after:  $(counters)"
echo "redis-cli --scan --pattern 'user:9*' served from snapshots: $(wc -l <<<"$served") keys, $( [[ $served == "$native" ]] && echo "the same keys as natively" || echo "NOT the native key set")"
echo "> KEYS 'user:99*' (SNAPSHOT.KEYS on a worker: the caller waits, nobody else does)"
cli KEYS 'user:99*' | wc -l
echo "after:  $(counters)"
echo "== INFO snapshot"
cli INFO snapshot | grep -E 'index_keys:|index_bytes_per_key|open_snapshots|scans_served:|workers:'
echo "== done: the server stops now"
