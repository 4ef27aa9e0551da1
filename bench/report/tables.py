"""A sweep as three tables of plain rows, for notebooks and other tools (bench.results makes DataFrames of them,
`./run_bench.sh export` CSV or JSON files): the report's numbers, not a second derivation of them.

    configurations(sweep, prices)   one row per configuration: every per-configuration figure the report shows (the
                                    forecast's rows: bench.report.forecastrows), each from the function
                                    the report takes it from (bench.analysis.results' Config, bench.stats, recommend,
                                    comm, frontier, training_state, reference, cost); configurations that failed or
                                    were skipped too, with their status and reason
    steps(conn, sweep_id)           every raw per-rank step row of the sweep's results, as stored, with its configuration
    collectives(sweep)              every row of the collectives microbenchmark, as stored, with algbw and busbw

Columns carry their units (samples_per_s, step_median_ms, peak_mib, busbw_gbps). A scalar field or property that
Config gains later (utilisation, tokens/s) becomes a column of its own name without a change here.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import math
import sqlite3
from typing import Optional

from bench import stats
from bench.analysis import cost, reference
from bench.analysis.memory_rows import STATE_KEYS
from bench.analysis.results import STRATEGY_NAMES, Config, Sweep, diverged, label, row_aux, row_variant
from bench.forecast import overhead
from bench.report import bound, choice, comm, frontier, recommend, training_state
from bench.report import busy as busy_share
from bench.report.efficiency import efficiency_text
from bench.report.cost import price_of
from bench.report.report import memory_text
from bench.store import read
from bench.store.schema import COMM_COLUMNS, STEP_COLUMNS

SCALAR = (int, float, str, bool, type(None))
IDENTITY = ("workload", "strategy", "device_type", "device_count", "nodes", "precision", "channels_last", "compiled",
            "optimizer", "global_batch", "scaling", "data")
# Each table's columns where it has no row (bench.results' empty frames, the export's CSV header): a one-GPU sweep has no
# collectives, and `r.collectives.query("op == 'all_reduce'")` raised on an empty frame with no columns, and its export
# was a 1-byte CSV that pd.read_csv refused. Steps and collectives: exactly a row's columns, in its order. A
# configuration frame has more than these (Config's own fields, utilisation, prices): these it always has.
IDENTITY_COLUMNS = ("config_key", *IDENTITY, "strategy_name", "options", "activation_checkpointing", "aux", "variant",
                    "label")
CONFIGURATION_COLUMNS = (
    *IDENTITY_COLUMNS, "status", "reason", "recommended", "processes", "samples_per_s", "speedup", "baseline",
    "efficiency", "efficiency_noise", "efficiency_shown", "efficiency_note", "efficiency_within_noise", "repeat_spread",
    "unstable", "loss_not_finite", *(f"step_{f.name}" for f in dataclasses.fields(stats.Summary) if f.name != "unstable"),
    *(f"phase_{p}" for p in stats.PHASES_MS), "exposed_comm_ms", "data_wait_ms", "compute_ms", "allreduce_grads_ms",
    "no_overlap_bound_ms", "full_overlap_bound_ms", "peak_mib", "peak_allocated_mib", "peak_reserved_mib",
    "device_level_mib", "state_rank", *(f"state_{k}" for k in STATE_KEYS), "loader_alone_samples_per_s", "bound",
    "bound_detail", "bound_why", "gpu_busy_share", "gpu_busy_device", "gpu_busy_why", "epochs", "epoch_wall_s_median",
    "gpu_sm_clock_mhz", "gpu_throttled", "gpu_throttled_why", "gpu_throttle", "gpu_power_w", "gpu_power_limit_w",
    "gpu_power_why")
STEPS_COLUMNS = (*IDENTITY_COLUMNS, "mode", "repeat", "result_id", *STEP_COLUMNS)
COLLECTIVES_COLUMNS = ("device_count", "nodes", "result_id", *COMM_COLUMNS, "repeat")
COLUMNS = {"configurations": CONFIGURATION_COLUMNS, "steps": STEPS_COLUMNS, "collectives": COLLECTIVES_COLUMNS}
# Config's fields shown through the columns below under other names, or not one number (traces: the report's own tables)
NOT_SCALAR = ("key", "step_ms", "summary", "process_sps", "phases_ms", "memory_mib", "epoch_wall_s", "options", "by_repeat",
              "reserved_mib", "device_mib", "numerics", "traces", "state_mib", "flops", "device_names", "gpu", "utilisation")


def _identity(r: dict) -> dict:
    """A results row's identity columns (a configuration that produced no measurement; every stored step), as the
    configurations frame names them: its settings (`options` as JSON), activation checkpointing, aux, `variant` and
    `label` too, so that a filter on steps cannot pool two configurations (the docs' filter on strategy and device
    count pooled ac=none with ac=full, and one comm hook with another)."""
    out = {"config_key": r["config_key"], **{k: r.get(k) for k in IDENTITY}}
    out["channels_last"], out["compiled"] = bool(out["channels_last"]), bool(out["compiled"])
    out["precision"], out["optimizer"] = out["precision"] or "fp32", out["optimizer"] or "sgd"
    out["nodes"] = int(out["nodes"] or 1)
    variant = row_variant(r)
    out.update(strategy_name=STRATEGY_NAMES.get(r["strategy"], r["strategy"]),
               options=json.dumps(json.loads(r.get("options_json") or "{}"), sort_keys=True),
               activation_checkpointing=r.get("activation_checkpointing") or "none", aux=row_aux(r), variant=variant,
               label=label(r["strategy"], int(r["device_count"]), variant))
    return out


def efficiency_shown(c: Config, configs: list) -> tuple:
    """(shown, note, within noise) of c's efficiency as the report's configurations table shows it. At one device a
    wrapper against single is its overhead, worded by the report's own function (bench.report.efficiency
    .efficiency_text, from bench.forecast.overhead.overhead_verdict), and within noise is that verdict's: True inside
    the noise, False beyond it, None where the note says another reason it is not resolved (one unstable process, the
    median steps alike) or the noise is not measured. The export had no note and within_noise False for 'DDP x1:
    wrapper overhead not resolved (26.0% against single device x1, within the 34% noise)', and later False, read as
    resolved, beside 'wrapper overhead not resolved (... by the windows' throughput ...; the median steps ...)'."""
    shown = stats.shown_efficiency(c.efficiency, c.efficiency_noise, c.device_count)
    if not (c.device_count == 1 and c.strategy != "single" and not math.isnan(c.speedup) and c.baseline):
        return shown.shown, shown.note or None, shown.within_noise
    note = efficiency_text(c, ".1%", configs) or None
    v = overhead.overhead_verdict(c, next((b for b in configs if b.label == c.baseline), None))
    return shown.shown, note, (v.within_noise if v else False)


