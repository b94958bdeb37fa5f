#!/usr/bin/env bash
# The project's test command. Builds the module once (release), runs the unit
# tests, then the integration tests (tests/*.rs) once per server listed by
# scripts/servers.sh, and ends with "N passed, M failed" over the server suites.
# A full run (no --server, --module or --portable) adds two suites: the portable
# build (scripts/build-portable.sh: glibc <= 2.28, checked) on redis-stack-7.4,
# and the Python client's tests (scripts/test-python.sh).
#
#   scripts/test.sh                                  everything
#   scripts/test.sh --server valkey-9.1              only that server's integration suite
#                                                    (repeatable; skips the unit tests)
#   scripts/test.sh --no-unit                        skip the unit tests
#   scripts/test.sh --no-portable                    skip the portable build's suite
#   scripts/test.sh --no-python                      skip the Python client's suite
#   scripts/test.sh --module PATH                    integration suites load the module PATH
#   scripts/test.sh --portable                       build the portable module and run the
#                                                    integration suites against it
#   scripts/test.sh -- --test smoke                  extra `cargo test` args (integration runs)
#   scripts/test.sh -- --test smoke -- name --nocapture   ...and args for the test binaries
#
# Env: SNAPSCAN_TEST_THREADS (default 2), SNAPSCAN_SUITE_TIMEOUT (seconds per
# suite, default 1200), SNAPSCAN_PORTABLE_SERVER (default redis-stack-7.4),
# SNAPSCAN_VENV (see scripts/servers.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

THREADS="${SNAPSCAN_TEST_THREADS:-2}"
SUITE_TIMEOUT="${SNAPSCAN_SUITE_TIMEOUT:-1200}"

