"""The history's pages and plots (bench.analysis.history): one PNG per workload, history.md and a self-contained
history.html with the same blocks (bench.report.pages).

    out = render(h, "results/bench.sqlite", plots_dir="plots", report_dir="results", prices=None)

Each plot has two panels over the sweeps in time order (one step per sweep, ticks labelled with its id and start):
samples/s (log scale, so equal ratios look equal) with the band its processes spanned in each sweep (its repeats),
and scaling efficiency; a regression that compare's rule calls is a red triangle down, an improvement a green
triangle up, and a dotted line marks each sweep where the suite's commit or torch changed, labelled with the new ones.
"""
from __future__ import annotations

import math
import os
from types import SimpleNamespace
from typing import Optional

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from bench.analysis import compare, cost, history  # noqa: E402
from bench.analysis.history import History, Series  # noqa: E402
from bench.report import report  # noqa: E402
from bench.report import names as naming  # noqa: E402
from bench.report import pages  # noqa: E402
from bench.report.pages import fmt  # noqa: E402
from bench.report.plots import COLORS, STYLES, file_name  # noqa: E402

MARKS = {"regression": ("v", "#d62728"), "improvement": ("^", "#2ca02c"), "failed": ("X", "#d62728")}


def sweep_title(s: dict) -> str:
    """'sweep 41 (2025-06-01, nightly-a100)': the sweep, its date, its --label where it has one."""
    day = str(s.get("started_at") or "")[:16].replace("T", " ")
    status = str(s.get("status") or "completed")
    return (f"sweep {s['sweep_id']} ({day}" + (f", {s['label']}" if s.get("label") else "")
            + ("" if status == "completed" else f", {status}") + ")")


def _x(h: History) -> dict:
    """sweep id -> x position: one step per sweep, in time order (nightly runs are evenly spaced anyway, and sweeps
    minutes apart stay apart); the ticks carry the dates."""
    return {int(s["sweep_id"]): i for i, s in enumerate(h.sweeps)}


def _ticks(h: History, keep: set) -> tuple:
    """(positions, labels): every sweep's id and date where there are few, else about 12 of them and those in `keep`."""
    every = max(1, math.ceil(len(h.sweeps) / 12))
    shown = [(i, s) for i, s in enumerate(h.sweeps) if i % every == 0 or int(s["sweep_id"]) in keep or i == len(h.sweeps) - 1]
    return [i for i, _ in shown], [f"{s['sweep_id']}\n{str(s.get('started_at') or '')[:16].replace('T', ' ')}" for _, s in shown]


def _milestones(h: History) -> list:
    """[(sweep id, text)] where the suite's commit or torch changed from the sweep before: the plot's labels."""
    out, before = [], None
    for s in h.sweeps:
        env = s["env"]
        if before is not None:
            parts = []
            if history.env_value(before, "git_commit") != history.env_value(env, "git_commit"):
                parts.append(history.env_value(env, "git_commit")[:10] or "commit ?")
            if history.env_value(before, "torch") != history.env_value(env, "torch"):
                parts.append(f"torch {history.env_value(env, 'torch') or '?'}")
            if parts:
                out.append((int(s["sweep_id"]), " / ".join(parts)))
        before = env
    return out


