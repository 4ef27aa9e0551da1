"""A configuration's history over the sweeps of one store: its throughput and efficiency sweep by sweep, in time
order, every step that compare's rule calls a regression or an improvement, and what changed in the environment
there (airspeed velocity's history pages; PyTorch's HUD benchmark dashboards).

    h = build(conn, Filters(workloads=("synthetic",)))    # -> History: one Series per configuration in 2+ sweeps
    h.series[0].points[-1].call                            # compare's call on the step into that sweep

The sweeps are this suite's own (plain sweeps and A sides of `ab`: bench.store.read), oldest first. A step is a
configuration's move from the last sweep that measured it to the next: it is judged by bench.analysis.compare.judge,
exactly as `./run_bench.sh compare --sweep-a PREV --sweep-b CUR` judges it (every configuration the two sweeps share
in one Holm family, its noise from up to DEFAULT_HISTORY earlier sweeps of the store on the baseline's host), so a
history never marks what compare would not call, whatever the filters show.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Optional

from bench.analysis import compare, results
from bench.store import read

# What a step reports as changed in the environment, in this order: (environments column, the word for it).
ENV_WORDS = (("git_commit", "commit"), ("torch", "torch"), ("cuda", "CUDA"), ("cudnn", "cuDNN"), ("nccl", "NCCL"),
             ("gpu_driver", "driver"), ("gpu_names", "GPU"), ("hostname", "host"), ("python", "python"))


@dataclass(frozen=True)
class Filters:
    """What to show (None: everything); `since` is an ISO date or date and time, compared with the sweep's start."""
    workloads: Optional[tuple] = None
    strategies: Optional[tuple] = None
    counts: Optional[tuple] = None
    precisions: Optional[tuple] = None
    since: Optional[str] = None

    def keeps(self, c: results.Config) -> bool:
        return ((self.workloads is None or c.workload in self.workloads)
                and (self.strategies is None or c.strategy in self.strategies)
                and (self.counts is None or c.device_count in self.counts)
                and (self.precisions is None or c.precision in self.precisions))


@dataclass
class Point:
    """One configuration in one sweep."""
    sweep: dict                                 # the sweeps row, with 'env'
    config: Optional[results.Config]            # None where it failed or was interrupted there
    failed: str = ""                            # its status and reason there, when it did not run to the end
    previous: Optional[int] = None              # the sweep of the point before (the step's baseline)
    call: Optional[compare.Call] = None         # compare's call on the step from `previous` (ok on both sides)
    changes: list = field(default_factory=list)  # ["torch 2.14 -> 2.15", ...] since `previous`
    base: Optional[results.Config] = None       # its baseline there (single device x1 of its settings), for the words
                                                # of a wrapper's overhead at one device (bench.report.report)
    partial: str = ""                           # 'interrupted: 2 of 3 processes' where its sweep did not run to its end
    level: Optional[int] = None                 # the sweep its level began, where a marked step before bounds its noise

    @property
    def sweep_id(self) -> int:
        return int(self.sweep["sweep_id"])

    @property
    def marked(self) -> str:
        """'regression', 'improvement', 'failed' (ok before, failed now; interrupted is not failed) or ''."""
        if self.failed and self.previous is not None and not self.failed.startswith("interrupted"):
            return "failed"
        if self.call is None:
            return ""
        return "regression" if self.call.regression else "improvement" if self.call.improvement else ""


@dataclass
class Series:
    key: str
    workload: str
    strategy: str
    device_count: int
    variant: str
    points: list

    @property
    def name(self) -> str:
        """'ddp x8 synthetic', with the variant when it is not plain fp32."""
        return f"{self.strategy} x{self.device_count} {self.workload}" + (f" [{self.variant}]" if self.variant != "fp32" else "")


