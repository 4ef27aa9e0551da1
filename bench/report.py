"""The report of a sweep, rendered from the results store alone: plots, report.md and report.html.

    python -m bench.report --store results/bench.sqlite [--sweep ID] [--plots-dir plots] [--report-dir results]

`render()` loads the result that counts per configuration (`store.latest_results`, so a resumed
sweep reads as one), recomputes every number from the raw rows with bench.stats (never from the
summary columns of `results`), draws the plots (bench.plots), and writes the same list of blocks
(heading, paragraph, table, image) twice: as GitHub markdown with relative image links and as one
self-contained HTML file with the plots inlined as data: URIs and all store text escaped.

Conventions: repeats of a configuration are pooled; a multi-rank step counts with its slowest rank
(a step ends when every rank is done) and its phase breakdown is that rank's. DDP's backward phase
contains the gradient all-reduce, so the exposed communication (results.exposed_comm_ms) is split
out of it rather than added to it.
"""
from __future__ import annotations

import argparse
import base64
import html
import json
import math
import os
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from bench import stats, store

STRATEGY_NAMES = {"single": "single device", "dp": "DataParallel", "ddp": "DDP"}
STRATEGY_ORDER = ("single", "dp", "ddp")
# The reference experiment (ANCHORS.md): DeepLabV3-ResNet101, VOC 2012 train split, 20 epochs, on V100s.
REFERENCE_IMAGES = 1464
REFERENCE_EPOCHS = 20
REFERENCE_V100_S = (("1x V100", 32 * 60 + 58), ("4x V100, DP", 14 * 60 + 40), ("4x V100, DDP", 11 * 60 + 21),
                    ("8x V100, DP", 9 * 60 + 40), ("8x V100, DDP", 9 * 60 + 8))


@dataclass
class Config:
    """One configuration of a sweep (repeats pooled), with everything derived from its raw rows."""
    key: str
    workload: str
    strategy: str
    device_type: str
    device_count: int
    global_batch: int
    scaling: str
    data: str
    step_ms: list                       # per step, slowest rank, all repeats
    summary: stats.Summary
    samples_per_s: float
    phases_ms: dict                     # median per phase of the slowest rank's rows
    exposed_comm_ms: float              # from the no_sync probe steps (else the stored column); nan if none
    grad_mib: Optional[float]
    comm_method: Optional[str]
    memory_mib: dict                    # device label -> peak MiB (max over repeats)
    epoch_wall_s: list
    speedup: float = math.nan
    efficiency: float = math.nan
    baseline: str = ""

    @property
    def label(self) -> str:
        return f"{STRATEGY_NAMES.get(self.strategy, self.strategy)} x{self.device_count}"


@dataclass
class Sweep:
    """Everything the report shows about one sweep."""
    sweep: dict
    envs: list
    threads: list
    bench: dict = field(default_factory=dict)      # workload -> [Config], sorted by strategy and count
    problems: list = field(default_factory=list)   # results rows that are not ok
    comm: list = field(default_factory=list)       # (device_count, comm rows) per comm result
    equivalence: list = field(default_factory=list)


# ---------------------------------------------------------------- loading

def pick_sweep(conn: sqlite3.Connection, sweep_id: Optional[int]) -> int:
    """The given sweep id (checked) or the latest sweep."""
    if sweep_id is None and conn.execute("SELECT 1 FROM sweeps LIMIT 1").fetchone() is None:
        raise store.StoreError("the store holds no sweep yet; run a sweep first")
    return int(store.find_sweep(conn, "last" if sweep_id is None else str(sweep_id))["sweep_id"])


def _rows(conn: sqlite3.Connection, sql: str, *args) -> list:
    return [dict(r) for r in conn.execute(sql, args)]