def _config_row(sweep: Sweep, c: Config, recommended: bool, costs: Optional[cost.Cost], configs: list = ()) -> dict:
    row = {"config_key": c.key, **{k: getattr(c, k) for k in IDENTITY}}
    row.update(strategy_name=STRATEGY_NAMES.get(c.strategy, c.strategy), options=json.dumps(c.options, sort_keys=True),
               variant=c.variant, label=c.label, status="ok", reason=None, processes=len(c.process_sps) or 1,
               samples_per_s=c.samples_per_s, speedup=c.speedup, baseline=c.baseline or None, efficiency=c.efficiency,
               efficiency_noise=c.efficiency_noise)
    shown, note, within = efficiency_shown(c, configs or [c])
    row.update(efficiency_shown=shown, efficiency_note=note, efficiency_within_noise=within,
               repeat_spread=c.repeat_spread, unstable=c.unstable, loss_not_finite=diverged(c))
    row.update({f"step_{k}": v for k, v in c.summary.asdict().items() if k != "unstable"})
    row.update({f"phase_{k}": v for k, v in c.phases_ms.items()})
    row.update(exposed_comm_ms=c.exposed_comm_ms, data_wait_ms=c.data_wait_ms)
    compute, allreduce, no_overlap, full_overlap = comm.step_bounds_ms(sweep, c)
    row.update(compute_ms=compute, allreduce_grads_ms=allreduce, no_overlap_bound_ms=no_overlap,
               full_overlap_bound_ms=full_overlap)
    alloc, reserved, level = memory_text(c) if c.device_type != "cpu" else (None, None, None)  # CPU: RSS, in peak_mib
    row.update(peak_mib=frontier.peak_mib(c), peak_allocated_mib=alloc, peak_reserved_mib=reserved,
               device_level_mib=level)
    rank, state = training_state.fullest(c)
    row.update(state_rank=rank, **{f"state_{k}": state.get(k) for k in training_state.STATE_KEYS})
    row["loader_alone_samples_per_s"] = sweep.loader.get(c.device_count)
    kind, why = bound.bound(sweep, c.workload, c)
    row.update(bound=bound.bound_category(kind), bound_detail=kind, bound_why=why, recommended=recommended)
    row.update(busy_columns(busy_share.verdict_busy(c)))
    row["epochs"] = len(c.epoch_wall_s)
    row["epoch_wall_s_median"] = stats.median(c.epoch_wall_s) if c.epoch_wall_s else math.nan
    if costs is not None:
        row.update(cost_per_million_samples=costs.per_million_samples, cost_per_epoch=costs.per_epoch,
                   cost_per_million_tokens=costs.per_million_tokens)   # nan where a sample is no sequence
    u = c.utilisation   # bench.analysis.utilisation: FLOPs, achieved FLOP/s, MFU (nan: no peak, or an error)
    if u is not None:
        row.update(flops_per_sample=u.flops.per_sample, flops_source=u.flops.source, flops_check=u.flops.check or None,
                   achieved_tflops_per_device=u.achieved_tflops, peak_tflops=u.peak_tflops, mfu=u.mfu, hfu=u.hfu,
                   mfu_error=u.error or None, mfu_note=u.note or None)
    row.update(gpu_state(c.gpu))
    for f in dataclasses.fields(c):   # fields added later (utilisation, tokens/s): under their own names
        value = getattr(c, f.name)
        if f.name not in row and f.name not in NOT_SCALAR and isinstance(value, SCALAR):
            row[f.name] = value
    for name, _ in inspect.getmembers(type(c), lambda m: isinstance(m, property)):
        if name not in row and not name.startswith("_"):
            value = getattr(c, name)
            if isinstance(value, SCALAR):
                row[name] = value
    return row


