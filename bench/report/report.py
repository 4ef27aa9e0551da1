"""The report of a sweep, rendered from the results store alone: plots, report.md and report.html.

    python -m bench.report.report --store results/bench.sqlite [--sweep ID] [--plots-dir plots] [--report-dir results]

`render()` loads the sweep (bench.analysis.results: the result that counts per configuration, every number
recomputed from the raw rows), draws the plots (bench.report.plots) and writes one list of blocks twice
(bench.report.pages): report.md and a self-contained report.html. The report opens with its answer
(bench.report.recommend: what to run, what DataParallel would cost, where scaling stops paying, what bounds
the run) and, right under its table, one small figure per workload (plots.overview_figure), then the evidence
per workload, communication, correctness, problems, and the environment last (bench.report.environment). Each
page names the sweep and store it reports; render() says whose report it replaced, when another's was there.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Optional

from bench import stats
from bench.analysis import cost, utilisation
from bench.analysis.nodes import starved_nodes
from bench.analysis.reference import REFERENCE_V100_S, train_times
from bench.config import ConfigError
from bench.report import comm as comm_report
from bench.report import frontierplot, plotset
from bench.report import compile as compile_report
from bench.report import efficiency
from bench.report.efficiency import efficiency_text, efficiency_words, speedup_text
from bench.report import fit as fit_report
from bench.report import cost as cost_report
from bench.report import choice, environment, frontier, levers, plots, recommend, sidebyside, training_state
from bench.report import traces as trace_report
from bench.report import pages
from bench.report import utilisation as utilisation_report
from bench.report.pages import fmt
from bench.store import store
from bench.report.names import device_title, image_line, relabel, shown_names, units

from bench.analysis.results import STRATEGY_NAMES, Sweep, diverged, load, pick_sweep

# efficiency's words that callers read as the report's (report.wrapper_text, report.OWN_BASELINE: tests/test_verdicts.py,
# tests/test_report.py), re-exported by name rather than as imports only a noqa kept
OWN_BASELINE, wrapper_text = efficiency.OWN_BASELINE, efficiency.wrapper_text

# ---------------------------------------------------------------- words and numbers

def name(strategy: str) -> str:
    return STRATEGY_NAMES.get(strategy, strategy)


def verdicts(configs: list) -> list:
    """Plain sentences: speed-up and efficiency per count and variant, where a step's time goes at the largest count."""
    if not configs:
        return []
    u = units(configs[0].device_type)
    out = []
    variants = list(dict.fromkeys(c.variant for c in configs))
    for variant in variants:
        vs = [c for c in configs if c.variant == variant]
        tag = f" [{variant}]" if len(variants) > 1 else ""   # three comm hooks' sentences read alike without it
        for n in sorted({c.device_count for c in vs if c.device_count > 1}):
            at_n = [c for c in vs if c.device_count == n and not math.isnan(c.speedup)]
            if at_n:
                first, rest = at_n[0], at_n[1:]
                s = f"{name(first.strategy)}{tag} reaches {first.speedup:.2f}x on {n} {u} ({efficiency_words(first, ' efficiency')})"
                s += "".join(f", {name(c.strategy)}{tag} {c.speedup:.2f}x ({efficiency_words(c)})" for c in rest)
                out.append(s + f", against {first.baseline}.")
        top = max(c.device_count for c in vs)
        for c in vs:
            if c.device_count != top:
                continue
            parts = []
            wait = c.data_wait_ms if not math.isnan(c.data_wait_ms) else c.phases_ms.get("data_ms", math.nan)
            if not math.isnan(wait) and c.summary.median_ms > 0:
                share = wait / c.summary.median_ms * 100
                parts.append(f"{c.label}: {share:.0f}% of a step waits for data" if share >= 1
                             else f"{c.label}: a step waits for data less than 1% of the time")
            if comm_report.probe_words(c):  # 'not resolved' inside the steps' spread; at one rank DDP's own work
                parts.append(comm_report.probe_words(c))
            if parts:
                out.append("; ".join(parts) + ".")
            waited = trace_report.comm_and_wait(c)  # --profile: how much of it is waiting for a slower rank
            if waited:
                out.append(waited)
    return out


def memory_text(c) -> tuple:
    """(allocated, reserved, device level) MiB of the fullest device, net of benchmark artefacts."""
    top = lambda d: max(d.values()) if d else None  # noqa: E731
    return top(c.memory_mib), top(c.reserved_mib), top(c.device_mib)