def _memory_mib(rows: list, device_type: str) -> dict:
    """CUDA: peak allocated per GPU; CPU: peak RSS per rank."""
    out: dict = {}
    for m in rows:
        if device_type == "cuda" and str(m["device"]).startswith("cuda") and m["peak_allocated_mib"] is not None:
            label, v = str(m["device"]), m["peak_allocated_mib"]
        elif device_type != "cuda" and m["peak_rss_mib"] is not None:
            label, v = f"rank {m['rank']}", m["peak_rss_mib"]
        else:
            continue
        out[label] = max(out.get(label, 0.0), float(v))
    return out


def _config(conn: sqlite3.Connection, results: list) -> Config:
    r0 = results[0]
    step_ms, no_sync_ms, slowest, memory, epochs = [], [], [], [], []
    for r in results:
        rows = _rows(conn, "SELECT * FROM steps WHERE result_id = ? AND kind = 'measure'", r["result_id"])
        step_ms += stats.step_times_ms(rows)
        no_sync_ms += stats.step_times_ms(_rows(conn, "SELECT * FROM steps WHERE result_id = ? AND kind = 'no_sync'", r["result_id"]))
        slowest += stats.slowest_rank_rows(rows)  # keeps each result's steps apart
        memory += _rows(conn, "SELECT * FROM memory WHERE result_id = ?", r["result_id"])
        epochs += [e["wall_s"] for e in _rows(conn, "SELECT wall_s FROM epochs WHERE result_id = ? ORDER BY epoch", r["result_id"])]
    summary = stats.summarize(step_ms)
    return Config(
        key=r0["config_key"], workload=r0["workload"], strategy=r0["strategy"], device_type=r0["device_type"],
        device_count=int(r0["device_count"]), global_batch=int(r0["global_batch"]), scaling=r0["scaling"] or "weak",
        data=r0["data"] or "synthetic", step_ms=step_ms, summary=summary,
        samples_per_s=stats.samples_per_s(int(r0["global_batch"]), summary.median_ms),
        phases_ms={p: stats.median(s.get(p) for s in slowest) for p in stats.PHASES_MS},
        exposed_comm_ms=(stats.exposed_comm_ms(step_ms, no_sync_ms) if no_sync_ms
                         else stats.median(r["exposed_comm_ms"] for r in results)),
        grad_mib=r0["grad_mib"], comm_method=r0["comm_method"], memory_mib=_memory_mib(memory, r0["device_type"]),
        epoch_wall_s=epochs)


def _with_scaling(configs: list) -> list:
    """Speed-up and efficiency against 'single' at 1 device, else the strategy's own 1-device result."""
    ones = {c.strategy: c for c in configs if c.device_count == 1}
    for c in configs:
        base = ones.get("single") or ones.get(c.strategy)
        if base is not None:
            c.baseline = base.label
            c.speedup = stats.speedup(c.samples_per_s, base.samples_per_s)
            c.efficiency = stats.efficiency(c.samples_per_s, base.samples_per_s, c.device_count, c.scaling)
    order = {s: i for i, s in enumerate(STRATEGY_ORDER)}
    return sorted(configs, key=lambda c: (order.get(c.strategy, len(order)), c.strategy, c.device_count))


def load(conn: sqlite3.Connection, sweep_id: int) -> Sweep:
    """Read one sweep from the store and derive every number the report shows."""
    sweep = dict(store.find_sweep(conn, str(sweep_id)))
    results = sorted((dict(r) for r in store.latest_results(conn, sweep_id)), key=lambda r: r["result_id"])
    env_ids = sorted({r["env_id"] for r in results if r["env_id"] is not None} | ({sweep["env_id"]} - {None}))
    envs = [dict(e) for i in env_ids for e in conn.execute("SELECT * FROM environments WHERE env_id = ?", (i,))]
    threads = sorted({r["threads_per_process"] for r in results if r["threads_per_process"] is not None})
    out = Sweep(sweep=sweep, envs=envs, threads=threads)
    groups: dict = {}
    for r in results:
        if r["mode"] == "equivalence":
            out.equivalence.append(r)
        if r["status"] != "ok":
            out.problems.append(r)
        elif r["mode"] == "bench":
            groups.setdefault(r["config_key"], []).append(r)
        elif r["mode"] == "comm":
            out.comm.append((int(r["device_count"]), _rows(conn, "SELECT * FROM comm WHERE result_id = ? ORDER BY size_bytes", r["result_id"])))
    by_workload: dict = {}
    for rs in groups.values():
        if _rows(conn, "SELECT 1 FROM steps WHERE result_id = ? AND kind = 'measure' LIMIT 1", rs[0]["result_id"]):
            c = _config(conn, rs)
            by_workload.setdefault(c.workload, []).append(c)
    out.bench = {w: _with_scaling(cs) for w, cs in sorted(by_workload.items())}
    return out


