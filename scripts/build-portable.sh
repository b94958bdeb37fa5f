#!/usr/bin/env bash
# Builds a portable libsnapscan.so that needs no glibc newer than 2.28 (Debian 10,
# Ubuntu 18.10, RHEL 8 and every newer distribution or container image), with
# cargo-zigbuild and zig from the PyPI packages `cargo-zigbuild` and `ziglang`
# that scripts/install-deps.sh puts into the venv $SNAPSCAN_VENV.
#
#   scripts/build-portable.sh                 build -> target/portable/libsnapscan.so, then check it
#   scripts/build-portable.sh --check FILE    only check FILE (any .so)
#
# The check reads the dynamic symbol table (`objdump -T`) and fails if any
# symbol needs a GLIBC_x.y newer than the baseline; it prints the newest one.
# Env: SNAPSCAN_GLIBC_BASELINE (default 2.28), SNAPSCAN_VENV (default /opt/snapscan-venv).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

VENV="${SNAPSCAN_VENV:-/opt/snapscan-venv}"
BASELINE="${SNAPSCAN_GLIBC_BASELINE:-2.28}"
TRIPLE=x86_64-unknown-linux-gnu
OUT_DIR="$ROOT/target/portable"

die() { printf 'build-portable: %s\n' "$*" >&2; exit 1; }

# check_glibc FILE: newest GLIBC_ version FILE needs must be <= $BASELINE.
check_glibc() {
    local file="$1" newest
    [[ -f $file ]] || die "no such file: $file"
    command -v objdump >/dev/null || die "objdump not found (Debian package binutils)"
    # Lines like `0000... DF *UND* 0000... (GLIBC_2.34) pthread_create`; the
    # version may also be printed without parentheses.
    newest=$(objdump -T "$file" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/^GLIBC_//' | sort -V | tail -n 1)
    [[ -n $newest ]] || die "$file: no GLIBC_ symbol versions in objdump -T (not a glibc .so?)"
    if [[ $(printf '%s\n%s\n' "$newest" "$BASELINE" | sort -V | tail -n 1) != "$BASELINE" ]]; then
        echo "build-portable: $file needs GLIBC_$newest, newer than the baseline $BASELINE:" >&2
        objdump -T "$file" | grep -E "GLIBC_[0-9.]+" | while read -r line; do
            v=$(grep -o 'GLIBC_[0-9][0-9.]*' <<<"$line" | sed 's/^GLIBC_//')
            [[ $(printf '%s\n%s\n' "$v" "$BASELINE" | sort -V | tail -n 1) == "$BASELINE" ]] || echo "    $line" >&2
        done
        exit 1
    fi
    echo "glibc check: $file needs at most GLIBC_$newest (baseline $BASELINE): ok"
}

case "${1:-}" in
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --check) [[ $# -eq 2 ]] || die "--check needs one FILE"; check_glibc "$2"; exit 0 ;;
    "") ;;
    *) die "unknown argument '$1' (see --help)" ;;
esac

[[ -x "$VENV/bin/cargo-zigbuild" ]] || die "no cargo-zigbuild in $VENV/bin (run scripts/install-deps.sh)"
"$VENV/bin/python" -m ziglang version >/dev/null 2>&1 || die "no ziglang in $VENV (run scripts/install-deps.sh)"

# cargo-zigbuild runs zig as `python -m ziglang` with this python.
export CARGO_ZIGBUILD_PYTHON_PATH="$VENV/bin/python"
start=$SECONDS
echo "build-portable: cargo zigbuild --release --lib --target $TRIPLE.$BASELINE (zig $("$VENV/bin/python" -m ziglang version))"
# Unwinding (a panic caught before it reaches the server) goes through the
# system's libgcc_s.so.1, as in the regular build: zig's own libunwind, linked
# in by default, crashes the server in _Unwind_RaiseException on the first
# panic. Every glibc system has libgcc_s.so.1 (its GCC_* symbol versions are
# older than any glibc baseline we target).
# (awk reads to the end: exiting at the first match could kill ldconfig with
# SIGPIPE, which pipefail and set -e turn into a silent exit of this script.)
libgcc_s=$(/sbin/ldconfig -p 2>/dev/null | awk '/libgcc_s\.so\.1 .*x86-64/ && !found {print $NF; found = 1}' || true)
[[ -n "$libgcc_s" && -e "$libgcc_s" ]] || libgcc_s=/lib/x86_64-linux-gnu/libgcc_s.so.1
[[ -e "$libgcc_s" ]] || die "no libgcc_s.so.1 found (needed for panic unwinding)"
RUSTFLAGS="${RUSTFLAGS:-} -C link-arg=$libgcc_s" \
    PATH="$VENV/bin:$PATH" cargo zigbuild --release --lib --target "$TRIPLE.$BASELINE"
mkdir -p "$OUT_DIR"
cp -f "target/$TRIPLE/release/libsnapscan.so" "$OUT_DIR/libsnapscan.so.tmp"
mv -f "$OUT_DIR/libsnapscan.so.tmp" "$OUT_DIR/libsnapscan.so"
echo "build-portable: $OUT_DIR/libsnapscan.so built in $((SECONDS - start))s"
check_glibc "$OUT_DIR/libsnapscan.so"
