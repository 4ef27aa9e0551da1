"""Compare a candidate sweep against a baseline, configuration by configuration, with processes as the
independent samples (pyperf's rule: steps of one process share its luck).

    ./run_bench.sh compare --store base.sqlite --against new.sqlite [--threshold 0.05] [--noise 0.25]
    ./run_bench.sh compare --store results/bench.sqlite          # the two latest sweeps of one store

Per configuration key with an ok benchmark on both sides, each process (repeat) contributes one
throughput (samples over its timed window). With two or more processes per side: the ratio of
geometric means, its 95% confidence interval, and a one-sided Welch t-test on log throughput that the
candidate is slower; the p-values of all configurations are Holm-corrected (family-wise alpha 0.05).
Sweeps run one after another also drift apart as the shared machine's speed changes, which their
processes cannot show: a regression needs significance and a slowdown beyond --drift (15%). Sweeps
written by `./run_bench.sh ab` interleave A and B process by process: compare pairs them (paired
t-test on log ratios, the drift cancels) and a slowdown beyond --threshold (5%) is enough. With one
process on a side nothing separates a change from process-to-process noise: compare says so, and calls
a regression only beyond --noise (25%). A configuration ok in the baseline and failed in the candidate
is a regression.
Exit status 1 on a regression, 0 otherwise, 2 on bad input.
"""
from __future__ import annotations

import argparse
import math
from typing import Optional

from bench.analysis import stats
from bench.store import results, store

ALPHA = 0.05               # family-wise significance level over the configurations compared
PROCESS_CV = 0.07          # typical between-process spread (sd / mean) on shared machines, for the advice
DEFAULT_NOISE = stats.PROCESS_NOISE  # without repeats: the bound a slowdown must exceed
DEFAULT_DRIFT = 0.15       # sweeps run one after another: their means differed by 6% sd here (9% for a pair)


def _sweeps(conn_a, conn_b, sweep_a: Optional[int], sweep_b: Optional[int]) -> tuple:
    if conn_b is not None:
        return results.pick_sweep(conn_a, sweep_a), results.pick_sweep(conn_b, sweep_b)
    ids = [r[0] for r in conn_a.execute("SELECT sweep_id FROM sweeps ORDER BY sweep_id")]
    if sweep_b is None:
        sweep_b = ids[-1] if ids else None
    if sweep_a is None:
        older = [i for i in ids if sweep_b is not None and i < sweep_b]
        if not older:
            raise store.StoreError(f"comparing within one store needs two sweeps; it holds {len(ids)} "
                                   f"(name them with --sweep-a/--sweep-b, or give a candidate store with --against)")
        sweep_a = older[-1]
    return results.pick_sweep(conn_a, sweep_a), results.pick_sweep(conn_a, sweep_b)


def _configs(conn, sweep_id: int) -> tuple:
    """(ok configurations by key, {key: reason} of benchmark configurations that failed or were interrupted,
    the sweep row)."""
    sweep = results.load(conn, sweep_id)
    broken = {r["config_key"]: f"{r['status']}: {r['reason']}" for r in sweep.problems
              if r["mode"] == "bench" and r["status"] in ("failed", "interrupted")}
    return {c.key: c for cs in sweep.bench.values() for c in cs}, broken, sweep.sweep


def _matched(base: dict, cand: dict, interleaved: bool) -> list:
    """[(baseline key, candidate key)]: the same key on both sides; and for interleaved sweeps whose variant B
    ran other settings (`ab --b-args`, tune's confirmation), the rest matched in order, one to one, where
    workload, strategy and count agree."""
    pairs = [(k, k) for k in sorted(set(base) & set(cand))]
    left_a, left_b = sorted(set(base) - set(cand)), sorted(set(cand) - set(base))
    shape = lambda c: (c.workload, c.strategy, c.device_type, c.device_count)  # noqa: E731
    if interleaved and left_a and len(left_a) == len(left_b) and all(
            shape(base[x]) == shape(cand[y]) for x, y in zip(left_a, left_b)):
        pairs += list(zip(left_a, left_b))
    return pairs


def resolvable(n: int, cv: float = PROCESS_CV) -> float:
    """The slowdown n processes per side resolve at 80% power (one-sided 5%), for a process spread cv."""
    return (1.645 + 0.842) * cv * math.sqrt(2.0 / n)


def verdict(pc: stats.ProcessComparison, noise: float, slower: bool = False, different: bool = False) -> str:
    """pyperf-style wording for a comparison of per-process throughputs. slower / different: the one-sided
    (candidate slower) / two-sided test survived the correction over configurations."""
    change = f"{pc.ratio:.2f}x faster" if pc.ratio > 1 else f"{1 / pc.ratio:.2f}x slower"
    if not pc.decidable:
        side = "one process per side" if pc.n_a == pc.n_b == 1 else f"{pc.n_a} vs {pc.n_b} process(es)"
        within = abs(math.log(pc.ratio)) <= math.log1p(noise)
        return (f"{change if pc.ratio != 1 else 'no change'}, {'within' if within else 'beyond'} the noise bound of "
                f"{noise:.0%} between fresh processes ({side}: cannot separate a change from process noise; "
                f"--repeats 5 on both sides resolves about {resolvable(5):.0%})")
    ci = f"95% CI of the ratio {pc.ci95[0]:.2f}-{pc.ci95[1]:.2f}, {pc.n_a} vs {pc.n_b} processes"
    if slower and pc.ratio < 1:
        return f"{change} (p={pc.p_slower:.2g} one-sided, {ci})"
    if different and pc.ratio != 1:
        return f"{change} (p={pc.p_two_sided:.2g}, {ci})"
    return f"no significant difference (p={pc.p_two_sided:.2g} before correction over configurations, {ci})"


