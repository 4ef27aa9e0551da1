#!/usr/bin/env bash
# Run the whole test suite on CPU/gloo, pytest-benchmark benchmarks included.
# The benchmark table and the 15 slowest tests are printed at the end; the table is saved to
# results/pytest-benchmark.json.
# Extra arguments go to pytest (e.g. ./run_tests.sh -k store).
set -euo pipefail
cd "$(dirname "$0")"
source scripts/ensure_venv.sh
mkdir -p results
exec "$BENCH_PY" -m pytest --durations=15 --benchmark-json=results/pytest-benchmark.json --benchmark-columns=min,median,mean,stddev,rounds "$@"
