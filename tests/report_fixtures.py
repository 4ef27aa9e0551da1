"""Stores with known raw values for the report and compare tests, written through bench.sweep.record.record_result.

`build_sweep_store` writes one sweep with bench results of two workloads (steps, memory, epochs
rows), a skipped, a failed (reason with HTML in it), an interrupted, a failed-then-resumed
configuration, collectives microbenchmark rows (all-reduce, all-gather) and an equivalence result. `build_compare_store`
writes one sweep per slow-down factor with the same noisy step times scaled by the factor.
"""
from __future__ import annotations

import random

from bench.store import store
from bench.sweep import record
from bench.sweep.plan import RunSpec

EVIL_REASON = "<script>alert('x')</script> rank 0 died & took <b>the rest</b> with it"
PHASE_FRACTIONS = {"data_ms": 0.10, "h2d_ms": 0.05, "forward_ms": 0.30, "backward_ms": 0.40, "optimizer_ms": 0.10}
COMM_POINTS = ((2**20, 1.0), (2**22, 3.5), (2**24, 13.0), (2**26, 50.0))  # (size_bytes, time_ms)
GATHER_SHARE = 0.6                 # an all-gather of the same size takes this share of the all-reduce's time
GPU = "NVIDIA H100 80GB HBM3"


def spec(workload: str, strategy: str, count: int, device: str = "cpu", mode: str = "bench", data: str = "synthetic",
         per_device_batch: int = 0, repeat: int = 0) -> RunSpec:
    pdb = per_device_batch or (2 if workload == "deeplabv3" else 64)
    return RunSpec(workload=workload, strategy=strategy, device_type=device, device_count=count, per_device_batch=pdb,
                   global_batch=pdb * count, image_size=64 if workload == "deeplabv3" else 0, steps=10, warmup=2,
                   threads=1 if device == "cpu" else 0, seed=0, scaling="weak", repeat=repeat,
                   data=data if workload == "deeplabv3" else "synthetic", mode=mode)


def steps(ranks: int, step_ms: list, kind: str = "measure") -> list:
    """Rank r takes step_ms[i] + r ms at step i (so the last rank is the slowest); phases are fixed fractions."""
    out = []
    for r in range(ranks):
        for i, t in enumerate(step_ms):
            t = t + r
            out.append({"kind": kind, "rank": r, "step": i, "step_ms": t, "loss": 1.0,
                        **{k: f * t for k, f in PHASE_FRACTIONS.items()}})
    return out


def windows(ranks: int, step_ms: list, per_rank: int) -> list:
    """The measured window of each rank, as the worker records it: its steps' time and samples."""
    return [{"kind": "measure", "rank": r, "wall_s": sum(t + r for t in step_ms) / 1e3, "samples": per_rank * len(step_ms),
             "steps": len(step_ms)} for r in range(ranks)]


def measured(count: int, step_ms: list, per_rank: int) -> dict:
    return {"steps": steps(count, step_ms), "windows": windows(count, step_ms, per_rank)}


def memory(device: str, strategy: str, count: int, base_mib: float) -> list:
    """CPU: RSS per rank. CUDA: allocated per GPU; DataParallel puts twice as much on cuda:0 as elsewhere."""
    if device == "cpu":
        ranks = 1 if strategy != "ddp" else count
        return [{"rank": r, "device": "cpu", "peak_rss_mib": base_mib + 10 * r} for r in range(ranks)]
    if strategy == "dp":
        return [{"rank": 0, "device": f"cuda:{d}", "device_name": GPU, "peak_allocated_mib": base_mib * (2 if d == 0 else 1),
                 "peak_reserved_mib": base_mib * 3} for d in range(count)] + [{"rank": 0, "device": "cpu", "peak_rss_mib": 9999.0}]
    ranks = count if strategy == "ddp" else 1
    return [{"rank": r, "device": f"cuda:{r}", "device_name": GPU, "peak_allocated_mib": base_mib,
             "peak_reserved_mib": base_mib * 2} for r in range(ranks)]


