"""Where a sweep without its own process noise at a precision finds one in its store, and how a sweep's noise is said.

    earlier(conn, sweep_id, env, device_type, "deeplabv3", "bf16", label_of) -> Noise of the same store's most recent
        earlier sweep that ran 3+ processes of one configuration of that workload and precision on this host and
        device (source 'earlier'), or None
    lines(sweep.noise_by_precision, "cuda") -> ['Process noise on this GPU, fp32: 0.1% (75.09-75.18 samples/s, ...)']

Why: one H200's compile sweep (DeepLabV3 bf16, one process each) was held against selfcheck's 15%, measured on the
synthetic MLP after that sweep ended, while the same store's sweep two minutes earlier had measured DeepLabV3 bf16's
own spread on that GPU, 16.8%. The same workload's figure from this store comes before selfcheck's (bench.analysis.
results.noise); a figure of another host, device, device type or workload never does.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

from bench import stats
from bench.store import read

MIN_PROCESSES = 3      # an earlier sweep's figure counts where one configuration ran in this many processes or more
LOOK_BACK = 50         # sweeps searched back (a store of tune trials holds hundreds)


def device_name(env: dict, device_type: str) -> Optional[str]:
    """The device a sweep's environment names: its first GPU on CUDA, its CPU model otherwise (as hostnoise keys it)."""
    name = str(env.get("gpu_names") or "").split(",")[0].strip() if device_type == "cuda" else env.get("cpu_model")
    return name or None


def earlier(conn, sweep_id: int, env: dict, device_type: str, workload: str, precision: str,
            label_of: Callable[[dict], str]) -> Optional[stats.Noise]:
    """The noise at `precision` of the same store's most recent sweep before `sweep_id` (this suite's own code, on
    env's host) that ran one configuration of `workload` at `precision` in MIN_PROCESSES processes or more on the same
    device type and device name: the largest spread among such configurations of that sweep; None where none did.
    label_of: a results row -> its configuration's label."""
    host, name = env.get("hostname"), device_name(env, device_type)
    if not host or not name:
        return None
    envs: dict = {}   # env_id -> its row, read once (review: once per results row, over up to LOOK_BACK sweeps)
    for sid in reversed(read.earlier_sweeps(conn, sweep_id, host, LOOK_BACK)):
        groups: dict = {}
        for r in read.latest_results(conn, sid):
            if (r["mode"] == "bench" and r["status"] == "ok" and r["workload"] == workload and r["device_type"] == device_type
                    and (r["precision"] or "fp32") == precision and _same_machine(conn, r, host, name, device_type, envs)):
                groups.setdefault(r["config_key"], []).append(r)
        found = [_processes(conn, rs) for rs in groups.values() if len(rs) >= MIN_PROCESSES]
        found = [(sps, shaky, rs) for sps, shaky, rs in found if len(sps) >= MIN_PROCESSES]
        if found:
            return _noise(conn, sid, max(found, key=lambda f: stats.repeat_spread(f[0])), label_of, device_type)
    return None


def finder(conn, sweep_id: int, envs: list, label_of: Callable[[dict], str]) -> Callable:
    """(workload, precision, device type) -> `earlier`'s figure for sweep `sweep_id` (bench.analysis.results.noise)."""
    env = envs[0] if envs else {}
    return lambda workload, precision, device: earlier(conn, sweep_id, env, device, workload, precision, label_of)


def _same_machine(conn, r: dict, host: str, name: str, device_type: str, envs: dict) -> bool:
    if r["env_id"] not in envs:
        envs[r["env_id"]] = read.environment(conn, r["env_id"])
    env = envs[r["env_id"]]
    return env.get("hostname") == host and device_name(env, device_type) == name


def _processes(conn, rs: list) -> tuple:
    """([samples/s per process], how many stepped unsteadily, rows) of one configuration's processes, from raw rows."""
    sps, shaky = [], 0
    for r in rs:
        steps = read.result_rows(conn, "steps", r["result_id"])
        summary = stats.result_summary(steps, read.result_rows(conn, "windows", r["result_id"]), int(r["global_batch"]))
        if summary.get("samples_per_s") is not None and not math.isnan(summary["samples_per_s"]):
            sps.append(summary["samples_per_s"])
            shaky += bool(summary.get("summary") and summary["summary"].unstable)
    return sps, shaky, rs


def _noise(conn, sid: int, found: tuple, label_of, device_type: str) -> stats.Noise:
    sps, shaky, rs = found
    started = str(read.sweep_row(conn, sid).get("started_at") or "?")
    where = stats.device_word(device_type)
    label = label_of(rs[0])
    return stats.Noise(stats.repeat_spread(sps), "earlier",
                       f"the spread between the {len(sps)} processes of {label} in sweep {sid} of this store "
                       f"({started[:16].replace('T', ' ')}, the same host and {where}; this sweep repeated no "
                       f"configuration at its precision)", rs[0]["workload"], low=min(sps), high=max(sps),
                       processes=len(sps), configuration=label, unstable=shaky,
                       where=f"sweep {sid} of this store, {started[:10]}")


def lines(by_precision: dict, device_type: str) -> list:
    """'Process noise on this GPU, fp32: 0.1% (75.09-75.18 samples/s, 3 processes of single device x1, this sweep)'
    per precision (by_precision: precision -> Noise, bench.analysis.results.noise), 'not measured at bf16 on this GPU'
    where it has none: where the verdicts that rest on it are made."""
    where = stats.device_word(device_type)
    return [f"Process noise on this {where}, {p}: " + (n.figure_words() if n.measured else missing(n, f"at {p} on this {where}"))
            for p, n in by_precision.items()]


def missing(n: stats.Noise, where: str) -> str:
    """'not measured at bf16 on this GPU', with why another precision's figure does not stand in where one was measured
    (stats.not_carried): the verdicts' own words gave that reason, the line under them dropped it."""
    said = f"not measured {where}"
    return said if n.detail == stats.NOT_MEASURED.detail else f"{said}: {n.detail}"


def sweep_line(sweep) -> str:
    """'process noise on this GPU: fp32 0.1% (75.09-75.18 samples/s, ...); bf16 17% (...)': the figures a sweep
    measured itself (source 'sweep'), in one line for its terminal's closing lines; '' where it measured none. The
    DeepLabV3 noise sweep printed 'each run in 3 processes' at its start and no figure at its end."""
    device = next((c.device_type for cs in sweep.bench.values() for c in cs), None)
    order = dict.fromkeys(c.precision for cs in sweep.bench.values() for c in cs)
    own = [(p, sweep.noise_by_precision[p]) for p in order
           if p in sweep.noise_by_precision and sweep.noise_by_precision[p].source == "sweep"]
    if not own or device is None:
        return ""
    where = stats.device_word(device)
    return f"process noise on this {where}: " + "; ".join(f"{p} {n.figure_words()}" for p, n in own)
