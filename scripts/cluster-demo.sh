#!/usr/bin/env bash
# Starts a 3-primary cluster on 127.0.0.1 (free ports, a temp dir) with snapscan
# loaded on every node, loads keys through the cluster, and shows the
# cluster-wide iteration recipe: one SNAPSHOT.SCAN iteration per primary.
# Stops the nodes and removes the temp dir on exit; every wait is bounded.
#   scripts/cluster-demo.sh [--server NAME]   NAME from scripts/servers.sh (default valkey-9.1)
# Needs: a built module (cargo build --release; built here if missing), redis-cli, python3.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
name=valkey-9.1
[[ ${1:-} == --server ]] && name=${2:?--server needs a NAME}
[[ -f target/release/libsnapscan.so ]] || cargo build --release --quiet
module=$PWD/target/release/libsnapscan.so
server=$(scripts/servers.sh "$name")
dir=$(mktemp -d)
ports=()
cli() { local p=$1; shift; redis-cli -h 127.0.0.1 -p "$p" "$@"; }
cleanup() {
    for p in "${ports[@]}"; do cli "$p" SHUTDOWN NOSAVE >/dev/null 2>&1 || true; done
    rm -rf "$dir"
}
trap cleanup EXIT
# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.1 s.
wait_for() {
    local secs=$1 what=$2; shift 2
    for _ in $(seq $((secs * 10))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
    echo "timed out after ${secs}s waiting for $what" >&2
    exit 1
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "== starting 3 $name nodes in cluster mode with snapscan ($dir)"
for i in 0 1 2; do
    p=$(free_port)
    ports+=("$p")
    mkdir -p "$dir/n$i"
    (cd "$dir/n$i" && "$server" --port "$p" --bind 127.0.0.1 --cluster-enabled yes \
        --save "" --appendonly no --daemonize yes --logfile "$dir/n$i/server.log" \
        --loadmodule "$module")
    wait_for 10 "node $i" cli "$p" PING
done
echo "ports: ${ports[*]}"

echo "== assigning slots (0-5460, 5461-10922, 10923-16383) and joining the nodes"
cli "${ports[0]}" CLUSTER ADDSLOTSRANGE 0 5460 >/dev/null
cli "${ports[1]}" CLUSTER ADDSLOTSRANGE 5461 10922 >/dev/null
cli "${ports[2]}" CLUSTER ADDSLOTSRANGE 10923 16383 >/dev/null
cli "${ports[0]}" CLUSTER MEET 127.0.0.1 "${ports[1]}" >/dev/null
cli "${ports[0]}" CLUSTER MEET 127.0.0.1 "${ports[2]}" >/dev/null
cluster_ok() { for p in "${ports[@]}"; do cli "$p" CLUSTER INFO | grep -q 'cluster_state:ok' || return 1; done; }
wait_for 30 "cluster_state:ok on every node" cluster_ok

echo "== loading 30,000 keys user:<id>:<n> and 20 keys {user42}:<n> through the cluster"
python3 - <<'PY' > "$dir/keys.txt"
for u in range(3000):
    for n in range(10):
        print(f"SET user:{u}:{n} v")
for n in range(20):
    print(f"SET {{user42}}:{n} v")
PY
# redis-cli -c follows MOVED redirections, one command per line.
redis-cli -c -h 127.0.0.1 -p "${ports[0]}" < "$dir/keys.txt" >/dev/null
for p in "${ports[@]}"; do echo "node $p: DBSIZE $(cli "$p" DBSIZE)"; done

echo "== the recipe: one SNAPSHOT.SCAN iteration per primary (each exact for its node at its own instant)"
total=0
for p in "${ports[@]}"; do
    n=0; cursor=0
    for _ in $(seq 100000); do
        mapfile -t reply < <(cli "$p" SNAPSHOT.SCAN "$cursor" COUNT 1000)
        cursor=${reply[0]}; n=$((n + ${#reply[@]} - 1))
        [[ $cursor == 0 ]] && break
    done
    echo "node $p: $n keys"
    total=$((total + n))
done
echo "cluster: $total keys (30,020 written)"

echo "== a hashtag prefix lives in one slot: ask only its owner, a prefix seek there"
slot=$(cli "${ports[0]}" CLUSTER KEYSLOT '{user42}:')
owner=""
for p in "${ports[@]}"; do [[ $(cli "$p" CLUSTER COUNTKEYSINSLOT "$slot") != 0 ]] && owner=$p; done
echo "slot $slot is served by node $owner"
echo "> SNAPSHOT.SCAN 0 MATCH {user42}:* COUNT 100 (on $owner)"
cli "$owner" SNAPSHOT.SCAN 0 MATCH '{user42}:*' COUNT 100 | tail -n +2 | wc -l | xargs echo "keys:"
cli "$owner" INFO snapshot | grep -E 'index_keys:|scans_served:'
echo "== done: the nodes stop now"