def figure(h: History, workload: str, series: list, where: str) -> Figure:
    """Samples/s and efficiency of each configuration over the sweeps, with its process band and compare's marks."""
    fig = Figure(figsize=(11.0, 8.0), layout="constrained")
    ax_t, ax_e = fig.subplots(2, 1, sharex=True)
    fig.suptitle(f"History over {len(h.sweeps)} sweeps\n{workload} on {where}".replace("$", r"\$"))
    xs = _x(h)
    variants = list(dict.fromkeys(s.variant for s in series))
    palette = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
    marked_once: set = set()
    for i, s in enumerate(series):
        ok = [p for p in s.points if p.config is not None]
        color = palette[i % len(palette)] if len(series) > 1 else COLORS.get(s.strategy, "#1f77b4")
        style = STYLES[variants.index(s.variant) % len(STYLES)]
        x = [xs[p.sweep_id] for p in ok]
        ax_t.plot(x, [p.config.samples_per_s for p in ok], marker="o", color=color, linestyle=style, label=s.name)
        lo = [min(p.config.process_sps or [p.config.samples_per_s]) for p in ok]
        hi = [max(p.config.process_sps or [p.config.samples_per_s]) for p in ok]
        ax_t.fill_between(x, lo, hi, color=color, alpha=0.15, linewidth=0)
        eff = [(xs[p.sweep_id], p.config.efficiency * 100) for p in ok if not math.isnan(p.config.efficiency)
               and (s.device_count > 1 or s.strategy == "single")]   # a wrapper at one device: overhead, not scaling
        if eff:
            ax_e.plot([e[0] for e in eff], [e[1] for e in eff], marker="o", color=color, linestyle=style, label=s.name)
        for p in s.points:
            if p.marked:
                m, c = MARKS[p.marked]
                y = p.config.samples_per_s if p.config is not None else (ok[-1].config.samples_per_s if ok else 1.0)
                ax_t.plot([xs[p.sweep_id]], [y], m, color=c, markersize=11, zorder=5,
                          label=None if p.marked in marked_once else f"{p.marked} (compare's rule)")
                marked_once.add(p.marked)
    for sid, text in _milestones(h):
        for ax in (ax_t, ax_e):
            ax.axvline(xs[sid], color="#999999", linestyle=":", linewidth=1)
        ax_t.annotate(text, (xs[sid], 1.0), xycoords=("data", "axes fraction"), rotation=90, va="top", ha="right",
                      fontsize=8, color="#555555")
    if series:
        ax_t.set_yscale("log")
    ax_t.set(ylabel="throughput (samples/s, log scale; band: its processes)")
    ax_e.set(ylabel="scaling efficiency (%)", xlabel="sweep (id and start, in time order)")
    ax_e.axhline(100, linestyle="--", color="#999999")
    ax_e.set_xticks(*_ticks(h, {sid for sid, _ in _milestones(h)}))
    ax_e.tick_params(axis="x", labelrotation=30, labelsize=8)
    ax_e.set_xlim(-0.5, len(h.sweeps) - 0.5)
    ax_t.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    if ax_e.lines[1:]:
        ax_e.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return fig


def _price(prices: Optional[cost.Prices], sweep: dict) -> Optional[cost.Price]:
    if prices is None:
        return None
    env = sweep["env"]
    return prices.lookup(sweep.get("label"), sweep.get("hostname") or env.get("hostname"), cost.machine_names(env))


def _step_text(p: history.Point) -> str:
    if p.marked == "failed":
        return f"FAILED (ok in sweep {p.previous})"
    if p.call is None:
        return "–" if p.previous is None else "not judged"
    words = f"{compare.means_words(p.call.means)}: {p.call.words}"
    if p.level is not None:
        words += f"; noise measured only from sweeps since sweep {p.level} (a marked step there began its level)"
    if p.partial:
        words += f"; judged on the processes that ran ({p.partial})"
    return words + (" (REGRESSION)" if p.call.regression else " (IMPROVEMENT)" if p.call.improvement else "")


def series_table(s: Series, prices: Optional[cost.Prices]) -> tuple:
    head = ["sweep", "samples/s", "processes (min–max samples/s)", "efficiency (a wrapper at one device: its overhead)", "MFU",
            "step from the sweep before (compare's rule)", "what changed"]
    priced = prices is not None
    if priced:
        head.append(f"cost per million samples ({prices.unit()})")
    rows = []
    for p in s.points:
        c = p.config
        row = [sweep_title(p.sweep)]
        if c is None:
            row += [p.failed, "–", "–", "–"]
        else:
            band = (f"{min(c.process_sps):.1f}–{max(c.process_sps):.1f} ({p.partial or len(c.process_sps)})"
                    if c.process_sps else "–")
            row += [fmt(c.samples_per_s), band, report.efficiency_text(c, ".1%", [p.base] if p.base else []),
                    c.utilisation.mfu_cell() if c.utilisation else "–"]
        row += [_step_text(p), "; ".join(p.changes) or "–"]
        if priced:
            price = _price(prices, p.sweep)
            row.append(fmt(cost.per_million_samples(price.per_device_hour, s.device_count, c.samples_per_s), ".4g")
                       if price and c is not None else "no price for this machine" if c is not None else "–")
        rows.append(row)
    return head, rows


