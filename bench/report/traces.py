"""The report's part for the traced steps (every CUDA configuration by default, --profile on CPU), from the traces
table alone (bench.analysis.results: Config.traces).

Per configuration and rank: what the traced steps held (computation, exposed communication, copies,
idle: bench.analysis.traces), read from what (the device's kernels by HTA's method, or host operations by the
suite's adaptation of it), how much of the communication computation hid, how long each rank waited
in collectives (bench.analysis.waits), and a link to its trace. How busy each GPU is (bench.report.busy): its computation and
copies per traced step against the measured median step, collectives left out (a kernel waiting for a peer is not
work), per GPU where one process drives several (DataParallel): the recommendation's bound rests on it. A straggler is
named only where the same rank waits least in every traced step by more than the measured steps' jitter
(`straggler`). The traces' exposed communication is set beside the probe's, and where they disagree by more than
the measured steps' noise the report says so.

    figure(configs, workload, where) -> Figure or None    # drawn beside the phases plot
    blocks(configs, workload)        -> report blocks       # after the workload's tables
"""
from __future__ import annotations

import json
import math
import os
from typing import Optional

from bench.analysis import waits as wait_analysis
from bench.report import tracewords
from bench.report.busy import SEGMENTS, busy, device_rows, per_rank, percent
from bench.report.pages import Link
from bench.report.plots import _figure, _label

# A traced step this much longer than the measured median is a different step: the profiler's host-side work turned
# the H100 transformer's 42.9 ms compute-bound step into a 97.8 ms one (busy 94% of the measured step, idle 59% of the
# traced one), so its shares describe the profiled step, not the measured one (`slow_trace`).
TRACED_LONGER = 0.20
NOISE_FLOOR = 0.10   # the probe is a difference of two medians of a few steps: below 10% of a step, not told apart
HOW_TO_OPEN = ("Open a trace at https://ui.perfetto.dev (drag the .gz file in), or the sweep's traces in TensorBoard: "
               "`pip install torch-tb-profiler`, then `tensorboard --logdir {folder}`.")


def traced_longer(c, f: dict) -> float:
    """How much longer a rank's traced steps (their own wall time, traced_step_ms) ran than the measured median step
    (fraction); nan where either is not known. Past TRACED_LONGER its shares are of the profiled step, not the measured."""
    step, traced = c.summary.median_ms, f.get("traced_step_ms", math.nan)
    return traced / step - 1 if step and not math.isnan(step) and not math.isnan(traced) else math.nan


def traced_cell(c, f: dict) -> str:
    """'42.9', or '97.8 (measured 42.9: +128%)' past TRACED_LONGER; '–' where the store kept no traced step time."""
    longer = traced_longer(c, f)
    return (f"{f['traced_step_ms']:.1f} (measured {c.summary.median_ms:.1f}: +{longer:.0%})" if longer > TRACED_LONGER
            else _fmt(f.get("traced_step_ms", math.nan)))


def slow_trace_line(configs: list) -> Optional[str]:
    """One note under the table naming the configurations whose traced steps ran past TRACED_LONGER longer than their
    measured median (a note per configuration repeated itself seven times on the H100 transformer); else None."""
    slow = [_label(c) for c in configs if any(traced_longer(c, f) > TRACED_LONGER for f in per_rank(c).values())]
    if not slow:
        return None
    return (f"The traced steps of {', '.join(slow)} ran more than {TRACED_LONGER:.0%} longer than the measured median "
            "('traced step ms': the profiler's own work slowed them), so their computation, communication, copies and "
            "idle shares describe the profiled step, not the measured one; GPU busy holds their kernels against the "
            "measured step.")