def busy_columns(b) -> dict:
    """The bound's evidence on CUDA (bench.report.busy.Busy, None without kernel traces): the least busy GPU's work over
    a measured step, and that GPU. Where the report calls the share a measurement error (`over`: the kernels add up to
    more than the measured median step), gpu_busy_share is empty and gpu_busy_why gives the report's words: the export
    wrote a clamped 1.0 beside a report reading 'GPU busy 103%: over 100%, a measurement error'."""
    if b is None:
        return {"gpu_busy_share": None, "gpu_busy_device": None, "gpu_busy_why": None}
    mended = b.is_mended   # from the old window's figure, which the words say
    return {"gpu_busy_share": None if b.over else b.share, "gpu_busy_device": b.device,
            "gpu_busy_why": (b.error() or b.words()) if b.over else b.words() if mended else None}


def gpu_state(g) -> dict:
    """The GPU's state in the window as the report reads it (bench.analysis.gpustate.GpuState; all None where not
    sampled): a figure the report does not give is empty here, with why beside it. The export wrote gpu_throttled=False
    where the report read 'too few samples (2)', and no power at all, where the report read 'not updated in the
    window (43 ms)' for NVML's idle reading from before a short window."""
    if g is None:
        return dict.fromkeys(("gpu_sm_clock_mhz", "gpu_throttled", "gpu_throttled_why", "gpu_throttle", "gpu_power_w",
                              "gpu_power_limit_w", "gpu_power_why"))
    return {"gpu_sm_clock_mhz": g.sm_clock_mhz, "gpu_throttled": None if g.too_few else g.throttled,
            "gpu_throttled_why": g.verdict() if g.too_few else None, "gpu_throttle": g.words() or None,
            "gpu_power_w": g.power_w, "gpu_power_limit_w": g.power_limit_w,
            "gpu_power_why": g.power_text() if g.power_w is None else None}