def build_sweep_store(path: str, device: str = "cpu", data: str = "synthetic", epochs: bool = False) -> int:
    """One sweep with every kind of row the report shows. Returns the sweep id."""
    conn = store.connect(path)
    env = {"hostname": "bench-host", "python": "3.11.2", "torch": "2.14.1", "cuda": "12.4" if device == "cuda" else None,
           "cudnn": "90100" if device == "cuda" else None, "nccl": "2.21.5" if device == "cuda" else None,
           "gpu_names": [GPU, GPU] if device == "cuda" else [], "gpu_driver": "550.54" if device == "cuda" else None,
           "cpu_model": "Test CPU <i>9000</i>", "cpu_cores": 2, "git_commit": "abc1234"}
    env_id = store.insert_environment(conn, env)
    sid = store.begin_sweep(conn, "bench sweep --gpus 1,2", "{}", env_id)
    rec = lambda sp, status="ok", reason="", payload=None, **kw: record.record_result(  # noqa: E731
        conn, sid, env_id, sp, status, reason, payload, **kw)
    jitter = [1.00, 1.02, 0.98, 1.04, 0.96, 1.01, 0.99, 1.03, 0.97, 1.00]
    for strategy, count, ms in (("single", 1, 100.0), ("dp", 1, 105.0), ("ddp", 1, 102.0)):
        rec(spec("synthetic", strategy, count, device),
            payload={**measured(count, [ms * j for j in jitter], 64), "memory": memory(device, strategy, count, 500.0)})
    rec(spec("synthetic", "ddp", 2, device), "failed", "rendezvous timed out", failed_rank=1)  # resumed below
    ddp_ms = [120.0 if i % 2 else 170.0 for i in range(10)]  # alternating: an unstable result
    rec(spec("synthetic", "ddp", 2, device),
        payload={"steps": steps(2, ddp_ms) + steps(2, [100.0] * 10, kind="probe_no_sync"), "windows": windows(2, ddp_ms, 64),
                 "memory": memory(device, "ddp", 2, 500.0), "grad_bytes": 16 * 2**20,
                 "comm_method": "ddp minus no_sync"})
    if device == "cpu":
        rec(spec("synthetic", "dp", 2, device), "skipped", "DataParallel parallelises over GPUs only")
    else:
        rec(spec("synthetic", "dp", 2, device),
            payload={**measured(1, [80.0 * j for j in jitter], 128), "memory": memory(device, "dp", 2, 500.0)})
    for strategy, count, ms in (("single", 1, 3500.0), ("ddp", 2, 4000.0)):
        payload = {**measured(count, [ms * j for j in jitter], 2), "memory": memory(device, strategy, count, 2000.0)}
        if epochs:
            payload["epochs"] = [{"epoch": e, "wall_s": 600.0 / count + 10 * e, "samples": 1464, "steps": 732}
                                 for e in range(3)]
        rec(spec("deeplabv3", strategy, count, device, data=data), payload=payload)
    rec(spec("deeplabv3", "dp", 1, device, data=data), "failed", EVIL_REASON, failed_rank=0)
    rec(spec("deeplabv3", "ddp", 1, device, data=data), "interrupted", "interrupted by SIGINT")
    rec(spec("comm", "ddp", 2, device, mode="comm"),
        payload={"comm": [{"size_bytes": s, "time_ms": t, "iters": 5, "ranks": 2} for s, t in COMM_POINTS]
                 + [{"op": "all_gather", "size_bytes": s, "time_ms": t * GATHER_SHARE, "iters": 20, "ranks": 2,
                     "timing": "host_clock"} for s, t in COMM_POINTS]})
    rec(spec("synthetic", "ddp", 2, device, mode="equivalence"),
        payload={"max_abs_diff": 2.5e-7, "tolerance": 1e-5, "passed": True})
    rec(spec("synthetic", "dp", 1, device, mode="equivalence"), "failed", "parameters differ after 3 steps",
        payload={"max_abs_diff": 0.5, "tolerance": "torch.allclose(rtol=0.0001, atol=1e-05)", "passed": False})
    store.end_sweep(conn, sid, "completed")
    conn.close()
    return sid


