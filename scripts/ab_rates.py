"""Measure `./run_bench.sh ab`'s false-alarm and catch rates on this machine (docs/comparing.md, issue 44).

    .venv/bin/python scripts/ab_rates.py --out /tmp/abrates --aa 4 --slow 4 [--percent 10] [--pairs 16] [--fresh]

Runs `ab` on the configuration of tests/test_ab.py (the synthetic MLP 4 x 1024, batch 64, single process), --aa times
with identical code (B differs only by BENCH_AA=1) and --slow times with every step of B made --percent slower
(BENCH_FAULT=slow@0:P), each with --pairs pairs into a store of its own, one after another. A run's verdict is ab's own
(exit status 1: a regression called). Each run is also judged on each half of its pairs alone (compare on a copy of
its store without the other half), so 16-pair runs give the 8-pair rates too. --fresh starts every process as a new
interpreter (ab's way before it forked its processes from the fork server, as sweeps do). Prints one line per run
and the rates. Nothing here is part of the test command: it takes minutes.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.analysis import compare  # noqa: E402

AB = ["ab", "--device", "cpu", "--workloads", "synthetic", "--synthetic-width", "1024", "--synthetic-depth", "4",
      "--per-device-batch", "64", "--steps", "12", "--warmup", "2", "--strategies", "single", "--no-report"]


def run_ab(store: str, pairs: int, env: str, fresh: bool) -> int:
    cmd = [sys.executable, "-m", "bench", *AB, "--pairs", str(pairs), "--b-env", env, "--store", store]
    cmd += ["--fresh-interpreters"] if fresh else []
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode not in (0, 1):
        raise SystemExit(f"ab failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.returncode


def half_verdict(store: str, keep: range) -> tuple:
    """(called, ratio line) of compare on a copy of the store holding only the pairs whose repeat is in keep."""
    copy = store + f".half{keep.start}.sqlite"
    shutil.copyfile(store, copy)
    conn = sqlite3.connect(copy)
    conn.execute(f"DELETE FROM results WHERE repeat NOT IN ({','.join(map(str, keep))})")
    conn.commit()
    conn.close()
    text, code = compare.compare(copy, None, 1, 2)
    line = next((ln for ln in text.splitlines() if ln.startswith("bench/")), "")
    os.remove(copy)
    return code == 1, line.split(": ", 1)[-1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--aa", type=int, default=4)
    ap.add_argument("--slow", type=int, default=4)
    ap.add_argument("--percent", type=int, default=10)
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--fresh", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    tally = {"aa": [0, 0, 0, 0], "slow": [0, 0, 0, 0]}   # [whole runs called, whole runs, halves called, halves]
    half = a.pairs // 2
    for kind, n, env in (("aa", a.aa, "BENCH_AA=1"), ("slow", a.slow, f"BENCH_FAULT=slow@0:{a.percent}")):
        for k in range(n):
            store = os.path.join(a.out, f"{kind}{k}.sqlite")
            if os.path.exists(store):
                os.remove(store)
            whole = run_ab(store, a.pairs, env, a.fresh) == 1
            halves = [half_verdict(store, range(0, half)), half_verdict(store, range(half, a.pairs))]
            t = tally[kind]
            t[0] += whole
            t[1] += 1
            t[2] += sum(c for c, _ in halves)
            t[3] += 2
            print(f"{kind} run {k}: {a.pairs} pairs {'REGRESSION' if whole else 'none'}; halves of {half}: "
                  + " | ".join(f"{'REGRESSION' if c else 'none'} ({line})" for c, line in halves), flush=True)
    start = "fresh interpreters" if a.fresh else "forked from the fork server"
    print(f"processes {start}; A/A: {tally['aa'][0]} of {tally['aa'][1]} runs of {a.pairs} pairs called a regression, "
          f"{tally['aa'][2]} of {tally['aa'][3]} of {half}; {a.percent}% slower: caught in {tally['slow'][0]} of "
          f"{tally['slow'][1]} runs of {a.pairs} pairs, {tally['slow'][2]} of {tally['slow'][3]} of {half}")


if __name__ == "__main__":
    main()
