#!/usr/bin/env bash
# Tests the Python client (clients/python): builds the module (release), installs
# the package into the venv with pip, then runs its pytest suite once per server
# (a standalone server and a 3-node cluster each, started by the fixtures), and
# ends with "N passed, M failed" over the servers.
#
#   scripts/test-python.sh                       valkey-9.1 and redis-7.0
#   scripts/test-python.sh --server redis-8.2    only that server (repeatable)
#   scripts/test-python.sh -- -k hscan -x        extra pytest arguments
#
# Env: SNAPSCAN_VENV (default /opt/snapscan-venv; needs redis, valkey and pytest,
# see scripts/install-deps.sh), SNAPSCAN_PY_TIMEOUT (seconds per server, default 300).
# A pytest run that collects no test (exit 5) counts as a failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV="${SNAPSCAN_VENV:-/opt/snapscan-venv}"
PY="$VENV/bin/python"
TIMEOUT="${SNAPSCAN_PY_TIMEOUT:-300}"

servers=()
pytest_args=()
while (($#)); do
    case "$1" in
        --server) [[ $# -ge 2 ]] || { echo "test-python.sh: --server needs a NAME" >&2; exit 2; }
                  servers+=("$2"); shift 2 ;;
        --server=*) servers+=("${1#*=}"); shift ;;
        -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        --) shift; pytest_args=("$@"); break ;;
        *) echo "test-python.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
((${#servers[@]})) || servers=(valkey-9.1 redis-7.0)

banner() { printf '\n==================== %s ====================\n' "$*"; }

[[ -x $PY ]] || { echo "test-python.sh: no venv at $VENV (run scripts/install-deps.sh)" >&2; exit 1; }

banner "build (release)"
cargo build --release

# Installed from a copy, so that the build leaves nothing in the source tree.
banner "pip install ./clients/python"
tmp="$(mktemp -d -t snapscan-py.XXXXXX)"
current=""
cleanup() {
    [[ -n $current ]] && kill -KILL -- "-$current" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "test-python.sh: interrupted" >&2; exit 130' INT TERM
mkdir "$tmp/pkg"
cp -r clients/python/pyproject.toml clients/python/README.md clients/python/src "$tmp/pkg/"
timeout 600 "$PY" -m pip install -q --disable-pip-version-check --no-input --force-reinstall --no-deps "$tmp/pkg"
"$PY" -c 'import snapscan, snapscan.asyncio, redis, valkey, pytest; print("snapscan", snapscan.__version__, "| redis", redis.__version__, "| valkey", valkey.__version__, "| pytest", pytest.__version__)'

passed=0
failed=0
summary=()
for name in "${servers[@]}"; do
    banner "python client on $name"
    if ! path=$(scripts/servers.sh "$name"); then
        summary+=("$(printf '%-12s FAILED (server not available)' "$name")"); failed=$((failed + 1)); continue
    fi
    start=$SECONDS
    rc=0
    # `timeout` runs pytest in a process group of its own: whatever is left of it
    # afterwards (servers of a killed run) is killed with the group.
    (cd clients/python && SNAPSCAN_SERVER="$path" SNAPSCAN_SERVER_NAME="$name" \
        exec timeout -k 10 "$TIMEOUT" "$PY" -m pytest -q -p no:cacheprovider tests "${pytest_args[@]}") &
    current=$!
    wait "$current" || rc=$?
    kill -KILL -- "-$current" 2>/dev/null || true
    current=""
    case $rc in
        0) summary+=("$(printf '%-12s passed (%ds)' "$name" $((SECONDS - start)))"); passed=$((passed + 1)) ;;
        5) summary+=("$(printf '%-12s FAILED (no tests ran)' "$name")"); failed=$((failed + 1)) ;;
        124) summary+=("$(printf '%-12s FAILED (timed out after %ss)' "$name" "$TIMEOUT")"); failed=$((failed + 1)) ;;
        *) summary+=("$(printf '%-12s FAILED (pytest exit %d, %ds)' "$name" "$rc" $((SECONDS - start)))"); failed=$((failed + 1)) ;;
    esac
done

banner "python client summary"
printf '%s\n' "${summary[@]}"
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
