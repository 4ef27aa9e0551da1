"""Compare a candidate sweep against a baseline, configuration by configuration, with processes as the
independent samples (pyperf's rule: steps of one process share its luck) and each configuration's own noise
as the yardstick.

    ./run_bench.sh compare --store base.sqlite --against new.sqlite [--threshold 0.05]
    ./run_bench.sh compare --store results/bench.sqlite          # the two latest sweeps of one store

Per configuration key with an ok benchmark on both sides, each process (repeat) contributes one throughput
(samples over its timed window). How far two sweeps of identical code fall apart differs by configuration
(fresh DDP x2 processes on a shared 2-core machine spread several times more than one process), so the bound
a slowdown must pass is measured per configuration, from evidence (stats.evidence): the spread between its
processes (repeats in either sweep) and between its sweeps (the same configuration in the --history earlier
sweeps of the store, run on the same host: a shared machine's speed drifts between sweeps, which no repeat
inside one sweep shows). With that evidence a one-sided t-test on mean log throughput; the p-values of all
configurations are Holm-corrected (family-wise alpha 0.05) and a regression is significant and slower by more
than --threshold (5%). Without earlier sweeps but with repeats on both sides: Welch's t-test, and a
regression must also pass --drift (by default 15%, the drift between sweeps measured once on the CPU machines this
suite is developed on: CPU configurations only; a figure measured on CPUs is never applied to a GPU, so a GPU
configuration without earlier sweeps needs --drift, else compare cannot decide it). With neither, nothing
measures the configuration's noise: compare says it cannot decide, and calls no regression. One disturbed earlier
sweep inflates the spread between sweeps; where leaving one out alone would at least halve a bound, the line names it
(stats.disturbing_sweep) and --leave-out drops it from the evidence: a person's call, never made by rule. Sweeps written by
`./run_bench.sh ab` interleave A and B process by process: compare pairs them (paired t-test on log ratios,
the drift cancels) and a slowdown beyond --threshold is enough. A configuration that trained in the baseline and whose
last loss is not finite in the candidate (timed, but not training: stats.loss_not_finite) is a regression whatever its
speed. A configuration ok in the baseline and failed
in the candidate is a regression.
Exit status 1 on a regression, 0 otherwise, 2 on bad input.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from bench import stats

from bench.analysis import results
from bench.config import ConfigError
from bench.store import read, store

ALPHA = 0.05               # family-wise significance level over the configurations compared
DEFAULT_DRIFT = 0.15       # sweeps run one after another: their means differed by 6% sd here (9% for a pair)
DRIFT_MEASURED_ON = "cpu"  # ... on 2-core CPUs: the default drift applies to CPU configurations only
DEFAULT_HISTORY = 10       # earlier sweeps of each configuration that measure its noise (the machine's recent state)
WIDE_BOUND = 0.30          # a bound past this is worth more processes: one dipped process moves a mean of 3 by a third


def _sweeps(conn_a, conn_b, sweep_a: Optional[int], sweep_b: Optional[int]) -> tuple:
    if conn_b is not None:
        return results.pick_sweep(conn_a, sweep_a), results.pick_sweep(conn_b, sweep_b)
    ids = read.sweep_ids(conn_a)
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
    """(ok configurations by key, {key: reason} of benchmark configurations that failed or were interrupted, {key:
    reason} of those skipped, the sweep row)."""
    sweep = results.load(conn, sweep_id)
    bench = [r for r in sweep.problems if r["mode"] == "bench"]
    broken = {r["config_key"]: f"{r['status']}: {r['reason']}" for r in bench if r["status"] in ("failed", "interrupted")}
    skipped = {r["config_key"]: r["reason"] or "no reason recorded" for r in bench if r["status"] == "skipped"}
    return {c.key: c for cs in sweep.bench.values() for c in cs}, broken, skipped, sweep.sweep


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


def _history(conn_a, conn_b, sid_a: int, sid_b: int, row_a: dict, row_b: dict, limit: int,
             leave_out: tuple = (), name_b: str = "") -> tuple:
    """({config_key: [[samples/s per process] per earlier sweep]}, {config_key: [that sweep's label]}): the sweeps before
    the baseline in its store (and before the candidate in its own store, when that is another, labelled with
    `name_b`), on the host that ran each side; `leave_out`: sweep ids of the baseline's store left out."""
    out: dict = {}
    labels: dict = {}
    sources = [(conn_a, min(sid_a, sid_b) if conn_b is None else sid_a, row_a.get("hostname"), set(leave_out), "")]
    if conn_b is not None:
        sources.append((conn_b, sid_b, row_b.get("hostname"), set(), f" of {name_b}"))
    for conn, before, host, skip, where in sources:
        for sid in read.earlier_sweeps(conn, before, host, limit + len(skip)):
            if sid in skip:
                continue
            for key, sps in results.process_throughputs(conn, sid).items():
                out.setdefault(key, []).append(sps)
                labels.setdefault(key, []).append(f"{sid}{where}")
    return {k: v[-limit:] for k, v in out.items()}, {k: v[-limit:] for k, v in labels.items()}


def check_held(conn, ids: tuple, store_name: str) -> None:
    """Each --leave-out id is a sweep the store holds: ConfigError naming the ones it does hold otherwise. compare's
    and history's --leave-out both start here, so the two commands refuse an unknown id in the same words."""
    held = set(read.sweep_ids(conn))
    for i in ids:
        if i not in held:
            raise ConfigError(f"--leave-out {i}: {store_name} holds no sweep {i}; expected an earlier sweep of it "
                              f"(it holds {read.id_runs(sorted(held)) or 'none'})")


def check_leave_out(conn, ids: tuple, sid_a: int, sid_b: Optional[int], store_name: str, interleaved: bool) -> None:
    """--leave-out names earlier sweeps of the baseline's store, before both sweeps compared (sid_b None: the
    candidate is in another store): refused (ConfigError) otherwise, and for A/B pairs, which use no earlier sweep."""
    if ids and interleaved:
        raise ConfigError(f"--leave-out {','.join(map(str, ids))}: the two sweeps of an ab run are compared pair by pair, "
                          "with no earlier sweep as evidence; there is nothing to leave out")
    check_held(conn, ids, store_name)
    first = min(i for i in (sid_a, sid_b) if i is not None)
    for i in ids:
        if i in (sid_a, sid_b):
            raise ConfigError(f"--leave-out {i}: that is the {'baseline' if i == sid_a else 'candidate'} compared; "
                              f"expected an earlier sweep whose noise should not count")
        if i > first:
            raise ConfigError(f"--leave-out {i}: not earlier than sweep {first} compared; the evidence is the sweeps "
                              f"before it, so leaving {i} out would change nothing")


def _unread(conn, ids: tuple, before: int, host: Optional[str], history: int) -> list:
    """The --leave-out ids that the history would not have read anyway (another host, or beyond --history)."""
    read_anyway = set(read.earlier_sweeps(conn, before, host, history + len(ids)))
    return [i for i in ids if i not in read_anyway]


def drift_for(device_type: str, drift: Optional[float]) -> Optional[float]:
    """The drift between sweeps a configuration without earlier sweeps is held against: --drift where given, else the
    default on the device it was measured on (CPU), else None: not measured there."""
    if drift is not None:
        return drift
    return DEFAULT_DRIFT if device_type == DRIFT_MEASURED_ON else None


def no_evidence(earlier: int) -> str:
    """Why a configuration's drift between sweeps is not measured: 'no earlier sweep', or too few where the store held
    some (a compare read 'no earlier sweep' beside a store holding one earlier sweep of it)."""
    if not earlier:
        return "no earlier sweep"
    return f"too few earlier sweeps of this configuration ({earlier}; {stats.MIN_EVIDENCE_SWEEPS - 1} needed)"


def geometric_mean(values) -> float:
    """The geometric mean of samples/s over processes: what compare's ratio is of (a line printed the median processes,
    80.4 -> 84.4 samples/s, beside '1.17x faster', the ratio of the geometric means, where 84.4 / 80.4 is 1.05)."""
    values = [float(v) for v in values]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values and min(values) > 0 else math.nan


def means_words(means: tuple) -> str:
    """'80.4 -> 84.4 samples/s': the two geometric means a ratio is of."""
    return f"{means[0]:.1f} -> {means[1]:.1f} samples/s"


def verdict(pc: stats.ProcessComparison, ev: Optional[stats.Evidence], floor: Optional[float], slower: bool,
            different: bool, alpha: float = ALPHA, device_type: str = "cpu", earlier: int = 0,
            means: tuple = ()) -> str:
    """pyperf-style words for one configuration. slower / different: the one-sided (candidate slower) /
    two-sided test survived the correction over configurations; floor: the smallest slowdown that counts;
    alpha: the level a lone slowdown must reach after the correction (ALPHA / configurations compared); earlier: the
    earlier sweeps of it that the store held; means: the geometric means over each side's processes. Interleaved pairs
    (`ab`) say their ratio is the geometric mean of the paired ratios, which the medians beside it need not give (an ab
    line read '24260.1 -> 28084.9 samples/s: 1.29x faster'), with the two geometric means that give it, and use no drift
    between sweeps: it cancels in each pair."""
    change = "no change" if pc.ratio == 1 else f"{pc.ratio:.2f}x faster" if pc.ratio > 1 else f"{1 / pc.ratio:.2f}x slower"
    if pc.decided_by == "pairs":
        of = f": {means_words(means)}" if means else ""
        change = f"paired ratio {change} ({'1 pair' if pc.n_a == 1 else f'geometric means of {pc.n_a} pairs' + of})"
    if not pc.decidable and pc.decided_by == "pairs":
        return f"{change}: cannot decide (fewer than 2 interleaved pairs where both sides succeeded)"
    if not pc.decidable:
        side = "one process per side" if pc.n_a == pc.n_b == 1 else f"{pc.n_a} vs {pc.n_b} process(es)"
        return (f"{change}: cannot decide ({side}, and fewer than {stats.MIN_EVIDENCE_SWEEPS - 1} earlier sweeps of this "
                f"configuration in the store: nothing measures its noise; keep earlier sweeps in the store, or run both "
                f"sides with --repeats 3)")
    n = f"{pc.n_a} vs {pc.n_b} process(es)"
    if floor is None:
        why = no_evidence(earlier) if earlier else "no earlier sweep of this configuration"
        return (f"{change}: cannot decide ({n}, {why}, and the drift between sweeps is "
                f"not measured on {device_type}: the {DEFAULT_DRIFT:.0%} default was measured on CPUs; keep "
                f"{stats.MIN_EVIDENCE_SWEEPS - 1} earlier sweeps of it in the store, or give --drift)")
    if ev is not None:
        bound = max(floor, ev.bound(alpha))
        noise = (f"noise of this configuration from {ev.sweeps} sweeps: sd {math.expm1(ev.sd_diff):.0%} for this "
                 f"comparison, it calls slowdowns beyond {bound:.0%}"
                 + (f"; {n} cannot resolve this configuration's noise: --repeats 3 on both sides narrows it"
                    if bound > WIDE_BOUND and min(pc.n_a, pc.n_b) < 3 else ""))
    elif pc.decided_by == "pairs":
        noise = f"{pc.n_a} interleaved pairs: the drift between sweeps cancels in each pair"
    else:
        noise = f"{n}, {no_evidence(earlier)}: a slowdown must also pass the drift between sweeps, {floor:.0%}"
    ci = f"95% CI of the ratio {pc.ci95[0]:.2f}-{pc.ci95[1]:.2f}"
    if slower and pc.ratio < 1:
        return f"{change} (p={pc.p_slower:.2g} one-sided, {ci}; {noise})"
    if different and pc.ratio != 1:
        return f"{change} (p={pc.p_two_sided:.2g}, {ci}; {noise})"
    return f"{change}, within the noise (p={pc.p_two_sided:.2g} before correction over configurations, {ci}; {noise})"


@dataclass(frozen=True)
class Call:
    """compare's call on one configuration: the comparison, the evidence of its noise (None without), the smallest
    change that counts (floor), its words, and whether it is a regression or an improvement by compare's rule."""
    comparison: stats.ProcessComparison
    evidence: Optional[stats.Evidence]
    floor: float
    words: str
    regression: bool
    improvement: bool
    means: tuple = (math.nan, math.nan)   # geometric means of samples/s over each side's processes: the ratio's figures

    @property
    def decided(self) -> bool:
        """Whether its noise is measured and a floor stands (a GPU configuration without earlier sweeps or --drift has
        none): a change that is not decided is never 'within the noise'."""
        return self.comparison.decidable and not math.isnan(self.floor)


def disturbed_words(d: Optional[stats.Disturbing], label: str) -> str:
    """The words naming the one earlier sweep that alone widens a bound (stats.disturbing_sweep), and how to leave it
    out where it is the baseline store's ('7'; one of the candidate's store reads '7 of new.sqlite')."""
    if d is None:
        return ""
    how = f"if it was disturbed, --leave-out {label}" if label.isdigit() else "it is in the candidate's store"
    return (f"; sweep {label} ran this configuration {abs(d.deviation):.0%} {'slower' if d.deviation < 0 else 'faster'} "
            f"than the median of its other sweeps and alone widens the bound from {d.bound_without:.0%} to "
            f"{d.bound_with:.0%} ({how})")


def judge(samples: dict, threshold: float = 0.05, drift: Optional[float] = None, interleaved: bool = False,
          device_types: Optional[dict] = None, labels: Optional[dict] = None) -> dict:
    """compare's rule, on the processes alone: samples {name: (baseline's samples/s per process, candidate's, [[samples/s
    per process] per earlier sweep of it])}, all the configurations of one comparison (their p-values are corrected
    together, Holm). interleaved: the two lists are A/B pairs in order (earlier sweeps unused). Returns {name: Call}.
    A regression is significant (one-sided, after the correction) and slower by more than the floor; an improvement
    is significant (two-sided, after the correction) and faster by more than the floor. The floor is --threshold
    with evidence of the noise or with pairs, else the larger of --threshold and the drift (`drift_for`: --drift, else
    15% for a CPU configuration; a GPU configuration without a drift cannot be decided). device_types: {name: 'cpu' or
    'cuda'} (default cpu). labels: {name: [label of each earlier sweep]}: a configuration not called a regression
    whose bound one earlier sweep alone widens says which (disturbed_words)."""
    evidence, pcs = {}, {}
    for name, (a_sps, b_sps, earlier) in samples.items():
        if interleaved:
            pcs[name] = stats.compare_pairs(a_sps, b_sps)
            continue
        evidence[name] = stats.evidence(earlier, a_sps, b_sps)
        pcs[name] = (stats.compare_with_evidence(a_sps, b_sps, evidence[name]) if evidence[name]
                     else stats.compare_processes(a_sps, b_sps))
    significant = stats.holm({p: pc.p_slower for p, pc in pcs.items() if pc.decidable}, ALPHA)
    different = stats.holm({p: pc.p_two_sided for p, pc in pcs.items() if pc.decidable}, ALPHA)
    lone = ALPHA / max(1, sum(pc.decidable for pc in pcs.values()))  # Holm's first step: one slowdown among them
    out = {}
    for name, pc in pcs.items():
        means = (geometric_mean(samples[name][0]), geometric_mean(samples[name][1]))
        device = (device_types or {}).get(name, "cpu")
        between = drift_for(device, drift)
        floor = threshold if interleaved or evidence.get(name) else (None if between is None else max(threshold, between))
        words = verdict(pc, evidence.get(name), floor, name in significant, name in different, lone, device,
                        earlier=sum(1 for h in samples[name][2] if h), means=means)
        decided = pc.decidable and floor is not None
        regression = decided and name in significant and 1 / pc.ratio - 1 > floor
        if evidence.get(name) and labels and name in labels and not regression:
            a_sps, b_sps, earlier = samples[name]
            d = stats.disturbing_sweep(earlier, a_sps, b_sps, lone)
            words += disturbed_words(d, labels[name][d.index]) if d else ""
        out[name] = Call(pc, evidence.get(name), floor if floor is not None else math.nan, words,
                         regression=regression,
                         improvement=decided and name in different and pc.ratio - 1 > floor, means=means)
    return out


def compare(store_a: str, store_b: Optional[str], sweep_a: Optional[int], sweep_b: Optional[int],
            threshold: float = 0.05, drift: Optional[float] = None, history: int = DEFAULT_HISTORY,
            leave_out: tuple = ()) -> tuple:
    """Text of the comparison and the exit status (1: a regression). store_b None: two sweeps of store_a. leave_out:
    earlier sweeps of store_a whose noise does not count (a sweep a person knows was disturbed)."""
    conn_a = store.connect(store_a, readonly=True)
    try:  # a refused second store leaves the first as it was (no -wal/-shm of an open reader beside it)
        conn_b = store.connect(store_b, readonly=True) if store_b else None
    except BaseException:
        conn_a.close()
        raise
    try:
        sid_a, sid_b = _sweeps(conn_a, conn_b, sweep_a, sweep_b)
        base, _, _, row_a = _configs(conn_a, sid_a)
        cand, cand_broken, cand_skipped, row_b = _configs(conn_b or conn_a, sid_b)
        interleaved = store_b is None and row_a.get("paired_with") == sid_b
        check_leave_out(conn_a, leave_out, sid_a, sid_b if conn_b is None else None, store_a, interleaved)
        unread = _unread(conn_a, leave_out, min(sid_a, sid_b) if conn_b is None else sid_a, row_a.get("hostname"), history)
        earlier, labels = ({}, {}) if interleaved or history == 0 else _history(
            conn_a, conn_b, sid_a, sid_b, row_a, row_b, history, leave_out, store_b or "")
    finally:
        conn_a.close()
        if conn_b is not None:
            conn_b.close()
    if interleaved:
        rule = (f"interleaved A/B pairs (./run_bench.sh ab): a regression is slower by more than {threshold:.0%}, "
                f"significant at family-wise p < {ALPHA} over pairs")
    else:
        between = (f"{max(threshold, drift):.0%}" if drift is not None else
                   f"{max(threshold, DEFAULT_DRIFT):.0%} on CPU, where that drift was measured; no call on a GPU without --drift")
        rule = (f"each configuration against its own noise, measured from up to {history} earlier sweeps of it on this "
                f"host and its repeats: a regression is significant at family-wise p < {ALPHA} and slower by more than "
                f"{threshold:.0%} ({between} with repeats but no earlier sweep); without either, no call"
                + (f"; sweep(s) {', '.join(map(str, leave_out))} left out (--leave-out)" if leave_out else "")
                + (f" ({', '.join(map(str, unread))}: not among the sweeps read anyway: another host, or beyond "
                   f"--history {history})" if unread else ""))
    figures = ("each line's samples/s: the two sides' median processes, then the paired ratio with the geometric means "
               "of the pairs it is of" if interleaved else "each line's samples/s: the geometric means over each side's "
               "processes, the figures its ratio is of (a report shows the median process)")
    lines = [f"baseline: {store_a} sweep {sid_a}; candidate: {store_b or store_a} sweep {sid_b}; {rule}; {figures}", ""]
    common = _matched(base, cand, interleaved)
    samples = {}
    for p in common:
        a, b = base[p[0]], cand[p[1]]
        if interleaved:
            reps = sorted(set(a.by_repeat) & set(b.by_repeat))
            samples[p] = ([a.by_repeat[r] for r in reps], [b.by_repeat[r] for r in reps], [])
        else:
            samples[p] = (a.process_sps, b.process_sps, earlier.get(p[0], []))
    calls = judge(samples, threshold, drift, interleaved, {p: base[p[0]].device_type for p in common},
                  {p: labels.get(p[0], []) for p in common} if not interleaved else None)
    regressed = []
    for p in common:
        a, b, call = base[p[0]], cand[p[1]], calls[p]
        words = call.words
        if results.diverged(b) and not results.diverged(a):  # timed, but no longer training: worse than any slowdown
            regressed.append(p[1])
            words += (f"; but the candidate's {stats.loss_words(b.loss_not_finite)} (it trained in the baseline) "
                      "(REGRESSION)")
        elif call.regression:
            regressed.append(p[1])
            words += " (REGRESSION)"
        name = p[0] if p[0] == p[1] else f"{p[0]} vs {p[1]}"
        figures = f"median {a.samples_per_s:.1f} -> {b.samples_per_s:.1f} samples/s;" if interleaved else \
            f"{means_words(call.means)}:"
        lines.append(f"{name}: {figures} {words}")
    matched_a, matched_b = {p[0] for p in common}, {p[1] for p in common}
    head = lambda key: key.split("/")[:4]  # noqa: E731  mode/workload/strategy/devicexN
    for key in sorted(set(base) - matched_a):
        broken = key if key in cand_broken else next(
            (k for k in sorted(cand_broken) if interleaved and k not in base and head(k) == head(key)), None)
        if broken:  # ran fine before, fails now: the worst regression there is
            regressed.append(key)
            lines.append(f"{key}{'' if broken == key else ' vs ' + broken}: ok in the baseline, {cand_broken[broken]} "
                         f"in the candidate (REGRESSION)")
        else:   # absent is not failed: a candidate sweep that ran fewer configurations read as if they had failed
            lines.append(f"{key}: only in the baseline " + (f"(skipped in the candidate: {cand_skipped[key]})"
                                                             if key in cand_skipped else "(the candidate did not run it)"))
    for key in sorted(set(cand) - matched_b):
        lines.append(f"{key}: only in the candidate")
    if not common:
        lines.append("no configuration has an ok result on both sides")
    undecided = sum(not calls[p].decided for p in common)
    lines += ["", (f"{len(regressed)} configuration(s) regressed" if regressed else "no regression")
              + (f"; {undecided} of {len(common)} could not be decided (no evidence of their noise)" if undecided else "")]
    return "\n".join(lines) + "\n", 1 if regressed else 0