@dataclass
class History:
    sweeps: list                                  # the sweeps rows drawn (all read when none is), oldest first, with 'env'
    series: list                                  # [Series] of configurations in two sweeps or more
    once: list = field(default_factory=list)      # [(config key, sweep id)] of configurations measured in one sweep only
    threshold: float = 0.05
    drift: Optional[float] = None     # None: compare's default for each configuration's device (compare.drift_for)
    stored: int = 0                   # the store's own sweeps, --since aside
    leave_out: tuple = ()             # sweeps whose noise counts for no step (--leave-out)


def since_key(text: str) -> str:
    """An ISO date (2025-06-01) or date and time (2025-06-01T12:00) as the prefix a sweep's start is compared with;
    ValueError when it is neither."""
    for fmt, out in (("%Y-%m-%d", "%Y-%m-%d"), ("%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M"), ("%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M"),
                     ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S"), ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S")):
        try:
            return datetime.strptime(text.strip(), fmt).strftime(out)
        except ValueError:
            continue
    raise ValueError(text)


def env_value(env: dict, column: str) -> str:
    """An environment's value as the history shows it: a commit at 12 characters, '-dirty' kept where it was (a clean
    commit showed at 12 characters beside a dirty one at 40)."""
    v = env.get(column)
    if v in (None, ""):
        return ""
    if column != "git_commit":
        return str(v)
    commit, dirty = str(v).removesuffix("-dirty"), str(v).endswith("-dirty")
    return commit[:12] + ("-dirty" if dirty else "")


def changes(before: dict, after: dict) -> list:
    """What differs between two environments, in ENV_WORDS' order: ['torch 2.14.1 -> 2.15.0', ...]."""
    out = []
    for column, word in ENV_WORDS:
        a, b = env_value(before, column), env_value(after, column)
        if a != b:
            out.append(f"{word} {a or '?'} -> {b or '?'}")
    return out


def _broken(sweep: results.Sweep) -> dict:
    return {r["config_key"]: f"{r['status']}: {r['reason'] or 'no reason recorded'}" for r in sweep.problems
            if r["mode"] == "bench" and r["status"] in ("failed", "interrupted")}


def partial_words(sweep: dict, c: Optional[results.Config]) -> str:
    """'interrupted: 2 of 3 processes' for a configuration of a sweep that did not run to its end (Ctrl-C, a death, or
    one still running), '' for a completed one: a history showed a sweep interrupted after 2 of its 3 rounds as a
    normal row. The count planned is the sweep's --repeats (its noise probe may have planned more)."""
    status = str(sweep.get("status") or "completed")
    if status == "completed" or c is None:
        return ""
    planned = json.loads(sweep.get("config_json") or "{}").get("repeats")
    n = len(c.process_sps)
    if isinstance(planned, int) and n < planned:
        return f"{status}: {n} of {planned} processes"
    return f"{status} sweep; {n} process{'es' if n != 1 else ''} of this configuration had run"


def _steps(ok: dict) -> dict:
    """{sweep id: [(config key, the sweep that measured it before)]}: every configuration's steps, all sweeps read."""
    out: dict = {}
    last: dict = {}
    for sid in sorted(ok):
        for key in ok[sid]:
            if key in last:
                out.setdefault(sid, []).append((key, last[key]))
            last[key] = sid
    return out


