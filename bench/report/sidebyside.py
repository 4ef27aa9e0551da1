"""Several sweeps in one report, side by side: machines (a store each: `report --store a.sqlite --store b.sqlite`) or
sweeps of one store (`report --sweep 3,7`). Which machine, or which cloud instance, to train on.

    cols = columns(load_targets(targets(["a.sqlite", "b.sqlite"], None)))     # the latest sweep of each store
    out = render(cols, plots_dir="plots", report_dir="results", prices=None)  # report.md and report.html

Each sweep is a column, titled by its `--label` (given at sweep time), else by its host and devices. A configuration
is the same across sweeps when its workload, strategy, device count and variant (precision, format, settings) are;
one that some sweeps did not run is shown there as not run, failed or skipped with its reason, never dropped. The
recommendation table has a column per sweep; the plots draw one line per sweep and strategy; the environment table
shows only what differs. Stores written by older versions of the suite are read as they are (bench.store.read).
"""
from __future__ import annotations

import dataclasses
import math
import os
from collections import Counter
from dataclasses import dataclass
from typing import Optional

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from bench import stats  # noqa: E402
from bench.analysis import cost, results, utilisation  # noqa: E402
from bench.analysis.results import STRATEGY_NAMES, Sweep, diverged  # noqa: E402
from bench.config import ConfigError  # noqa: E402
from bench.report import cost as cost_report  # noqa: E402
from bench.report import choice, pages  # noqa: E402
from bench.report.efficiency import efficiency_text  # noqa: E402
from bench.report.pages import fmt  # noqa: E402
from bench.report.names import relabel, shown_names  # noqa: E402
from bench.report.plots import STYLES, file_name  # noqa: E402
from bench.store import read  # noqa: E402
from bench.store.store import StoreError  # noqa: E402

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
MARKERS = {"single": "s", "dp": "^", "ddp": "o", "fsdp": "D"}


@dataclass
class Column:
    store: str
    sweep: Sweep
    title: str = ""

    @property
    def configs(self) -> dict:
        """identity -> Config of the configurations that ran."""
        return {ident(c): c for cs in self.sweep.bench.values() for c in cs}

    @property
    def not_run(self) -> dict:
        """identity -> 'failed: reason' / 'skipped: reason' of the benchmarks that did not run to the end."""
        return {(r["workload"], r["strategy"], int(r["device_count"]), results.row_variant(r)):
                f"{r['status']}: {r['reason'] or 'no reason recorded'}" for r in self.sweep.problems if r["mode"] == "bench"}


def page_workloads(cols: list) -> list:
    """Every workload the page names, over every sweep: run, failed or skipped."""
    return list(dict.fromkeys([w for c in cols for w in c.sweep.bench] + [i[0] for c in cols for i in c.not_run]))


def ident(c) -> tuple:
    """What makes two sweeps' configurations the same one: (workload, strategy, device count, variant)."""
    return (c.workload, c.strategy, c.device_count, c.variant)


def targets(stores: list, sweep_text: Optional[str]) -> list:
    """[(store, sweep id or None for the latest)] from the flags: --sweep 3,7 names sweeps of one store, or one per
    --store in order; without it the latest sweep of each store. ConfigError when they do not fit together."""
    ids: list = [None]
    if sweep_text is not None:
        ids = []
        for part in str(sweep_text).split(","):
            part = part.strip()
            if part != "last" and not part.isdigit():
                raise ConfigError(f"--sweep {sweep_text!r}: {part!r} is not a sweep id; expected ids such as 3 or 3,7")
            ids.append(None if part == "last" else int(part))
    if len(stores) == 1:
        out = [(stores[0], i) for i in ids]
    elif sweep_text is None:
        out = [(s, None) for s in stores]
    elif len(ids) == len(stores):
        out = list(zip(stores, ids))
    else:
        raise ConfigError(f"--sweep {sweep_text!r} names {len(ids)} sweep(s) for {len(stores)} stores; expected one id "
                          "per --store, in their order (or no --sweep: the latest sweep of each)")
    keys = [(os.path.realpath(s), i) for s, i in out]
    if len(set(keys)) != len(keys):
        named = ", ".join(f"{s} sweep {'last' if i is None else i}" for s, i in out)
        raise ConfigError(f"--store/--sweep name the same sweep twice ({named}); expected different sweeps")
    return out


