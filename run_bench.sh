#!/usr/bin/env bash
# Benchmark single / DataParallel / DDP training and render plots and a report.
#   ./run_bench.sh                        # default sweep for this machine (CPU: gloo, counts 1,2)
#   ./run_bench.sh --gpus 1,4,8           # every strategy x workload on 1, 4 and 8 GPUs
#   ./run_bench.sh report                 # re-render plots/ and results/report.{md,html} from the store
#   ./run_bench.sh compare --store A.sqlite --against B.sqlite
# All flags: ./run_bench.sh --help
set -euo pipefail
cd "$(dirname "$0")"
source scripts/ensure_venv.sh
exec "$BENCH_PY" -m bench "$@"