def straggler(c) -> Optional[tuple]:
    """(rank, its wait ms per traced step, the others' median) when the same rank waits least in every traced step of
    every repeat, by more than the measured steps' jitter (their IQR) and `bench.analysis.waits.straggler`'s margins;
    else None. Without per-step waits (stores of schema 5) no straggler is named."""
    jitter = c.summary.iqr_ms if not math.isnan(c.summary.iqr_ms) else 0.0
    named = set()
    for repeat in sorted({t.get("repeat", 0) for t in c.traces}):
        rows = [t for t in c.traces if t.get("repeat", 0) == repeat and t.get("step_waits_json")]
        if len(rows) < 2:
            continue
        waits = {t["rank"]: json.loads(t["step_waits_json"]) for t in rows}
        named.add(wait_analysis.straggler_steps(waits, c.summary.median_ms, jitter))
    if len(named) != 1 or None in named:
        return None
    rank = named.pop()
    waits = {r: f["wait_per_step_ms"] for r, f in per_rank(c).items()}
    others = sorted(w for r, w in waits.items() if r != rank and not math.isnan(w))
    return rank, waits[rank], others[len(others) // 2] if others else math.nan


def wait_words(c) -> Optional[str]:
    """'rank 1 waits 40.1 ms a traced step for rank 0 in collectives; the collectives themselves take 1.2 ms a step,
    rank 0's time in them': the rank that waits most, for the one that waits least, and the collectives' own time
    (the least-waiting rank's time in them: the transfer, not waiting). None with fewer than two traced ranks."""
    ranks = {r: f for r, f in per_rank(c).items() if not math.isnan(f["wait_per_step_ms"])}
    if len(ranks) < 2:
        return None
    least = min(ranks, key=lambda r: ranks[r]["wait_per_step_ms"])
    most = max(ranks, key=lambda r: ranks[r]["wait_per_step_ms"])
    own = ranks[least]["comm_per_step_ms"]
    if straggler(c) is None:
        who = f"the ranks wait at most {ranks[most]['wait_per_step_ms']:.1f} ms a traced step for each other in collectives"
    else:
        who = f"rank {most} waits {ranks[most]['wait_per_step_ms']:.1f} ms a traced step for rank {least} in collectives"
    return who + ("" if math.isnan(own) else f"; the collectives themselves take {own:.1f} ms a step, rank {least}'s time in them")


def comm_and_wait(c) -> Optional[str]:
    """How the traces' waiting fits the probe's exposed communication, for the configuration's sentence; None without
    traces of two ranks or more."""
    words = wait_words(c)
    if words is None:
        return None
    s = straggler(c)
    out = f"In the traces of {_label(c)}, {words}"
    if s and not math.isnan(c.exposed_comm_ms):
        out += (f": the exposed communication above leaves that wait out (it compares steps with and without the "
                f"all-reduce, and both last as long as rank {s[0]}'s), so the wait is rank {s[0]}'s slowness, the straggler, "
                "not communication")
    elif s:
        out += f": that wait is rank {s[0]}'s slowness, the straggler, not communication"
    return out + "."


def probe_agreement(c) -> Optional[tuple]:
    """(traces' exposed comm ms per step, probe's, noise ms, rank used) for a DDP configuration with both, else None.
    The rank that waits least is used: its exposed communication is the transfer, not waiting for a slower rank."""
    if math.isnan(c.exposed_comm_ms) or not c.traces:
        return None
    ranks = {r: f for r, f in per_rank(c).items() if not math.isnan(f["exposed_comm_per_step_ms"])}
    if not ranks:
        return None
    rank = min(ranks, key=lambda r: (ranks[r]["wait_per_step_ms"] if not math.isnan(ranks[r]["wait_per_step_ms"]) else 0.0))
    noise = max(c.summary.iqr_ms if not math.isnan(c.summary.iqr_ms) else 0.0, NOISE_FLOOR * c.summary.median_ms)
    return ranks[rank]["exposed_comm_per_step_ms"], c.exposed_comm_ms, noise, rank


def figure(configs: list, workload: str, where: str):
    """Left: each rank's traced steps as shares (stacked), and for a rank that drives several GPUs (DataParallel) a bar
    per GPU after its union's (computation drawn with the copies), with a black mark at its GPU busy against the
    measured step (the bound's figure), and a bar whose traced step ran past TRACED_LONGER labelled so; right, where a
    configuration communicates: the share of communication computation hid. An H200's DeepLabV3 bf16 drew 77% idle
    for a profiled step 81% longer than the measured one, in which the GPU was busy 41%, beside an empty overlap panel
    at one device."""
    with_traces = [c for c in configs if any(t.get("span_ms") is not None for t in c.traces)]
    if not with_traces:
        return None
    talks = any(c.device_count > 1 for c in with_traces)   # one device communicates nothing: no overlap to draw
    fig, axes = _figure("Traced steps: where each rank's time went" + (", and overlap" if talks else ""), where,
                        workload, width=12.0 if talks else 8.0, ncols=2 if talks else 1)
    left, right = axes if talks else (axes, None)
    labels, figs, marks = [], [], []
    for c in with_traces:
        for rank, f in per_rank(c).items():
            labels.append(_bar_label(c, rank, f))
            figs.append(f)
            marks.append(_measured_busy(c, f))
            for d, sh in device_rows(f):  # DataParallel: each GPU its own bar, where the union hides a starved one
                labels.append(f"{_label(c)} r{rank} {d} (with copies)")
                figs.append({"compute_share": sh["work"], "comm_share": sh["comm"], "copy_share": 0.0,
                             "idle_share": sh["idle"], "overlap_share": math.nan})
                marks.append(_measured_busy(c, f, d))
    bottom = [0.0] * len(figs)
    for key, name, color in SEGMENTS:
        h = [0.0 if math.isnan(f[key]) else f[key] * 100 for f in figs]
        left.bar(labels, h, bottom=bottom, color=color, label=name)
        bottom = [a + b for a, b in zip(bottom, h)]
    _draw_busy(left, marks)
    left.set(ylabel="share of the traced (profiled) steps (%)",
             ylim=(0, max([105.0] + [m * 100 + 5 for m in marks if not math.isnan(m)])))
    left.tick_params(axis="x", labelrotation=30)
    left.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=3, fontsize="small")
    if right is not None:
        right.bar(labels, [0.0 if math.isnan(f["overlap_share"]) else f["overlap_share"] * 100 for f in figs],
                  color="#1f77b4")
        right.set(ylabel="communication overlapped by computation (%)", ylim=(0, 105))
        right.tick_params(axis="x", labelrotation=30)
    return fig