def load_targets(pairs: list, peak_tflops: Optional[str] = None) -> list:
    """[Column] of each (store, sweep id), read through bench.store.read (any schema version); peak_tflops (report
    --peak-tflops) replaces each sweep's own peaks for MFU."""
    out = []
    for path, sid in pairs:
        conn = read.connect(path)
        try:
            out.append(Column(path, results.load(conn, read.pick_sweep(conn, sid))))
        finally:
            conn.close()
        if peak_tflops is not None:
            utilisation.attach(out[-1].sweep, peak_tflops)
    return columns(out)


def devices(sweep: Sweep) -> str:
    env = sweep.envs[0] if sweep.envs else {}
    names = Counter(n.strip() for n in str(env.get("gpu_names") or "").split(",") if n.strip())
    if names:
        return ", ".join(f"{k}x {n}" for n, k in names.items())
    return f"{env.get('cpu_model') or 'unknown CPU'}" + (f" ({env['cpu_cores']} cores)" if env.get("cpu_cores") else "")


def columns(cols: list) -> list:
    """Title each column: its --label, else 'host, devices'; then made unique by the sweep id and the store."""
    for c in cols:
        label = c.sweep.sweep.get("label")
        env = c.sweep.envs[0] if c.sweep.envs else {}
        c.title = label if label and label != "a" else f"{env.get('hostname') or c.sweep.sweep.get('hostname') or '?'}, {devices(c.sweep)}"
    for extra in (lambda c: f"sweep {c.sweep.sweep['sweep_id']}", lambda c: os.path.basename(c.store)):
        counts = Counter(c.title for c in cols)
        for c in cols:
            if counts[c.title] > 1:
                c.title = f"{c.title} ({extra(c)})"
    return cols


def _what(c) -> str:
    return f"{STRATEGY_NAMES.get(c.strategy, c.strategy)} x{c.device_count}"


def _fastest(col: Column, workload: str, precision: str, aux: str = "false") -> tuple:
    """(cell, Config) of a sweep's fastest run of a workload at a precision (and model: DeepLabV3's auxiliary head,
    bench.report.choice.models) that trained (a run whose last loss was not finite is timed, not training:
    bench.analysis.results.diverged); ('not run', None) without one."""
    cs = [c for c in col.sweep.bench.get(workload, []) if c.precision == precision and c.aux == aux
          and not math.isnan(c.samples_per_s) and not diverged(c)]
    if not cs:
        return "not run", None
    c = max(cs, key=lambda c: c.samples_per_s)
    settings = f" [{c.variant}]" if c.variant != precision else ""
    eff = f", {c.efficiency:.0%} efficiency" if c.device_count > 1 and not math.isnan(c.efficiency) else ""
    return f"{_what(c)}{settings}: {fmt(c.samples_per_s)} samples/s{eff}{_mfu(c)}", c


def _mfu(c) -> str:
    """', 38% MFU' (or its error) where the configuration has one."""
    u = c.utilisation
    if u is None:
        return ""
    return ", MFU " + u.mfu_cell() if u.error else (", " + u.words() if u.words() else "")


def _cheapest(col: Column, workload: str, precision: str, prices: cost.Prices, aux: str = "false") -> tuple:
    """(cell, (Config, samples per unit of money)) of a sweep's cheapest run of a workload at a precision and model
    (None: none ran, or no price for the machine)."""
    price = cost_report.price_of(col.sweep, prices)
    if price is None:
        return "no price for this machine", None
    cs = [c for c in col.sweep.bench.get(workload, []) if c.precision == precision and c.aux == aux]
    costs = cost.of_configs(cs, price.per_device_hour)
    low = cost.cheapest(cs, lambda c: costs[c.key].per_million_samples)
    if low is None:
        return "not run", None
    value = costs[low.key].per_million_samples
    return f"{_what(low)}: {fmt(value, '.4g')} per million samples", (low, 1e6 / value)


def _wider(a: stats.Noise, b: stats.Noise) -> stats.Noise:
    """The noise two sweeps' configurations are held against where one ran a single process: the larger of the two
    sweeps' own process-to-process noise at their precision; not measured where either sweep's is not (one
    machine's spread does not speak for another's)."""
    if not (a.measured and b.measured):
        return a if not a.measured else b
    return a if a.fraction >= b.fraction else b