def noisy_ms(n: int, seed: int = 0, base_ms: float = 50.0) -> list:
    rng = random.Random(seed)
    return [base_ms * (1 + rng.uniform(0, 0.05)) for _ in range(n)]


def build_compare_store(path: str, factors: tuple, steps_n: int = 30, repeats: int = 1, process_cv=0.0,
                        seed: int = 0, sweep_cv: float = 0.0) -> list:
    """One sweep per factor: single x1 and ddp x2, `repeats` processes each; each process's step times are
    the same noisy times x factor x its sweep's luck (normal, sd sweep_cv: the machine's drift) x its own luck
    (normal, sd process_cv, or {strategy: sd}). Returns sweep ids."""
    conn = store.connect(path)
    rng = random.Random(seed)
    ids = []
    for f in factors:
        sid = store.begin_sweep(conn, "bench sweep", "{}", None)
        drift = 1 + rng.gauss(0, sweep_cv) if sweep_cv else 1.0
        for strategy, count in (("single", 1), ("ddp", 2)):
            cv = process_cv.get(strategy, 0.0) if isinstance(process_cv, dict) else process_cv
            for r in range(repeats):
                luck = 1 + rng.gauss(0, cv) if cv else 1.0
                ms = [t * f * drift * luck for t in noisy_ms(steps_n, seed=count)]
                record.record_result(conn, sid, None, spec("synthetic", strategy, count, repeat=r), "ok",
                                    payload={"steps": steps(count, ms), "windows": windows(count, ms, 64)})
        store.end_sweep(conn, sid, "completed")
        ids.append(sid)
    conn.close()
    return ids


def downgrade_to_v4(path: str) -> None:
    """Rewrite a store of this version as version 4 wrote it (no training-state columns, no optimizer, no interference
    table, forecasts keyed by sweep alone): a store an older suite left behind."""
    import sqlite3
    conn = sqlite3.connect(path)
    conn.executescript("""
    ALTER TABLE results DROP COLUMN optimizer;
    ALTER TABLE memory DROP COLUMN params_mib; ALTER TABLE memory DROP COLUMN grads_mib;
    ALTER TABLE memory DROP COLUMN optimizer_mib; ALTER TABLE memory DROP COLUMN buckets_mib;
    ALTER TABLE memory DROP COLUMN baseline_rss_mib;
    ALTER TABLE memory DROP COLUMN run_peak_allocated_mib; ALTER TABLE memory DROP COLUMN run_peak_reserved_mib;
    ALTER TABLE memory DROP COLUMN run_device_used_mib;
    ALTER TABLE traces DROP COLUMN work_ms; ALTER TABLE traces DROP COLUMN devices_json;
    ALTER TABLE traces DROP COLUMN step_waits_json;
    DROP TABLE interference;
    DROP TABLE forecasts;
    CREATE TABLE forecasts (sweep_id INTEGER NOT NULL, config_key TEXT NOT NULL, workload TEXT NOT NULL,
        strategy TEXT NOT NULL, variant TEXT, device_count INTEGER NOT NULL, from_counts TEXT NOT NULL,
        forecast_step_ms REAL, measured_step_ms REAL, error REAL, forecast_samples_per_s REAL,
        measured_samples_per_s REAL, compute_error REAL, noise REAL, why TEXT, network TEXT, created_at TEXT NOT NULL,
        PRIMARY KEY (sweep_id, config_key));
    PRAGMA journal_mode = DELETE;
    PRAGMA user_version = 4;
    """)
    conn.close()


# ---- the first GPU run (examples/h100-2026-11-24), as a store: GPU verdicts held on CPU ---------------------------

