"""How collectives and computation slow each other, as the forecast's pipeline uses it: the sweep's measurement
(bench.rank.interference, the `interference` table) turned into a lookup by collective, size and rank count, and
what stands in where nothing was measured, said in words.

    inter = from_rows(rows, device_type)         # rows: the interference table's rows of the counts the forecast may read
    inter.alone_ms("all_reduce", size_bytes, ranks)   # a lone call as a step issues it, at a measured count (else None)
    inter.comm_x("all_reduce", size_bytes, ranks)     # the collective's time beside computation / alone
    inter.compute_x("all_reduce", size_bytes, ranks)  # computation's time while the collective runs / alone
    inter.co_run_x(ranks, nodes)                      # the load on every rank at once / on one alone
    inter.words()                                     # measured or assumed, per figure
    anchor_x(net, inter, "all_reduce", size_bytes, ranks)  # at a count not measured: the network model's factor

Per (collective, ranks) three lines in the size S are fitted over the measured sizes (non-negative, on relative
residuals in log space with a soft-L1 loss: scipy's least_squares), so that no single noisy size steers a bucket:
    alone(S)      = a0 + a1 S      the collective by itself, one call after a lead-in of computation, the wait for
                                   the later rank included (as a step issues its last bucket); not the microbenchmark's
                                   back-to-back calls after a barrier, which the network's fit is of: on gloo the two
                                   disagree, either way, by several times (`anchor_x`)
    contended(S)  = c0 + c1 S      the same beside the load (c0: on a CPU mostly the wait to be scheduled)
    lost(S)       = l0 + l1 S      the load's time lost while it ran (contended x (1 - 1/compute_slowdown))
comm_x = contended / alone and compute_x = contended / (contended - lost). A rank count not measured takes the
nearest measured one's slowdowns (said so); there the collective's own time is the network model's, anchored to the
lone calls at the measured counts (`anchor_x`: the curve passes through them, continuous in the count). Not measured at
all: on GPUs assumed none (1.0: NCCL's kernels share SMs and memory bandwidth with backward, a cost this
assumption leaves out: it errs fast), on CPU assumed serial (the collective at its lone speed, computation stopped
while it runs); both are named "assumed" in the forecast's words, never a bound, and the check says how far they
erred where the sweep measured a count (bench.forecast.check).

Runs: a sweep with --repeats R measures the machine in R comm runs at each count, each in fresh processes (its load
calibrated anew, its ranks placed anew: what all rounds of one run share). The lines are fitted through each size's
median over the runs, the co-run slowdown is the runs' median: one odd run does not move the central.

The spread (`redraw`): each row keeps its valid rounds (rounds_json); a draw picks the runs with replacement, then each
picked run's rounds with replacement, and scales the robust lines by its median's ratio to every round's (as the fit's
residuals are relative; log-linear in log size between sizes; lost moved by its change as a share of the contended).
Added in ms, one CPU's lone 64 KiB rounds (0.24-5.4 ms) took a draw's lone call, and every count anchored to it, to
zero. The co-run slowdown likewise. With one run that is its rounds resampled: the spread between runs is then not
measured (`spread_words` says so). Row 0 of a drawn copy is the measured central.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

from bench.forecast import network as nw

STOPPED = 100.0                  # bench.rank.interference.STOPPED: no progress while the collective ran


@dataclass(frozen=True)
class Line:
    """time_ms = intercept_ms + slope_ms_per_byte * S."""
    intercept_ms: float
    slope_ms_per_byte: float

    def __call__(self, size_bytes: float) -> float:
        return self.intercept_ms + self.slope_ms_per_byte * max(0.0, float(size_bytes))


def fit_line(points: list) -> Optional[Line]:
    """A non-negative line through (size, ms) points, robust to a noisy size: scipy's least_squares on log(fit / time)
    with a soft-L1 loss (an outlier counts about linearly, not squared; too fast and too slow alike). A single point:
    a flat line."""
    from scipy.optimize import least_squares
    pts = [(float(s), float(t)) for s, t in points if t is not None and t > 0]
    if len(pts) < 2:
        return Line(pts[0][1], 0.0) if pts else None
    s = np.array([p[0] for p in pts])
    t = np.array([p[1] for p in pts])
    scale = float(np.max(s)) or 1.0
    x0 = [float(np.min(t)), max(float(np.max(t) - np.min(t)), 1e-6)]
    fit = least_squares(lambda c: np.log(np.maximum(c[0] + c[1] * s / scale, 1e-9) / t), x0=x0,
                        bounds=([0.0, 0.0], [np.inf, np.inf]), loss="soft_l1", f_scale=0.1)
    return Line(float(fit.x[0]), float(fit.x[1]) / scale)


@dataclass(frozen=True)
class Fitted:
    """One (collective, ranks): its lines, the sizes they were fitted over, each size's rounds (alone, contended, lost
    per valid round, where stored) and, in a drawn copy (`redraw`), each draw's deviation from the rounds' medians."""
    alone: Line
    contended: Line
    lost: Line
    sizes: tuple
    rounds: tuple = ()               # per size (in `sizes` order), per run: ((alone, contended, lost), ...) per round
    deviation: Optional[np.ndarray] = None   # (draws, sizes, 3): `_ratios` of a draw's medians to the rounds'

    def _at(self, size: float) -> tuple:
        """(alone, contended, lost) ms at `size`: the lines, a drawn copy's scaled by its ratios interpolated between
        sizes (a draw never takes a lone call to zero); lost moved by its share of the contended line, 0 at the least."""
        a, c, lost = self.alone(size), self.contended(size), self.lost(size)
        if self.deviation is None:
            return a, c, lost
        xs, x = np.log(np.maximum(np.asarray(self.sizes, dtype=float), 1.0)), math.log(max(size, 1.0))
        if len(xs) > 1:  # linear in log size between the two measured sizes around it, flat past the ends
            i = int(np.clip(np.searchsorted(xs, x), 1, len(xs) - 1))
            w = float(np.clip((x - xs[i - 1]) / (xs[i] - xs[i - 1]), 0.0, 1.0)) if xs[i] > xs[i - 1] else 1.0
            d = (1 - w) * self.deviation[:, i - 1, :] + w * self.deviation[:, i, :]
        else:
            d = self.deviation[:, 0, :]
        return a * np.exp(d[:, 0]), c * np.exp(d[:, 1]), np.clip(lost + d[:, 2] * c, 0.0, None)

    def alone_ms(self, size: float):
        return self._at(size)[0]

    def comm_x(self, size: float):
        a, c, _ = self._at(size)
        return np.maximum(1.0, c / np.maximum(a, 1e-9))

    def compute_x(self, size: float):
        _, c, lost = self._at(size)
        lost = np.minimum(lost, c * (1 - 1 / STOPPED))
        return np.maximum(1.0, c / (c - lost))


def round_values(row: dict) -> list:
    """A stored interference row's valid rounds as (alone, contended, lost) ms (rounds_json; [] where not stored):
    lost, the load's time lost while the collective ran, from that round's own slowdown (bench.rank.interference)."""
    out = []
    for r in json.loads(row.get("rounds_json") or "[]"):
        if len(r) != 4:
            continue
        alone, comm, load, load_alone = (float(v) for v in r)
        extra = load - load_alone
        x = comm / (comm - extra) if comm > extra else STOPPED
        out.append((alone, comm, comm * (1 - 1 / min(max(1.0, x), STOPPED))))
    return out


@dataclass(frozen=True)
class Interference:
    table: dict = field(default_factory=dict)     # (op, ranks, nodes) -> Fitted
    co_run: dict = field(default_factory=dict)    # (ranks, nodes) -> compute slowdown with every rank computing
    assumed_comm_x: float = 1.0
    assumed_compute_x: float = 1.0
    assumption: str = ""
    source: str = ""                              # where the measured figures come from (counts, load)
    co_rounds: dict = field(default_factory=dict)  # (ranks, nodes) -> the co-run's slowdown per round
    co_sized: dict = field(default_factory=dict)   # ((ranks, nodes), model bytes) -> (slowdown, rounds): CPU, per workload

    def for_state(self, state_bytes: float) -> "Interference":
        """The co-run measured with layers holding the nearest model's bytes to `state_bytes` (on CPU a sweep's comm run
        measures one per workload: bench.rank.interference); itself where the co-run was measured once."""
        if not self.co_sized or not state_bytes or state_bytes <= 0:
            return self
        co, rounds = dict(self.co_run), dict(self.co_rounds)
        for key in {k for k, _ in self.co_sized}:
            best = min((s for k, s in self.co_sized if k == key), key=lambda s: abs(math.log(s / state_bytes)))
            co[key], kept = self.co_sized[(key, best)]
            if kept:
                rounds[key] = kept
            else:
                rounds.pop(key, None)
        return replace(self, co_run=co, co_rounds=rounds, co_sized={})

    @property
    def measured(self) -> bool:
        return bool(self.table)

    def _fitted(self, op: str, ranks: int, nodes: Optional[int] = None) -> Optional[Fitted]:
        """The fit of op at exactly (ranks, nodes) when nodes is given; else the nearest count's (all-reduce's
        where op was not measured)."""
        if nodes is not None:
            return self.table.get((op, ranks, nodes))
        mine = {n: f for (o, n, _), f in self.table.items() if o == op} or {
            n: f for (o, n, _), f in self.table.items() if o == "all_reduce"}
        if not mine:
            return None
        return mine[min(mine, key=lambda n: (abs(math.log(n) - math.log(max(ranks, 1))), -n))]

    def alone_ms(self, op: str, size_bytes: float, ranks: int, nodes: int = 1) -> Optional[float]:
        """The collective alone as a step issues it, where measured at exactly this count and node count; else None."""
        f = self._fitted(op, ranks, nodes)
        return f.alone_ms(size_bytes) if f is not None else None

    def comm_x(self, op: str, size_bytes: float, ranks: int) -> float:
        f = self._fitted(op, ranks)
        return f.comm_x(size_bytes) if f is not None else self.assumed_comm_x

    def compute_x(self, op: str, size_bytes: float, ranks: int) -> float:
        f = self._fitted(op, ranks)
        return f.compute_x(size_bytes) if f is not None else self.assumed_compute_x

    def co_run_x(self, ranks: int, nodes: int = 1) -> float:
        """The compute slowdown of `ranks` ranks on `nodes` nodes all computing at once: as measured at exactly that
        count and node count, else the single-node measurement nearest its ranks per node (1.0 for one rank per
        node, or where nothing was measured: separate nodes share no cores)."""
        if (ranks, nodes) in self.co_run:
            return self.co_run[(ranks, nodes)]
        per_node = math.ceil(ranks / max(1, nodes))
        local = {n: x for (n, m), x in self.co_run.items() if m == 1}
        if per_node <= 1 or not local:
            return 1.0
        return local[min(local, key=lambda n: (abs(n - per_node), -n))]

    def words(self) -> str:
        if not self.measured:
            return self.assumption
        return (f"interference measured ({self.source}): {self.describe()}; lone calls as a step issues them priced "
                "from the same rows at the counts measured; other counts take the network model's time anchored to them "
                "and the nearest count's slowdowns")

    def describe(self) -> str:
        """The fitted slowdowns at the largest measured size of each (op, ranks), in words."""
        parts = []
        for (op, n, nodes), f in sorted(self.table.items()):
            size = f.sizes[-1]
            px = f.compute_x(size)
            parts.append(f"{op} x{n}{f' on {nodes} nodes' if nodes > 1 else ''} at {size / 2**20:.3g} MiB: collective {f.comm_x(size):.2g}x, computation "
                         + ("stopped" if px >= STOPPED else f"{px:.2g}x"))
        sized = {}
        for (key, size), (x, _) in self.co_sized.items():
            sized.setdefault(key, []).append(f"{x:.2g}x with {size / 2**20:.3g} MiB of parameters")
        for (n, m), x in sorted(self.co_run.items()):
            parts.append(f"{n} ranks{f' on {m} nodes' if m > 1 else ''} computing at once: "
                         + (", ".join(sorted(sized[(n, m)])) if len(sized.get((n, m), ())) > 1 else f"{x:.2g}x"))
        return "; ".join(parts)


# ---------------------------------------------------------------- counts not measured: the model, anchored

def anchors(net: nw.Network, inter: "Interference", op: str, size: float) -> list:
    """[(count, measured / model)]: at each count the interference run measured `op` at, on as many nodes as the
    network puts that count on, its lone call (as a step issues it) over the network model's time for `size` (the
    fit's own figures: a draw's network factor stays on the count it prices)."""
    central = replace(net, x=())
    out = []
    for o, n, nodes in sorted(inter.table):
        if o == op and n > 1 and nodes == math.ceil(n / net.gpus_per_node):
            model = nw.OPS[op](central, size, n)
            if model > 0:
                out.append((n, inter.alone_ms(op, size, n, nodes) / model))
    return out


def anchor_x(net: nw.Network, inter: "Interference", op: str, size: float, ranks: int):
    """The factor on the network model's time at a count the interference run did not measure: measured / model at
    the measured counts (`anchors`), geometric between the two around `ranks` in log count, the nearest's past the
    ends; 1 where none. The two measure different things: the network's fit is of the microbenchmark's back-to-back
    calls, averaged after a barrier (nccl-tests' way), the interference's lone call one call after a lead-in of
    computation, the wait for the later rank included, as a step's last bucket pays. On one CPU they disagreed ~4x
    (0.5 MiB on gloo x2: 2.4 ms lone, the fit 0.65 ms), and a forecast priced x2 from the one and x3, x4 from the
    other stepped twice as fast at 3 and 4 ranks as at 2. Anchored, the curve passes through each measured count and
    keeps the model's shape between and past them."""
    pts = anchors(net, inter, op, size)
    if not pts:
        return 1.0
    x = math.log(ranks)
    lower = [p for p in pts if p[0] <= ranks] or pts[:1]
    upper = [p for p in pts if p[0] >= ranks] or pts[-1:]
    (n0, r0), (n1, r1) = lower[-1], upper[0]
    if n0 == n1:
        return r0
    w = (x - math.log(n0)) / (math.log(n1) - math.log(n0))
    return np.exp((1 - w) * np.log(r0) + w * np.log(r1))


def anchor_words(net: nw.Network, inter: "Interference", op: str, size: float) -> str:
    """'all-reduce at counts not measured: the network model's time anchored to the lone calls measured (3.7x at x2,
    lone call over the model, at 0.512 MiB; ...)'; '' where nothing anchors it."""
    pts = anchors(net, inter, op, size)
    if not pts:
        return ""
    parts = ", ".join(f"{_central(r):.2g}x at x{n}" for n, r in pts)
    return (f"{nw.NAMES[op]} at counts not measured: the network model's time anchored to the lone calls measured "
            f"({parts}, lone call over the model, at {size / 2**20:.3g} MiB; between counts geometric in the count, "
            "past them the nearest's)")


def _central(v) -> float:
    return float(np.ravel(v)[0]) if np.ndim(v) else float(v)


def assumed(device_type: str) -> Interference:
    """Not measured: an assumption, said as one, never as a bound (which way it errs in words; by how much where the
    suite measured it is the check's: bench.forecast.check)."""
    if device_type == "cuda":
        return Interference(assumption="interference assumed none (not measured: collectives and backward taken not "
                                       "to slow each other, which errs fast wherever they share the GPU's SMs and "
                                       "memory; not a bound; a sweep with --interference measures it)")
    return Interference(assumed_compute_x=math.inf, assumption="interference assumed serial (not measured: computation "
                        "taken to stop while a collective runs, the collective at its lone speed; not a bound: beside "
                        "computation collectives also run slower and ranks slow each other, so it errs either way; a "
                        "sweep with --interference measures it)")


def _median(values) -> float:
    return float(np.median(np.asarray(values, dtype=float)))


def _run_median(runs: list) -> tuple:
    """(alone, contended, lost) ms over the runs: medians, lost the median contended x the runs' median share lost (1 -
    1/slowdown). The lost ms' own median mixed runs: a middle run timed 2x slower throughout turned a 2x into 2.5x."""
    c = _median([r[1] for r in runs])
    return _median([r[0] for r in runs]), c, c * _median([r[2] / r[1] if r[1] > 0 else 0.0 for r in runs])


def from_rows(rows: list, device_type: str, source: str = "") -> Interference:
    """The lookup from interference rows {op, ranks, nodes, size_bytes, comm_alone_ms, comm_contended_ms,
    compute_slowdown, rounds_json, result_id} (nodes: of the comm run the row came from, 1 where absent; result_id
    tells the runs of one count apart, one run where absent)."""
    points: dict = {}     # (op, ranks, nodes) -> size -> [(alone, contended, lost) per run]
    rounds: dict = {}     # (op, ranks, nodes) -> size -> [rounds per run]
    co_x: dict = {}       # ((ranks, nodes), model bytes) -> slowdown per run
    co_rounds: dict = {}
    for r in rows:
        x = r.get("compute_slowdown")
        if r.get("op") == "co_run":
            if x is not None:
                key = ((int(r["ranks"]), int(r.get("nodes") or 1)), int(r.get("size_bytes") or 0))
                co_x.setdefault(key, []).append(max(1.0, float(x)))
                ratios = [t / s for s, t in (json.loads(r.get("rounds_json") or "[]")) if s and s > 0]
                if ratios:
                    co_rounds.setdefault(key, []).append(tuple(ratios))
            continue
        if x is None or not r.get("comm_alone_ms") or not r.get("comm_contended_ms"):
            continue
        contended = float(r["comm_contended_ms"])
        key, size = (r["op"], int(r["ranks"]), int(r.get("nodes") or 1)), float(r["size_bytes"])
        points.setdefault(key, {}).setdefault(size, []).append(
            (float(r["comm_alone_ms"]), contended, contended * (1 - 1 / max(1.0, float(x)))))
        rounds.setdefault(key, {}).setdefault(size, []).append(tuple(round_values(r)))
    table = {}
    for key, by_size in points.items():
        sizes = tuple(sorted(by_size))
        med = {s: _run_median(by_size[s]) for s in sizes}  # over the runs
        lost = fit_line([(s, med[s][2]) for s in sizes if med[s][2] > 0]) or Line(0.0, 0.0)
        kept = tuple(tuple(run for run in rounds[key][s] if run) for s in sizes)
        whole = all(len(k) == len(rounds[key][s]) and k for k, s in zip(kept, sizes))
        table[key] = Fitted(fit_line([(s, med[s][0]) for s in sizes]), fit_line([(s, med[s][1]) for s in sizes]), lost,
                            sizes, kept if whole else ())
    if not table:
        return assumed(device_type)
    sized = {key: (_median(xs), tuple(co_rounds[key]) if len(co_rounds.get(key, ())) == len(xs) else ())
             for key, xs in co_x.items()}
    largest = {}                  # the machine's own figure: the co-run of the largest model (one comm run's before)
    for (key, size) in sized:
        largest[key] = max(largest.get(key, size), size)
    co_run = {key: sized[(key, size)][0] for key, size in largest.items()}
    co_kept = {key: sized[(key, size)][1] for key, size in largest.items() if sized[(key, size)][1]}
    several = {k for k in largest if sum(1 for kk, _ in sized if kk == k) > 1}
    return Interference(table=table, co_run=co_run, source=source, co_rounds=co_kept,
                        co_sized={k: v for k, v in sized.items() if k[0] in several})


def _medians(runs: tuple, rng: np.random.Generator, draws: int) -> np.ndarray:
    """(draws + 1, ...) medians of the runs' rounds (each run a sequence of rounds, a round a number or a row), the
    runs picked with replacement and then each picked run's rounds with replacement; row 0 the median of every round."""
    arrays = [np.asarray(r, dtype=float) for r in runs]
    shape = arrays[0].shape[1:]
    n = np.array([len(a) for a in arrays])
    most = int(n.max())
    padded = np.full((len(arrays), most) + shape, np.nan)
    for i, a in enumerate(arrays):
        padded[i, :len(a)] = a
    picked = rng.integers(0, len(arrays), size=(draws, len(arrays)))                 # (draws, R): runs
    k = np.floor(rng.random((draws, len(arrays), most)) * n[picked][..., None]).astype(int)   # rounds within each
    values = padded[picked[..., None], k]                                            # (draws, R, most, ...)
    values[np.arange(most)[None, None, :] >= n[picked][..., None]] = np.nan         # a short run: its own count
    central = np.nanmedian(np.concatenate(arrays), axis=0)
    return np.concatenate([central[None], np.nanmedian(values.reshape((draws, -1) + shape), axis=1)])


def _ratios(m: np.ndarray) -> np.ndarray:
    """(draws + 1, 3) medians (alone, contended, lost; row 0 every round's) as `Fitted.deviation`'s: log ratios of the
    two durations, the lost time's change as a share of the contended (a lost median of 0 is common: no slowdown)."""
    pos = np.maximum(m[:, :2], 1e-9)
    return np.column_stack([np.log(pos / pos[0]), (m[:, 2] - m[0, 2]) / pos[0, 1]])


def redraw(inter: Interference, rng: np.random.Generator, draws: int) -> Interference:
    """A copy whose figures are arrays over draws + 1 (row 0 the measured central): each size's runs and their rounds
    resampled, the medians' ratio to every round's median scaling the fitted lines (`_ratios`); the co-run slowdown
    likewise. A measurement without stored rounds keeps its figures (its spread unknown: `spread_words`)."""
    table = {}
    for key, f in inter.table.items():
        if not f.rounds:
            table[key] = f
            continue
        dev = np.stack([_ratios(_medians(runs, rng, draws)) for runs in f.rounds], axis=1)
        table[key] = replace(f, deviation=dev)
    co = dict(inter.co_run)
    for key, runs in inter.co_rounds.items():
        m = _medians(runs, rng, draws)
        co[key] = np.maximum(1.0, inter.co_run[key] * m / m[0])
    return replace(inter, table=table, co_run=co)


def spread_words(inter: Interference) -> str:
    """What the interference's spread rests on: the rounds, the runs, and whether the runs' spread was measured."""
    if not inter.measured:
        return ""
    kept = [f for f in inter.table.values() if f.rounds]
    if not kept:
        return "interference's spread unknown (its rounds were not stored: a store before version 6)"
    n = sorted({len(r) for f in kept for runs in f.rounds for r in runs})
    runs = min(len(runs) for f in kept for runs in f.rounds)
    each = f"{n[0]}{'-' + str(n[-1]) if n[-1] != n[0] else ''} rounds"
    co = next(iter(inter.co_rounds.values()), ())
    co_words = f", the co-run's {sum(len(r) for r in co)} rounds" if co else ""
    if runs >= 2:
        return f"interference's spread: {runs} runs (fresh processes) and each size's {each} in each, resampled{co_words}"
    return (f"interference's spread: each size's {each} resampled{co_words}; the spread between runs not measured "
            "(one comm run: --repeats 3 runs it in three), left out")
