#!/usr/bin/env bash
# Builds a directory that runs the benchmark on a machine without package
# access (a many-core machine lent for an hour): called by
# `scripts/bench.sh --prepare DIR [--server NAME ...]`.
#
#   DIR/run.sh [bench.sh options]   runs scripts/bench.sh from DIR, offline
#   DIR/libsnapscan.so              the module (cargo build --release)
#   DIR/servers/NAME                each server (a wrapper where it links
#                                   libraries outside glibc; argv[0] kept)
#   DIR/bin/redis-benchmark, redis-cli, sclient
#   DIR/lib/                        shared libraries outside glibc, for the above
#   DIR/noopsub.so                  the no-op subscriber module
#   DIR/pylib/                      redis-py (pure Python)
#   DIR/scripts/                    bench.sh and scripts/bench/
# The target machine needs python3 (>= 3.8) and glibc no older than this one's.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

dir=$1; shift
mkdir -p "$dir"
dir=$(realpath "$dir")
VENV="${SNAPSCAN_VENV:-/opt/snapscan-venv}"

echo "prepare: building the module"
cargo build --release --quiet
mkdir -p "$dir"/{servers,bin,lib,libexec,pylib,scripts/bench,bench}
cp target/release/libsnapscan.so "$dir/"

# copy_libs BINARY: the libraries BINARY links outside glibc into DIR/lib.
copy_libs() {
    ldd "$1" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
        case "$(basename "$lib")" in
            libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libresolv.so*) ;;
            *) cp -L "$lib" "$dir/lib/" ;;
        esac
    done
}

# needs_libs BINARY: whether it links anything outside glibc.
needs_libs() {
    local n
    n=$(ldd "$1" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | xargs -r -n1 basename |
        grep -cvE '^(libc|libm|libdl|librt|libpthread|libresolv)\.so|^ld-linux' || true)
    ((n > 0))
}

# wrap NAME BINARY DEST: DEST runs a copy of BINARY (kept under libexec/NAME/ with
# its own file name, so that a binary that picks its mode from argv[0], like
# Debian's redis-server, still sees it) with DIR/lib on its library path.
wrap() {
    local name=$1 bin=$2 dest=$3
    mkdir -p "$dir/libexec/$name"
    cp -L "$bin" "$dir/libexec/$name/"
    copy_libs "$bin"
    cat >"$dest" <<EOF
#!/bin/sh
here=\$(cd "\$(dirname "\$0")/.." && pwd)
LD_LIBRARY_PATH="\$here/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$here/libexec/$name/$(basename "$bin")" "\$@"
EOF
    chmod +x "$dest"
}

for name in "$@"; do
    bin=$(scripts/servers.sh "$name")
    # A wrapper script (redis-stack-7.4) cannot be copied as it is.
    [[ $(head -c4 "$bin" | tail -c3) == ELF ]] || { echo "prepare: $name ($bin) is not an ELF binary: not supported" >&2; exit 1; }
    if needs_libs "$bin"; then
        wrap "$name" "$bin" "$dir/servers/$name"
    else
        cp -L "$bin" "$dir/servers/$name"
    fi
    echo "prepare: server $name"
done
for tool in redis-benchmark redis-cli; do
    wrap "$tool" "$(command -v "$tool")" "$dir/bin/$tool"
done

echo "prepare: compiling sclient and the no-op subscriber"
cc -O2 -o "$dir/bin/sclient" scripts/bench/sclient.c
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$VENV/bin/python" - "$tmp" <<'EOF'
import sys
sys.path.insert(0, "scripts/bench")
import lib
print(lib.noop_module(sys.argv[1]))
EOF
cp "$tmp/noopsub.so" "$dir/"

echo "prepare: redis-py"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    --target "$dir/pylib" async-timeout \
    "redis==$("$VENV/bin/python" -c 'import redis; print(redis.__version__)')"

rev="$(git rev-parse --short HEAD 2>/dev/null || echo '?')"
git diff --quiet HEAD -- src Cargo.toml Cargo.lock 2>/dev/null || rev="$rev + uncommitted changes in src/"
cp scripts/bench.sh "$dir/scripts/"
cp scripts/bench/*.py scripts/bench/*.c scripts/bench/prepare.sh "$dir/scripts/bench/"
cat >"$dir/run.sh" <<EOF
#!/usr/bin/env bash
# Runs the snapscan benchmark from this prepared directory, offline:
#   ./run.sh [--quick] [--only LIST] [--server NAME] [--server-cpus LIST --load-cpus LIST] [--io-threads N]
# Results: bench/results.csv and bench/REPORT.md here.
set -euo pipefail
here=\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)
export SNAPSCAN_BENCH_OFFLINE=1 SNAPSCAN_MODULE="\$here/libsnapscan.so" \\
    SNAPSCAN_MODULE_REV="$rev" \\
    SNAPSCAN_SERVERS_DIR="\$here/servers" SNAPSCAN_SCLIENT="\$here/bin/sclient" \\
    SNAPSCAN_NOOP_MODULE="\$here/noopsub.so" PATH="\$here/bin:\$PATH" \\
    PYTHONPATH="\$here/pylib\${PYTHONPATH:+:\$PYTHONPATH}"
exec "\$here/scripts/bench.sh" "\$@"
EOF
chmod +x "$dir/run.sh"
echo "prepare: $dir ready ($(du -sh "$dir" | cut -f1)); run $dir/run.sh [options]"
