"""The forecast section's plots (bench.report.forecast draws them through here), one colour per setting.

    figure(workload, where, [(setting, what_ifs, checks, assumed)])   # scaling efficiency against count
    drawable(lines)            # whether that figure has any efficiency to draw (none without a single device x1)
    memory_figure(workload, where, [(setting, [Point])], budget_mib, budget_name)   # memory per device against count
    assumed_words(machine)     # what the machine assumed, for the legend

<workload>_forecast.png: scaling efficiency against device count (log scale): the measured points; each measured count
above the smallest as the check forecast it (a hollow marker joined to the measurement); the forecast line from the
largest measured count on, with its range as a band (faint, its edges drawn: bench.forecast.spread); where it rests on
an assumption a hatched band spans how far the check erred; the 75% line; a what-if line only where it leaves its
setting's line by VISIBLE_POINTS, the rest listed once. One legend entry per setting, each mark's meaning once, the y
axis from the data (values past Y_CAP marked at the edge). <workload>_forecast_memory.png: memory per device (CUDA: the
device level; CPU: a process's peak RSS, as the memory section) against count, per setting (its own marker for the measured peak), with its range, and the budget the
page holds it to (bench.forecast.memory.budget), drawn where it is near the data, else named as above the scale.
Moved out of bench/report/forecast.py, which had grown past 400 lines.
"""
from __future__ import annotations

import math
import textwrap

from bench.forecast import check as fk
from bench.forecast import outlook as fo
from bench.forecast import settings as fs
from bench.forecast import memory as mm

UNRESOLVED_STYLE = "--"   # a forecast line resting on one unstable process (`Point.unresolved`): dashed
WHAT_IF_STYLES = (":", "-.", (0, (3, 1, 1, 1, 1, 1)), (0, (1, 3)))   # never dashed: `UNRESOLVED_STYLE`


def _ticks(ax, counts: list) -> None:
    ticks = sorted({1, *fo.DOUBLING} & set(range(min(counts + [2]), max(counts + [2]) + 1))) or list(fo.DOUBLING)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(n) for n in ticks])
    ax.set_xlim(min(ticks) / 1.25, max(ticks) * 1.25)   # set, not autoscaled: the legend's proxies hold no data


PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")


def colors(settings: list) -> dict:
    """One colour per setting of a plot (two settings of one strategy never share one): (strategy, variant) -> colour."""
    return {(s.strategy, s.variant): PALETTE[i % len(PALETTE)] for i, s in enumerate(settings)}


LEGEND_WRAP = 56          # characters per line of a legend's label: two columns fit a 10-inch figure
LEGEND_LINE_IN = 0.17     # inches a legend's line of small text takes: the figure grows by its tallest column


def _legend(fig, ax) -> None:
    """The legend below the axes in two columns, each label wrapped to LEGEND_WRAP characters and the figure made taller
    by the legend's lines, so that every label lies whole inside the figure (a one-line legend of two columns under a
    fixed 9-inch figure was clipped at both ends)."""
    handles, labels = ax.get_legend_handles_labels()
    labels = [textwrap.fill(t, LEGEND_WRAP) for t in labels]
    rows = math.ceil(len(labels) / 2)                      # a legend fills its first column, then the second
    tallest = max((sum(t.count("\n") + 1 for t in col) for col in (labels[:rows], labels[rows:])), default=0)
    fig.set_figheight(fig.get_figheight() + LEGEND_LINE_IN * tallest)
    fig.legend(handles, labels, fontsize="small", loc="outside lower center", ncols=2)


def plot_name(s: fs.Setting) -> str:
    """'DDP [bf16, adamw]', with the batch its forecast rests on where the page names it ('... at batch 14 a GPU')."""
    from bench.report import plots
    return f"{plots.NAMES.get(s.strategy, s.strategy)} [{s.variant}]" + (f" {s.batch}" if s.batch else "")


def assumed_words(m) -> str:
    """What the forecast's machine assumed rather than measured, for the plot's legend: 'interference and network
    inside a node and network between nodes' (a one-GPU sweep forecast on its GPU's preset); '' for nothing. The same
    list the text names (bench.forecast.check.assumed), over every count the plot draws."""
    return " and ".join(w for w, _ in fk.assumed(m, fo.DOUBLING))


