#!/usr/bin/env bash
# The project's test command. Builds the module once (release), runs the unit
# tests, then the integration tests (tests/*.rs) once per server listed by
# scripts/servers.sh, and ends with "N passed, M failed" over the server suites.
#
#   scripts/test.sh                                  everything
#   scripts/test.sh --server valkey-9.1              only that server's integration suite
#                                                    (repeatable; skips the unit tests)
#   scripts/test.sh --no-unit                        skip the unit tests
#   scripts/test.sh -- --test smoke                  extra `cargo test` args (integration runs)
#   scripts/test.sh -- --test smoke -- name --nocapture   ...and args for the test binaries
#
# Env: SNAPSCAN_TEST_THREADS (default 2), SNAPSCAN_SUITE_TIMEOUT (seconds per
# suite, default 1200), SNAPSCAN_VENV (see scripts/servers.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

THREADS="${SNAPSCAN_TEST_THREADS:-2}"
SUITE_TIMEOUT="${SNAPSCAN_SUITE_TIMEOUT:-1200}"

servers=()
run_unit=1
cargo_args=()
test_args=()
while (($#)); do
    case "$1" in
        --server) [[ $# -ge 2 ]] || { echo "test.sh: --server needs a NAME" >&2; exit 2; }
                  servers+=("$2"); run_unit=0; shift 2 ;;
        --server=*) servers+=("${1#*=}"); run_unit=0; shift ;;
        --no-unit) run_unit=0; shift ;;
        -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        --) shift
            while (($#)) && [[ $1 != -- ]]; do cargo_args+=("$1"); shift; done
            (($#)) && shift && test_args=("$@")
            break ;;
        *) echo "test.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
((${#servers[@]})) || mapfile -t servers < <(scripts/servers.sh --names)

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

passed=0
failed=0
summary=()
i=0
for name in "${servers[@]}"; do
    i=$((i + 1))
    banner "[$i/${#servers[@]}] $name"
    if ((failed_setup)); then
        summary+=("$(printf '%-12s FAILED (build failed)' "$name")"); failed=$((failed + 1)); continue
    fi
    if ! path=$(scripts/servers.sh "$name"); then
        summary+=("$(printf '%-12s FAILED (server not available)' "$name")"); failed=$((failed + 1)); continue
    fi
    echo "server: $path"
    start=$SECONDS
    if SNAPSCAN_SERVER="$path" SNAPSCAN_SERVER_NAME="$name" \
        run_group cargo test --release "${select_tests[@]}" "${cargo_args[@]}" \
            -- --test-threads="$THREADS" "${test_args[@]}"; then
        summary+=("$(printf '%-12s passed (%ds)' "$name" $((SECONDS - start)))"); passed=$((passed + 1))
    else
        summary+=("$(printf '%-12s FAILED (%ds)' "$name" $((SECONDS - start)))"); failed=$((failed + 1))
    fi
done

banner "summary"
printf '%-12s %s\n' "unit tests" "$unit_result"
printf '%s\n' "${summary[@]}"
echo "$passed passed, $failed failed"
[[ $failed -eq 0 && $failed_setup -eq 0 && $unit_result != FAILED ]]