FP32_ON_CUDA = ("fp32 on CUDA here means full fp32: TF32 off for matrix products and for cuDNN's convolutions "
               "(torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False). PyTorch's own "
               "default lets cuDNN use TF32 for convolutions, so a plain script's 'fp32' convolution model can run "
               "faster than this row; --precision tf32 measures TF32.")


def _top(d: dict):
    return max(d.values()) if d else None


WARMUP_END_HEADER = "device level at the warm-up's end MiB"   # one reading, after the cache is emptied: read 'whole run'
WARMUP_PEAK_HEADER = "warm-up peak reserved MiB"   # the H100's DeepLabV3 fp32: 21204 beside 5631 at the warm-up's end
STEPS_HEADER = "steps (all repeats)"   # 'steps 18, repeats 3' read as 18 per process: the count is their total (6 each)


TIMING = {"cuda_window_events": "CUDA: window wall time between two synchronisations, steps and phases from CUDA events",
          "cpu_clock": "CPU: monotonic clock"}


# ---------------------------------------------------------------- the report as blocks

def _workload_blocks(sweep: Sweep, workload: str, configs: list, plot_paths: dict) -> list:
    dev = configs[0].device_type
    u = units(dev)
    b: list = [("h", 2, f"{workload}: all configurations ({device_title(sweep, dev)}, {configs[0].scaling} scaling, {configs[0].data} data)")]
    b += [("p", s) for s in [image_line(workload, configs)] if s]
    b += [("p", s) for s in verdicts(configs)]
    cuda = dev == "cuda"
    tokens = any(c.tokens_per_sample for c in configs)  # a language model: tokens/s, global and per device, beside
    rows = []
    for c in configs:
        alloc, reserved, level = memory_text(c)
        rows.append([name(c.strategy), c.variant, str(c.device_count) + (f" ({c.nodes} nodes)" if c.nodes > 1 else ""),
                     str(c.global_batch), str(c.summary.n), str(len(c.process_sps) or 1), fmt(c.samples_per_s)]
                    + ([fmt(c.tokens_per_s, ".0f"), fmt(c.tokens_per_s_per_device, ".0f")] if tokens else [])
                    + [speedup_text(c),
                     efficiency_text(c, ".1%", configs), fmt(c.summary.median_ms, ".2f"), fmt(c.summary.p10_ms, ".2f"),
                     fmt(c.summary.p90_ms, ".2f"), fmt(alloc, ".0f")]
                    + ([fmt(reserved, ".0f"), fmt(level, ".0f"), fmt(_top(c.run_device_mib), ".0f"),
                        fmt(_top(c.run_reserved_mib), ".0f")] if cuda else [])
                    + utilisation_report.cells(c) + ["loss not finite" if diverged(c) else "unstable" if c.unstable else "stable"])
    mem = ["peak allocated MiB (fullest GPU)", "peak reserved MiB", "device level MiB (nvidia-smi)",
           WARMUP_END_HEADER, WARMUP_PEAK_HEADER] if cuda else ["peak RSS MiB (largest process)"]
    tok = ["tokens/s (all devices)", f"tokens/s per {recommend.SINGULAR[u]}"] if tokens else []
    b.append(("table", ["strategy", "precision / settings", u, "global batch", STEPS_HEADER, "repeats", "samples/s", *tok,
                        "speed-up", "efficiency", "median step ms", "p10 ms", "p90 ms", *mem,
                        *utilisation_report.headers(cuda), "stability"], rows))
    if tokens:
        b.append(("p", f"A sample is one sequence of {configs[0].tokens_per_sample} tokens: tokens/s (all devices) is "
                       f"samples/s x {configs[0].tokens_per_sample}; tokens/s per {recommend.SINGULAR[u]} is that over the "
                       f"{u} of the configuration (the figure torchtitan and most papers report)."))
    methods = sorted({c.timing_method for c in configs if c.timing_method})
    b.append(("p", f"Throughput is samples over the timed window's wall time ({'; '.join(TIMING.get(m, m) for m in methods) or 'median step'}), "
                   f"the median over processes; speed-up and efficiency against single device x1 with the same precision "
                   f"and settings. Each step counts with its slowest rank. Unstable: IQR > {stats.UNSTABLE_IQR_FRACTION:.0%} "
                   f"of the median step, or repeats spread more than {stats.UNSTABLE_REPEAT_SPREAD:.0%}. At one device a "
                   f"wrapper (DataParallel, DDP) against single device is its overhead, not scaling."
                   + (" Memory is net of the suite's pre-generated batches; the steady peaks are those after the warm-up "
                      "(its peaks reset). The device level at the warm-up's end is one nvidia-smi reading there, "
                      "compilation's memory in it, taken after PyTorch has emptied the cache cuDNN's benchmark search "
                      "filled: not the run's peak. The warm-up's peak reserved is the allocator's peak over the warm-up, "
                      "compilation and that search (their workspaces sized to the memory free, so a smaller GPU "
                      "searches less rather than runs out); the budget table says it beside its pick where it was "
                      "higher." if cuda else "")))
    b += utilisation_report.blocks(workload, configs)  # FLOPs, peaks, MFU errors; the GPU's clocks in the window
    numerics = {c.precision: c.numerics for c in configs if c.numerics}
    if cuda and "fp32" in numerics:
        b.append(("p", FP32_ON_CUDA))
    if numerics and cuda:
        b.append(("table", ["precision", "autocast", "TF32 matmul / cuDNN", "float32 matmul precision", "cuDNN benchmark", "grad scaler"],
                  [[p, str(n.get("autocast_dtype") or "–"), f"{n.get('tf32_matmul')} / {n.get('tf32_cudnn')}",
                    str(n.get("float32_matmul_precision")), str(n.get("cudnn_benchmark")), str(n.get("grad_scaler"))]
                   for p, n in numerics.items()]))
    elif any(n.get("autocast_dtype") for n in numerics.values()):  # CPU: TF32, cuDNN and the scaler are the GPU's
        b.append(("table", ["precision", "autocast"], [[p, str(n.get("autocast_dtype") or "–")] for p, n in numerics.items()]))
    b += compile_report.blocks(workload, configs)  # compilation's cost and payback; the reference job's time
    if sweep.loader and configs[0].data != "synthetic":
        rows = []
        for c in configs:
            alone = sweep.loader.get(c.device_count)
            if alone:
                rows.append([c.label, fmt(c.samples_per_s), fmt(alone), str(c.loader_workers or "–"),
                             "data-bound" if alone < 1.1 * c.samples_per_s else "no"])
        b.append(("h", 3, f"{workload}: the data loader alone"))
        b.append(("table", ["configuration", "training samples/s", "loader alone samples/s",
                            "loader workers in all", "data-bound (loader < 1.1x training)"], rows))
    b += training_state.blocks(workload, configs)  # parameters, gradients, optimizer state per rank
    b += comm_report.ddp_bounds_blocks(sweep, workload, configs, u)
    b += trace_report.blocks(configs, workload)  # --profile
    for key, path in plot_paths.items():
        b.append(("img", path, f"{workload} {key.replace('_', ' ')}"))
    return b