VISIBLE_POINTS = 2.0      # a what-if line within 2 percentage points of its setting's line everywhere is not drawn
Y_CAP = 250.0             # efficiency (%) above this is marked at the top edge with its value, not drawn off the axes


def _band(ax, xs: list, lo: list, hi: list, color) -> None:
    """A range as a faint fill with its two edges drawn: five settings' fills at alpha 0.18 merged into one mass."""
    ax.fill_between(xs, lo, hi, color=color, alpha=0.10, linewidth=0)
    for ys in (lo, hi):
        ax.plot(xs, ys, "-", color=color, linewidth=0.7, alpha=0.7)


def _off_scale(ax, pts: list, top: float) -> None:
    """pts: [(x, y, color)]: each value above the axes' top marked at the edge with its value (never clipped silently)."""
    for x, y, color in pts:
        if y > top:
            ax.annotate(f"{y:.0f}%", (x, top), xytext=(0, -10), textcoords="offset points", ha="center",
                        fontsize="x-small", color=color, arrowprops={"arrowstyle": "->", "color": color})


def efficiency_top(values: list) -> float:
    """The y-limit (%) from the data: at least 110, 5 points above the highest value, at most Y_CAP (`_off_scale`)."""
    return min(Y_CAP, max([110.0] + [v + 5.0 for v in values if not math.isnan(v)]))


def _key(ax, assumed: str, drawn: set) -> None:
    """What each mark means, once for every setting (a legend of one entry per mark and setting ran to 29 entries),
    and only for the marks drawn (`drawn`: 'line', 'measured', 'checked', 'band'): a one-GPU sweep's legend explained
    'measured (dots)' where no dot was drawn. A dashed line (not resolved) says so in its own entry. assumed: what
    every line assumes ('' where they differ, each line's entry then says its own)."""
    if "line" in drawn:
        net = "an assumed network" if "network" in assumed else "this network"   # never 'this network' on a preset
        ax.plot([], [], "-", color="#555555", label=f"forecast, {net}" + (f" ({assumed} assumed)" if assumed else ""))
    marks = [w for k, w in (("measured", "measured (dots)"), ("checked", "the check's forecast of a measured count: "
                                                                         "hollow, joined to its measurement")) if k in drawn]
    if marks:
        ax.plot([], [], "o", color="#555555", label="; ".join(marks))
    if "band" in drawn:
        ax.fill_between([], [], [], color="#555555", alpha=0.2, label="range from the inputs' spreads (5-95% of the draws)")


def _what_ifs(ax, name: str, color, whatifs: list, main: dict, hidden: dict) -> list:
    """Draw the what-ifs that move off the setting's line by VISIBLE_POINTS somewhere; the others into `hidden`
    (what -> [setting names]), listed once. Returns the drawn values (%)."""
    drawn = []
    for i, (what, pts) in enumerate(whatifs):
        pts = [p for p in pts if p.count in main and not p.refused and not math.isnan(p.efficiency)]
        ys = [p.efficiency * 100 for p in pts]
        if not pts or max(abs(y - main[p.count]) for p, y in zip(pts, ys)) < VISIBLE_POINTS:
            hidden.setdefault(what, []).append(name)
            continue
        ax.plot([p.count for p in pts], ys, linestyle=WHAT_IF_STYLES[i % len(WHAT_IF_STYLES)], color=color, alpha=0.7,
                label=f"{name}: {what}")
        drawn += ys
    return drawn


def drawable(lines: list) -> bool:
    """Whether `figure` has any efficiency to draw: a measured count past one, a checked one, or a forecast point with a
    known efficiency. Without a single device x1 none is known, and a one-GPU transformer sweep's plot was axes, a 75%
    line and one tick, linked under 'scaling efficiency past the measured counts' (read as a failed or a 0% forecast)."""
    for s, whatifs, checks, _ in lines:
        if any(n > 1 and not math.isnan(c.efficiency) for n, c in s.configs.items()):
            return True
        if any(not p.refused and not math.isnan(p.efficiency) for p in whatifs[0][1]):
            return True
    return False