def _bar_label(c, rank: int, f: dict) -> str:
    """A rank's bar: 'single device x1 [bf16] r0', and where its traced steps ran past TRACED_LONGER the measured
    median, what its shares are of: '(profiled step, +81% longer than measured)', from the stored step times."""
    longer = traced_longer(c, f)
    return (f"{_label(c)} r{rank}" + (" (its GPUs' union)" if len(f["devices"]) > 1 else "")
            + (f"\n(profiled step, +{longer:.0%} longer than measured)" if longer > TRACED_LONGER else ""))


def _measured_busy(c, f: dict, device: Optional[str] = None) -> float:
    """One GPU's work (computation and copies) per traced step against the measured median step, as bench.report.busy
    holds it for the bound; nan for a union of GPUs, or where not read."""
    devs, step = f["devices"], c.summary.median_ms
    v = devs.get(device) if device else (next(iter(devs.values())) if len(devs) == 1 else None)
    if not v or not step or math.isnan(step) or math.isnan(v["work_ms"]):
        return math.nan
    return v["work_ms"] / step


def _draw_busy(ax, marks: list) -> None:
    """A black mark across each bar at its GPU busy against the measured step (the text's and the bound's figure)."""
    label = "GPU busy against the measured step (the bound's figure)"
    for i, m in enumerate(marks):
        if not math.isnan(m):
            ax.plot([i - 0.4, i + 0.4], [m * 100] * 2, color="black", linewidth=2.5, label=label)
            label = None


def _busy_cell(share: float) -> str:
    """A GPU's busy share of the measured step: '94%', '103% (over 100%: a measurement error)', '–' where not read."""
    if math.isnan(share):
        return "–"
    return percent(share) + (" (over 100%: a measurement error)" if share > 1.0 else "")


def _fmt(v, spec: str = ".1f", suffix: str = "") -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:{spec}}{suffix}"