def _best(titles: list, picks: list, measure: str = "samples/s") -> str:
    """The column whose (Config, value) pick is the best (the highest value: samples/s, or samples per unit of money
    where `measure` is 'cost'), named only where its lead over the next is beyond the noise of their processes, by the
    main report's rule (bench.report.recommend: their repeats, else their sweeps' noise at the precision; under a 5%
    floor never a lead); otherwise 'not told apart: ...'. '–' where no column has one. A CPU trial named 'beta' fastest
    at 45491.8 against 42945.1 samples/s, 6% apart inside beta's own 7.8% noise."""
    known = sorted(((p[1], t, p[0]) for t, p in zip(titles, picks) if p is not None and not math.isnan(p[1])),
                   key=lambda k: -k[0])
    if len(known) < 2:
        return known[0][1] if known else "–"
    (v1, t1, c1), (v2, t2, c2) = known[:2]
    fallback = _wider(c1.noise_fallback, c2.noise_fallback)
    a = choice.apart(dataclasses.replace(c1, samples_per_s=v1, noise_fallback=fallback),
                         dataclasses.replace(c2, samples_per_s=v2, noise_fallback=fallback))
    lead = (f"{t1}, {v1 / v2:.2f}x {t2}'s samples/s" if measure == "samples/s"
            else f"{t1}, {v2 / v1:.3g}x {t2}'s cost")
    if a.within is False:
        return f"{lead}: beyond the {stats.percent(a.noise.fraction)} noise"
    if a.within is None:
        return f"not told apart: {lead}, " + (a.why or "the noise between their processes is not measured; --repeats 3 "
                                                       "measures it")
    if choice.by_floor(a):
        return f"not told apart: {lead}, {choice.floor_words()}"
    return f"not told apart: {lead}, within the {stats.percent(a.noise.fraction)} noise"


TOLD_APART = ("'fastest of them' (and 'cheapest of them') names a sweep only where its lead over the next is beyond the "
              "noise between their processes, by the rule the single-sweep report uses: their repeats' spread where "
              "both ran several processes, else the larger of the two sweeps' own noise at that precision (not "
              f"measured where either sweep's is not), and never under a {choice.LEAD_FLOOR:.0%} gap; otherwise it says "
              "they are not told apart.")


def recommendation_blocks(cols: list, prices: Optional[cost.Prices]) -> list:
    titles = [c.title for c in cols]
    keys = list(dict.fromkeys((w, c.precision, c.aux) for col in cols for w, cs in col.sweep.bench.items() for c in cs))
    rows, cheap_rows = [], []
    for workload, precision, aux in keys:
        every = [c for col in cols for c in col.sweep.bench.get(workload, [])]
        shown = precision + choice.model_suffix(aux, every)
        cells, picks = zip(*(_fastest(col, workload, precision, aux) for col in cols))
        rows.append([workload, shown, *cells, _best(titles, [(c, c.samples_per_s) if c else None for c in picks])])
        if prices is not None:
            cells, picks = zip(*(_cheapest(col, workload, precision, prices, aux) for col in cols))
            cheap_rows.append([workload, shown, *cells, _best(titles, list(picks), "cost")])
    b: list = [("h", 2, "What to run, per sweep"),
               ("table", ["workload", "precision", *[f"fastest: {t}" for t in titles], "fastest of them"], rows),
               ("p", TOLD_APART)]
    if prices is not None:
        b += [("p", f"At the price per device-hour of each machine ({prices.origin}; {prices.unit()}): a device is a "
                    "GPU (on CPU a gloo process) and a configuration holds all of its devices for its run."),
              ("table", ["workload", "precision", *[f"cheapest: {t}" for t in titles], "cheapest of them"], cheap_rows)]
    return b


def _order(i: tuple) -> tuple:
    workload, strategy, count, variant = i
    rank = results.STRATEGY_ORDER.index(strategy) if strategy in results.STRATEGY_ORDER else len(results.STRATEGY_ORDER)
    return workload, variant != "fp32", variant, rank, count