def figure(workload: str, where: str, lines: list):
    """lines: [(setting, what_ifs, checks, assumed)] -> a matplotlib Figure (Agg, no pyplot). One legend entry per
    setting (its forecast line; what it assumes and how far that erred, hatched, in the same entry), the marks' meaning
    once, a what-if only where it leaves its setting's line by VISIBLE_POINTS (the rest listed once: on one H100 every
    what-if lay on its line, 29 entries described nothing visible), the y-limit from the data (`efficiency_top`)."""
    from bench.report import plots
    fig, ax = plots._figure("Forecast: scaling efficiency past the measured counts", where, workload, width=10.0)
    xs_all, marks, hidden, drawn = [], [], {}, set()
    palette = colors([line[0] for line in lines])
    shared = {a[0] for *_, a in lines}
    for s, whatifs, checks, assumed in lines:
        color = palette[(s.strategy, s.variant)]
        name = plot_name(s)
        # at one device a wrapper against single is its overhead (the report's table says it), not scaling
        measured = [(n, c.efficiency * 100) for n, c in s.configs.items() if n > 1 and not math.isnan(c.efficiency)]
        if measured:
            ax.plot([n for n, _ in measured], [e for _, e in measured], "o", color=color)
            marks += [(n, e, color) for n, e in measured]
            drawn.add("measured")
        for r in checks:
            eff = s.configs[r["device_count"]].efficiency
            if r.get("error") is None or math.isnan(eff):
                continue
            fe = eff / (1 + r["error"])  # the same samples at the forecast step: efficiency scales inversely
            ax.plot([r["device_count"]] * 2, [eff * 100, fe * 100], "-", color=color, alpha=0.5)
            ax.plot([r["device_count"]], [fe * 100], "o", mfc="none", color=color)
            marks.append((r["device_count"], fe * 100, color))
            drawn.add("checked")
        top = max(s.configs)
        pts = [p for p in whatifs[0][1] if not p.refused and not math.isnan(p.efficiency) and p.count >= top]
        xs_all += [n for n in s.configs if n > 1]
        if not pts:
            continue
        xs, ys = [p.count for p in pts], [p.efficiency * 100 for p in pts]
        xs_all += xs
        what_assumed, (lo, hi) = assumed
        hatched = what_assumed and not math.isnan(lo)
        said = what_assumed if len(shared) > 1 else ""   # one assumption for every line: said once (`_key`)
        shaky = any(p.unresolved for p in pts) and "not resolved, dashed: one unstable process (--repeats 3)"
        drawn.add("line")
        ax.plot(xs, ys, UNRESOLVED_STYLE if shaky else "-", color=color, label=f"{name} forecast" + "".join(
            f"; {w}" for w in (shaky, said and f"{said} assumed", hatched and f"hatched: {what_assumed} assumed, erred "
                               f"{lo:+.0%} to {hi:+.0%} where measured") if w))
        marks += [(x, y, color) for x, y in zip(xs, ys)]
        ranges = [p.range_of("efficiency") for p in pts]
        if not any(math.isnan(r[0]) for r in ranges):
            _band(ax, xs, [r[0] * 100 for r in ranges], [r[1] * 100 for r in ranges], color)
            marks += [(x, r[1] * 100, color) for x, r in zip(xs, ranges)]
            drawn.add("band")
        if hatched:  # step error e: efficiency / (1 + e)
            ax.fill_between(xs, [y / (1 + hi) for y in ys], [y / (1 + lo) for y in ys], facecolor="none",
                            edgecolor=color, hatch="//", alpha=0.4, linewidth=0)
            marks += [(x, y / (1 + lo), color) for x, y in zip(xs, ys)]
        marks += [(x, y, color) for x, y in zip(xs, _what_ifs(ax, name, color, whatifs[1:], dict(zip(xs, ys)), hidden))]
    _key(ax, next(iter(shared)) if len(shared) == 1 else "", drawn)
    ax.axhline(fo.EFFICIENT * 100, color="#999999", linestyle="--", label=f"{fo.EFFICIENT:.0%}: scaling stops paying")
    if hidden:
        ax.plot([], [], " ", label=f"not drawn, within {VISIBLE_POINTS:g} points of their setting's line at every "
                "count: " + "; ".join(f"{what} ({'every setting' if len(names) == len(lines) else ', '.join(names)})"
                                 for what, names in hidden.items()))
    _ticks(ax, xs_all)
    cpu = bool(lines) and fs.on_cpu(line[0] for line in lines)
    ax.set(xlabel="process count (log scale)" if cpu else "device count (log scale)", ylabel="scaling efficiency (%)")
    top = efficiency_top([y for _, y, _ in marks])
    ax.set_ylim(0, top)
    _off_scale(ax, marks, top)
    _legend(fig, ax)
    return fig