def blocks(configs: list, workload: str) -> list:
    """The traces' table, the straggler, the probe comparison, notes and how to open a trace; [] without traces."""
    traced = [c for c in configs if c.traces]
    if not traced:
        return []
    rows, lines = [], []
    for c in traced:
        b = busy(c)
        for rank, f in per_rank(c).items():
            link = _trace_cell(f)
            read_from = ", ".join(tracewords.read_from(m) for m in f["methods"]) or "–"
            mine = {d: v for d, v in (b.devices if b else {}).items() if d in f["devices"]}
            gpu = ", ".join(("" if len(mine) < 2 else f"{d} ") + _busy_cell(v) for d, v in mine.items()) or "–"
            rows.append([_label(c), str(rank), read_from, gpu] + [_fmt(f[k] * 100, ".0f", "%") for k, _, _ in SEGMENTS]
                        + [traced_cell(c, f), _fmt(f["overlap_share"] * 100, ".0f", "%"), _fmt(f["wait_per_step_ms"], ".2f"),
                           _fmt(f["trace_mb"], ".2f"), _fmt(f["mb_per_step"], ".3f"), _fmt(f["profile_s"], ".1f"), link])
            for d, sh in device_rows(f):  # the rank's row above is its GPUs' union: each GPU's own shares
                rows.append([_label(c), f"{rank}, {d}", read_from, _busy_cell(mine.get(d, math.nan)),
                             _fmt(sh["work"] * 100, ".0f", "% (with copies)"), _fmt(sh["comm"] * 100, ".0f", "%"), "–",
                             _fmt(sh["idle"] * 100, ".0f", "%"), traced_cell(c, f)] + ["–"] * 6)
            lines += [f"{_label(c)}, rank {rank}: {n}" for n in f["notes"]]
        if b is not None and b.over:
            lines.append(f"{_label(c)}: {b.error()}.")
        s = straggler(c)
        if s:
            lines.append(f"{_label(c)}: rank {s[0]} waits {s[1]:.2f} ms per traced step in collectives, the others "
                         f"{s[2]:.2f} ms (median), and waits least in every traced step by more than the steps' jitter: "
                         f"they wait for rank {s[0]}, the straggler.")
        elif len({t['rank'] for t in c.traces}) > 1:
            lines.append(f"{_label(c)}: no straggler named: no rank waits least in every traced step by more than the "
                         f"measured steps' jitter ({c.summary.iqr_ms:.2f} ms IQR)"
                         + ("" if any(t.get("step_waits_json") for t in c.traces) else
                            " (these traces hold no waits per step: a store of an older version)") + ".")
        agree = probe_agreement(c) if c.device_count > 1 else None  # at one rank there is no communication to agree on
        if agree:
            trace_ms, probe_ms, noise, rank = agree
            verdict = ("they agree within the noise" if abs(trace_ms - probe_ms) <= noise else
                       "they differ by more than the noise: the probe measures how much slower a synchronised step is "
                       "(contention for cores or links included), the traces the collectives' own time outside computation "
                       "in a few profiled steps; open a trace to see where the step's time goes")
            lines.append(f"{_label(c)}: the traces show {trace_ms:.2f} ms of exposed communication per step (rank {rank}, "
                         f"the one that waits least), the probe {probe_ms:.2f} ms; {verdict} ({noise:.2f} ms: the measured "
                         f"steps' IQR, at least {NOISE_FLOOR:.0%} of the median step).")
    lines += [x for x in [slow_trace_line(traced)] if x]
    methods = {m for c in traced for t in c.traces for m in [t.get("method")] if m and t.get("span_ms") is not None}
    matches = {t["wait_match"] for c in traced for t in c.traces if t.get("wait_match")}
    paths = [t["path"] for c in traced for t in c.traces if t.get("path")]
    folder = os.path.dirname(paths[-1]) if paths else None
    cost_s = sum(t.get("profile_s") or 0.0 for c in traced for t in c.traces)
    mb = sum((t.get("trace_bytes") or 0) / 1e6 for c in traced for t in c.traces)
    return [("h", 3, f"{workload}: profiler traces"),
            ("p", "A few steps after each configuration's measured window ran under torch.profiler on every rank (never the "
                  "measured window itself; on CUDA by default, the evidence of what bounds a step; on CPU with --profile). "
                  f"They cost {cost_s:.1f} s of profiling and {mb:.1f} MB of traces in all (--no-profile leaves them out). "
                  "GPU busy: the GPU's computation and copies per traced step against the measured median step; its "
                  "collectives are left out (a kernel waiting for a peer is not work), every GPU on its own. Where one "
                  "process drives several GPUs (DataParallel) its row's shares are the GPUs' union, and a row per GPU "
                  "follows with that GPU's own (computation and copies together). The shares (computation to idle) are "
                  "of the traced steps, whose own wall time the 'traced step ms' column gives: the profiler's work can "
                  "make them longer than the measured median, and past "
                  f"{TRACED_LONGER:.0%} longer the cell and a note below say so. " + tracewords.method_text(methods, matches)),
            ("table", ["configuration", "rank", "read from", "GPU busy (of a measured step)", "computation",
                       "exposed communication", "copies", "idle", "traced step ms", "comm overlapped", "waiting in collectives ms/step",
                       "trace MB", "MB/step", "profiling s", "trace"], rows),
            *[("p", line) for line in lines],
            ("p", _how_to_open(folder))]


def _trace_cell(f: dict):
    """A link to the rank's trace where the file is there at render time; 'not kept' where the store names a file that
    is not (a committed example's traces stayed on the machine that ran it, and its links led nowhere)."""
    if not f["paths"]:
        return "; ".join(f["notes"]) or "–"
    path = f["paths"][-1]
    return Link(os.path.basename(path), path) if os.path.isfile(path) else "not kept"


def _how_to_open(folder: Optional[str]) -> str:
    """How to open the traces, where their folder is there at render time; else that they were not kept."""
    if folder and os.path.isdir(folder):
        return HOW_TO_OPEN.format(folder=folder)
    if folder:
        return (f"The trace files were written to {folder} on the machine that ran the sweep and are not there now: the "
                "figures above are read from the store.")
    return "No trace file was written: the figures above are read from the store."


def plot_paths(paths: dict, configs: list, workload: str, where: str, plots_dir: str) -> dict:
    """The workload's plot paths with the traces' figure saved and placed right after the phases plot."""
    fig = figure(configs, workload, where)
    if fig is None:
        return paths
    from bench.report.plots import file_name
    path = os.path.join(plots_dir, file_name(workload, "traces"))
    fig.savefig(path, dpi=100)
    out = {}
    for k, v in paths.items():
        out[k] = v
        if k == "phases":
            out["traces"] = path
    out.setdefault("traces", path)
    return out
