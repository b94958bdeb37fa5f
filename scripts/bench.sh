#!/usr/bin/env bash
# The snapscan benchmark suite: reproduces the experiments of the articles in
# the design notes (KeyDB, Garnet, Dragonfly, Qunar) against servers it starts
# itself on 127.0.0.1 (free port, temporary directory, module loaded; a second
# server without the module where a comparison needs one).
#
#   scripts/bench.sh [--quick] [--large] [--server NAME] [--only SCENARIOS]
#                    [--server-cpus LIST --load-cpus LIST] [--io-threads N]
#   scripts/bench.sh --prepare DIR [--server NAME ...]
#
#   --quick          small datasets, about 7 minutes (full run: longer, not re-timed since issue 9)
#   --large          also the 31M-key Garnet dataset, if /proc/meminfo allows
#   --server NAME    a server of scripts/servers.sh (default valkey-9.1)
#   --only LIST      comma-separated scenarios, by name or number:
#                    1 interference, 2 percall, 3 invalidation, 4 hscan,
#                    5 memory, 6 writes, 7 scale, 8 large, 9 pinned, 10 unlink,
#                    11 native (the native commands served from snapshots, issue 18),
#                    12 survival (whole iterations under a write load, issue 25)
#   --server-cpus LIST  pin every server to these CPUs (taskset's list format, e.g. 0-5)
#   --load-cpus LIST    pin the load generators, scanners and probes to these (e.g. 6-15);
#                    the two lists must not overlap. For many-core machines.
#   --io-threads N   start every server with io-threads N (Valkey/Redis I/O threads)
#   --prepare DIR    build everything a run needs into DIR and stop: the module,
#                    the --server binaries (default valkey-9.1; repeatable) with the
#                    shared libraries they link outside glibc, redis-benchmark and
#                    redis-cli (same), the compiled sclient and no-op subscriber,
#                    redis-py, and these scripts. On a machine without package
#                    access (python3 >= 3.8 and glibc are all it needs), run
#                    DIR/run.sh with the options above; results land in DIR/bench/.
#
# Prints progress, medians, ratios and every target with PASS/MISS; appends rows
# to bench/results.csv; writes bench/REPORT.md with PNG charts in bench/.
# Needs redis-benchmark/redis-cli (Debian redis-tools), a C compiler, and the venv
# /opt/snapscan-venv (matplotlib and numpy are installed into it if missing).
# Env: SNAPSCAN_MODULE=/path/libsnapscan.so benchmarks that build instead of
# building this checkout (SNAPSCAN_MODULE_REV=text labels it in the report).
# Every server is shut down (SHUTDOWN NOSAVE) at the end, also on error or ^C.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV="${SNAPSCAN_VENV:-/opt/snapscan-venv}"
export PYTHONDONTWRITEBYTECODE=1
PY="$VENV/bin/python"
quick=0; large=0; server=valkey-9.1; only=""; prepare=""; prep_servers=()
pin_args=()
while (($#)); do
    case "$1" in
        --server-cpus|--load-cpus|--io-threads)
                [[ $# -ge 2 ]] || { echo "bench.sh: $1 needs a value" >&2; exit 2; }
                pin_args+=("$1" "$2"); shift 2 ;;
        --prepare) [[ $# -ge 2 ]] || { echo "bench.sh: --prepare needs a DIR" >&2; exit 2; }
                prepare=$2; shift 2 ;;
        --quick) quick=1; shift ;;
        --large) large=1; shift ;;
        --server) [[ $# -ge 2 ]] || { echo "bench.sh: --server needs a NAME" >&2; exit 2; }
                  server=$2; prep_servers+=("$2"); shift 2 ;;
        --server=*) server=${1#*=}; shift ;;
        --only) [[ $# -ge 2 ]] || { echo "bench.sh: --only needs a list" >&2; exit 2; }
                only=$2; shift 2 ;;
        --only=*) only=${1#*=}; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

if [[ -n $prepare ]]; then
    ((${#prep_servers[@]})) || prep_servers=(valkey-9.1)
    exec scripts/bench/prepare.sh "$prepare" "${prep_servers[@]}"
fi

# SNAPSCAN_BENCH_OFFLINE=1: run from a directory made by --prepare (its run.sh
# sets it): everything is prebuilt, nothing is installed or compiled.
offline=${SNAPSCAN_BENCH_OFFLINE:-0}
tools=(redis-benchmark redis-cli)
((offline)) || tools+=(cc)
for tool in "${tools[@]}"; do
    command -v "$tool" >/dev/null || { echo "bench.sh: $tool not found (run scripts/install-deps.sh)" >&2; exit 1; }
done
if ((offline)); then
    PY=$(command -v python3) || { echo "bench.sh: python3 not found" >&2; exit 1; }
else
    [[ -x $PY ]] || { echo "bench.sh: no venv at $VENV (run scripts/install-deps.sh)" >&2; exit 1; }
    scripts/servers.sh "$server" >/dev/null || exit 1
    if ! "$PY" -c 'import matplotlib, numpy' 2>/dev/null; then
        echo "bench: installing matplotlib and numpy into $VENV"
        timeout 600 "$PY" -m pip install --quiet --disable-pip-version-check matplotlib numpy
    fi
fi

if [[ -n ${SNAPSCAN_MODULE:-} ]]; then
    [[ -f $SNAPSCAN_MODULE ]] || { echo "bench.sh: SNAPSCAN_MODULE=$SNAPSCAN_MODULE: no such file" >&2; exit 1; }
    echo "bench: using the module $SNAPSCAN_MODULE (SNAPSCAN_MODULE)"
else
    echo "bench: building the module (cargo build --release)"
    cargo build --release --quiet
fi

tmp=$(mktemp -d /tmp/snapscan-bench.XXXXXX)
py_pid=""
# Stops every server this run started (their "pid port" lines are in $tmp/pids),
# whatever happened to the Python driver.
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -n $py_pid ]] && kill -0 "$py_pid" 2>/dev/null; then
        kill -TERM "$py_pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$py_pid" 2>/dev/null || break; sleep 0.2; done
        kill -KILL "$py_pid" 2>/dev/null || true
    fi
    if [[ -f $tmp/pids ]]; then
        while read -r pid port; do
            kill -0 "$pid" 2>/dev/null || continue
            timeout 5 redis-cli -h 127.0.0.1 -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$pid" 2>/dev/null || true
        done < "$tmp/pids"
    fi
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

args=(--tmp "$tmp" --server "$server")
((quick)) && args+=(--quick)
((large)) && args+=(--large)
[[ -n $only ]] && args+=(--only "$only")
args+=("${pin_args[@]}")
# Hard cap so that everything stops by itself.
limit=$((quick ? 900 : 3600)); ((large)) && limit=$((limit + 3600))
start=$(date +%s)
timeout -k 30 "$limit" "$PY" -u scripts/bench/run.py "${args[@]}" &
py_pid=$!
rc=0
wait "$py_pid" || rc=$?
py_pid=""
echo "bench: finished in $(( $(date +%s) - start ))s (exit status $rc)"
exit "$rc"
