"""A sweep read back from the store: one `Config` per configuration (repeats pooled), every number
derived from the raw rows with bench.stats (never from the summary columns of `results`). The rows come
through the store's plain read interface, bench.store.read.

    sweep = load(conn, pick_sweep(conn, None))
    sweep.bench["synthetic"]   -> [Config], sorted by series then device count, with speed-up and efficiency

Conventions: a multi-rank step counts with its slowest rank (a step ends when every rank is done) and
its phase breakdown is that rank's; throughput is samples over the timed window's wall time, one
value per process (repeat), the configuration's figure their median; DDP's backward phase contains
the gradient all-reduce, so the exposed communication is split out of it rather than added to it.
Speed-up and efficiency are against single at 1 device with the same precision, memory format,
compilation and optimizer, else the series' own 1-device result. Used by report, plots, compare, recommend, tune.
"""
from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass, field
from typing import Optional

from bench import stats
from bench.analysis import fit, gpustate, noise_source, utilisation
from bench.analysis.process_noise import by_precision, noise  # noqa: F401 (read as results.noise)
from bench.shared import rehearsal
from bench.shared.spec import STRATEGY_NAMES
from bench.analysis.labels import label, row_aux, row_variant, variant  # noqa: F401 (read as results.variant)
from bench.analysis.memory_rows import device_names as _device_names, per_device as _memory, state as _state
from bench.analysis.memory_rows import run_reserved as _run_reserved
from bench.store import forecasts, read