# ---------------------------------------------------------------- words and numbers

def device_title(sweep: Sweep, device_type: str) -> str:
    """'cuda, 4x NVIDIA A100' or 'cpu, AMD EPYC (2 cores)' from the environments table."""
    env = sweep.envs[0] if sweep.envs else {}
    if device_type == "cuda" and env.get("gpu_names"):
        names = Counter(n.strip() for n in str(env["gpu_names"]).split(","))
        return "cuda, " + ", ".join(f"{k}x {n}" if k > 1 else n for n, k in names.items())
    cores = f" ({env['cpu_cores']} cores)" if env.get("cpu_cores") else ""
    return f"{device_type}, {env.get('cpu_model') or 'unknown CPU'}{cores}"


def units(device_type: str) -> str:
    return "GPUs" if device_type == "cuda" else "processes"


def fmt(v, spec: str = "", suffix: str = "") -> str:
    """A number for a table; without spec 1 decimal from 100 up, 2 from 1 up, else 3 significant digits."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    spec = spec or (".1f" if abs(v) >= 100 else ".2f" if abs(v) >= 1 else "#.3g")
    return f"{v:{spec}}{suffix}"


def hms(seconds: float) -> str:
    if seconds is None or math.isnan(seconds):
        return "–"
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def train_times(configs: list) -> tuple:
    """[(label, seconds)] for the reference experiment's 20 epochs, and how they were obtained."""
    measured = all(c.epoch_wall_s for c in configs)
    if measured:
        bars = [(c.label, stats.median(c.epoch_wall_s) * REFERENCE_EPOCHS) for c in configs]
        return bars, f"measured: median epoch wall time x {REFERENCE_EPOCHS}"
    data = configs[0].data if configs else "synthetic"
    bars = [(c.label, stats.train_time_s(c.samples_per_s, REFERENCE_IMAGES, REFERENCE_EPOCHS)) for c in configs]
    return bars, f"estimate from {data}-data throughput: {REFERENCE_EPOCHS} x {REFERENCE_IMAGES} images / samples/s"


def verdicts(configs: list) -> list:
    """Plain sentences: speed-up and efficiency per count, where a step's time goes at the largest count."""
    if not configs:
        return []
    u = units(configs[0].device_type)
    out = []
    for n in sorted({c.device_count for c in configs if c.device_count > 1}):
        at_n = [c for c in configs if c.device_count == n and not math.isnan(c.speedup)]
        if at_n:
            first, rest = at_n[0], at_n[1:]
            s = (f"{STRATEGY_NAMES.get(first.strategy, first.strategy)} reaches {first.speedup:.2f}x on {n} {u} "
                 f"({first.efficiency * 100:.0f}% efficiency)")
            s += "".join(f", {STRATEGY_NAMES.get(c.strategy, c.strategy)} {c.speedup:.2f}x "
                         f"({c.efficiency * 100:.0f}%)" for c in rest)
            out.append(s + f", against {first.baseline}.")
    top = max(c.device_count for c in configs)
    for c in configs:
        if c.device_count != top:
            continue
        name = STRATEGY_NAMES.get(c.strategy, c.strategy)
        parts = []
        data = c.phases_ms.get("data_ms", math.nan)
        if not math.isnan(data):
            share = data / c.summary.median_ms * 100
            parts.append(f"{share:.0f}% of a {name} step on {top} {u} waits for data" if share >= 1
                         else f"A {name} step on {top} {u} waits for data less than 1% of the time")
        if not math.isnan(c.exposed_comm_ms):
            parts.append(f"{c.exposed_comm_ms / c.summary.median_ms * 100:.0f}% is exposed communication")
        if parts:
            out.append("; ".join(parts) + ".")
    return out