def build(conn, filters: Filters = Filters(), threshold: float = 0.05, drift: Optional[float] = None,
          history: int = compare.DEFAULT_HISTORY, leave_out: tuple = ()) -> History:
    """The history of every configuration the filters keep, over the store's own sweeps since filters.since.
    leave_out: sweep ids whose noise counts for no step (compare's --leave-out); their own rows stay."""
    every = read.sweeps(conn)
    loaded = {int(r["sweep_id"]): results.load(conn, int(r["sweep_id"])) for r in every}
    ok = {sid: {c.key: c for cs in s.bench.values() for c in cs} for sid, s in loaded.items()}
    calls = _Calls(conn, ok, {int(r["sweep_id"]): r for r in every}, threshold, drift, history, leave_out)
    calls.judge_in_order(_steps(ok))   # every step of every configuration, filters aside: levels need all of them
    rows = every
    if filters.since:
        rows = [r for r in every if str(r.get("started_at") or "")[:len(filters.since)] >= filters.since]
    broken = {int(r["sweep_id"]): _broken(loaded[int(r["sweep_id"])]) for r in rows}
    by_id = {int(r["sweep_id"]): r for r in rows}
    shown: dict = {}                 # key -> [(sweep id, Config or None)]
    for sid in by_id:
        for key, c in ok[sid].items():
            if filters.keeps(c):
                shown.setdefault(key, []).append((sid, c))
    for sid in by_id:                # failures of a configuration measured somewhere in the history
        for key in broken[sid]:
            if key in shown and key not in ok[sid]:
                shown[key].append((sid, None))
    series, once = [], []
    for key, appearances in shown.items():
        appearances.sort(key=lambda a: a[0])
        if sum(c is not None for _, c in appearances) < 2:
            once += [(key, sid) for sid, c in appearances if c is not None]
            continue
        points, last_ok = [], None
        for sid, c in appearances:
            p = Point(sweep=by_id[sid], config=c, failed="" if c is not None else broken[sid][key],
                      base=next((b for b in ok[sid].values() if c is not None and b.label == c.baseline), None),
                      partial=partial_words(by_id[sid], c))
            if last_ok is not None:
                p.previous = last_ok
                p.changes = changes(by_id[last_ok]["env"], by_id[sid]["env"])
                if c is not None:
                    p.call = calls.get(last_ok, sid, key)
                    p.level = calls.level_at.get((key, last_ok))
            if c is not None:
                last_ok = sid
            points.append(p)
        c0 = next(c for _, c in appearances if c is not None)
        series.append(Series(key, c0.workload, c0.strategy, c0.device_count, c0.variant, points))
    order = {s: i for i, s in enumerate(results.STRATEGY_ORDER)}
    series.sort(key=lambda s: (s.workload, s.variant != "fp32", s.variant, order.get(s.strategy, 9), s.device_count))
    drawn = {p.sweep_id for s in series for p in s.points}
    return History(sweeps=[r for sid, r in by_id.items() if sid in drawn] if series else list(by_id.values()),
                   series=series, once=sorted(once), threshold=threshold, drift=drift, stored=len(every),
                   leave_out=tuple(leave_out))


class _Calls:
    """compare's calls on the steps between two sweeps, made once per pair over every configuration they share, in time
    order. A configuration's noise is measured within its level: from the sweeps since its last step that a call marked
    (a regression or an improvement: a level shift), never across it. Measured across, one real regression (55.9k to
    27.8k samples/s) read as noise, and the next step, 3x slower, was 'within the noise (sd 65%, calls slowdowns
    beyond 391%)'. Sweeps in `leave_out` are no step's evidence (compare's --leave-out)."""

    def __init__(self, conn, ok: dict, by_id: dict, threshold: float, drift: Optional[float], history: int,
                 leave_out: tuple = ()):
        self.conn, self.ok, self.by_id = conn, ok, by_id
        self.threshold, self.drift, self.history, self.leave_out = threshold, drift, history, set(leave_out)
        self.done: dict = {}
        self.throughputs: dict = {}
        self.marked: dict = {}         # config key -> the sweeps into which a step of it was marked, in time order
        self.level_at: dict = {}       # (config key, baseline sweep) -> the level's first sweep, where one was marked

    def _processes(self, sid: int) -> dict:
        if sid not in self.throughputs:
            self.throughputs[sid] = results.process_throughputs(self.conn, sid)
        return self.throughputs[sid]

    def judge_in_order(self, steps: dict) -> None:
        """Judge every step oldest first, so that each pair's levels are known when its call is made."""
        for cur in sorted(steps):
            for key, prev in steps[cur]:
                call = self.get(prev, cur, key)
                if call is not None and (call.regression or call.improvement):
                    self.marked.setdefault(key, []).append(cur)

    def _earlier(self, prev: int, key: str, ids: list) -> list:
        start = max((m for m in self.marked.get(key, ()) if m <= prev), default=0)   # its level at the baseline
        if start:
            self.level_at[(key, prev)] = start
        kept = [e for e in ids if e >= start and e not in self.leave_out and key in self._processes(e)]
        return [self._processes(e)[key] for e in kept][-self.history:]

    def get(self, prev: int, cur: int, key: str) -> Optional[compare.Call]:
        if (prev, cur) not in self.done:
            base, cand = self.ok[prev], self.ok[cur]
            ids = read.earlier_sweeps(self.conn, prev, self.by_id[prev].get("hostname"),
                                      self.history + len(self.leave_out)) if self.history else []
            samples = {k: (base[k].process_sps, cand[k].process_sps, self._earlier(prev, k, ids) if self.history else [])
                       for k in sorted(set(base) & set(cand))}
            self.done[(prev, cur)] = compare.judge(samples, self.threshold, self.drift,
                                                   device_types={k: base[k].device_type for k in samples})
        return self.done[(prev, cur)].get(key)