def blocks(h: History, store_path: str, plot_paths: dict, prices: Optional[cost.Prices], filters: str) -> list:
    first, last = h.sweeps[0], h.sweeps[-1]
    b: list = [("h", 1, f"History: {len(h.sweeps)} sweeps of {store_path}, {sweep_title(first)} to {sweep_title(last)}")]
    left = (f"; sweep(s) {', '.join(map(str, h.leave_out))} left out of every step's noise (--leave-out)"
            if h.leave_out else "")
    b.append(("p", f"Each configuration measured in two sweeps or more{filters}, sweep by sweep in time order. A step is "
                   f"judged as ./run_bench.sh compare judges two sweeps: each configuration against its own noise "
                   f"(its processes, and up to {compare.DEFAULT_HISTORY} earlier sweeps of it on the same host, since "
                   f"its last marked step: a regression or an improvement begins a new level, and the noise is not "
                   f"measured across it{left}), "
                   f"Holm-corrected over the configurations the two sweeps share; a regression or an improvement is "
                   f"significant and beyond {h.threshold:.0%} ("
                   + (f"{max(h.threshold, h.drift):.0%}" if h.drift is not None else
                      f"{max(h.threshold, compare.DEFAULT_DRIFT):.0%} on CPU, undecided on a GPU,")
                   + f" where no earlier sweep measures the noise). A step's two samples/s are the geometric means over "
                   f"each sweep's processes, the figures its ratio is of; the samples/s column is the median process, as a "
                   f"sweep's report shows it. {history.MEANING}."))
    b.append(("h", 2, "Summary"))
    b += [("p", line) for line in history.summary_lines(h)]
    b.append(("h", 2, "Sweeps and their environment"))
    rows, before = [], None
    for s in h.sweeps:
        env = s["env"]
        rows.append([sweep_title(s), *[history.env_value(env, c) or "–" for c, _ in history.ENV_WORDS],
                     ("; ".join(history.changes(before, env)) or "–") if before is not None else "–"])
        before = env
    b.append(("table", ["sweep", *[w for _, w in history.ENV_WORDS], "changed from the sweep before"], rows))
    for workload in dict.fromkeys(s.workload for s in h.series):
        b.append(("h", 2, f"{workload}: history"))
        if workload in plot_paths:
            b.append(("img", plot_paths[workload], f"{workload} history"))
        for s in (s for s in h.series if s.workload == workload):
            b.append(("h", 3, s.name))
            head, rows = series_table(s, prices)
            b.append(("table", head, rows))
    if h.once:
        b.append(("h", 2, "Configurations measured in one sweep only (no history to show)"))
        b.append(("table", ["configuration", "sweep"], [[k, str(sid)] for k, sid in h.once]))
    return b


def render(h: History, store_path: str, plots_dir: str = "plots", report_dir: str = "results",
           prices: Optional[cost.Prices] = None, filters: str = "") -> dict:
    """Write <plots_dir>/<workload>_history.png, <report_dir>/history.md and history.html. Returns their paths."""
    os.makedirs(plots_dir, exist_ok=True)
    plot_paths = {}
    names_all = list(dict.fromkeys(s.workload for s in h.series))
    names = naming.shown_names(names_all)   # a model given by path: my_model:build on the page
    for workload in dict.fromkeys(s.workload for s in h.series):
        series = [s for s in h.series if s.workload == workload]
        c = next(p.config for p in series[0].points if p.config is not None)
        env = h.sweeps[-1]["env"]
        where = report.device_title(SimpleNamespace(envs=[env] if env else []), c.device_type)
        plot_paths[workload] = os.path.join(plots_dir, file_name(workload, "history", names_all))
        figure(h, names.get(workload, workload), series, where).savefig(plot_paths[workload], dpi=100)
    bl = naming.relabel(blocks(h, store_path, plot_paths, prices, filters), names)
    md, page, _ = pages.write(bl, report_dir, "history", f"history of {os.path.abspath(store_path)}")
    return {"markdown": md, "html": page, "plots": list(plot_paths.values())}