def _picks(sweep: Sweep, configs: list) -> dict:
    """id(pick) -> None, or the summary's cell where its pick is no answer yet ('not resolved: --repeats 3 (...)'), for
    the pick at each precision: the recommendation's own rule (recommend.candidates, choice.choose, choice.unresolved),
    not its sentences: the export once wrote each whole answer (bound, traces, FSDP beside DDP) to match a string."""
    name = frontier.names(configs, bool(sweep.fit))   # the summary's names for the cell
    return {id(best): choice.unresolved_cell(best, fastest, name) if choice.unresolved(best, tie) else None
            for best, fastest, tie in recommend.chosen(sweep, configs, name)}


def configurations(sweep: Sweep, prices: Optional[cost.Prices] = None) -> list:
    """One row per configuration of the sweep, in the report's order; those without a measurement after them."""
    price = price_of(sweep, prices)
    rows = []
    for workload, configs in sweep.bench.items():
        picks = _picks(sweep, configs)
        costs = cost.of_configs(configs, price.per_device_hour) if price else {}
        rows += [_config_row(sweep, c, id(c) in picks, costs.get(c.key) if price else None, configs) for c in configs]
        for c, row in zip(configs, rows[-len(configs):]):   # the summary's cell where its pick is no answer yet
            if id(c) in picks:
                row.update(recommendation_resolved=picks[id(c)] is None, recommendation_note=picks[id(c)])
        if workload == "deeplabv3":
            for row, (_, seconds) in zip(rows[-len(configs):], reference.train_times(configs)[0]):
                row["reference_train_s"] = seconds
    measured = {r["config_key"]: r for r in rows}
    why: dict = {}   # config key -> {(status, reason): [repeats]}, of the results that are not ok
    failed: dict = {}
    for r in sweep.problems:
        if r["mode"] == "bench":
            why.setdefault(r["config_key"], {}).setdefault((r["status"], r["reason"] or "no reason stored"), []).append(r["repeat"])
            failed.setdefault(r["config_key"], {**_identity(r), "status": r["status"], "recommended": False})
    for key, reasons in why.items():
        named = key in measured or len({s for s, _ in reasons}) > 1   # the status is not the row's own
        text = "; ".join(f"{status + ': ' if named else ''}{reason} (repeat{'s' if len(reps) > 1 else ''} "
                         f"{', '.join(map(str, reps))})" for (status, reason), reps in reasons.items())
        if key in measured:   # another repeat of it measured: said beside its figures
            measured[key]["reason"] = text
        else:
            failed[key]["reason"] = text
    if price:
        for row in rows:
            row.update(price_per_device_hour=price.per_device_hour, price_source=price.source,
                       currency=prices.unit() if prices else None)
    return rows + [row for key, row in failed.items() if key not in measured]


def steps(conn: sqlite3.Connection, sweep_id: int) -> list:
    """Every stored step row (measured, probe, profiled: `kind`) of the sweep's results that count, per rank, as stored,
    each with its result's configuration and repeat."""
    out = []
    for r in read.latest_results(conn, sweep_id):
        rows = read.result_rows(conn, "steps", r["result_id"])
        if rows:
            head = {"config_key": r["config_key"], **_identity(r), "mode": r["mode"], "repeat": r["repeat"]}
            out += [{**head, **s} for s in rows]
    return out


def collectives(sweep: Sweep) -> list:
    """Every row of the collectives microbenchmark (bench.rank.commbench), as stored, with nccl-tests' algbw and busbw."""
    out = []
    for count, nodes, rows in sweep.comm:
        for r in rows:
            ranks = r.get("ranks") or count
            op = r.get("op") or "all_reduce"
            alg = stats.algbw_gbps(r["size_bytes"], r["time_ms"])
            out.append({"device_count": count, "nodes": nodes, **r, "op": op, "ranks": ranks,
                        "algbw_gbps": alg, "busbw_gbps": stats.busbw_gbps(alg, ranks, op)})
    return out