def compare(store_a: str, store_b: Optional[str], sweep_a: Optional[int], sweep_b: Optional[int],
            threshold: float, noise: float = DEFAULT_NOISE, drift: float = DEFAULT_DRIFT) -> tuple:
    """Text of the comparison and the exit status (1: a regression). store_b None: two sweeps of store_a."""
    conn_a = store.connect(store_a, readonly=True)
    conn_b = store.connect(store_b, readonly=True) if store_b else None
    try:
        sid_a, sid_b = _sweeps(conn_a, conn_b, sweep_a, sweep_b)
        base, _, row_a = _configs(conn_a, sid_a)
        cand, cand_broken, row_b = _configs(conn_b or conn_a, sid_b)
    finally:
        conn_a.close()
        if conn_b is not None:
            conn_b.close()
    interleaved = store_b is None and row_a.get("paired_with") == sid_b
    if interleaved:
        rule = (f"interleaved A/B pairs (./run_bench.sh ab): a regression is slower by more than {threshold:.0%}, "
                f"significant at family-wise p < {ALPHA} over pairs")
    else:
        rule = (f"a regression is slower by more than {max(threshold, drift):.0%} (sweeps run one after another drift "
                f"apart by that much here; ./run_bench.sh ab resolves less), significant at family-wise p < {ALPHA} over "
                f"processes; with one process per side, slower by more than the noise bound {noise:.0%}")
    lines = [f"baseline: {store_a} sweep {sid_a}; candidate: {store_b or store_a} sweep {sid_b}; {rule}", ""]
    common = _matched(base, cand, interleaved)
    if interleaved:
        reps = {p: sorted(set(base[p[0]].by_repeat) & set(cand[p[1]].by_repeat)) for p in common}
        pcs = {p: stats.compare_pairs([base[p[0]].by_repeat[r] for r in reps[p]], [cand[p[1]].by_repeat[r] for r in reps[p]])
               for p in common}
    else:
        pcs = {p: stats.compare_processes(base[p[0]].process_sps, cand[p[1]].process_sps) for p in common}
    significant = stats.holm({p: pc.p_slower for p, pc in pcs.items() if pc.decidable}, ALPHA)
    different = stats.holm({p: pc.p_two_sided for p, pc in pcs.items() if pc.decidable}, ALPHA)
    floor = threshold if interleaved else max(threshold, drift)
    regressed = []
    for p in common:
        a, b, pc = base[p[0]], cand[p[1]], pcs[p]
        words = verdict(pc, noise, p in significant, p in different).replace("processes)", "pairs)" if interleaved else "processes)")
        slowdown = 1 / pc.ratio - 1
        if (p in significant and slowdown > floor) or (not pc.decidable and slowdown > max(floor, noise)):
            regressed.append(p[1])
            words += " (REGRESSION)"
        name = p[0] if p[0] == p[1] else f"{p[0]} vs {p[1]}"
        lines.append(f"{name}: {a.samples_per_s:.1f} -> {b.samples_per_s:.1f} samples/s: {words}")
    matched_a, matched_b = {p[0] for p in common}, {p[1] for p in common}
    head = lambda key: key.split("/")[:4]  # noqa: E731  mode/workload/strategy/devicexN
    for key in sorted(set(base) - matched_a):
        broken = key if key in cand_broken else next(
            (k for k in sorted(cand_broken) if interleaved and k not in base and head(k) == head(key)), None)
        if broken:  # ran fine before, fails now: the worst regression there is
            regressed.append(key)
            lines.append(f"{key}{'' if broken == key else ' vs ' + broken}: ok in the baseline, {cand_broken[broken]} "
                         f"in the candidate (REGRESSION)")
        else:
            lines.append(f"{key}: only in the baseline (no ok result in the candidate)")
    for key in sorted(set(cand) - matched_b):
        lines.append(f"{key}: only in the candidate")
    if not common:
        lines.append("no configuration has an ok result on both sides")
    lines += ["", f"{len(regressed)} configuration(s) regressed" if regressed else "no regression"]
    return "\n".join(lines) + "\n", 1 if regressed else 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", default="results/bench.sqlite", help="baseline store")
    parser.add_argument("--against", default=None, help="candidate store (default: compare two sweeps of --store)")
    parser.add_argument("--sweep-a", type=int, default=None, help="baseline sweep id (default: latest, or the one before --sweep-b)")
    parser.add_argument("--sweep-b", type=int, default=None, help="candidate sweep id (default: latest)")
    parser.add_argument("--threshold", type=float, default=0.05, help="smallest slowdown that counts, with repeats (0.05 = 5%%)")
    parser.add_argument("--noise", type=float, default=DEFAULT_NOISE,
                        help="without repeats, the process-to-process noise bound a slowdown must exceed (0.25 = 25%%)")
    parser.add_argument("--drift", type=float, default=DEFAULT_DRIFT,
                        help="sweeps run one after another: the drift between them a slowdown must exceed (0.15 = 15%%); "
                             "interleaved A/B sweeps (./run_bench.sh ab) need none")


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage()
        self.exit(2, f"error: {message}\n")


def main(argv: Optional[list] = None) -> int:
    parser = _Parser(prog="./run_bench.sh compare", description=__doc__.splitlines()[0])
    add_arguments(parser)
    ns = parser.parse_args(argv)
    for flag, v in (("--threshold", ns.threshold), ("--noise", ns.noise), ("--drift", ns.drift)):
        if not (0 <= v < 10):
            print(f"error: {flag} {v}: expected a fraction such as 0.05")
            return 2
    try:
        text, code = compare(ns.store, ns.against, ns.sweep_a, ns.sweep_b, ns.threshold, ns.noise, ns.drift)
    except store.StoreError as e:
        print(f"error: {e}")
        return 2
    print(text, end="")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
