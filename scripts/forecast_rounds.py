"""Measure the forecast's error on counts it never saw, in the held-out form (issue 30), on this machine.

    .venv/bin/python scripts/forecast_rounds.py --rounds 5 -- --workloads synthetic
    .venv/bin/python scripts/forecast_rounds.py --rounds 5 --slurm -- --workloads synthetic   # inside salloc -N2

Each round, into a store of its own: sweep 1 trains single and DDP at 1 device and measures the machine at 2
(`--comm-counts 2`: the collectives and their interference, no training there); sweep 2 trains DDP at 2; then
`forecast --sweep 1 --against 2 --to 2` judges sweep 1's forecast by sweep 2's measurement (stored with basis
"later sweep"). With --slurm the 2 are 2 nodes of 1 process (`--gpus-per-node 1`; run it inside a 2-node
allocation). Flags after `--` go to both sweeps. It prints each round's line (the forecast's central value, its printed
range, the measurement) and, over the rounds, what the forecast is judged on (issue 43): the mean and worst |error| of
the central value (targets: mean <= 10%, worst <= 15%) and how many measurements fell inside the printed range
(target: at least 4 of 5). Nothing here is part of the test command: a round takes one to several minutes.
With --interleave-with CHECKOUT each round runs in that checkout too, right after this one's: two versions of the
forecast judged on the same minutes of the machine (sets an hour apart differed more than two loads did).

    .venv/bin/python scripts/forecast_rounds.py --rounds 5 -- --workloads synthetic
    .venv/bin/python scripts/forecast_rounds.py --rounds 5 -- --workloads deeplabv3 --image-size 64 --per-device-batch 2
    git worktree add /tmp/before HEAD~1 && .venv/bin/python scripts/forecast_rounds.py --rounds 5 \
        --interleave-with /tmp/before -- --workloads synthetic
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
LINE = re.compile(r"x2: forecast ([\d.]+) ms from x1 \((?:range ([\d.]+)-([\d.]+) ms|no range[^)]*)\), measured "
                  r"([\d.]+) ms: error ([+-][\d.]+)%(?:, (inside|outside) the range)?")   # no range: neither
TARGETS = {"mean": 10.0, "worst": 15.0, "inside": 0.8}    # % of the measured step; share of rounds inside the range


def bench(args: list, root: str = ROOT) -> str:
    """`python -m bench ARGS` with ROOT's package (its folder first on the path: another checkout runs its own code)."""
    p = subprocess.run([sys.executable, "-m", "bench", *args], cwd=root, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): bench {' '.join(args)}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.stdout


def one_round(store: str, flags: list, slurm: bool, root: str = ROOT) -> tuple:
    where = ["--gpus-per-node", "1"] if slurm else []
    bench(["--strategies", "single,ddp", "--gpus", "1", "--comm-counts", "2", "--store", store, "--no-report",
           "--device", "cpu", *where, *flags], root)
    bench(["--strategies", "ddp", "--gpus", "2", "--no-comm-bench", "--store", store, "--no-report", "--device", "cpu",
           *where, *flags], root)
    return parse(bench(["forecast", "--store", store, "--sweep", "1", "--against", "2", "--to", "2"], root))


def parse(out: str) -> tuple:
    """(forecast, low, high, measured, error %, inside) of the forecast's held-out line; a round with no range (nan, nan)
    is not inside one."""
    m = LINE.search(out)
    if not m:
        raise SystemExit(f"no held-out line in the forecast's output:\n{out}")
    low, high = (float(v) if v else float("nan") for v in (m.group(2), m.group(3)))
    return float(m.group(1)), low, high, float(m.group(4)), float(m.group(5)), m.group(6) == "inside"


def summary(rounds: list) -> str:
    """Over the rounds [(forecast, low, high, measured, error %, inside)]: the central value's mean and worst |error|,
    its mean signed error, and how many measurements fell inside the printed range, against the targets."""
    errors = [r[4] for r in rounds]
    mean, worst = statistics.mean(abs(e) for e in errors), max(abs(e) for e in errors)
    inside = sum(r[5] for r in rounds)
    met = (mean <= TARGETS["mean"] and worst <= TARGETS["worst"] and inside >= TARGETS["inside"] * len(rounds))
    return (f"{len(rounds)} rounds: mean |error| {mean:.1f}%, worst {worst:.1f}%, mean error {statistics.mean(errors):+.1f}%; "
            f"{inside} of {len(rounds)} measured inside the printed range (targets: mean <= {TARGETS['mean']:g}%, worst <= "
            f"{TARGETS['worst']:g}%, at least {TARGETS['inside']:.0%} inside: {'met' if met else 'not met'})")


def main(argv: list) -> int:
    if "--" in argv:
        argv, flags = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    else:
        flags = []
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--slurm", action="store_true", help="x2 as 2 nodes of 1 process (inside a 2-node allocation)")
    p.add_argument("--folder", default=None, help="where the rounds' stores go (default: a new temporary folder)")
    p.add_argument("--interleave-with", default=None, metavar="CHECKOUT",
                   help="another checkout of the suite (git worktree add ../old COMMIT): each round runs there too, "
                        "right after this one's, and each side is summed up apart (a change judged against the "
                        "machine of the same minutes, not of another hour)")
    ns = p.parse_args(argv)
    if ns.interleave_with and not os.path.isfile(os.path.join(ns.interleave_with, "bench", "__main__.py")):
        p.error(f"--interleave-with {ns.interleave_with}: expected a checkout of this suite (with bench/__main__.py)")
    folder = ns.folder or tempfile.mkdtemp(prefix="forecast-rounds-")
    sides = [("this checkout", ROOT)] + ([(ns.interleave_with, os.path.abspath(ns.interleave_with))]
                                        if ns.interleave_with else [])
    rounds: dict = {name: [] for name, _ in sides}
    for k in range(ns.rounds):
        for i, (name, root) in enumerate(sides):
            store = os.path.join(folder, f"round{k + 1}{'-' + str(i) if i else ''}.sqlite")
            r = one_round(store, flags, ns.slurm, root)
            rounds[name].append(r)
            forecast_ms, low, high, measured_ms, err, inside = r
            who = f" [{name}]" if len(sides) > 1 else ""
            print(f"round {k + 1}{who}: forecast {forecast_ms:.2f} ms (range {low:.2f}-{high:.2f}), measured "
                  f"{measured_ms:.2f} ms, error {err:+.1f}%, {'inside' if inside else 'outside'} the range ({store})",
                  flush=True)
    for name, got in rounds.items():
        if got:
            print((f"{name}: " if len(sides) > 1 else "") + summary(got))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