def blocks(sweep: Sweep, plot_paths: dict, figures: list = (), memory_budget_gib: Optional[float] = None,
           prices=None) -> list:
    """The whole report as ('h', level, text) / ('p', text) / ('table', headers, rows) / ('img', path, alt) /
    ('imgs', [(path, alt)]): the recommendation first with `figures` (one small figure per workload) right under its
    table, then the evidence per workload, then communication, correctness, problems, environment."""
    s = sweep.sweep
    b: list = [("h", 1, f"DataParallel vs DistributedDataParallel: sweep {s['sweep_id']}")]
    b += recommend.blocks(sweep, figures)
    b += fit_report.blocks(sweep)  # ./run_bench.sh fit: the largest batch each configuration fits, and its speed there
    b += frontier.blocks(sweep, *frontier.budget_mib(sweep, memory_budget_gib))  # the fastest that fits
    b += levers.blocks(sweep)  # what activation checkpointing, CPU offload, find_unused_parameters saved and cost
    b += cost_report.blocks(sweep, prices)  # --price-per-device-hour: the cheapest run beside the fastest
    names = page_names(sweep)
    b = relabel(b, names)   # the command line below is quoted as the user gave it
    b.append(("p", f"Sweep {s['sweep_id']}: {s['status']}, started {s['started_at']}, ended {s['ended_at'] or '–'}"
                   + (f", resumed {s['resumed']} time(s)" if s["resumed"] else "") + f". Command: {s['command_line']}"))
    return b + relabel(_evidence_blocks(sweep, plot_paths), names)


def page_workloads(sweep: Sweep) -> list:
    """Every workload the page names: measured, failed or skipped, checked for equivalence."""
    return [*sweep.bench, *(r["workload"] for r in [*sweep.problems, *sweep.equivalence])]