H100 = "NVIDIA H100 80GB HBM3"
# DeepLabV3 at batch 8 on one H100 (deeplabv3-precision-compile/report.md): (strategy, precision, compiled) ->
# (median, p10, p90 step ms, no_sync median ms of DDP's probe, first step with compilation s, allocated / reserved /
# device-level MiB, the device's kernels (computation and copies) per traced step ms)
H100_DEEPLAB = {
    ("single", "fp32", False): (107.70, 107.62, 107.86, None, None, (4327, 4954, 5597), 104.9),
    ("ddp", "fp32", False): (110.59, 110.51, 110.75, 108.58, None, (4556, 5184, 6389), 106.0),
    ("single", "bf16", False): (60.05, 52.28, 68.98, None, None, (2559, 2658, 3301), 23.1),
    ("single", "bf16", True): (49.05, 42.63, 55.32, None, 84.4, (2555, 2788, 3433), 19.6),
    ("ddp", "bf16", False): (57.78, 51.32, 77.44, 58.20, None, (2784, 2924, 4131), 23.1),
    ("ddp", "bf16", True): (67.31, 62.15, 77.11, 53.37, 93.0, (2778, 2938, 4149), 20.4),
    ("single", "fp32", True): (99.61, 99.51, 99.73, None, 70.2, (4411, 5030, 5673), 97.0),
    ("ddp", "fp32", True): (111.81, 111.75, 111.86, 109.74, 86.7, (4695, 5092, 6301), 98.1),
}
H100_SYNTHETIC_MS = 10.32     # the synthetic MLP 8 x 4096 at batch 512, single fp32: the sweep's cheapest configuration


def spread_steps(median: float, p10: float, p90: float, n: int = 30) -> list:
    """n step times whose 10th, 50th and 90th percentiles are about p10, median and p90 (piecewise linear quantiles,
    tails as far beyond p10 and p90 as those are from the median over 4)."""
    knots = ((0.0, p10 - (median - p10) / 4), (0.1, p10), (0.5, median), (0.9, p90), (1.0, p90 + (p90 - median) / 4))
    out = []
    for i in range(n):
        q = i / (n - 1)
        (q0, v0), (q1, v1) = next((a, b) for a, b in zip(knots, knots[1:]) if a[0] <= q <= b[0])
        out.append(v0 + (v1 - v0) * (q - q0) / (q1 - q0))
    return out


def h100_payload(key: tuple, warmup_first_ms: float = None, traced: bool = True) -> dict:
    median, p10, p90, nosync, compile_s, (alloc, reserved, level), work = H100_DEEPLAB[key]
    ms = spread_steps(median, p10, p90)
    rows = [{"kind": "measure", "rank": 0, "step": 10 + i, "step_ms": t, "data_ms": 0.01, "host_data_ms": 0.01,
             "forward_ms": 0.3 * t, "backward_ms": 0.6 * t, "optimizer_ms": 0.1 * t} for i, t in enumerate(ms)]
    first = compile_s * 1e3 if compile_s else (warmup_first_ms or 6 * median)   # cuDNN's search: 6x an eager step
    rows += [{"kind": "warmup", "rank": 0, "step": i, "step_ms": first if i == 0 else median} for i in range(10)]
    if nosync is not None:
        rows += [{"kind": k, "rank": 0, "step": 100 + i, "step_ms": t} for k, m in (("probe_sync", median), ("probe_no_sync", nosync))
                 for i, t in enumerate(spread_steps(m, m - (median - p10), m + (p90 - median), 8))]
    out = {"steps": rows, "windows": [{"kind": "measure", "rank": 0, "wall_s": sum(ms) / 1e3, "samples": 8 * len(ms),
                                      "steps": len(ms)}],
           "memory": [{"rank": 0, "device": "cuda:0", "device_name": H100, "peak_allocated_mib": alloc,
                       "peak_reserved_mib": reserved, "device_used_mib": level, "run_peak_allocated_mib": alloc,
                       "run_peak_reserved_mib": reserved + 600, "run_device_used_mib": level + 600, "artefact_mib": 0.0}],
           "grad_bytes": 234_562_000 if key[0] == "ddp" else None, "compile_s": compile_s,
           "timing_method": "cuda_window_events",
           "numerics": {"autocast_dtype": "bfloat16" if key[1] == "bf16" else None, "tf32_matmul": False,
                        "tf32_cudnn": False, "float32_matmul_precision": "highest", "cudnn_benchmark": True}}
    if nosync is not None:
        out["comm_method"] = "probe: median step of synchronised blocks - median step of no_sync() blocks"
    if traced:  # 3 traced steps after the window; a traced step runs slower on the host (the profiler's own work)
        span = 3 * (median * 1.1)
        out["_traces"] = [{"rank": 0, "path": None, "steps": 3, "profile_s": 1.5, "trace_bytes": 2_400_000,
                           "span_ms": span, "compute_ms": 3 * work * 0.97, "copy_ms": 3 * work * 0.03, "comm_ms": 0.0,
                           "idle_ms": span - 3 * work, "overlap_ms": 0.0, "exposed_comm_ms": 0.0, "work_ms": 3 * work,
                           "compute_share": work * 0.97 / (median * 1.1), "comm_share": 0.0,
                           "copy_share": work * 0.03 / (median * 1.1), "idle_share": 1 - work / (median * 1.1),
                           "method": "device_kernels"}]
    return out