STRATEGY_ORDER = ("single", "dp", "ddp", "zero", "fsdp", "hsdp")
pick_sweep = read.pick_sweep   # re-exported: readers of a sweep take load and pick_sweep from here


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
    samples_per_s: float                # median over processes of window throughput
    process_sps: list                   # one window throughput per process (repeat)
    phases_ms: dict                     # median per phase of the slowest rank's rows
    exposed_comm_ms: float              # from the probe's blocks (nan if none)
    grad_mib: Optional[float]
    comm_method: Optional[str]
    memory_mib: dict                    # device label -> peak allocated MiB, net of benchmark artefacts (CPU: RSS)
    epoch_wall_s: list
    precision: str = "fp32"
    channels_last: bool = False
    compiled: bool = False
    options: dict = field(default_factory=dict)
    nodes: int = 1
    by_repeat: dict = field(default_factory=dict)      # repeat -> that process's throughput (interleaved A/B pairs)
    process_unstable: int = 0                          # how many of its processes stepped unsteadily (IQR > 10%)
    reserved_mib: dict = field(default_factory=dict)   # device -> peak reserved, net of artefacts
    device_mib: dict = field(default_factory=dict)     # device -> device level (nvidia-smi)
    run_device_mib: dict = field(default_factory=dict)  # device -> device level at the warm-up's end (compilation's memory held)
    timing_method: Optional[str] = None
    numerics: dict = field(default_factory=dict)
    compile_s: Optional[float] = None
    loader_workers: Optional[int] = None
    params: Optional[int] = None
    data_wait_ms: float = math.nan      # median host wait for the next batch (slowest rank)
    probe_sync_ms: list = field(default_factory=list)    # DDP's probe: its synchronised steps, slowest rank, all repeats
    probe_nosync_ms: list = field(default_factory=list)  # and its no_sync() steps (the step's compute without the all-reduce)
    image_size: Optional[int] = None     # the images' side in pixels (vision workloads; None where the model has none)
    epoch_images: Optional[int] = None   # images in one of its measured epochs (--data voc with --epochs)
    speedup: float = math.nan
    efficiency: float = math.nan
    efficiency_noise: float = math.nan  # the throughput difference this and its baseline cannot be told apart within
    noise_fallback: stats.Noise = stats.NOT_MEASURED  # the noise where this or its rival ran one process: its precision's
    baseline: str = ""
    traces: list = field(default_factory=list)   # --profile: traces rows, one per rank and repeat (with 'repeat')
    optimizer: str = "sgd"
    state_mib: dict = field(default_factory=dict)  # rank -> {params_mib, grads_mib, optimizer_mib, buckets_mib, baseline_rss_mib}
    warmup_s: float = math.nan          # the warm-up steps' time (compilation and cuDNN's autotuning in it), median process
    process_warmup_s: list = field(default_factory=list)   # each process's warm-up s, in process_sps's order
    run_reserved_mib: dict = field(default_factory=dict)   # device -> the whole run's allocator peak reserved, net of
                                                           # artefacts (the warm-up's cuDNN search: bench.analysis.fit)
    warmup_steps: int = 0
    activation_checkpointing: str = "none"        # none | full | selective:K
    aux: str = "false"                            # --deeplabv3-aux: false | true | unused
    tokens_per_sample: Optional[int] = None       # a language model's sequence length (tokens/s = samples/s x this)
    input_shape: tuple = ()                       # one sample's input as the workload's dry step saw it: (C, H, W) for images
    natural_image_size: Optional[int] = None      # a torchvision model's own image side (224 for resnet18)
    flops: dict = field(default_factory=dict)      # flops_per_sample, hw_flops_per_sample, how (flops_json), analytic_per_sample
    device_names: tuple = ()                       # the GPU of each device it ran on (memory rows), for its peak
    gpu: Optional[object] = None                   # bench.analysis.gpustate.GpuState over its measured windows
    loss_not_finite: Optional[dict] = None         # stats.loss_not_finite over its processes: timed, not training
    utilisation: Optional[object] = None           # bench.analysis.utilisation.Utilisation (set by load)

    @property
    def variant(self) -> str:
        """Everything but strategy and count that tells this configuration apart: precision, format, settings."""
        return variant(self.precision, self.channels_last, self.compiled, self.options, self.optimizer,
                       self.activation_checkpointing, self.aux, self.device_count // max(self.nodes, 1))

    @property
    def tokens_per_s(self) -> float:
        """Tokens per second, all devices together (samples/s x tokens per sample); nan where a sample is no sequence."""
        return self.samples_per_s * self.tokens_per_sample if self.tokens_per_sample else math.nan

    @property
    def tokens_per_s_per_device(self) -> float:
        """Tokens per second per device: the global figure over the devices (torchtitan reports this one)."""
        return self.tokens_per_s / self.device_count

    @property
    def series(self) -> tuple:
        return (self.strategy, self.variant)

    @property
    def label(self) -> str:
        """The one name of this configuration in every table, sentence and plot (`label`)."""
        return label(self.strategy, self.device_count, self.variant)

    @property
    def repeat_spread(self) -> float:
        return stats.repeat_spread(self.process_sps)

    @property
    def unstable(self) -> bool:
        spread = self.repeat_spread
        return self.summary.unstable or (not math.isnan(spread) and spread > stats.UNSTABLE_REPEAT_SPREAD)


@dataclass
class Sweep:
    """Everything the report shows about one sweep."""
    sweep: dict
    envs: list
    threads: list
    bench: dict = field(default_factory=dict)      # workload -> [Config]
    problems: list = field(default_factory=list)   # results rows that are not ok
    comm: list = field(default_factory=list)       # (device_count, nodes, comm rows, each with its op) per comm result
    comm_notes: list = field(default_factory=list)  # (device_count, why its interference stage failed) per comm result
    interference: list = field(default_factory=list)  # (device_count, nodes, interference rows) per ok comm result
    equivalence: list = field(default_factory=list)
    loader: dict = field(default_factory=dict)     # device count -> loader-alone samples/s
    nodes: list = field(default_factory=list)      # per multi-node result: (result_id, node rows)
    env_results: dict = field(default_factory=dict)  # env_id -> config keys of the results measured under it
    noise: stats.Noise = stats.NOT_MEASURED         # fp32's process noise where the sweep ran fp32, else its first precision's
    noise_by_precision: dict = field(default_factory=dict)  # precision -> the sweep's figure at it on this device (`by_precision`)
    noise_by_workload: dict = field(default_factory=dict)   # (workload, precision) -> what its verdicts rest on (`noise`)
    fit: list = field(default_factory=list)        # ./run_bench.sh fit: one bench.analysis.fit.Search per configuration
    rehearsal_counts: set = field(default_factory=set)  # counts whose collectives ran on shared GPUs (bench.shared.rehearsal)
    process_starts: dict = field(default_factory=dict)  # 'forked' / 'fresh' -> how many measured processes began so


def _flops(results: list) -> dict:
    """The FLOP count of a configuration (its first repeat's: counted once per configuration), and the workload's
    analytic figure (stored with the count, or in the workload's details by older versions)."""
    out: dict = {}
    for r in results:
        how = json.loads(r.get("flops_json") or "null")
        if how and not out:
            out = {"flops_per_sample": r.get("flops_per_sample"), "hw_flops_per_sample": r.get("hw_flops_per_sample"),
                   "how": how, "analytic_per_sample": how.get("analytic_per_sample")}
    older = [f for f in (_details(r).get("flops_per_sample") for r in results) if isinstance(f, (int, float))]
    if out.get("analytic_per_sample") is None and older:
        out["analytic_per_sample"] = float(older[0])
    return out


def _config(conn: sqlite3.Connection, results: list) -> Config:
    r0 = results[0]
    step_ms, sync_ms, nosync_ms, slowest, memory, epochs, sps, by_repeat, traces = [], [], [], [], [], [], [], {}, []
    shaky = 0
    epoch_images: list = []
    warmup_s, warmup_steps, process_warm = [], [], []
    samples = []
    for r in results:
        rid = r["result_id"]
        samples += read.result_rows(conn, "gpu_samples", rid)
        steps = read.result_rows(conn, "steps", rid)
        measured = [s for s in steps if s["kind"] == "measure"]
        step_ms += stats.step_times_ms(measured)
        warm = stats.step_times_ms([s for s in steps if s["kind"] == "warmup"])
        w = (sum(warm[1:]) / 1e3 + max(warm[0] / 1e3, r["compile_s"] or 0.0)) if warm else math.nan
        if warm:  # the first step holds the compilation: its window's wall time where longer than its events
            warmup_s.append(w)
            warmup_steps.append(len(warm))
        sync_ms += stats.step_times_ms([s for s in steps if s["kind"] == "probe_sync"])
        nosync_ms += stats.step_times_ms([s for s in steps if s["kind"] in ("probe_no_sync", "no_sync")])
        slowest += stats.slowest_rank_rows(measured)  # keeps each result's steps apart
        memory += read.result_rows(conn, "memory", rid)
        traced = _traced_step_ms(steps)
        traces += [dict(t, repeat=int(r["repeat"]), traced_step_ms=traced.get(t["rank"]))
                   for t in read.result_rows(conn, "traces", rid)]
        rows_e = read.result_rows(conn, "epochs", rid)
        epochs += [e["wall_s"] for e in rows_e]
        epoch_images += [e.get("images") or e.get("samples") for e in rows_e if e.get("images") or e.get("samples")]
        summary = stats.result_summary(steps, read.result_rows(conn, "windows", rid), int(r["global_batch"]))
        if summary.get("samples_per_s") is not None:
            sps.append(summary["samples_per_s"])
            process_warm.append(w)
            by_repeat[int(r["repeat"])] = summary["samples_per_s"]
            shaky += bool(summary.get("summary") and summary["summary"].unstable)
    nodes = int(r0["nodes"] or 1)
    ranks_per_node = int(r0["device_count"]) // nodes if nodes > 1 else 0   # 0: one node, every rank on it
    details = _details(r0)
    alloc, reserved, level, run_level = _memory(memory, r0["device_type"], ranks_per_node)
    return Config(
        key=r0["config_key"], workload=r0["workload"], strategy=r0["strategy"], device_type=r0["device_type"],
        device_count=int(r0["device_count"]), global_batch=int(r0["global_batch"]), scaling=r0["scaling"] or "weak",
        data=r0["data"] or "synthetic", step_ms=step_ms, summary=stats.summarize(step_ms),
        samples_per_s=stats.median(sps), process_sps=sps, by_repeat=by_repeat, process_unstable=shaky,
        phases_ms={p: stats.median(s.get(p) for s in slowest) for p in stats.PHASES_MS},
        exposed_comm_ms=stats.exposed_comm_ms(sync_ms or step_ms, nosync_ms) if nosync_ms else math.nan,
        probe_sync_ms=sync_ms, probe_nosync_ms=nosync_ms, image_size=r0.get("image_size") or None,
        grad_mib=r0["grad_mib"], comm_method=r0["comm_method"], memory_mib=alloc, reserved_mib=reserved, device_mib=level,
        run_device_mib=run_level,
        epoch_wall_s=epochs, epoch_images=int(stats.median(epoch_images)) if epoch_images else None, precision=r0["precision"] or "fp32", channels_last=bool(r0["channels_last"]),
        compiled=bool(r0["compiled"]), options=json.loads(r0["options_json"] or "{}"), nodes=nodes,
        timing_method=r0["timing_method"], numerics=json.loads(r0["numerics_json"] or "{}"),
        compile_s=stats.median(r["compile_s"] for r in results), loader_workers=r0["loader_workers"],
        params=r0["params"], data_wait_ms=stats.median(s.get("host_data_ms") for s in slowest), traces=traces,
        warmup_s=stats.median(warmup_s), process_warmup_s=process_warm,
        run_reserved_mib=_run_reserved(memory, r0["device_type"], ranks_per_node), warmup_steps=int(stats.median(warmup_steps)) if warmup_steps else 0,
        optimizer=r0["optimizer"] if "optimizer" in r0 and r0["optimizer"] else "sgd", state_mib=_state(memory),
        activation_checkpointing=r0.get("activation_checkpointing") or "none", aux=row_aux(r0),
        tokens_per_sample=details.get("tokens_per_sample"),
        input_shape=tuple(details.get("input_shape") or ()), natural_image_size=details.get("natural_image_size"),
        flops=_flops(results), device_names=_device_names(memory),
        gpu=gpustate.summarise(samples, ranks_per_node),
        loss_not_finite=_loss_not_finite(results),
    )


def _details(r: dict) -> dict:
    """The workload's details a results row stores (sequence length, input shape, an older version's FLOPs); {} if null."""
    return json.loads(r.get("details_json") or "{}").get("workload_details") or {}


def _traced_step_ms(steps: list) -> dict:
    """rank -> the mean wall time of its traced steps (kind 'profile', after the measured window), in ms: what a trace's
    kernels are held against (bench.report.busy.busy). The committed H100 DeepLabV3 summed 111.0 ms of kernels a
    traced step; its traced steps took 108.4 ms each, its measured median 108.0 ms, and the report named the latter."""
    by_rank: dict = {}
    for s in steps:
        if s["kind"] == "profile" and s.get("step_ms") is not None:
            by_rank.setdefault(s["rank"], []).append(float(s["step_ms"]))
    return {rank: sum(ms) / len(ms) for rank, ms in by_rank.items()}


def _loss_not_finite(results: list) -> Optional[dict]:
    """The processes' records of losses that were not finite (bench.sweep.record), their steps added up; None if none."""
    found = [d for d in (json.loads(r["details_json"] or "{}").get("loss_not_finite") for r in results) if d]
    if not found:
        return None
    return {**found[0], "steps": sum(d["steps"] for d in found), "of": sum(d["of"] for d in found),
            "processes": len(found), "last": any(d.get("last", True) for d in found)}


def diverged(c) -> bool:
    """Its last loss was not finite in some process: timed, but not training (stats.loss_not_finite)."""
    return bool(c.loss_not_finite) and c.loss_not_finite.get("last", True)


def _with_scaling(configs: list, fallback: dict = None) -> list:
    """Speed-up and efficiency against single at 1 device of the same numerics, optimizer and activation checkpointing,
    else the series' own 1-device result; `fallback` ((workload, precision) -> Noise, `noise`) gives the noise where a
    configuration or its baseline (of the same precision) ran one process: its workload's and precision's, NOT_MEASURED
    where it has none.
    (Without the checkpointing in the key, one H100's DDP x1 was held against single x1 [ac=full], 1.8x slower: 'wrapper
    overhead -37%'.)"""
    numerics = lambda c: (c.precision, c.channels_last, c.compiled, c.optimizer, c.activation_checkpointing, c.aux)  # noqa: E731
    singles = {numerics(c): c for c in configs if c.strategy == "single" and c.device_count == 1}
    ones = {c.series: c for c in configs if c.device_count == 1}
    for c in configs:
        c.noise_fallback = (fallback or {}).get((c.workload, c.precision), stats.NOT_MEASURED)
        base = singles.get(numerics(c)) or ones.get(c.series)
        if base is not None:
            c.baseline = base.label
            c.speedup = stats.speedup(c.samples_per_s, base.samples_per_s)
            c.efficiency = stats.efficiency(c.samples_per_s, base.samples_per_s, c.device_count, c.scaling)
            c.efficiency_noise = 0.0 if base is c else stats.noise_bound(c.process_sps, base.process_sps, c.noise_fallback)
    order = {s: i for i, s in enumerate(STRATEGY_ORDER)}
    return sorted(configs, key=lambda c: (c.variant != "fp32", c.precision, order.get(c.strategy, len(order)),
                                          c.variant, c.device_count))


def load(conn: sqlite3.Connection, sweep_id: int) -> Sweep:
    """Read one sweep from the store and derive every number the report shows."""
    sweep = read.sweep_row(conn, sweep_id)
    results = read.latest_results(conn, sweep_id)
    env_ids = sorted({r["env_id"] for r in results if r["env_id"] is not None} | ({sweep["env_id"]} - {None}))
    envs = [e for e in (read.environment(conn, i) for i in env_ids) if e]
    threads = sorted({r["threads_per_process"] for r in results if r["threads_per_process"] is not None})
    out = Sweep(sweep=sweep, envs=envs, threads=threads)
    for r in results:   # a fork server gone mid-sweep: the rest start fresh (bench.shared.forkclient), said by the report
        start = json.loads(r["details_json"] or "{}").get("process_start") if r["status"] == "ok" else None
        if start:
            out.process_starts[start] = out.process_starts.get(start, 0) + 1
        if r["env_id"] is not None:
            out.env_results.setdefault(r["env_id"], []).append(r["config_key"])
    groups: dict = {}
    out.fit = fit.searches(results, lambda rid: read.result_rows(conn, "memory", rid), STRATEGY_NAMES)
    for r in results:
        if fit.is_answer(r):  # a fit's trial or measured run that did not fit is an answer, not a problem
            continue
        if r["mode"] == "equivalence":
            out.equivalence.append(r)
        if r["status"] != "ok":
            out.problems.append(r)
        elif r["mode"] == "bench":
            groups.setdefault(r["config_key"], []).append(r)
        elif r["mode"] == "comm":
            if rehearsal.shares(json.loads(r["options_json"] or "{}")):
                out.rehearsal_counts.add(int(r["device_count"]))
            out.comm.append((int(r["device_count"]), int(r["nodes"] or 1),
                             [{**x, "repeat": r["repeat"]} for x in read.result_rows(conn, "comm", r["result_id"])]))
            failed = json.loads(r["details_json"] or "{}").get("interference_error")
            if failed:
                out.comm_notes.append((int(r["device_count"]), failed))
        elif r["mode"] == "loader":
            windows = read.result_rows(conn, "windows", r["result_id"])
            out.loader.setdefault(int(r["device_count"]), []).append(stats.window_throughput(windows)[0])
        nodes = [{"node_rank": n["node_rank"], "hostname": n["hostname"],
                  "cpu_cores": json.loads(n["env_json"] or "{}").get("cpu_cores")}  # as the node's srun task saw them
                 for n in read.result_rows(conn, "nodes", r["result_id"])]
        if nodes:
            out.nodes.append((r, nodes))
    out.loader = {n: stats.median(v) for n, v in out.loader.items()}
    out.interference = forecasts.read_interference(conn, sweep_id)  # a step above its no-overlap bound cites it
    by_workload: dict = {}
    for rs in groups.values():
        if read.has_measured_steps(conn, rs[0]["result_id"]):
            c = _config(conn, rs)
            by_workload.setdefault(c.workload, []).append(c)
    out.noise_by_workload = noise([c for cs in by_workload.values() for c in cs], envs, noise_source.finder(
        conn, sweep_id, envs, lambda r: label(r["strategy"], int(r["device_count"]), row_variant(r))))
    by = out.noise_by_precision = by_precision(out.noise_by_workload, [c for cs in by_workload.values() for c in cs])
    out.noise = by.get("fp32") or next(iter(by.values()), stats.NOT_MEASURED)   # fp32's where it ran, else the first's
    out.bench = {w: _with_scaling(cs, out.noise_by_workload) for w, cs in sorted(by_workload.items())}
    utilisation.attach(out)  # MFU against the sweep's own --peak-tflops or the table (report --peak-tflops: again)
    return out


def process_throughputs(conn: sqlite3.Connection, sweep_id: int) -> dict:
    """{config_key: [samples/s of each ok process]} of one sweep's benchmarks, from the raw windows alone."""
    out: dict = {}
    for r in read.latest_results(conn, sweep_id):
        if r["mode"] != "bench" or r["status"] != "ok":
            continue
        sps = stats.window_throughput(read.result_rows(conn, "windows", r["result_id"]))[0]
        if not math.isnan(sps):
            out.setdefault(r["config_key"], []).append(sps)
    return out
