"""Measure the forecast's error on counts it never saw, in the held-out form (issue 30), on this machine.

    .venv/bin/python scripts/forecast_rounds.py --rounds 5 -- --workloads synthetic
    .venv/bin/python scripts/forecast_rounds.py --rounds 5 --slurm -- --workloads synthetic   # inside salloc -N2

Each round, into a store of its own: sweep 1 trains single and DDP at 1 device and measures the machine at 2
(`--comm-counts 2`: the collectives and their interference, no training there); sweep 2 trains DDP at 2; then
`forecast --sweep 1 --against 2 --to 2` judges sweep 1's forecast by sweep 2's measurement (stored with basis
"later sweep"). With --slurm the 2 are 2 nodes of 1 process (`--gpus-per-node 1`; run it inside a 2-node
allocation). Flags after `--` go to both sweeps. It prints each round's line and the mean and worst |error|.
Nothing here is part of the test command: a round takes one to several minutes.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINE = re.compile(r"x2: forecast ([\d.]+) ms from x1, measured ([\d.]+) ms: error ([+-][\d.]+)%")


def bench(args: list) -> str:
    p = subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): bench {' '.join(args)}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.stdout


def one_round(store: str, flags: list, slurm: bool) -> tuple:
    where = ["--gpus-per-node", "1"] if slurm else []
    bench(["--strategies", "single,ddp", "--gpus", "1", "--comm-counts", "2", "--store", store, "--no-report",
           "--device", "cpu", *where, *flags])
    bench(["--strategies", "ddp", "--gpus", "2", "--no-comm-bench", "--store", store, "--no-report", "--device", "cpu",
           *where, *flags])
    out = bench(["forecast", "--store", store, "--sweep", "1", "--against", "2", "--to", "2"])
    m = LINE.search(out)
    if not m:
        raise SystemExit(f"no held-out line in the forecast's output:\n{out}")
    return float(m.group(1)), float(m.group(2)), float(m.group(3))


def main(argv: list) -> int:
    if "--" in argv:
        argv, flags = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    else:
        flags = []
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--slurm", action="store_true", help="x2 as 2 nodes of 1 process (inside a 2-node allocation)")
    p.add_argument("--folder", default=None, help="where the rounds' stores go (default: a new temporary folder)")
    ns = p.parse_args(argv)
    folder = ns.folder or tempfile.mkdtemp(prefix="forecast-rounds-")
    errors = []
    for k in range(ns.rounds):
        store = os.path.join(folder, f"round{k + 1}.sqlite")
        forecast_ms, measured_ms, err = one_round(store, flags, ns.slurm)
        errors.append(err)
        print(f"round {k + 1}: forecast {forecast_ms:.2f} ms, measured {measured_ms:.2f} ms, error {err:+.1f}% ({store})",
              flush=True)
    if errors:
        print(f"{len(errors)} rounds: mean |error| {statistics.mean(abs(e) for e in errors):.1f}%, worst "
              f"{max(abs(e) for e in errors):.1f}%, mean error {statistics.mean(errors):+.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
