"""What the forecast says, shared by `./run_bench.sh forecast` and the report: the network a stored sweep is
forecast on, a setting's series over counts, the changes that would move it (what-ifs), the count where
scaling efficiency falls below 75%, and the sentence that says so.

    machine = machine(sweep, runs, preset=None, levels={}, gpus_per_node=None)   # forecast.settings.Machine
    attach_bounds(sets, kind_of)                         # each one-device run's measured bound, from the caller
    rests_on(setting, inputs, machine)                   # what the forecast rests on, measured or assumed, in words
    pts = series(setting, inputs, counts, machine)       # [forecast_sweep.Point]
    what_ifs(setting, inputs, machine, counts)           # [(what, [Point])]: this network first
    first_below(pts), stop_range(pts), recommendation(setting, pts, what_ifs)
    cells(setting, point)                                # the table's row (COLUMNS: one entry per column)
    unbracketed_words(points)                            # once under it: what a figure without brackets means
No claim without its basis: where the sweep has no single-device run of the same numerics, efficiency is unknown
and the recommendation says what is missing and what to run instead of a count.
"""
from __future__ import annotations

import json
import math
from typing import Optional

from bench.forecast import brackets
from bench.forecast import check as fk
from bench.forecast import settings as fs
from bench.forecast import memory as mm
from bench.forecast import network as nw
from bench.forecast import overhead
from bench.forecast import whatif
from bench import stats
from bench.shared.spec import STRATEGY_NAMES

EFFICIENT = whatif.EFFICIENT                      # below this, scaling stops paying (0.75)
GPU_PRESETS = (("H100", "h100"), ("H200", "h100"), ("A100", "a100"), ("V100", "v100"))
DOUBLING = tuple(2**k for k in range(1, 11))      # 2 .. 1024: past one device
what_ifs = whatif.what_ifs                        # [(what, [Point])]: this network first (bench.forecast.whatif)
first_below, network_sets = whatif.first_below, whatif.network_sets   # the first count under 75%; what sets it
on_words = whatif.on_words                        # the network a verdict is on: 'this network' only where measured
# The ranges as the table and the verdicts write them (bench.forecast.brackets)
bracket, ranged, SHOWN, stop_range, _between = (brackets.bracket, brackets.ranged, brackets.SHOWN,
                                                brackets.stop_range, brackets.between)
unbracketed_words = brackets.unbracketed_words
WINDOWS = "windows"                               # a measured row's efficiency basis (`_efficiency`)
BASIS_WORDS = (f"efficiency ({WINDOWS}): a measured row's, as the report's, from its measured windows' throughput; a "
               "forecast row's from its step against single device x1's median step (the forecast has no windows)")


def budget(sweep, given_gib: Optional[float] = None) -> tuple:
    """(MiB per device, which budget in words) the forecast's memory is held to, by the report's rule
    (bench.forecast.memory.budget): 'the 16.00 GiB budget (--memory-budget-gib)', "the sweep's 16.00 GiB budget",
    "the GPU's 79.18 GiB"; (None, '') without one. A fit sweep with --memory-budget-gib 16 read 'fits in 140 GiB' at
    17.5 GiB per device (the GPU's memory) beside the page's own 'over the budget'."""
    mib, source = mm.budget(sweep, given_gib)
    text = mm.budget_text(mib)
    return mib, {mm.TYPED: f"the {text} budget (--memory-budget-gib)", mm.SWEPT: f"the sweep's {text} budget",
                 mm.GPU: f"the GPU's {text}"}.get(source, "")


def shown_efficiency(s: fs.Setting, eff: float, count: int) -> str:
    """Efficiency as the report shows it (bench.stats.shown_efficiency): above 100% only with why; the noise
    is the spread between the processes of the setting and of its single-device baseline."""
    if eff is None or math.isnan(eff):
        return "–"
    noise = stats.noise_bound(s.single.process_sps if s.single is not None else [], s.any.process_sps,
                              getattr(s.any, "noise_fallback", stats.NOT_MEASURED))
    return stats.shown_efficiency(eff, noise, count).text()


def auto_preset(sweep) -> Optional[nw.Preset]:
    """The preset a CUDA sweep's GPU names (from its environments), for the levels it did not measure."""
    names = " ".join(str(e.get("gpu_names") or "") for e in sweep.envs)
    return next((nw.PRESETS[p] for key, p in GPU_PRESETS if key in names), None)