def page_names(sweep: Sweep) -> dict:
    return shown_names(page_workloads(sweep))


def _evidence_blocks(sweep: Sweep, plot_paths: dict) -> list:
    """Warnings, each workload's evidence, communication, correctness, problems and the environment."""
    b = [("p", f"Warning: {w}") for w in starved_nodes(sweep)]  # a node with fewer cores than its ranks need
    for workload, configs in sweep.bench.items():
        b += _workload_blocks(sweep, workload, configs, plot_paths.get(workload, {}))
    if sweep.comm:
        b += comm_report.microbenchmark_blocks(sweep)
    if sweep.equivalence:
        b.append(("h", 2, "Equivalence with the single-device run"))
        rows = []
        for r in sweep.equivalence:
            d = json.loads(r["details_json"] or "{}")
            tol = d.get("tolerance")
            rows.append([r["workload"], name(r["strategy"]), str(r["device_count"]), r["precision"] or "fp32",
                         fmt(d.get("max_abs_diff"), ".3g"), fmt(tol, ".3g") if isinstance(tol, (int, float)) else str(tol or "–"),
                         {True: "passed", False: "FAILED"}.get(d.get("passed"), r["status"])])
        b.append(("table", ["workload", "strategy", "devices", "precision", "max abs diff", "tolerance", "result"], rows))
    if sweep.problems:
        b.append(("h", 2, "Failed, skipped and interrupted configurations"))
        b.append(("table", ["status", "configuration", "failed rank", "reason"],
                  [[r["status"], r["config_key"], "–" if r["failed_rank"] is None else str(r["failed_rank"]),
                    r["reason"] or "–"] for r in sweep.problems]))
    return b + environment.blocks(sweep)


# ---------------------------------------------------------------- entry points

def render(store_path: str, sweep_id: Optional[int] = None, plots_dir: str = "plots", report_dir: str = "results",
           memory_budget_gib: Optional[float] = None, prices=None, peak_tflops: Optional[str] = None) -> dict:
    """Render plots into plots_dir and report.md + report.html into report_dir, from the store alone.
    sweep_id None: the latest sweep. peak_tflops: report --peak-tflops (default: the sweep's own).
    Returns {'markdown': path, 'html': path, 'plots': [paths]}."""
    conn = store.connect(store_path, readonly=True)
    try:
        sweep = load(conn, pick_sweep(conn, sweep_id))
    finally:
        conn.close()
    if peak_tflops is not None:
        utilisation.attach(sweep, peak_tflops)
    with plots.page(page_workloads(sweep)):   # each plot's file named, and cited, by the page's name of its workload
        bl, saved = _blocks_and_plots(store_path, sweep, plots_dir, memory_budget_gib, prices)
    md, page, replaced = pages.write(bl, report_dir, "report", f"sweep {sweep.sweep['sweep_id']} of {os.path.abspath(store_path)}")
    return {"markdown": md, "html": page, "replaced": replaced, "plots": saved}


def _blocks_and_plots(store_path: str, sweep: Sweep, plots_dir: str, memory_budget_gib, prices) -> tuple:
    """(the page's blocks, the paths of the plots saved for it)."""
    names = page_names(sweep)   # each plot's title and file name by the page's name of its workload
    shown = {w: names.get(w, w) for w in sweep.bench}
    title = {w: device_title(sweep, cs[0].device_type) for w, cs in sweep.bench.items()}
    plot_paths = {w: plotset.render_workload(shown[w], cs, title[w], plots_dir, train_times(cs) if w == "deeplabv3" else None,
                                           REFERENCE_V100_S if cs[0].data == "voc" else None)
                  for w, cs in sweep.bench.items()}
    plot_paths = {w: trace_report.plot_paths(p, sweep.bench[w], shown[w], title[w], plots_dir)
                  for w, p in plot_paths.items()}  # --profile: the traces' figure beside the phases plot
    budget = frontier.budget_mib(sweep, memory_budget_gib)[0]
    plot_paths = {w: {**p, **frontierplot.save_plots(sweep.bench[w], shown[w], title[w], plots_dir, budget)}
                  for w, p in plot_paths.items()}
    plot_paths = {w: {**p, **utilisation_report.save_plots(sweep.bench[w], shown[w], title[w], plots_dir)}
                  for w, p in plot_paths.items()}
    figures = [(first_screen_figure(sweep, w, cs, plots_dir, shown[w]), f"{shown[w]}: throughput against device count, "
                f"recommended starred") for w, cs in sweep.bench.items()]
    bl = blocks(sweep, plot_paths, figures, memory_budget_gib, prices)
    from bench.report import forecast
    at = next((i for i, x in enumerate(bl) if x[:3] == ("h", 2, "Environment")), len(bl))  # before the environment
    bl[at:at] = ahead = relabel(forecast.blocks(store_path, sweep, plots_dir, device_title(
        sweep, next(iter(sweep.bench.values()))[0].device_type) if sweep.bench else "", memory_budget_gib), names)
    forecast_plots = [x[1] for x in ahead if x[0] == "img"]
    return bl, [x[0] for x in figures] + [p for d in plot_paths.values() for p in d.values()] + forecast_plots