# ---------------------------------------------------------------- the report as blocks

def _workload_blocks(sweep: Sweep, workload: str, configs: list, plot_paths: dict) -> list:
    dev = configs[0].device_type
    u = units(dev)
    b: list = [("h", 2, f"{workload} ({device_title(sweep, dev)}, {configs[0].scaling} scaling, {configs[0].data} data)")]
    b += [("p", s) for s in verdicts(configs)]
    mem = "peak allocated per GPU" if dev == "cuda" else "peak RSS per process"
    rows = [[STRATEGY_NAMES.get(c.strategy, c.strategy), str(c.device_count), str(c.global_batch), str(c.summary.n),
             fmt(c.samples_per_s), fmt(c.speedup, ".2f", "x"), fmt(c.efficiency * 100, ".1f", "%"),
             fmt(c.summary.median_ms, ".2f"), fmt(c.summary.p10_ms, ".2f"), fmt(c.summary.p90_ms, ".2f"),
             fmt(max(c.memory_mib.values()) if c.memory_mib else None, ".0f"),
             "unstable" if c.summary.unstable else "stable"] for c in configs]
    b.append(("table", ["strategy", u, "global batch", "steps", "samples/s", "speed-up", "efficiency",
                        "median step ms", "p10 ms", "p90 ms", f"peak memory MiB ({mem})", "stability"], rows))
    b.append(("p", f"Speed-up and efficiency against {configs[0].baseline or 'no 1-device result'}. "
                   f"Each step counts with its slowest rank, and its phases are that rank's; unstable means IQR > "
                   f"{stats.UNSTABLE_IQR_FRACTION:.0%} of the median."))
    if workload == "deeplabv3":
        bars, how = train_times(configs)
        b.append(("h", 3, f"Time to train the reference experiment ({REFERENCE_EPOCHS} epochs of VOC 2012 train, "
                          f"{REFERENCE_IMAGES} images)"))
        b.append(("table", ["setup", "time", "how"], [[lbl, hms(s), how] for lbl, s in bars]))
        if configs[0].data == "voc":
            b.append(("p", "Published, on AWS V100s (DeepLabV3-ResNet101, batch 8 per GPU, 256x256):"))
            b.append(("table", ["setup", "time"], [[lbl, hms(s)] for lbl, s in REFERENCE_V100_S]))
    ddp = [c for c in configs if c.strategy == "ddp" and c.grad_mib and not math.isnan(c.exposed_comm_ms)]
    comm_at = {n: rows for n, rows in sweep.comm}
    if ddp:
        rows = []
        for c in ddp:
            cr = comm_at.get(c.device_count, [])
            ar = stats.allreduce_ms_at(c.grad_mib * 2**20, [r["size_bytes"] for r in cr], [r["time_ms"] for r in cr])
            rows.append([str(c.device_count), fmt(c.grad_mib, ".1f"), fmt(c.exposed_comm_ms, ".2f"), fmt(ar, ".2f"),
                         c.comm_method or "–"])
        b.append(("h", 3, "DDP: exposed communication against an all-reduce of the gradients"))
        b.append(("table", [u, "grad MiB", "exposed comm ms", "all-reduce of grads ms (microbenchmark)", "method"], rows))
    for name, path in plot_paths.items():
        b.append(("img", path, f"{workload} {name.replace('_', ' ')}"))
    return b