def gpus_per_node(sweep, given: Optional[int], preset: Optional[nw.Preset]) -> int:
    """Given, else the preset's, else the sweep's resolved --gpus-per-node, else its largest count on one node."""
    if given:
        return given
    if preset is not None:
        return preset.gpus_per_node
    cfg = json.loads(sweep.sweep.get("config_json") or "{}")
    measured = max((c.device_count // max(1, c.nodes) for cs in sweep.bench.values() for c in cs), default=1)
    return int(cfg.get("gpus_per_node") or measured)


def machine(sweep, runs: fk.Runs, preset: Optional[nw.Preset] = None, levels: Optional[dict] = None,
            given_gpus_per_node: Optional[int] = None) -> fs.Machine:
    """The forecast's machine: network levels the user typed, else measured (the sweep's all-reduce rows at every
    count), else the preset (named, or the one the sweep's GPUs name), else the other level's figures
    (bench.forecast.network); the interference the sweep measured, else assumed."""
    levels = levels or {}
    preset = preset or (auto_preset(sweep) if "net" not in levels else None)
    g = gpus_per_node(sweep, given_gpus_per_node, preset)
    return fk.machine_for(runs, tuple(sorted({c for c, _, _ in runs.comm})), preset, levels, g)


def attach_bounds(sets: list, kind_of) -> None:
    """Give each setting the measured bound of its runs at one device (kind_of(config) -> words, the report's
    bench.report.bound.bound: 'host-bound (GPU busy 39%)'), shown where the forecast falls through to the local
    step ('local step (host-bound, measured)'); a bound not measured is left out (the column then reads 'local step').
    Passed in: the forecast imports neither the analysis nor the report."""
    for s in sets:
        ones = [c for c in list(s.configs.values()) + [s.single] if c is not None and c.device_count == 1]
        s.bounds = {c.key: kind for c, kind in ((c, kind_of(c)) for c in ones)
                    if kind and not kind.startswith("not measured")}


def rests_on(s: fs.Setting, inp: fs.Inputs, m: fs.Machine) -> list:
    """What a setting's forecast rests on, in words: its inputs and, for FSDP, where its collectives' costs come from."""
    return inp.words + (nw.collective_words(m.net) if s.strategy in ("fsdp", "hsdp") else [])


def series(s: fs.Setting, inp: fs.Inputs, counts: tuple, m: fs.Machine, draws: int = 0) -> list:
    """[Point] at each count; with draws (bench.forecast.spread.DRAWS) each with its range."""
    return fs.series(s, inp, counts, m, draws)


def measured_point(s: fs.Setting, count: int) -> fs.Point:
    """A measured configuration as a Point (its median step, throughput, efficiency, peak), for the same table. At one
    device there is no scaling: no efficiency, and its bound column says the wrapper's overhead against single."""
    c = s.configs[count]
    raw = s.raws.get(c.key)
    mem = (mm.Memory(count, {"measured peak": raw.peak_mib}, runtime_mib=raw.runtime_mib or 0.0)
           if raw is not None and raw.peak_mib is not None else None)
    one = count == 1 and c.strategy != "single"
    over = overhead.wrapper_overhead(c, s.single) if one else ""
    return fs.Point(count=count, nodes=c.nodes, step_ms=c.summary.median_ms, samples_per_s=c.samples_per_s,
                    efficiency=math.nan if one else c.efficiency, bound="measured" + (f"; {over}" if over else ""),
                    memory=mem, basis=WINDOWS)


def _efficiency(s: fs.Setting, p: fs.Point) -> str:
    """The efficiency cell; a measured row's marked with its basis ('31% (windows)'): it is the report's, from the
    measured windows' throughput, where a forecast row's is its step against single x1's median step (the forecast has
    no windows). Unmarked, one column held both: a measured x2 read 20% at 8.2 ms beside a forecast x8 at 17% with a
    shorter step. A forecast row's is never 'measured' (`forecast_efficiency`)."""
    if p.basis != WINDOWS:
        return forecast_efficiency(s, p)
    shown = shown_efficiency(s, p.efficiency, p.count)
    if shown == "–":
        return shown
    return shown + bracket(p, "efficiency", lambda v: format(v, ".0%")) + f" ({p.basis})"


def forecast_efficiency(s: fs.Setting, p: fs.Point) -> str:
    """A forecast row's efficiency: 'not resolved' where its baseline or its compute's run is one unstable process
    (`Point.unresolved`, the rule the report's recommendation uses), with the figure and why; above 100% with its cause
    (`above_ideal`); else the figure and its range. The measured rows' wording (bench.stats.shown_efficiency) said
    'measured 101%' of a forecast at 16 GPUs, and 152% against a single x1 whose steps spread 80% of their median."""
    if p.efficiency is None or math.isnan(p.efficiency):
        return "–"
    figure = f"{p.efficiency:.0%}" + bracket(p, "efficiency", lambda v: format(v, ".0%"))
    if p.unresolved:
        base = f" against {s.single.label}" if s.single is not None else ""
        return f"not resolved ({figure}{base}: {p.unresolved}; --repeats 3 measures it)"
    if p.efficiency > 1.0:
        return f"{figure} ({above_ideal(s, p)})"
    return figure


def above_ideal(s: fs.Setting, p: fs.Point) -> str:
    """Why a forecast passes 100%: the optimizer step divided by the ranks (ZeRO and FSDP step on their shard; CPU
    offload's on the host, `bench.forecast.inputs.host_x`) where that alone lifts it past 100%, else that the
    forecast step is shorter than the baseline's median step: above the ideal either way, a forecast, not measured."""
    saved = p.optimizer_one_ms - p.optimizer_ms
    if not math.isnan(saved) and saved > 0 and p.efficiency * p.step_ms / (p.step_ms + saved) <= 1.0:
        host = "on the host (CPU offload), " if s.offloaded else ""
        return (f"above the ideal 100%: {STRATEGY_NAMES.get(s.strategy, s.strategy)}'s optimizer step {host}divided by "
                f"the {p.count} ranks' shards, {p.optimizer_one_ms:.2f} ms at one rank, {p.optimizer_ms:.2f} ms here")
    base = s.single.summary.median_ms if s.single is not None else math.nan
    return (f"above the ideal 100%: the forecast step {p.step_ms:.1f} ms is shorter than {s.single.label}'s median "
            f"{base:.1f} ms" if s.single is not None else "above the ideal 100%")


# The forecast's table, in the terminal and the report alike: (header, cell(setting, point) -> text). A column is one
# entry here (the range, where drawn, in brackets after the central value: bench.forecast.spread).
COLUMNS = [
    ("devices", lambda s, p: str(p.count)),
    ("nodes", lambda s, p: str(p.nodes)),
    ("step ms", lambda s, p: ranged(p, "step_ms", None if p.refused else p.step_ms, SHOWN["step_ms"])),
    ("samples/s", lambda s, p: ranged(p, "samples_per_s", None if p.refused else p.samples_per_s,
                                      SHOWN["samples_per_s"])),
    ("efficiency", lambda s, p: "–" if p.refused else _efficiency(s, p)),
    ("MiB/device", lambda s, p: ranged(p, "memory_mib", p.memory.device_mib if p.memory else None,
                                       SHOWN["memory_mib"])),
    ("bound", lambda s, p: f"refused: {p.refused}" if p.refused else sharded_net(p) or p.bound + (
        f" ({p.algorithm})" if p.algorithm and p.bound == "exposed communication" else "") + (
        " (unstable run)" if p.unsteady and p.bound == "straggler/jitter" else "")),
]


def sharded_net(p: fs.Point) -> str:
    """A forecast row above 100% because the optimizer step divides by the ranks (ZeRO, FSDP): the net effect, the
    optimizer time saved against the exposed communication, both in ms, in place of a bound; '' for any other row. A
    ZeRO row at 101% read 'exposed communication (tree)': no bound a step faster than the ideal can have."""
    saved = p.optimizer_one_ms - p.optimizer_ms
    if p.basis == WINDOWS or not p.efficiency > 1.0 or not saved > 0:
        return ""
    exposed = 0.0 if math.isnan(p.exposed_comm_ms) else p.exposed_comm_ms
    algorithm = f" ({p.algorithm})" if p.algorithm and exposed > 0 else ""
    return (f"no bound above 100%: optimizer {saved:.2f} ms saved by the shards against {exposed:.2f} ms exposed "
            f"communication{algorithm}: net {abs(saved - exposed):.2f} ms a step "
            + ("saved" if saved >= exposed else "lost"))


def cells(s: fs.Setting, p: fs.Point) -> list:
    return [cell(s, p) for _, cell in COLUMNS]


def missing_baseline(s: fs.Setting) -> str:
    """Why efficiency cannot be stated for s ('' when it can)."""
    if s.single is not None:
        return ""
    return (f"efficiency unknown: the sweep has no single-device run of [{s.variant.split(',')[0]}] at 1 device to "
            f"hold the throughput against (run with --strategies single,{s.strategy} --gpus 1,...)")


def unit(s: fs.Setting, n: int) -> str:
    """'8 GPUs', '1 process': a count in the sweep's unit, as the report counts (bench.report.names.units, which the
    forecast may not import: tests/test_layout.py): on CPU a device is a gloo process. A CPU sweep's verdict read
    'past 8 GPUs'."""
    cuda = getattr(s.any, "device_type", "cuda") == "cuda"
    return f"{n} " + (("GPU" if cuda else "process") if n == 1 else ("GPUs" if cuda else "processes"))


def unsteady_words(points: list, bound: str = "") -> str:
    """'; rests on DDP x1 [bf16], unstable: ...; its straggler/jitter term is that spread': where the forecast's
    compute and tail are read from a run the analysis calls unstable, what that moves ('' for a steady one)."""
    shaky = next((p.unsteady for p in points if p.unsteady), "")
    if not shaky:
        return ""
    moved = ("no figure of it is a training step's" if "which did not train" in shaky else  # forecastable.NOT_TRAINING
             "the line through the steps is drawn through it" if any(p.bound.startswith("DataParallel") for p in points)
             else "its straggler/jitter term is that spread" if bound == "straggler/jitter" else
             "the compute and the straggler/jitter term are read from that spread")
    return f"; rests on {shaky}; {moved}"


def recommendation(s: fs.Setting, points: list, whatifs: Optional[list] = None, on: str = "this network") -> str:
    """'past N GPUs on this network (between N1 and N2), scaling stops paying' where the forecast crosses 75%, the
    range from the draws; never a claim from a missing value; with the what-ifs, whether the network sets N; where it
    rests on an unstable run, that (`unsteady_words`). on: the network, as `on_words` names it."""
    shaky = unsteady_words(points, next((p.bound for p in points if p.count == first_below(points)), ""))
    if any(p.unresolved for p in points if not p.refused) and s.single is not None:
        # the baseline's instability in the stats' words; the compute's run's in the caller's (`unsteady_words`)
        base = stats.unsteady_words([s.single])
        return (f"{s.label}: where scaling stops paying is not resolved (one unstable process: --repeats 3)"
                + (f": {base}" if base else "") + per_device_words(s, points) + shaky)
    return _recommendation(s, points, whatifs, on) + per_device_words(s, points) + shaky


def below_words(whatifs: list, top: int, on: str = "this network") -> str:
    """'this network: 4; 4x faster inter-node network: 8': where each line falls under 75% (the first named `on`,
    `on_words`' short form); 'not resolved (...)' where the forecast rests on one unstable process (`recommendation`),
    never a count then; '' where no efficiency is known (no single device x1 to hold it against: a transformer sweep
    read 'efficiency unknown' and 'Under 75% from: this network: not up to 1024')."""
    if not any(not p.refused and not math.isnan(p.efficiency) for p in whatifs[0][1]):
        return ""
    if any(p.unresolved for p in whatifs[0][1]):
        return "not resolved (one unstable process: --repeats 3)"
    return "; ".join(f"{on if i == 0 else what}: {first_below(pts) or f'not up to {top}'}"
                     for i, (what, pts) in enumerate(whatifs))


def per_device_words(s: fs.Setting, points: list) -> str:
    """'; per GPU 69.2 samples/s at 16 GPUs, above the 38.4 measured at x1: ...' where a forecast count's throughput
    per device passes the setting's own one-device rate (its efficiency against itself above 100%), with the term that
    lifts it (`above_ideal`); '' where none does. An offload forecast without a single-device baseline showed 1.8x the
    one-GPU rate per GPU with an efficiency of '–' and nothing said."""
    one = getattr(s, "configs", {}).get(1)   # a stand-in setting may have none
    if one is None or not one.samples_per_s > 0:
        return ""
    # on the forecast's own basis, x1's median step: against the windows' rate a transformer's x2 read 274.3 a GPU
    # 'above the 273.8 measured at x1' for no reason but the basis (466.7 ms a step forecast, 467.6 by the windows)
    med = getattr(getattr(one, "summary", None), "median_ms", math.nan)
    rate = one.global_batch / med * 1e3 if med > 0 else one.samples_per_s
    over = [p for p in points if not p.refused and p.count > 1 and p.samples_per_s / p.count > rate * (1 + 1e-9)]
    if not over:
        return ""
    p = over[0]
    saved = p.optimizer_one_ms - p.optimizer_ms
    name = STRATEGY_NAMES.get(s.strategy, s.strategy)
    held = s.offloaded and s.host_cores and s.threads
    basis = (f"x1's {rate:.1f} at its median step ({one.samples_per_s:.1f} measured by its windows)"
             if f"{rate:.1f}" != f"{one.samples_per_s:.1f}" else f"the {one.samples_per_s:.1f} measured at x1")
    why = (f"{name}'s optimizer step on the host (CPU offload), shared out over {p.nodes} nodes' hosts ("
           f"{p.optimizer_one_ms:.2f} ms at one rank, {p.optimizer_ms:.2f} ms at {p.count}: a node's ranks share its "
           f"{s.host_cores} cores)" if held and not math.isnan(saved) and saved > 0 else
           f"{name}'s optimizer step divided by the ranks' shards ({p.optimizer_one_ms:.2f} ms at one rank, "
           f"{p.optimizer_ms:.2f} ms at {p.count}; assumed)" if not math.isnan(saved) and saved > 0 else
           f"its forecast step, {p.step_ms:.1f} ms, is shorter than x1's median step")
    return (f"; per {unit(s, 1).split(' ', 1)[1]} {p.samples_per_s / p.count:.1f} samples/s at {unit(s, p.count)}, "
            f"above {basis}: {why}")


def _recommendation(s: fs.Setting, points: list, whatifs: Optional[list] = None, on: str = "this network") -> str:
    missing = missing_baseline(s)
    if missing:
        return f"{s.label}: {missing}"
    known = [p for p in points if not p.refused and not math.isnan(p.efficiency)]
    if not known:
        return f"{s.label}: no count forecast"
    top, first = max(p.count for p in known), min(p.count for p in known)
    between = _between(stop_range(known), top, first)
    below = first_below(known)
    if below is None:
        r = stop_range(known)
        low_end = (f" (at the range's low end it stops paying past {unit(s, r[0] or 1)})" if r is not None
                   and r[0] is not None else "")
        return f"{s.label}: efficiency stays at or above {EFFICIENT:.0%} up to {unit(s, top)} on {on}{low_end}"
    ok = [p.count for p in known if p.count < below]
    sets = network_sets(whatifs or []) or lifted_words(s, whatifs or [])
    bound = next(p.bound for p in known if p.count == below)
    if not ok:
        return (f"{s.label}: under {EFFICIENT:.0%} already at {unit(s, below)} on {on}"
                f"{first_words(s, known[0], stop_range(known), top)}" + (f"; {sets}" if sets else ""))
    return (f"{s.label}: past {unit(s, max(ok))} on {on}{between}, scaling stops "
            f"paying (efficiency under {EFFICIENT:.0%} at {below}, bound there: {bound})" + (f"; {sets}" if sets else ""))


def first_words(s: fs.Setting, p: fs.Point, r: Optional[tuple], top: int) -> str:
    """' (forecast 69%, its range reaching 77%; measured 72%)': the first count's efficiency, already under 75%, its
    range, the measurement where there is one. '... already at 2 processes (at the range's high end it stays at or above
    75% up to 2)' read as both under and over 75% at 2."""
    lo, hi = p.range_of("efficiency")
    said = f"forecast {p.efficiency:.0%}"
    if not math.isnan(hi):
        said += f", its range reaching {hi:.0%}" if hi >= EFFICIENT else f", its range {lo:.0%}-{hi:.0%}"
    if r is not None and r[1] != 0 and (r[1] is None or r[1] > p.count):
        said += (f"; at the range's high end at or above {EFFICIENT:.0%} up to "
                 f"{unit(s, r[1]) if r[1] is not None else f'beyond {unit(s, top)}'}")
    c = getattr(s, "configs", {}).get(p.count)
    if c is not None and not math.isnan(getattr(c, "efficiency", math.nan)):
        said += f"; measured {c.efficiency:.0%}"
    return f" ({said})"


def lifted_words(s: fs.Setting, whatifs: list) -> str:
    """'bf16 gradients (bf16_compress_hook) keeps it at or above 75% up to 2 processes (under from 4 processes)': each
    what-if that lifts the first count under 75%, and to where; '' for none. Only 'no what-if moves it' was said: DeepLabV3 on
    two CPU processes read 'below 75% already at 2' where bf16 gradients kept it at 75%."""
    if len(whatifs) < 2:
        return ""
    base = first_below(whatifs[0][1])
    said = []
    for what, pts in whatifs[1:]:
        below = first_below(pts)
        if base is None or (below is not None and below <= base):
            continue
        paying = [p.count for p in pts if not p.refused and (below is None or p.count < below)]
        if paying:
            said.append(f"{what} keeps it at or above {EFFICIENT:.0%} up to {unit(s, max(paying))}"
                        + (f" (under from {unit(s, below)})" if below is not None else ""))
    return "a what-if lifts it: " + "; ".join(said) if said else ""
