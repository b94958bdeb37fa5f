#!/usr/bin/env bash
# Instruction counts (callgrind) of the write and scan paths, module builds
# compared in one run against the no-op subscriber and no module (see the
# docstring of scripts/bench/callgrind.py and docs/PERFORMANCE.md).
#
#   scripts/bench/callgrind.sh OLD.so NEW.so [MORE.so ...] [--labels A,B]
#        [--server NAME] [--keys N] [--count N] [--iterations N] [--scan-calls N]
#        [--no-baselines] [--diff-threshold X] [--cluster]
#
# --cluster: every server a one-node cluster owning every slot.
# The first build is the reference; ratios are each build over it and over the
# no-op subscriber. About 3-4 minutes for two builds with the defaults on the
# 2-core VM. Needs valgrind (callgrind_control, callgrind_annotate), a C
# compiler, redis-py in /opt/snapscan-venv. Every server is shut down
# (SHUTDOWN NOSAVE) at the end, also on error or ^C; the run stops by itself
# after 30 minutes.
set -euo pipefail
# No cd: the .so paths are the caller's, relative to where it runs.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

VENV="${SNAPSCAN_VENV:-/opt/snapscan-venv}"
PY="$VENV/bin/python"
[[ -x $PY ]] || { echo "callgrind.sh: no venv at $VENV (run scripts/install-deps.sh)" >&2; exit 1; }
export PYTHONDONTWRITEBYTECODE=1
case "${1:-}" in
    ""|-h|--help) sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
esac

tmp=$(mktemp -d /tmp/snapscan-callgrind.XXXXXX)
py_pid=""
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
            for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$pid" 2>/dev/null || true
        done < "$tmp/pids"
    fi
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

timeout -k 30 1800 "$PY" -u "$root/scripts/bench/callgrind.py" --tmp "$tmp" "$@" &
py_pid=$!
rc=0
wait "$py_pid" || rc=$?
py_pid=""
exit "$rc"