def first_screen_figure(sweep: Sweep, workload: str, configs: list, plots_dir: str, shown: str = "") -> str:
    """Save the workload's small figure for the first screen (bench.report.plots.overview_figure), marked as the
    summary reads (`overview_marks`); returns its path. shown: the workload's name on the page (title, file)."""
    shown = shown or page_names(sweep).get(workload, workload)
    path = os.path.join(plots_dir, plots.file_name(shown, "overview", page_workloads(sweep)))
    plots.overview_figure(configs, shown, device_title(sweep, configs[0].device_type),
                          *overview_marks(sweep, configs)).savefig(path, dpi=100)
    return path


def overview_marks(sweep: Sweep, configs: list) -> tuple:
    """(picks, open pairs) of each precision by the summary's own rule (recommend.candidates: a fit sweep's runs over
    the budget are none; choice.choose, choice.unresolved): the overview chose among every run, so where a run over
    the budget was fastest its ring or star could disagree with the summary's cell."""
    chosen = recommend.chosen(sweep, configs)
    return [best for best, _, _ in chosen], [(best, fastest) for best, fastest, tie in chosen if choice.unresolved(best, tie)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", action="append", default=None, help="SQLite results store to read (default "
                        "results/bench.sqlite); again for several machines side by side (the latest sweep of each)")
    parser.add_argument("--sweep", default=None, help="sweep id to report (default: the latest); several (3,7): side by "
                        "side, of one store or one per --store")
    parser.add_argument(cost.FLAG, dest="price", default=None, help=cost.HELP)
    parser.add_argument("--plots-dir", default="plots", help="where the PNG plots are written")
    parser.add_argument("--report-dir", default="results", help="where report.md and report.html are written")
    parser.add_argument("--memory-budget-gib", type=frontier.budget_arg, default=None,
                        help="memory per device the recommendation must fit, GiB (default: the sweep's)")
    parser.add_argument("--peak-tflops", type=peak_arg, default=None,
                        help="dense peak TFLOP/s per device for MFU: a number, or PRECISION=TFLOPS,... (e.g. "
                        "bf16=989,fp32=67); overrides the table of known GPUs, on every sweep shown (default: the "
                        "sweep's); on CPU per process: the peak of the --threads-per-process cores one process runs on, "
                        "not the machine's")


def peak_arg(text: str) -> str:
    """`report --peak-tflops`: checked here (argparse's error, exit 2), parsed where the report attaches it."""
    import argparse
    from bench.machine.peaks import parse_override
    try:
        parse_override(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: exit 2, one line, as every command's
        self.print_usage()
        self.exit(2, f"error: {message}\n")


def main(argv: Optional[list] = None) -> int:
    parser = _Parser(prog="./run_bench.sh report", description=__doc__.splitlines()[0])
    add_arguments(parser)
    ns = parser.parse_args(argv)
    try:
        prices = cost.parse_price(ns.price)
        for flag, folder in (("--plots-dir", ns.plots_dir), ("--report-dir", ns.report_dir)):
            store.check_folder(flag, folder)     # before any store is read: a file there once failed as exit 3
        pairs = sidebyside.targets(ns.store or ["results/bench.sqlite"], ns.sweep)
        out = (sidebyside.render(sidebyside.load_targets(pairs, ns.peak_tflops), ns.plots_dir, ns.report_dir, prices)
               if len(pairs) > 1 else render(pairs[0][0], pairs[0][1], ns.plots_dir, ns.report_dir, ns.memory_budget_gib,
                                             prices, ns.peak_tflops))
    except (store.StoreError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out['markdown']}, {out['html']} and {len(out['plots'])} plot(s) in {ns.plots_dir}"
          + (f"; they replace the report of {out['replaced']}" if out.get("replaced") else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
