#!/usr/bin/env bash
# Run the whole test suite on CPU/gloo, pytest-benchmark benchmarks included.
# The benchmark table and the 15 slowest tests are printed at the end, then the wall time of the whole
# command (the suite is held to 7 minutes on 2 cores from a fresh clone, the venv's set-up included: issue 44); the
# table is saved to results/pytest-benchmark.json.
# Extra arguments go to pytest (e.g. ./run_tests.sh -k store).
set -euo pipefail
SECONDS=0
cd "$(dirname "$0")"
source scripts/ensure_venv.sh
mkdir -p results
status=0
"$BENCH_PY" -m pytest --durations=15 --benchmark-json=results/pytest-benchmark.json \
    --benchmark-columns=min,median,mean,stddev,rounds "$@" || status=$?
echo "[run_tests.sh] wall time $((SECONDS / 60))m$(printf '%02d' $((SECONDS % 60)))s (set-up included), exit status $status"
exit "$status"