servers=()
run_unit=1
module=""          # --module PATH
portable=0         # --portable: every suite runs the portable build
portable_extra=1   # a full run adds a suite with the portable build
python_extra=1     # ...and the Python client's suite
PORTABLE_SO="target/portable/libsnapscan.so"
PORTABLE_GLIBC=2.28
PORTABLE_SERVER="${SNAPSCAN_PORTABLE_SERVER:-redis-stack-7.4}"
cargo_args=()
test_args=()
while (($#)); do
    case "$1" in
        --server) [[ $# -ge 2 ]] || { echo "test.sh: --server needs a NAME" >&2; exit 2; }
                  servers+=("$2"); run_unit=0; shift 2 ;;
        --server=*) servers+=("${1#*=}"); run_unit=0; shift ;;
        --no-unit) run_unit=0; shift ;;
        --no-portable) portable_extra=0; shift ;;
        --no-python) python_extra=0; shift ;;
        --portable) portable=1; portable_extra=0; shift ;;
        --module) [[ $# -ge 2 ]] || { echo "test.sh: --module needs a PATH" >&2; exit 2; }
                  module="$(realpath -e "$2")" || { echo "test.sh: --module: no such file '$2'" >&2; exit 2; }
                  portable_extra=0; shift 2 ;;
        -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        --) shift
            while (($#)) && [[ $1 != -- ]]; do cargo_args+=("$1"); shift; done
            (($#)) && shift && test_args=("$@")
            break ;;
        *) echo "test.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
if ((${#servers[@]})); then portable_extra=0; python_extra=0; else mapfile -t servers < <(scripts/servers.sh --names); fi
if [[ -n $module ]] || ((portable)); then python_extra=0; fi
if [[ -n $module ]] && ((portable)); then echo "test.sh: --module and --portable exclude each other" >&2; exit 2; fi

# Integration test targets: all of tests/*.rs unless the caller picked some.
select_tests=(--test '*')
for a in "${cargo_args[@]}"; do
    case "$a" in --test|--test=*|--tests|--bench|--benches|--all-targets) select_tests=() ;; esac
done

banner() { printf '\n==================== %s ====================\n' "$*"; }

# The suite running now (a process group of its own, see run_group), killed on ^C.
current=""
trap '[[ -n $current ]] && kill -TERM -- "-$current" 2>/dev/null; echo "test.sh: interrupted" >&2; exit 130' INT TERM

# run_group CMD...: runs CMD under `timeout` (which puts it in a new process
# group); afterwards kills whatever is left in that group, e.g. servers
# orphaned by a crashed test binary.
run_group() {
    local rc=0
    timeout -k 30 "$SUITE_TIMEOUT" "$@" &
    current=$!
    wait "$current" || rc=$?
    kill -KILL -- "-$current" 2>/dev/null || true
    current=""
    if ((rc == 124)); then echo "test.sh: timed out after ${SUITE_TIMEOUT}s: $*" >&2; fi
    return "$rc"
}

# run_suite MODULE BASELINE CMD...: run_group CMD with SNAPSCAN_MODULE and
# SNAPSCAN_GLIBC_BASELINE set for it, unless "-" (then as the caller has them).
run_suite() {
    local so="$1" baseline="$2"
    shift 2
    [[ $so == - ]] || local -x SNAPSCAN_MODULE="$so"
    [[ $baseline == - ]] || local -x SNAPSCAN_GLIBC_BASELINE="$baseline"
    run_group "$@"
}

failed_setup=0
banner "build (release)"
if ! cargo build --release; then
    echo "test.sh: build failed" >&2
    failed_setup=1
fi

unit_result="skipped"
if ((run_unit && !failed_setup)); then
    banner "unit tests"
    if run_group cargo test --release --lib; then unit_result="passed"; else unit_result="FAILED"; fi
fi

if ((!failed_setup)); then
    banner "build integration tests"
    if ! cargo test --release --no-run "${select_tests[@]}" "${cargo_args[@]}"; then
        echo "test.sh: integration tests do not build" >&2
        failed_setup=1
    fi
fi

# The portable module (scripts/build-portable.sh builds it and checks its glibc symbols).
portable_ok=1
if ((!failed_setup && (portable || portable_extra))); then
    banner "build portable module (cargo zigbuild, glibc $PORTABLE_GLIBC)"
    start=$SECONDS
    if SNAPSCAN_GLIBC_BASELINE="$PORTABLE_GLIBC" scripts/build-portable.sh; then
        echo "test.sh: portable build took $((SECONDS - start))s"
    else
        echo "test.sh: portable build failed" >&2
        portable_ok=0
    fi
fi

# Suites: "label server module glibc-baseline" (module "-": the release build).
suites=()
for name in "${servers[@]}"; do
    if ((portable)); then
        suites+=("$name $name $PORTABLE_SO $PORTABLE_GLIBC")
    else
        suites+=("$name $name ${module:--} -")
    fi
done
((portable_extra)) && suites+=("portable@$PORTABLE_SERVER $PORTABLE_SERVER $PORTABLE_SO $PORTABLE_GLIBC")

passed=0
failed=0
summary=()
i=0
for suite in "${suites[@]}"; do
    read -r label name so baseline <<<"$suite"
    i=$((i + 1))
    banner "[$i/${#suites[@]}] $label"
    if ((failed_setup)); then
        summary+=("$(printf '%-12s FAILED (build failed)' "$label")"); failed=$((failed + 1)); continue
    fi
    if [[ $so == "$PORTABLE_SO" ]] && ((!portable_ok)); then
        summary+=("$(printf '%-12s FAILED (portable build failed)' "$label")"); failed=$((failed + 1)); continue
    fi
    if ! path=$(scripts/servers.sh "$name"); then
        summary+=("$(printf '%-12s FAILED (server not available)' "$label")"); failed=$((failed + 1)); continue
    fi
    echo "server: $path"
    if [[ $so != - ]]; then
        [[ $so == /* ]] || so="$PWD/$so"
        echo "module: $so"
    fi
    start=$SECONDS
    if SNAPSCAN_SERVER="$path" SNAPSCAN_SERVER_NAME="$name" \
        run_suite "$so" "$baseline" cargo test --release "${select_tests[@]}" "${cargo_args[@]}" \
            -- --test-threads="$THREADS" "${test_args[@]}"; then
        summary+=("$(printf '%-12s passed (%ds)' "$label" $((SECONDS - start)))"); passed=$((passed + 1))
    else
        summary+=("$(printf '%-12s FAILED (%ds)' "$label" $((SECONDS - start)))"); failed=$((failed + 1))
    fi
done

if ((python_extra)); then
    banner "python client (scripts/test-python.sh)"
    start=$SECONDS
    if ((failed_setup)); then
        summary+=("$(printf '%-12s FAILED (build failed)' python)"); failed=$((failed + 1))
    elif scripts/test-python.sh; then
        summary+=("$(printf '%-12s passed (%ds)' python $((SECONDS - start)))"); passed=$((passed + 1))
    else
        summary+=("$(printf '%-12s FAILED (%ds)' python $((SECONDS - start)))"); failed=$((failed + 1))
    fi
fi

banner "summary"
printf '%-12s %s\n' "unit tests" "$unit_result"
printf '%s\n' "${summary[@]}"
echo "$passed passed, $failed failed"
[[ $failed -eq 0 && $failed_setup -eq 0 && $unit_result != FAILED ]]
