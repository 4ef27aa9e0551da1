"""Measure compare's false-alarm and detection rates on real sweeps of this machine (issue 18).

    .venv/bin/python scripts/compare_rates.py --store /tmp/rates.sqlite --aa 10 --slow 4 -- --workloads synthetic

Runs --aa sweeps of identical code (the default CPU sweep unless flags after `--` narrow it), then --slow sweeps
with every step of rank 0 (--ranks) made --percent slower (BENCH_FAULT=slow@0:P, the suite's fault injection), all into one
store, one after another as a user's CI would. Then, at compare's default settings:
- A/A: each sweep k against sweep k-1, with the sweeps before k-1 as the evidence of each configuration's noise
  (from k = 4), and again each pair on its own processes alone (`--history 0`); a compare that calls any
  regression is a false alarm (and each configuration called is counted too);
- detection: each slowed sweep against the last identical one, the identical ones before it as evidence; each
  configuration called a regression is a detection.
It prints one line per compare and the rates. Nothing here is part of the test command: it takes minutes per sweep.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.analysis import compare  # noqa: E402


def sweep(store: str, flags: list, env: dict) -> None:
    cmd = [sys.executable, "-m", "bench", "--device", "cpu", "--no-report", "--store", store, *flags]
    p = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"sweep failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")


def calls(store: str, a: int, b: int, **kw) -> tuple:
    text, code = compare.compare(store, None, a, b, **kw)
    lines = [line for line in text.splitlines() if line.startswith("bench/")]
    called = [line.split(":")[0] for line in lines if line.endswith("(REGRESSION)")]
    undecided = sum("cannot decide" in line for line in lines)
    return code, called, len(lines), undecided, text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--aa", type=int, default=10, help="sweeps of identical code")
    ap.add_argument("--slow", type=int, default=4, help="sweeps with rank 0 slowed by --percent")
    ap.add_argument("--percent", type=int, default=30)
    ap.add_argument("--ranks", default="0", help="ranks slowed, e.g. 0,1 (every rank of DDP x2: the whole step slower)")
    ap.add_argument("--analyse-only", action="store_true", help="the sweeps are in --store already")
    ap.add_argument("flags", nargs="*", help="sweep flags after --")
    ns = ap.parse_args()
    if not ns.analyse_only:
        for i in range(ns.aa):
            sweep(ns.store, ns.flags, {})
            print(f"A sweep {i + 1}/{ns.aa} done", flush=True)
        for i in range(ns.slow):
            fault = ",".join(f"slow@{r}:{ns.percent}" for r in ns.ranks.split(","))
            sweep(ns.store, ns.flags, {"BENCH_FAULT": fault})
            print(f"slowed sweep {i + 1}/{ns.slow} done", flush=True)
    aa_compares = aa_alarms = aa_configs = aa_called = aa_undecided = 0
    for k in range(4, ns.aa + 1):  # sweep k vs k-1 with at least 2 earlier sweeps as evidence
        code, called, n, undecided, _ = calls(ns.store, k - 1, k)
        aa_compares += 1
        aa_alarms += code
        aa_configs += n - undecided
        aa_undecided += undecided
        aa_called += len(called)
        print(f"A/A sweep {k} vs {k - 1}: exit {code}, {len(called)} of {n} called{', ' + str(undecided) + ' undecided' if undecided else ''} {called}")
    welch = welch_alarms = welch_configs = welch_called = 0
    for k in range(2, ns.aa + 1):  # sweep k vs k-1 on their own processes alone (--history 0: Welch + drift floor)
        code, called, n, undecided, _ = calls(ns.store, k - 1, k, history=0)
        welch += 1
        welch_alarms += code
        welch_configs += n - undecided
        welch_called += len(called)
        print(f"A/A sweep {k} vs {k - 1}, --history 0: exit {code}, {len(called)} of {n} called {called}")
    det_configs = det_caught = 0
    for j in range(ns.aa + 1, ns.aa + ns.slow + 1):
        code, called, n, undecided, text = calls(ns.store, ns.aa, j)
        det_configs += n - undecided
        det_caught += len(called)
        missed = [line for line in text.splitlines() if line.startswith("bench/") and not line.endswith("(REGRESSION)")]
        print(f"{ns.percent}% slower sweep {j} vs {ns.aa}: {len(called)} of {n} caught; missed: {missed}")
    print(f"\nA/A: {aa_alarms} of {aa_compares} compares called a regression; {aa_called} of {aa_configs} decided "
          f"configuration pairs called ({aa_undecided} undecided)")
    print(f"A/A without history: {welch_alarms} of {welch} compares called a regression; {welch_called} of "
          f"{welch_configs} decided configuration pairs called")
    print(f"{ns.percent}% slowdown: {det_caught} of {det_configs} decided configuration pairs caught")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