def _efficiency(c, col: Column) -> str:
    """c's efficiency in its own sweep's report's words (bench.report.report.efficiency_text): at one device a wrapper
    against single device is its overhead, not scaling (a side-by-side read DDP x1's 73% as 'scaling efficiency' where
    its sweep's report said 'wrapper overhead 38.7%')."""
    return efficiency_text(c, ".0%", [b for cs in col.sweep.bench.values() for b in cs])


def _cost_cell(costs: dict, c) -> str:
    if c is None:
        return "–"
    if not costs:
        return "no price for this machine"
    k = costs[c.key]
    return fmt(k.per_million_samples, ".4g") + (f"; {fmt(k.per_epoch, '.4g')} per reference epoch" if c.workload == "deeplabv3" else "")


def configuration_blocks(cols: list, prices: Optional[cost.Prices]) -> list:
    per_col = [c.configs for c in cols]
    missing = [c.not_run for c in cols]
    idents = list(dict.fromkeys([i for cfgs in per_col for i in cfgs] + [i for m in missing for i in m]))
    price = [cost_report.price_of(c.sweep, prices) for c in cols]
    costs = [{} for _ in cols]
    for k, col in enumerate(cols):
        if price[k]:
            for cs in col.sweep.bench.values():
                costs[k].update(cost.of_configs(cs, price[k].per_device_hour))
    rows, cost_rows = [], []
    for i in sorted(idents, key=_order):
        got = [cfgs.get(i) for cfgs in per_col]
        first = next((c for c in got if c is not None), None)
        batches = {c.global_batch for c in got if c is not None}
        cells, present = [], []
        for k, c in enumerate(got):
            if c is None:
                cells.append(missing[k].get(i, "not in this sweep"))
                continue
            present.append(cols[k].title)
            ratio = f", {c.samples_per_s / first.samples_per_s:.2f}x the first" if c is not first and first.samples_per_s > 0 else ""
            cells.append(f"{fmt(c.samples_per_s)} ({_efficiency(c, cols[k])}{ratio}"
                         + (f", global batch {c.global_batch}" if len(batches) > 1 else "") + _mfu(c) + ")")
        where = "all" if len(present) == len(cols) else ("only " + ", ".join(present) if present else "none")
        rows.append([i[0], f"{STRATEGY_NAMES.get(i[1], i[1])} x{i[2]}", i[3], *cells, where])
        if prices is not None:
            cost_rows.append([i[0], f"{STRATEGY_NAMES.get(i[1], i[1])} x{i[2]}", i[3],
                              *[_cost_cell(costs[k], c) for k, c in enumerate(got)]])
    titles = [c.title for c in cols]
    b: list = [("h", 2, "Every configuration, side by side"),
               ("p", "samples/s (scaling efficiency, or at one device a wrapper's overhead against single device x1, "
                     "as each sweep's own report words them; throughput against the first sweep that ran it; and model "
                     "FLOPs utilisation against each machine's own peak where it is known); a configuration "
                     "is the same workload, strategy, device count, precision and settings."),
               ("table", ["workload", "configuration", "precision / settings", *titles, "ran in"], rows)]
    if prices is not None:
        b += [("h", 3, f"Cost per million samples ({prices.unit()})"),
              ("table", ["workload", "configuration", "precision / settings", *titles], cost_rows)]
    return b


def env_values(col: Column) -> dict:
    """What the environment table compares, for one sweep: {row name: text}."""
    s = col.sweep
    env = s.envs[0] if s.envs else {}
    out = {"host": env.get("hostname") or s.sweep.get("hostname"), "label": s.sweep.get("label"), "devices": devices(s)}
    out.update({k: env.get(k) for k in read.ENV_KEYS[1:]})
    out["threads per process"] = ", ".join(map(str, s.threads))
    out["started"] = s.sweep.get("started_at")
    return {k: str(v) if v not in (None, "") else "–" for k, v in out.items()}


def environment_blocks(cols: list) -> list:
    per_col = [env_values(c) for c in cols]
    values = {name: [v[name] for v in per_col] for name in per_col[0]}
    differ = [[name, *v] for name, v in values.items() if len(set(v)) > 1]
    same = [f"{name} {v[0]}" for name, v in values.items() if len(set(v)) == 1 and v[0] != "–"]
    return [("h", 2, "Environment: what differs"),
            ("table", ["", *[c.title for c in cols]], differ) if differ else ("p", "Nothing differs."),
            ("p", "The same in every sweep: " + ("; ".join(same) if same else "nothing recorded") + ".")]


