#!/usr/bin/env bash
# Run the whole test suite on CPU/gloo, pytest-benchmark benchmarks included.
# The benchmark table and the 15 slowest tests are printed at the end, then the wall time of the whole
# command (the suite is held to 7 minutes on 2 cores from a fresh clone, the venv's set-up included: issue 44); the
# table is saved to results/pytest-benchmark.json.
# With no arguments it runs as two pytest processes at once (tests/parts.py): the tests that start processes, in
# order, and beside them every test that starts none, paused while a module that times something runs; the second's
# output follows the first's. Extra arguments go to one pytest over everything (e.g. ./run_tests.sh -k store), as does
# BENCH_TESTS_ONE_PROCESS=1.
set -euo pipefail
SECONDS=0
cd "$(dirname "$0")"
source scripts/ensure_venv.sh
mkdir -p results
status=0
report=(--durations=15 --benchmark-json=results/pytest-benchmark.json --benchmark-columns=min,median,mean,stddev,rounds)
if [ $# -gt 0 ] || [ "${BENCH_TESTS_ONE_PROCESS:-0}" = 1 ]; then
    "$BENCH_PY" -m pytest "${report[@]}" "$@" || status=$?
else
    spawning=() in_process=()
    while IFS= read -r f; do spawning+=("$f"); done < <("$BENCH_PY" tests/parts.py spawning)
    while IFS= read -r f; do in_process+=("$f"); done < <("$BENCH_PY" tests/parts.py in-process)
    if [ ${#spawning[@]} -eq 0 ] || [ ${#in_process[@]} -eq 0 ]; then
        echo "[run_tests.sh] tests/parts.py gave an empty part; run with BENCH_TESTS_ONE_PROCESS=1" >&2
        exit 2
    fi
    lock=$(mktemp) log=$(mktemp)
    export BENCH_TEST_QUIET_LOCK="$lock"
    BENCH_TEST_PART=in-process nice -n 19 "$BENCH_PY" -m pytest -q --durations=5 "${in_process[@]}" >"$log" 2>&1 &
    beside=$!
    trap 'kill "$beside" 2>/dev/null || true; rm -f "$lock" "$log"' EXIT
    BENCH_TEST_PART=spawning "$BENCH_PY" -m pytest "${report[@]}" "${spawning[@]}" || status=$?
    wait "$beside" || status=$?
    echo "[run_tests.sh] the in-process part (${#in_process[@]} modules, run beside the above: tests/parts.py):"
    cat "$log"
fi
echo "[run_tests.sh] wall time $((SECONDS / 60))m$(printf '%02d' $((SECONDS % 60)))s (set-up included), exit status $status"
exit "$status"
