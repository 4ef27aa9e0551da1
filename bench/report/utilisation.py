"""The report's utilisation: achieved FLOP/s and MFU beside every configuration, what the FLOPs and the peak rest on,
what the GPU's clocks did in the measured window (throttling flagged with its reason), and a plot of MFU against
device count per strategy. Numbers from bench.analysis.utilisation and bench.analysis.gpustate.

    headers(cuda), cells(c)         # the configuration table's columns (bench.report.report)
    blocks(workload, configs)       # the paragraph under that table, the GPU-state table, MFU errors
    save_plots(configs, workload, where, plots_dir) -> {"utilisation": path}
    forecast_headers(), forecast_cells(s, p)   # the forecast's table with each point's MFU (report and command)
"""
from __future__ import annotations

import math
import os

from bench.analysis import utilisation
from bench.analysis.gpustate import MIN_POWER_READINGS, MIN_SAMPLES, POWER_AVERAGE_S, THROTTLED_SHARE
from bench.analysis.utilisation import Utilisation
from bench.machine.gpustate import INTERVAL_S


def headers(cuda: bool) -> list:
    return (["TFLOP/s per GPU", "MFU", "throttled"] if cuda else ["GFLOP/s per process", "MFU"])


def _u(c) -> Utilisation:
    return c.utilisation


def throttle_cell(c) -> str:
    """The reasons it throttled, 'too few samples (N)' where a GPU was sampled too few times to see a throttle, else
    'no' (bench.analysis.gpustate.GpuState.verdict)."""
    if c.gpu is None:
        return "not sampled"
    return c.gpu.verdict()


def cells(c) -> list:
    u = _u(c)
    out = [u.achieved_cell() if u else "–", u.mfu_cell() if u else "–"]
    return out + ([throttle_cell(c)] if c.device_type == "cuda" else [])