def h100_spec(workload: str, strategy: str, precision: str = "fp32", compiled: bool = False, repeat: int = 0,
              batch: int = 8) -> RunSpec:
    return RunSpec(workload=workload, strategy=strategy, device_type="cuda", device_count=1, per_device_batch=batch,
                   global_batch=batch, image_size=256 if workload == "deeplabv3" else 0, steps=30, warmup=10, threads=16,
                   seed=0, scaling="weak", repeat=repeat, precision=precision, compile=compiled)


def write_synthetic_processes(conn, sid: int, env_id, factors) -> None:
    """The H100 synthetic MLP's single x1 in one process per factor (its steps' time multiplied by it): a
    configuration's processes spread as the factors say."""
    for r, f in enumerate(factors):
        ms = [H100_SYNTHETIC_MS * f * j for j in (1.0, 1.001, 0.999, 1.002, 0.998) * 19]
        pl = {"steps": [{"kind": "measure", "rank": 0, "step": i, "step_ms": t} for i, t in enumerate(ms)],
              "windows": [{"kind": "measure", "rank": 0, "wall_s": sum(ms) / 1e3, "samples": 512 * len(ms), "steps": len(ms)}],
              "memory": [{"rank": 0, "device": "cuda:0", "device_name": H100, "peak_allocated_mib": 1618,
                          "peak_reserved_mib": 1718, "device_used_mib": 2469}]}
        record.record_result(conn, sid, env_id, h100_spec("synthetic", "single", repeat=r, batch=512), "ok", payload=pl)


def build_h100_store(path: str, process_noise: float = None, traced: bool = True, hostname: str = "vm") -> int:
    """The H100 run's DeepLabV3 fp32/bf16 x compile sweep (single and DDP x1), with realistic figures, and beside it the
    synthetic MLP single x1 in 3 processes spread by `process_noise` (fraction; None: one process, nothing measured).
    traced: the bound's evidence, 3 traced steps of each configuration (kernel figures as the sweep derives them)."""
    from bench.store import write
    conn = store.connect(path)
    env = {"hostname": hostname, "python": "3.12.3", "torch": "2.11.0+cu130", "cuda": "13.0", "cudnn": "91900",
           "nccl": "2.28.9", "gpu_names": [H100], "gpu_driver": "580.159.04", "cpu_model": "Intel(R) Xeon(R) Processor",
           "cpu_cores": 16, "git_commit": "61e4bb3",
           "gpus": [{"index": 0, "name": H100, "memory_total_mib": 81559}]}
    env_id = store.insert_environment(conn, env)
    sid = store.begin_sweep(conn, "./run_bench.sh --workloads deeplabv3,synthetic --strategies single,ddp "
                                  "--precision fp32,bf16 --compile false,true", '{"memory_budget_gib": 79.65}', env_id)
    for key in H100_DEEPLAB:
        pl = h100_payload(key, traced=traced)
        trace_rows = pl.pop("_traces", [])
        write.write_result(conn, sid, env_id, h100_spec("deeplabv3", key[0], key[1], key[2]), "ok", "", pl,
                           derived=record.summary_columns(pl["steps"], pl["windows"], 8), traces=trace_rows)
    luck = (1.0,) if process_noise is None else (1.0, 1.0, 1.0 / (1.0 + process_noise))  # throughputs spread by it
    write_synthetic_processes(conn, sid, env_id, luck)
    store.end_sweep(conn, sid, "completed")
    conn.close()
    return sid