def blocks(sweep: Sweep, plot_paths: dict) -> list:
    """The whole report as ('h', level, text) / ('p', text) / ('table', headers, rows) / ('img', path, alt)."""
    s = sweep.sweep
    b: list = [("h", 1, f"DataParallel vs DistributedDataParallel: sweep {s['sweep_id']}"),
               ("p", f"Sweep {s['sweep_id']}: {s['status']}, started {s['started_at']}, ended {s['ended_at'] or '–'}"
                     + (f", resumed {s['resumed']} time(s)" if s["resumed"] else "") + f". Command: {s['command_line']}")]
    b.append(("h", 2, "Environment"))
    keys = ("hostname", "git_commit", "python", "torch", "torchvision", "cuda", "cudnn", "nccl", "gpu_names",
            "gpu_driver", "cpu_model", "cpu_cores")
    for e in sweep.envs:
        rows = [[k, str(e[k]) if e.get(k) not in (None, "") else "–"] for k in keys]
        rows.append(["threads per process", ", ".join(str(t) if t else "torch default" for t in sweep.threads) or "–"])
        b.append(("table", ["", f"environment {e['env_id']}"], rows))
    if not sweep.envs:
        b.append(("p", "No environment was recorded."))
    for workload, configs in sweep.bench.items():
        b += _workload_blocks(sweep, workload, configs, plot_paths.get(workload, {}))
    if sweep.comm:
        b.append(("h", 2, "All-reduce microbenchmark"))
        rows = []
        for n, cr in sweep.comm:
            for r in cr:
                alg = stats.algbw_gbps(r["size_bytes"], r["time_ms"])
                size = r["size_bytes"]
                size_text = f"{size / 2**20:.2f} MiB" if size >= 2**20 else f"{size / 2**10:.1f} KiB"
                rows.append([str(n), size_text, fmt(r["time_ms"], ".3f"), fmt(alg),
                             fmt(stats.busbw_gbps(alg, n))])
        b.append(("table", ["ranks", "size", "time ms", "algbw GB/s", "busbw GB/s"], rows))
    if sweep.equivalence:
        b.append(("h", 2, "Equivalence with the single-device run"))
        rows = []
        for r in sweep.equivalence:
            d = json.loads(r["details_json"] or "{}")
            tol = d.get("tolerance")
            rows.append([r["workload"], STRATEGY_NAMES.get(r["strategy"], r["strategy"]), str(r["device_count"]),
                         fmt(d.get("max_abs_diff"), ".3g"), fmt(tol, ".3g") if isinstance(tol, (int, float)) else str(tol or "–"),
                         {True: "passed", False: "FAILED"}.get(d.get("passed"), r["status"])])
        b.append(("table", ["workload", "strategy", "devices", "max abs diff", "tolerance", "result"], rows))
    if sweep.problems:
        b.append(("h", 2, "Failed, skipped and interrupted configurations"))
        b.append(("table", ["status", "configuration", "failed rank", "reason"],
                  [[r["status"], r["config_key"], "–" if r["failed_rank"] is None else str(r["failed_rank"]),
                    r["reason"] or "–"] for r in sweep.problems]))
    return b


# ---------------------------------------------------------------- markdown and HTML

def _md_text(text: str) -> str:
    return html.escape(str(text), quote=False).replace("|", "\\|").replace("\n", " ")


def to_markdown(bl: list, report_dir: str) -> str:
    out = []
    for blk in bl:
        if blk[0] == "h":
            out.append("#" * blk[1] + " " + _md_text(blk[2]))
        elif blk[0] == "p":
            out.append(_md_text(blk[1]))
        elif blk[0] == "table":
            out.append("| " + " | ".join(_md_text(h) for h in blk[1]) + " |")
            out[-1] += "\n|" + "---|" * len(blk[1])
            out[-1] += "".join("\n| " + " | ".join(_md_text(c) for c in row) + " |" for row in blk[2])
        elif blk[0] == "img":
            rel = os.path.relpath(os.path.abspath(blk[1]), os.path.abspath(report_dir)).replace(os.sep, "/")
            out.append(f"![{_md_text(blk[2])}]({rel})")
    return "\n\n".join(out) + "\n"


