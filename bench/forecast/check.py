"""The forecast checked against measured counts, reading nothing of the count it judges but what its basis says.

    runs = Runs(comm=sweep.comm, inter=interference_runs, device_type="cpu")
    machine = machine_for(runs, counts, preset, explicit, gpus_per_node)     # the network and interference of counts
    rows = validate(s, runs, preset, explicit, created_at)                   # each measured count above the smallest
    rows = validate_against(s, judged, runs, preset, explicit, created_at, judged_sweep)   # a later sweep's counts

Basis of a check at count n (stored with each row, printed beside it):
  held out            nothing of x n or above: compute, buckets and spread from smaller counts, the machine (network,
                      interference) from the microbenchmark at smaller counts or typed (--network)
  machine at x n      compute, buckets and spread from smaller counts; the machine measured at x n by the collectives
                      microbenchmark, apart from any training step (the held-out form a sweep `--gpus 1
                      --comm-counts 2` gives: nothing of x n's training read)
  later sweep         the forecast read only an earlier sweep (its training and its machine measurements); the
                      measurement judged is another sweep's (`forecast --against SWEEP`)
Where no basis exists (no network below and none at x n) the row says why and holds no error. Each row holds the
forecast's range (bench.forecast.spread) of the step and of the memory, and whether each measurement fell inside it;
`assumed_words` says what a forecast assumed and how far it erred where the sweep measured a count (`assumed`: what it
assumed, the one list the terminal, the report's text and its plot all name).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Optional

from bench.forecast import brackets
from bench.forecast import settings as fs
from bench.forecast import interference as itf
from bench.forecast import network as nw
from bench.forecast import spread
from bench.config import ConfigError

CHECK_TARGET = 0.10                  # errors beyond 10% are called out, with what the model left out


@dataclass
class Runs:
    """The machine measurements of a sweep: [(device_count, nodes, rows)] of its comm runs and interference rows."""
    comm: list = field(default_factory=list)
    inter: list = field(default_factory=list)
    device_type: str = "cpu"


def machine_for(runs: Runs, counts: tuple, preset, explicit: dict, gpus_per_node: int) -> fs.Machine:
    """The network (levels typed, else fitted from the comm rows of `counts`, else the preset's) and the interference
    (the rows of `counts`, else assumed) for a topology of gpus_per_node devices per node."""
    comm = [r for r in runs.comm if r[0] in counts]
    measured = nw.levels_from_comm(comm)
    net = nw.network_for({k: v for k, v in measured.items() if k not in explicit}, preset, explicit, gpus_per_node,
                         "nccl" if runs.device_type == "cuda" else "gloo", own=nw.own_levels(comm))
    rows = [{**row, "nodes": nodes} for n, nodes, rs in runs.inter if n in counts for row in rs]
    where = ",".join(str(n) for n in sorted({n for n, _, _ in runs.inter if n in counts}))
    runs_at = [n for n, _, _ in runs.inter if n in counts]
    each = f", {len(runs_at) // len(set(runs_at))} runs each" if runs_at and len(runs_at) > len(set(runs_at)) else ""
    inter = itf.from_rows(rows, runs.device_type, f"at {where} ranks{each}" if where else "")
    counts = tuple(sorted(set(counts)))
    return fs.Machine(net, inter, counts, f"the machine measured at x{','.join(map(str, counts))}")


def _basis(runs: Runs, n: int, explicit: dict) -> tuple:
    """(counts the check may read the machine from, basis in words) for a check at n; (None, why) when none."""
    below = tuple(sorted({c for c, _, _ in runs.comm if c < n}))
    if below:
        return below, f"held out: nothing of x{n} or above (the machine from x{','.join(map(str, below))})"
    if explicit:
        return (), f"held out: nothing of x{n} or above (the network typed with --network; interference assumed)"
    if any(c == n for c, _, _ in runs.comm):
        return (n,), (f"machine at x{n}: its collectives and their interference, measured apart from training; "
                      f"nothing of x{n}'s training read")
    return None, f"no network below x{n} or at it (no collectives microbenchmark; --network names one)"


def inside(lo: float, hi: float, measured: float):
    """1 if the measured value lies in [lo, hi], 0 if not; None where there is no range (`brackets.flat`: none drawn, or
    draws that never varied: memory_x wherever each peak was measured once, a step where no input was measured twice):
    such a value is neither inside nor outside, as the line's "no range" says."""
    return None if brackets.flat(lo, hi) else int(lo <= measured <= hi)


def _row(s: fs.Setting, target, inp, machine: fs.Machine, basis: str, judged_sweep, created_at: str, raw) -> dict:
    n = target.device_count
    p = fs.series(s, inp, (n,), machine, spread.DRAWS)[0]
    lo, hi = p.range_of("step_ms")
    measured = target.summary.median_ms
    row = {"config_key": target.key, "workload": s.workload, "strategy": s.strategy, "variant": s.variant,
           "device_count": n, "measured_step_ms": measured, "judged_sweep": judged_sweep,
           "measured_samples_per_s": target.samples_per_s, "created_at": created_at, "basis": basis,
           "from_counts": ",".join(map(str, inp.from_counts)), "forecast_step_ms": p.step_ms,
           "forecast_step_ms_low": None if math.isnan(lo) else lo, "forecast_step_ms_high": None if math.isnan(hi) else hi,
           "in_range": inside(lo, hi, measured),
           "forecast_samples_per_s": p.samples_per_s, "error": p.step_ms / measured - 1,
           "network": f"node: {machine.net.node.source}" + (f"; net: {machine.net.net.source}" if machine.gpus_per_node < n
                                                            else "") + f"; {inp.inter.words()}"}
    mine = raw.no_sync if s.strategy in ("ddp", "zero") and raw is not None else None
    if mine:
        # like for like: the target's no_sync() step skips DDP's own gradient work, which the forecast's compute holds
        own_less = replace(inp.compute, backward_ms=inp.compute.backward_ms - inp.own_ms)
        compute = own_less.slowed(inp.inter.co_run_x(n, target.nodes) / inp.co_run_base)   # inp.inter: this model's
        row["compute_error"] = (compute.total_ms - (mine["step_ms"] - mine.get("buffers_ms", 0.0))) / target.summary.median_ms
    again = raw.sync if raw is not None and s.strategy in ("ddp", "zero") else None
    row["noise"] = again["step_ms"] / target.summary.median_ms - 1 if again else None
    if p.memory is not None and raw is not None and raw.peak_mib is not None:
        # the range of what the peak is held to: the table's (device level) less the runtime carried as measured
        mlo, mhi = (v - p.memory.runtime_mib for v in p.range_of("memory_mib"))
        row.update(forecast_mem_mib=p.memory.checked_mib, measured_mem_mib=raw.peak_mib, mem_method=raw.peak_method,
                   mem_error=p.memory.checked_mib / raw.peak_mib - 1 if raw.peak_mib > 0 else None,
                   forecast_mem_mib_low=None if math.isnan(mlo) else mlo,
                   forecast_mem_mib_high=None if math.isnan(mhi) else mhi,
                   mem_in_range=inside(mlo, mhi, raw.peak_mib))
    row["why"] = why(row, inp, mine) if abs(row["error"]) > CHECK_TARGET else ""
    return row


def validate(s: fs.Setting, runs: Runs, preset, explicit: dict, created_at: str) -> list:
    """One row per measured count above the smallest: the forecast from what the basis allows, beside it."""
    rows = []
    counts = sorted(s.configs)
    smallest = min(counts + ([1] if s.single is not None else []))
    for n in counts:
        if n <= smallest:
            continue
        target = s.configs[n]
        head = {"config_key": target.key, "workload": s.workload, "strategy": s.strategy, "variant": s.variant,
                "device_count": n, "measured_step_ms": target.summary.median_ms, "created_at": created_at,
                "measured_samples_per_s": target.samples_per_s, "from_counts": ""}
        allowed, basis = _basis(runs, n, explicit)
        if allowed is None:
            rows.append({**head, "why": basis})
            continue
        g = max(1, n // max(1, target.nodes))
        try:
            machine = machine_for(runs, allowed, preset, explicit, g)
        except ConfigError as e:
            rows.append({**head, "why": str(e)})
            continue
        inp = fs.inputs(s, machine, below=n)
        if isinstance(inp, str):
            rows.append({**head, "why": inp})
            continue
        rows.append(_row(s, target, inp, machine, basis, None, created_at, s.raws.get(target.key)))
    return rows


def validate_against(s: fs.Setting, judged: fs.Setting, runs: Runs, preset, explicit: dict, created_at: str,
                     judged_sweep: int, judged_raw: dict) -> list:
    """The forecast of s (an earlier sweep: its training and machine only) at each count of `judged` (a later sweep's
    same setting) it did not train, beside that sweep's measurement."""
    rows = []
    for n, target in sorted(judged.configs.items()):
        if n in s.configs:
            continue
        g = max(1, n // max(1, target.nodes))
        machine = machine_for(runs, tuple(sorted({c for c, _, _ in runs.comm})), preset, explicit, g)
        inp = fs.inputs(s, machine)
        if isinstance(inp, str):
            continue
        basis = f"later sweep: the forecast read only its own sweep; sweep {judged_sweep}'s x{n} judged ({machine.words})"
        rows.append(_row(s, target, inp, machine, basis, judged_sweep, created_at, judged_raw.get(target.key)))
    return rows


def why(row: dict, inp: fs.Inputs, own: Optional[dict]) -> str:
    """What the model left out, read off the measured configuration (only to explain, never to forecast); own: the
    target's own compute under no_sync (DDP)."""
    parts = []
    if own and row.get("compute_error") is not None:
        less = (f" (less DDP's own gradient work, {inp.own_ms:.1f} ms of bucket copies from x1's probe, which "
                "no_sync() skips too)" if inp.own_ms > 0 else "")
        parts.append(f"compute without gradient sync was {own['step_ms']:.1f} ms at x{row['device_count']}; the "
                     f"forecast's compute{less} {row['compute_error']:+.0%} of the step off it (the ranks share this "
                     "machine)")
        parts.append(f"communication and waiting: {row['error'] - row['compute_error']:+.0%} of the step off the "
                     "measurement")
    if row.get("noise") is not None and abs(row["noise"]) > CHECK_TARGET / 2:
        parts.append(f"the measurement itself moved: the same step in the probe's synchronised blocks, later in the same "
                     f"processes, took {row['noise']:+.0%} against the measured window (load on the machine)")
    if row["strategy"] in ("fsdp", "hsdp"):
        parts.append("FSDP2's per-unit copy-in/copy-out beyond one rank's are outside the model")
    return "; ".join(parts)


def band(rows: list) -> tuple:
    """(lowest, highest) signed error of the checked rows, each side at least 0: how far the forecast erred where the
    sweep measured a count, which is all that is known of an assumption's error (interference not measured, a level
    not measured): the band drawn beside the range for such a forecast."""
    errs = [r["error"] for r in rows if r.get("error") is not None and not math.isnan(r["error"])]
    return (min(0.0, min(errs)), max(0.0, max(errs))) if errs else (math.nan, math.nan)


def _origin(level: nw.Level) -> str:
    """Where an assumed level's figures come from, briefly: 'preset h100', '--network net=50@5', 'as fast as ...'."""
    kind, name = nw.origin(level)
    if kind == "flat":
        return "as fast as the other level" if level.source.startswith("assumed as fast") else ""
    return {"preset": f"preset {name}", "typed": name}.get(kind, "")


def assumed(machine: fs.Machine, counts: Optional[tuple] = None) -> list:
    """[(what, how)] the forecast's machine assumed rather than measured: interference ('none' or 'serial'), the network
    inside a node and the one between nodes (how: its origin, `_origin`), a level only where the forecast's counts
    reach it (None: every count). One list for the terminal, the report's text (`assumed_words`) and its plot: a
    one-GPU sweep's forecast for 2-8 GPUs rests on its GPU's preset inside the node, and all three say so."""
    beyond = lambda size: counts is None or any(n > size for n in counts)  # noqa: E731
    out = []
    if not machine.inter.measured:
        out.append(("interference", "none" if machine.inter.assumed_compute_x == 1.0 else "serial"))
    for what, level, size in (("network inside a node", machine.net.node, 1),
                              ("network between nodes", machine.net.net, machine.gpus_per_node)):
        if not level.measured and beyond(size):
            out.append((what, _origin(level)))
    return out


def assumed_words(machine: fs.Machine, rows: list, counts: Optional[tuple] = None) -> str:
    """For a forecast resting on an assumption (interference, the network inside a node or between nodes not
    measured at the forecast's `counts`: `assumed`): what it is, which way it errs, and how far the forecast erred
    where this sweep measured a count; '' for none."""
    what = [f"{w} {how}" if w == "interference" else f"the {w}" + (f" ({how})" if how else "")
            for w, how in assumed(machine, counts)]
    if not what:
        return ""
    checked = [r for r in rows if r.get("error") is not None and not math.isnan(r["error"])]
    lo, hi = band(checked)
    where = (f"where this sweep measured x{','.join(str(r['device_count']) for r in checked)} the forecast erred "
             f"{min(r['error'] for r in checked):+.0%} to {max(r['error'] for r in checked):+.0%} (drawn as its band, "
             f"{lo:+.0%} to {hi:+.0%})" if checked else "not checked: this sweep measured no count to hold it to, so "
             "how far it errs is unknown here")
    return f"assumed, not measured: {' and '.join(what)}: outside the range; {where}"