NEAR = 1.5    # the budget is drawn where it lies within 1.5x the data's top; further up it squashed the data


def memory_figure(workload: str, where: str, lines: list, budget_mib, budget_name: str = "", per_node: int = 0):
    """lines: [(setting, [Point])] -> memory per device against count, the measured peaks (each setting its own marker,
    so that two equal peaks both show), the budget. The y axis is the data's: the budget is drawn where it is near
    (NEAR), else named in the legend as above the scale (a 140 GiB line over 17 GiB of data squashed both lines). On
    CPU the figure is a process's peak RSS, as the memory section's (bench.forecast.inputs._memory), and said so; the
    budget is a node's (per_node processes summed, as the memory section holds it), drawn as its share per process."""
    from bench.report import plots
    cpu = bool(lines) and fs.on_cpu(s for s, _ in lines)
    fig, ax = plots._figure("Forecast: peak RSS per process" if cpu else "Forecast: memory per device", where, workload,
                            width=10.0)
    xs_all, tops = [], []
    palette = colors([s for s, _ in lines])
    for i, (s, pts) in enumerate(lines):
        color, marker = palette[(s.strategy, s.variant)], plots.MARKERS[i % len(plots.MARKERS)]
        name = plot_name(s)
        ax.plot([], [], "-" + marker, color=color, mfc="none", label=f"{name}: forecast (line), measured peak (marker)")
        mem = [(p.count, p.memory.device_mib, p.range_of("memory_mib")) for p in pts if p.memory is not None]
        if mem:
            ax.plot([n for n, _, _ in mem], [m for _, m, _ in mem], "-", color=color)
            tops += [m for _, m, _ in mem]
            if not any(math.isnan(r[0]) for _, _, r in mem):
                _band(ax, [n for n, _, _ in mem], [r[0] for _, _, r in mem], [r[1] for _, _, r in mem], color)
                tops += [r[1] for _, _, r in mem]
            xs_all += [n for n, _, _ in mem]
        seen = [(n, s.raws[c.key].peak_mib + (s.raws[c.key].runtime_mib or 0.0)) for n, c in s.configs.items()
                if c.key in s.raws and s.raws[c.key].peak_mib]  # the device level, as the line
        if seen:
            ax.plot([n for n, _ in seen], [m for _, m in seen], marker, color=color, mfc="none", ms=11 - 2 * (i % 4),
                    mew=1.5)
            xs_all += [n for n, _ in seen]
            tops += [m for _, m in seen]
    top, per = max(tops, default=1.0), "process" if cpu else "device"
    name = budget_name or (f"budget {mm.budget_text(budget_mib)}" if budget_mib else "")
    label = f"{name} per {per}"
    if budget_mib and per_node > 1:    # a node's budget, shared by the processes it runs at each count (fit_words)
        xs = sorted(set(xs_all or [2]))
        shares = [budget_mib / min(n, per_node) for n in xs]
        label = f"{name} per node, shared by the processes it runs (at most {per_node}): a process's share"
        if min(shares) <= NEAR * top:
            ax.plot(xs, shares, color="#c0392b", linestyle="--", drawstyle="steps-post", label=label)
            top = max(top, min(max(shares), NEAR * top))
        else:
            ax.plot([], [], " ", label=f"{label}: above the scale, not drawn")
        budget_mib = None
    if budget_mib and budget_mib <= NEAR * top:
        ax.axhline(budget_mib, color="#c0392b", linestyle="--", label=label)
        top = max(top, budget_mib)
    elif budget_mib:
        ax.plot([], [], " ", label=f"{label} ({budget_mib:.0f} MiB): above the scale, not drawn" if per_node <= 1
                else f"{label}: above the scale, not drawn")
    _ticks(ax, xs_all or [2])
    ax.set(xlabel="process count (log scale)" if cpu else "device count (log scale)",
           ylabel="peak RSS per process (MiB, as the memory section)" if cpu else
           "memory per device (MiB; CUDA: the device level)")
    ax.set_ylim(0, top * 1.1)
    _legend(fig, ax)
    return fig
