#!/usr/bin/env bash
# Long differential-fuzzing campaigns (tests/fuzz): the same fuzzer CI runs
# with a few hundred steps per mode, here for as many seeds, steps and
# minutes as asked, on the servers and modes asked. Prints one line of
# totals per server and mode (steps, checks, failures) and appends them to
# the report file; a failure's shrunk replay is printed and written to
# target/fuzz-failures/.
#
#   scripts/fuzz.sh                                   every server, every mode, 10 minutes each
#   scripts/fuzz.sh --server valkey-9.1 --mode cluster-3 --minutes 30
#   scripts/fuzz.sh --seeds 100..200 --steps 20000    seeds and steps per seed
#   scripts/fuzz.sh --jobs 2                          servers fuzzed in parallel
#   scripts/fuzz.sh --total-steps 1000000             a mode stops once it made that many steps
#   scripts/fuzz.sh --report docs/fuzz.txt            where the totals go (default target/fuzz-report.txt)
#
# Modes: standalone, cluster-1, cluster-3, replica, serve-native.
# Seeds default to 1000.. (a different range than CI's seed 1); a run
# stops (after its final checks) when its minutes are spent.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

servers=()
modes=()
seeds="1000..100000"
steps=20000
minutes=10
total_steps=""
jobs=1
report="target/fuzz-report.txt"
while (($#)); do
    case "$1" in
        --server) servers+=("$2"); shift 2 ;;
        --mode) modes+=("$2"); shift 2 ;;
        --seeds) seeds="$2"; shift 2 ;;
        --steps) steps="$2"; shift 2 ;;
        --minutes) minutes="$2"; shift 2 ;;
        --total-steps) total_steps="$2"; shift 2 ;;
        --jobs) jobs="$2"; shift 2 ;;
        --report) report="$2"; shift 2 ;;
        -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
((${#servers[@]})) || mapfile -t servers < <(scripts/servers.sh --names)
((${#modes[@]})) || modes=(standalone cluster-1 cluster-3 replica serve-native)
mkdir -p "$(dirname "$report")"

cargo build --release
cargo test --release --test fuzz --no-run

# One server: every mode, one after the other (one test each).
fuzz_server() {
    local name="$1" path rc=0 mode_rc
    path=$(scripts/servers.sh "$name")
    for mode in "${modes[@]}"; do
        mode_rc=0
        SNAPSCAN_SERVER="$path" SNAPSCAN_SERVER_NAME="$name" \
        SNAPSCAN_FUZZ_MODES="$mode" SNAPSCAN_FUZZ_SEEDS="$seeds" SNAPSCAN_FUZZ_STEPS="$steps" \
        SNAPSCAN_FUZZ_SECONDS=$((minutes * 60)) SNAPSCAN_FUZZ_TOTAL_STEPS="$total_steps" \
        SNAPSCAN_FUZZ_REPORT="$report" \
            timeout -k 30 $((minutes * 60 + 600)) \
            cargo test --release --test fuzz -- --test-threads=1 --nocapture fuzz_ \
            > "target/fuzz-$name-$mode.log" 2>&1 || mode_rc=1
        grep -E '^fuzz: |fuzz: server=' "target/fuzz-$name-$mode.log" | sed 's/.*fuzz: /fuzz: /' || true
        if ((mode_rc)); then
            rc=1
            echo "fuzz.sh: $name $mode FAILED (target/fuzz-$name-$mode.log)"
            grep -A40 'fuzz failure' "target/fuzz-$name-$mode.log" | head -60 || true
        fi
    done
    return "$rc"
}

failed=0
running=0
for name in "${servers[@]}"; do
    fuzz_server "$name" &
    running=$((running + 1))
    if ((running >= jobs)); then
        wait -n || failed=1
        running=$((running - 1))
    fi
done
while ((running > 0)); do
    wait -n || failed=1
    running=$((running - 1))
done
echo "fuzz.sh: totals appended to $report"
exit "$failed"