_CSS = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}"
        "th{background:#f3f3f3}img{max-width:100%;display:block;margin:1em 0}#img-warning{color:#b00}")
# Says so on the page if an embedded plot cannot be decoded (and lets a headless test check it).
_SCRIPT = ("window.addEventListener('load',function(){var bad=[].filter.call(document.images,"
           "function(i){return !(i.naturalWidth>0)});document.body.setAttribute('data-images-ok',bad.length?'false':'true');"
           "if(bad.length){document.getElementById('img-warning').textContent=bad.length+' plot(s) could not be shown';}});")


def to_html(bl: list) -> str:
    e = html.escape
    out = []
    for blk in bl:
        if blk[0] == "h":
            out.append(f"<h{blk[1]}>{e(str(blk[2]))}</h{blk[1]}>")
        elif blk[0] == "p":
            out.append(f"<p>{e(str(blk[1]))}</p>")
        elif blk[0] == "table":
            head = "".join(f"<th>{e(str(h))}</th>" for h in blk[1])
            body = "".join("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in row) + "</tr>" for row in blk[2])
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif blk[0] == "img":
            with open(blk[1], "rb") as f:
                data = base64.b64encode(f.read()).decode("ascii")
            out.append(f'<img src="data:image/png;base64,{data}" alt="{e(str(blk[2]))}">')
    title = e(str(bl[0][2])) if bl and bl[0][0] == "h" else "report"
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
            f"<style>{_CSS}</style><script>{_SCRIPT}</script></head>\n<body>\n<p id=\"img-warning\"></p>\n"
            + "\n".join(out) + "\n</body></html>\n")


# ---------------------------------------------------------------- entry points

def render(store_path: str, sweep_id: Optional[int] = None, plots_dir: str = "plots", report_dir: str = "results") -> dict:
    """Render plots into plots_dir and report.md + report.html into report_dir, from the store alone.
    sweep_id None: the latest sweep. Returns {'markdown': path, 'html': path, 'plots': [paths]}."""
    from bench import plots
    conn = store.connect(store_path, readonly=True)
    try:
        sweep = load(conn, pick_sweep(conn, sweep_id))
    finally:
        conn.close()
    plot_paths = {w: plots.render_workload(w, cs, device_title(sweep, cs[0].device_type), plots_dir,
                                           train_times(cs) if w == "deeplabv3" else None,
                                           REFERENCE_V100_S if cs[0].data == "voc" else None)
                  for w, cs in sweep.bench.items()}
    bl = blocks(sweep, plot_paths)
    os.makedirs(report_dir, exist_ok=True)
    md, page = os.path.join(report_dir, "report.md"), os.path.join(report_dir, "report.html")
    with open(md, "w", encoding="utf-8") as f:
        f.write(to_markdown(bl, report_dir))
    with open(page, "w", encoding="utf-8") as f:
        f.write(to_html(bl))
    return {"markdown": md, "html": page, "plots": [p for d in plot_paths.values() for p in d.values()]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", default="results/bench.sqlite", help="SQLite results store to read")
    parser.add_argument("--sweep", type=int, default=None, help="sweep id to report (default: the latest)")
    parser.add_argument("--plots-dir", default="plots", help="where the PNG plots are written")
    parser.add_argument("--report-dir", default="results", help="where report.md and report.html are written")


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.splitlines()[0])
    add_arguments(parser)
    ns = parser.parse_args(argv)
    try:
        out = render(ns.store, ns.sweep, ns.plots_dir, ns.report_dir)
    except store.StoreError as e:
        print(f"error: {e}")
        return 2
    print(f"wrote {out['markdown']}, {out['html']} and {len(out['plots'])} plot(s) in {ns.plots_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