def figure(cols: list, workload: str, shown: str = "") -> Figure:
    """Throughput and efficiency against device count: one line per sweep and strategy (and variant)."""
    fig = Figure(figsize=(12.0, 5.0), layout="constrained")
    ax_t, ax_e = fig.subplots(1, 2)
    fig.suptitle(f"Side by side: throughput and scaling efficiency against device count\n{shown or workload}".replace("$", r"\$"))
    counts = set()
    for k, col in enumerate(cols):
        cs = col.sweep.bench.get(workload, [])
        variants = list(dict.fromkeys(c.variant for c in cs))
        for series in dict.fromkeys(c.series for c in cs):
            line = sorted((c for c in cs if c.series == series), key=lambda c: c.device_count)
            counts |= {c.device_count for c in line}
            style = dict(color=PALETTE[k % len(PALETTE)], marker=MARKERS.get(series[0], "o"),
                         linestyle=STYLES[variants.index(series[1]) % len(STYLES)],
                         label=(f"{col.title}: {STRATEGY_NAMES.get(series[0], series[0])}"
                                + (f" [{series[1]}]" if series[1] != "fp32" else "")).replace("$", r"\$"))
            ax_t.plot([c.device_count for c in line], [c.samples_per_s for c in line], **style)
            eff = [c for c in line if not math.isnan(c.efficiency) and (c.device_count > 1 or c.strategy == "single")]
            ax_e.plot([c.device_count for c in eff], [c.efficiency * 100 for c in eff], **style)
    ax_t.set(xlabel="device count (GPUs; on CPU gloo processes)", ylabel="throughput (samples/s)", xticks=sorted(counts))
    ax_e.set(xlabel="device count (GPUs; on CPU gloo processes)", ylabel="scaling efficiency (%)", xticks=sorted(counts))
    ax_e.axhline(100, linestyle="--", color="#999999")
    ax_t.set_ylim(bottom=0)
    ax_e.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return fig


def render(cols: list, plots_dir: str = "plots", report_dir: str = "results", prices: Optional[cost.Prices] = None) -> dict:
    """report.md, report.html and <workload>_sidebyside.png of several sweeps. StoreError when they share nothing."""
    shared = [i for i in dict.fromkeys(i for c in cols for i in c.configs) if sum(i in c.configs for c in cols) > 1]
    if not shared:
        ran = "; ".join(f"{c.title} ran " + (", ".join(sorted({f'{w} {STRATEGY_NAMES.get(s, s)} x{n} [{v}]' for w, s, n, v in c.configs}))
                                              or "no benchmark") for c in cols)
        raise StoreError(f"these sweeps share no configuration to compare ({ran})")
    b: list = [("h", 1, "Side by side: " + " | ".join(c.title for c in cols))]
    b.append(("table", ["column", "store", "sweep", "started", "status", "command"],
              [[c.title, c.store, str(c.sweep.sweep["sweep_id"]), str(c.sweep.sweep["started_at"]), c.sweep.sweep["status"],
                c.sweep.sweep["command_line"]] for c in cols]))
    ws = page_workloads(cols)
    names = shown_names(ws)   # a model given by path by its short name, in every word below (bench.report.names)
    b += relabel(recommendation_blocks(cols, prices) + configuration_blocks(cols, prices), names)
    os.makedirs(plots_dir, exist_ok=True)
    paths = []
    for workload in dict.fromkeys(w for c in cols for w in c.sweep.bench):
        path = os.path.join(plots_dir, file_name(workload, "sidebyside", ws))
        figure(cols, workload, names.get(workload, workload)).savefig(path, dpi=100)
        paths.append(path)
        b.append(("img", path, f"{names.get(workload, workload)} side by side"))
    b += environment_blocks(cols)
    origin = "side by side: " + ", ".join(f"sweep {c.sweep.sweep['sweep_id']} of {os.path.abspath(c.store)}" for c in cols)
    md, page, replaced = pages.write(b, report_dir, "report", origin)
    return {"markdown": md, "html": page, "plots": paths, "replaced": replaced}
