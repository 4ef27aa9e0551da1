"""Compare a candidate sweep against a baseline, configuration by configuration, like pyperf.

    python -m bench.compare --store base.sqlite --against new.sqlite [--threshold 0.05]
    python -m bench.compare --store results/bench.sqlite            # the two latest sweeps of one store

For every configuration key with an ok 'bench' result on both sides: throughput ratio
(candidate / baseline, from the median of the raw step times), Mann-Whitney p-value on the raw step
times (slowest rank per step, repeats pooled), and "1.84x faster" / "1.10x slower" / "no significant
difference". Exit status 1 when a configuration is slower by more than the threshold (0.05: the
candidate's step takes 5% longer) and the difference is significant (p < 0.05), or when a
configuration that was ok in the baseline failed in the candidate; else 0.
"""
from __future__ import annotations

import argparse
import math
from typing import Optional

from bench import report, stats, store

ALPHA = 0.05  # significance level of the Mann-Whitney test


def _sweeps(conn_a, conn_b, sweep_a: Optional[int], sweep_b: Optional[int]) -> tuple:
    if conn_b is not None:
        return report.pick_sweep(conn_a, sweep_a), report.pick_sweep(conn_b, sweep_b)
    ids = [r[0] for r in conn_a.execute("SELECT sweep_id FROM sweeps ORDER BY sweep_id")]
    if sweep_b is None:
        sweep_b = ids[-1] if ids else None
    if sweep_a is None:
        older = [i for i in ids if sweep_b is not None and i < sweep_b]
        if not older:
            raise store.StoreError(f"comparing within one store needs two sweeps; it holds {len(ids)} "
                                   f"(name them with --sweep-a/--sweep-b, or give a candidate store with --against)")
        sweep_a = older[-1]
    return report.pick_sweep(conn_a, sweep_a), report.pick_sweep(conn_a, sweep_b)


def _configs(conn, sweep_id: int) -> tuple:
    """(ok configurations by key, {key: reason} of bench configurations that failed or were interrupted)."""
    sweep = report.load(conn, sweep_id)
    broken = {r["config_key"]: f"{r['status']}: {r['reason']}" for r in sweep.problems
              if r["mode"] == "bench" and r["status"] in ("failed", "interrupted")}
    return {c.key: c for cs in sweep.bench.values() for c in cs}, broken


def verdict(ratio: float, p: float) -> str:
    """pyperf-style wording for a throughput ratio candidate/baseline and its p-value."""
    if math.isnan(p) or p >= ALPHA or ratio == 1.0:
        return "no significant difference"
    return f"{ratio:.2f}x faster" if ratio > 1 else f"{1 / ratio:.2f}x slower"


def compare(store_a: str, store_b: Optional[str], sweep_a: Optional[int], sweep_b: Optional[int],
            threshold: float) -> tuple:
    """Text of the comparison and the exit status (1: a significant regression beyond threshold).
    store_b None: two sweeps of store_a (default: the two latest). Raises store.StoreError."""
    conn_a = store.connect(store_a, readonly=True)
    conn_b = store.connect(store_b, readonly=True) if store_b else None
    try:
        sid_a, sid_b = _sweeps(conn_a, conn_b, sweep_a, sweep_b)
        (base, _), (cand, cand_broken) = _configs(conn_a, sid_a), _configs(conn_b or conn_a, sid_b)
    finally:
        conn_a.close()
        if conn_b is not None:
            conn_b.close()
    lines = [f"baseline: {store_a} sweep {sid_a}; candidate: {store_b or store_a} sweep {sid_b}; "
             f"regression threshold {threshold:.0%} slower at p < {ALPHA}", ""]
    regressed = []
    for key in sorted(set(base) & set(cand)):
        a, b = base[key], cand[key]
        ratio = b.samples_per_s / a.samples_per_s
        p = stats.significance(a.step_ms, b.step_ms)
        words = verdict(ratio, p)
        if p < ALPHA and 1 / ratio - 1 > threshold:
            regressed.append(key)
            words += " (REGRESSION)"
        lines.append(f"{key}: {a.samples_per_s:.1f} -> {b.samples_per_s:.1f} samples/s, median step "
                     f"{a.summary.median_ms:.2f} -> {b.summary.median_ms:.2f} ms, p={p:.3g}: {words}")
    for key in sorted(set(base) - set(cand)):
        if key in cand_broken:  # ran fine before, fails now: the worst regression there is
            regressed.append(key)
            lines.append(f"{key}: ok in the baseline, {cand_broken[key]} in the candidate (REGRESSION)")
        else:
            lines.append(f"{key}: only in the baseline (no ok result in the candidate)")
    for key in sorted(set(cand) - set(base)):
        lines.append(f"{key}: only in the candidate")
    if not set(base) & set(cand):
        lines.append("no configuration has an ok result on both sides")
    lines += ["", f"{len(regressed)} configuration(s) regressed by more than {threshold:.0%}" if regressed
              else "no significant regression beyond the threshold"]
    return "\n".join(lines) + "\n", 1 if regressed else 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", default="results/bench.sqlite", help="baseline store")
    parser.add_argument("--against", default=None, help="candidate store (default: compare two sweeps of --store)")
    parser.add_argument("--sweep-a", type=int, default=None, help="baseline sweep id (default: latest, or the one before --sweep-b)")
    parser.add_argument("--sweep-b", type=int, default=None, help="candidate sweep id (default: latest)")
    parser.add_argument("--threshold", type=float, default=0.05, help="fail when slower by more than this fraction (0.05 = 5%%)")


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.splitlines()[0])
    add_arguments(parser)
    ns = parser.parse_args(argv)
    try:
        text, code = compare(ns.store, ns.against, ns.sweep_a, ns.sweep_b, ns.threshold)
    except store.StoreError as e:
        print(f"error: {e}")
        return 2
    print(text, end="")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