def flop_text(x: float) -> str:
    """12.3 MFLOP, 45.18 GFLOP, 1.2 TFLOP."""
    for scale, unit in ((1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP")):
        if abs(x) >= scale:
            return f"{x / scale:.4g} {unit}"
    return f"{x:.4g} FLOP"


def _flops_sentence(configs: list) -> str:
    """Where the FLOPs per sample come from (one workload: one model, one count per image size and batch)."""
    seen = {}
    for c in configs:
        f = c.utilisation.flops if c.utilisation else None
        if f is not None and f.per_sample is not None:
            seen.setdefault((f.source, f.check), f.per_sample)
    if not seen:
        reasons = sorted({c.utilisation.flops.source for c in configs if c.utilisation})
        return "No FLOPs per sample: " + "; ".join(reasons) + "."
    parts = [f"{flop_text(v)} per sample, {src}" + (f"; {check}" if check else "") for (src, check), v in seen.items()]
    return ("Training FLOPs (forward and backward, model FLOPs only): " + "; ".join(parts)
            + ". Achieved = FLOPs per sample x samples/s / devices.")


def blocks(workload: str, configs: list) -> list:
    """The paragraphs under the configuration table (FLOPs, peaks, MFU errors and gaps) and the GPU's state."""
    if not configs or all(c.utilisation is None for c in configs):
        return []
    out = [("p", _flops_sentence(configs))]
    cpu = configs[0].device_type != "cuda"
    peaks = sorted({c.utilisation.peak_text for c in configs if c.utilisation and c.utilisation.peak_text})
    if peaks:
        out.append(("p", "MFU against the dense peak (no sparsity) of the precision that ran: " + "; ".join(peaks)
                    + "." + (CPU_PEAK if cpu else "") + _across_precisions(configs)))
    for c in configs:
        if c.utilisation and c.utilisation.error:
            out.append(("p", f"ERROR in {c.label} [{c.variant}]: {c.utilisation.error}."))
    notes = sorted({c.utilisation.note for c in configs if c.utilisation and c.utilisation.note})
    out += [("p", n[0].upper() + n[1:] + ".") for n in notes]
    sampled = [c for c in configs if c.gpu is not None]
    if sampled:
        out.append(("h", 3, f"{workload}: the GPU's state in the measured window"))
        out.append(("table", ["configuration", "precision / settings", "SM clock, median (of max)",
                              "power W, median (of limit)", "hottest °C", "throttled", "samples"],
                    [[c.label, c.variant, c.gpu.clock_text(), c.gpu.power_text(),
                      f"{c.gpu.temperature_max_c:.0f}", throttle_cell(c), str(c.gpu.samples)] for c in sampled]))
        out.append(("p", f"Sampled from NVML every {INTERVAL_S * 1e3:.0f} ms by a thread beside the measured window (it "
                         "touches no CUDA stream), every rank's GPUs. Throttled: a throttle reason (power cap, thermal or "
                         "hardware slowdown, power brake, sync boost, board limit) held one GPU's clock for "
                         f"{THROTTLED_SHARE:.0%} of its window or more, judged per GPU and named by its rank and "
                         "device (a step runs at its slowest GPU's pace); clock, power and temperature: all GPUs "
                         "together. " + _power_sentence()
                         + (_too_few_sentence() if any(c.gpu.too_few for c in sampled) else "")))
    return out


CPU_PEAK = (" On CPU the peak is per process: each process's share of the achieved FLOP/s (the configuration's over "
            "its processes) is held against it, so --peak-tflops gives the peak of the cores one process runs on (its "
            "--threads-per-process), not the machine's; the machine's peak would read DDP x2's MFU half what it is on "
            "a node running its two processes.")


def _across_precisions(configs: list) -> str:
    """Where the table sets precisions with different peaks side by side: MFU is each against its own, so the work
    done is compared in FLOP/s. DeepLabV3 on an H200 read 'MFU 40.5%' at fp32 beside '5.6%' at bf16, as if fp32 were
    the efficient one, where bf16 did 55.4 TFLOP/s of the model's work against fp32's 27.2. '' otherwise."""
    best: dict = {}
    for c in configs:
        u = c.utilisation
        if u and u.precision_key and not math.isnan(u.mfu) and not math.isnan(u.achieved_tflops):
            if u.precision_key not in best or u.achieved_tflops > best[u.precision_key].achieved_tflops:
                best[u.precision_key] = u
    if len({round(u.peak_tflops, 6) for u in best.values()}) < 2:
        return ""
    order = sorted(best.values(), key=lambda u: -u.achieved_tflops)
    cuda = order[0].device_type == "cuda"
    unit = "TFLOP/s per GPU" if cuda else "GFLOP/s per process"
    peaks = ", ".join(f"{u.precision_key} {u.peak_tflops:.4g}" for u in order)
    reached = " against ".join(f"{u.precision_key} {u.achieved_cell()}" for u in order)
    return (f" MFU is against each precision's own peak ({peaks} TFLOP/s), so across precisions compare {unit}, not "
            f"MFU: the most each reached, {reached}.")


def _power_sentence() -> str:
    """Why power counts only from a second into a window: NVML's reading is a one-second average (a self-check's
    75 ms windows on an H100 read 123 W, the idle draw from before them, beside DeepLabV3's 510-574 W)."""
    return (f"Power: NVML's reading (nvmlDeviceGetPowerUsage) is the average over the last second on Ampere and newer "
            f"GPUs, refreshed about every 100 ms, so it counts only from {POWER_AVERAGE_S:.0f} s into a window whose "
            f"readings changed; with fewer than {MIN_POWER_READINGS} such readings it reads 'not updated in the window' "
            "(the longest window given): a shorter window's reading is the draw from before it.")


def _too_few_sentence() -> str:
    return (f" Too few samples (N): a GPU sampled fewer than {MIN_SAMPLES} times (its repeats together) cannot show a "
            f"reason held for {THROTTLED_SHARE:.0%} of its window (one sample is more than that), so no 'no' is given.")


def clause(c) -> str:
    """', 38% MFU' for the recommendation's first sentence ('' without one; the error's short form with one)."""
    u = c.utilisation
    if u is None:
        return ""
    if u.error:
        return f", MFU {u.mfu_cell()} (an error in the peak or the count: see its table)"
    return f", {u.words()}" if u.words() else ""


def throttled_sentence(c) -> str:
    """For the recommendation: '' unless a GPU of the configuration throttled; then by how much. 'its speed is the
    throttled machine's' once stood alone after an H200's power cap, read as a degraded number, where the clock had
    averaged 1.9% under its maximum: the flag, then the clock's mean and lowest, the power, and what that bounds."""
    if c.gpu is None or not c.gpu.throttled:
        return ""
    flag = f"It throttled in the measured window ({c.gpu.words()})"
    how = c.gpu.magnitude()
    return f"{flag}: {how}{_throttle_bound(c.gpu)}." if how else f"{flag}: its speed is the throttled machine's."


NO_SHORTFALL = 0.0005   # a mean clock within 0.05% of its maximum: under what the report prints ('0.0%'), none


def _throttle_bound(g) -> str:
    """What the clock's shortfall bounds: clock-bound work scales at most with the clock (memory-bound work less)."""
    short = g.shortfall()
    if math.isnan(short):
        return ""
    if short < NO_SHORTFALL:
        return "; on average the clock was not held below its maximum, so the speed is not held down by it"
    return (f", so its throughput is at most about {short:.1%} under an uncapped clock's (clock-bound work scales at "
            "most with the clock)")


def forecast_mfu(s, p) -> str:
    """A forecast point's MFU: the setting's FLOPs per sample at the point's samples/s, against its measured peak; above
    100% an error (bench.analysis.utilisation.at_cell)."""
    return "–" if p.refused else utilisation.at_cell(s.any.utilisation, p.samples_per_s, p.count)


def forecast_headers() -> list:
    """The forecast's table (bench.forecast.outlook.COLUMNS) with MFU before its last column, the bound's words."""
    from bench.forecast import outlook
    names = [h for h, _ in outlook.COLUMNS]
    return names[:-1] + ["MFU"] + names[-1:]


def forecast_cells(s, p) -> list:
    """One forecast (or measured) point's cells under forecast_headers()."""
    from bench.forecast import outlook
    cells = outlook.cells(s, p)
    return cells[:-1] + [forecast_mfu(s, p)] + cells[-1:]


def figure(configs: list, workload: str, where: str):
    """MFU (or, without a peak, achieved FLOP/s per device) against device count, one line per strategy and variant: a
    matplotlib Figure (imported here: the forecast command reads this module's table helpers without drawing). Where
    the configurations' MFU stands against different peaks (fp32 against 67 TFLOP/s, bf16 against 989 on an H100),
    one MFU axis would say the precision that does less of the model's work is the efficient one (DeepLabV3: fp32 at
    40% MFU, 26.5 TFLOP/s; bf16 at 5%, 51.0): it plots achieved FLOP/s per device instead, on a log axis with each
    precision's dense peak a dashed line (`_against_peaks`), so each point's distance below its own line is its MFU."""
    from bench.report import plots
    with_mfu = any(c.utilisation and not math.isnan(c.utilisation.mfu) for c in configs)
    cuda = configs[0].device_type == "cuda"
    peaks = _peaks(configs) if with_mfu else []
    several = len({peak for _, peak in peaks}) > 1
    title = (f"Achieved FLOP/s per {'device' if cuda else 'process'} against device count, each precision's dense peak dashed" if several
             else "Model FLOPs utilisation against device count" if with_mfu
             else "Achieved FLOP/s per device against count")
    fig, ax = plots._figure(title, where, workload, width=10.0 if several else 8.0)
    style = plots._series_style(configs)
    for key, cs in plots._by_series(configs).items():
        pts = [(c.device_count, _value(c, with_mfu and not several, cuda)) for c in cs]
        pts = [(n, v) for n, v in pts if not math.isnan(v) and (v > 0 or not several)]
        if pts:
            ax.plot([n for n, _ in pts], [v for _, v in pts], **style[key])
    per = "TFLOP/s per GPU" if cuda else "GFLOP/s per process"
    unit = (f"{per} (log scale)" if several else "MFU (% of the dense peak)" if with_mfu else per)
    ax.set(xlabel=plots._devices_label(configs), ylabel=unit, xticks=sorted({c.device_count for c in configs}))
    if several:
        _against_peaks(ax, peaks, 1 if cuda else 1e3, "TFLOP/s per device" if cuda else "GFLOP/s per process")
    else:
        ax.set_ylim(0, 100 if with_mfu else None)
    if ax.get_lines():
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small") if several else ax.legend()
    return fig


def _peaks(configs: list) -> list:
    """[(precision key, peak TFLOP/s per device)], first seen first, of the configurations with an MFU: the peaks their
    MFU stands against."""
    return list(dict.fromkeys((c.utilisation.precision_key, round(c.utilisation.peak_tflops, 6)) for c in configs
                              if c.utilisation and not math.isnan(c.utilisation.mfu) and c.utilisation.peak_tflops > 0))


PEAK_STYLES = ("--", (0, (6, 3, 1, 3)), (0, (2, 2)), (0, (8, 2)))


def _against_peaks(ax, peaks: list, k: float, unit: str) -> None:
    """Each precision's dense peak, a dashed line named in the legend ('bf16 dense peak: 989 TFLOP/s per device'; on
    CPU per process, as --peak-tflops is there), on
    a log axis that holds the points and every peak (a linear one from 0 to 989 would flatten fp32's 26.5 to the
    floor)."""
    for i, (key, peak) in enumerate(peaks):
        ax.axhline(peak * k, color="#777777", linewidth=1.0, linestyle=PEAK_STYLES[i % len(PEAK_STYLES)],
                   label=f"{key} dense peak: {peak * k:.4g} {unit}")
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))   # 20, 50, 100, 200, 500: read without powers of 10
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())
    values = [y for ln in ax.get_lines() for y in ln.get_ydata() if y > 0]
    if values:
        ax.set_ylim(min(values) / 2, max(values) * 1.5)


def _value(c, with_mfu: bool, cuda: bool) -> float:
    u = c.utilisation
    if u is None:
        return math.nan
    if with_mfu:
        return u.mfu * 100
    return u.achieved_tflops * (1 if cuda else 1e3)


def save_plots(configs: list, workload: str, where: str, plots_dir: str) -> dict:
    """{'utilisation': path} where any configuration has FLOPs, else {}."""
    if not any(c.utilisation and not math.isnan(c.utilisation.achieved_tflops) for c in configs):
        return {}
    from bench.report import plots
    os.makedirs(plots_dir, exist_ok=True)
    path = os.path.join(plots_dir, plots.file_name(workload, "utilisation"))
    figure(configs, workload, where).savefig(path, dpi=100)
    return {"utilisation": path}
