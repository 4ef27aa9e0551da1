#!/usr/bin/env bash
# Benchmark single / DataParallel / DDP training and render plots and a report.
#   ./run_bench.sh                        # default sweep for this machine (CPU: gloo, counts 1,2)
#   ./run_bench.sh --gpus 1,4,8           # every strategy x workload on 1, 4 and 8 GPUs
#   ./run_bench.sh report                 # re-render plots/ and results/report.{md,html} from the store
#   ./run_bench.sh compare --store A.sqlite --against B.sqlite
# All flags: ./run_bench.sh --help
# Paths (--store, --workloads FILE:FN, --voc-root, ...) and the default results/ and plots/ are relative
# to the folder you run it from, and a module named in --workloads is imported from there.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ "$PWD" != "$here" ] && { [ -e "$PWD/bench/__init__.py" ] || [ -e "$PWD/bench.py" ]; }; then
    echo "error: $PWD/bench would be imported instead of this suite's bench package ($here/bench);" \
         "run from another folder" >&2
    exit 2
fi
source "$here/scripts/ensure_venv.sh"
export BENCH_INVOKED_AS="$0"   # the path the user typed: the lines that say what to run next print it (--resume)
exec "$BENCH_PY" -m bench "$@"