MEANING = ("X% slower: the training step X% longer (its samples/s lower by 1 - 1/(1 + X)), the sense --threshold "
           "counts in; X% faster: the samples/s X% higher")


def change_words(p: Point) -> str:
    """'12% slower' / '1.30x faster' of a step (compare's ratio), '' without one."""
    if p.call is None or math.isnan(p.call.comparison.ratio):
        return ""
    r = p.call.comparison.ratio
    if r < 1:
        return f"{1 / r - 1:.0%} slower"
    return f"{r - 1:.0%} faster" if r > 1 else "no change"


def p_value(p: Point) -> float:
    """The p-value behind a mark: one-sided for a slowdown, two-sided for a speed-up (as compare's words say)."""
    pc = p.call.comparison
    return pc.p_slower if pc.ratio < 1 else pc.p_two_sided


def summary_lines(h: History) -> list:
    """The terminal's text: one line per marked step ("ddp x8 synthetic: 12% slower since sweep 41 (torch 2.14 ->
    2.15), p=0.003"), and one per configuration with none."""
    out = []
    for s in h.series:
        marked = [p for p in s.points if p.marked]
        for p in marked:
            what = "; ".join(p.changes) or "nothing in the environment changed"
            what += f"; sweep {p.sweep_id} {p.partial}" if p.partial else ""
            if p.marked == "failed":
                out.append(f"{s.name}: ok in sweep {p.previous}, {p.failed} in sweep {p.sweep_id} ({what})")
            else:
                out.append(f"{s.name}: {change_words(p)} since sweep {p.sweep_id} ({what}), p={p_value(p):.2g}"
                           + (" (REGRESSION)" if p.marked == "regression" else " (IMPROVEMENT)"))
        if not marked:
            out.append(f"{s.name}: {_unmarked(s)}" + "".join(f"; sweep {p.sweep_id} {p.partial}" for p in s.points
                                                             if p.partial))
    return out


def _unmarked(s: Series) -> str:
    """A configuration with no marked step: 'no step beyond the noise' only over steps that were decided; where none
    was, it says so (a history read 'no step beyond the noise over 2 sweeps (16885.9 -> 28182.1 samples/s)' of a
    1.67x move whose noise nothing measured)."""
    ok = [p for p in s.points if p.config is not None]
    steps = [p for p in ok if p.call is not None]
    undecided = sum(1 for p in steps if not p.call.decided)
    span = f"over {len(ok)} sweeps ({ok[0].config.samples_per_s:.1f} -> {ok[-1].config.samples_per_s:.1f} samples/s)"
    if steps and undecided == len(steps):
        return f"not decided {span}: no evidence of the noise for " + ("its step" if undecided == 1 else
                                                                         f"any of its {undecided} steps")
    return (f"no {'decided ' if undecided else ''}step beyond the noise {span}"
            + (f"; {undecided} of its {len(steps)} steps could not be decided (no evidence of the noise)" if undecided else ""))
