"""The first thing to run on new hardware: `./run_bench.sh selfcheck`.

In a few minutes on this machine's GPUs it runs single, DataParallel and DDP (NCCL) at 1 device and at
all of them, the equivalence gate, bf16 autocast where the GPU has it, and a small all-reduce, into
its own store (results/selfcheck.sqlite), then checks what only real hardware can show:
    timing      window throughput and the per-step CUDA events agree (within 10%)
    memory      every GPU has allocator, reserved and device-level figures, in that order
    equivalence DataParallel and DDP end with the single-process parameters
    all-reduce  the microbenchmark measured a bus bandwidth
    machine     no other process on the GPUs (NVML's list, before the sweep); each rank of a run on a GPU
                of its own; CUDA events agree with the host clock around known device work (after it)
                (bench.commands.machinecheck)
and prints what passed and what did not (exit 1 if anything failed). With no GPU it says so and exits 0
having checked nothing. `--device cpu` runs the same checks on CPU/gloo (for the suite's own tests).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

from bench.analysis import stats
from bench.commands import machinecheck
from bench.store import results, store

TIMING_AGREEMENT = 0.10


def sweep_args(device: str, count: int, out: str, bf16: bool) -> list:
    """The self-check's sweep: bf16 only on a GPU that has it (on the CPU path fp32 is enough)."""
    counts = ("1" if count == 1 else f"1,{count}") if device == "cuda" else str(count)  # CPU: the suite's own check
    size = ["--synthetic-width", "2048", "--synthetic-depth", "4", "--per-device-batch", "256"] if device == "cuda" else \
           ["--synthetic-width", "256", "--synthetic-depth", "2", "--per-device-batch", "16"]
    return ["--device", device, "--gpus", counts, "--workloads", "synthetic", "--strategies", "single,dp,ddp",
            "--precision", "fp32,bf16" if bf16 else "fp32", *size, "--steps", "20" if device == "cuda" else "8", "--warmup", "3",
            "--check-equivalence", "--store", out, "--report-dir", os.path.dirname(out),
            "--plots-dir", os.path.join(os.path.dirname(out), "selfcheck-plots")]


def checks(path: str) -> list:
    """[(check, passed, detail)] from the self-check's store alone."""
    conn = store.connect(path, readonly=True)
    try:
        sweep = results.load(conn, results.pick_sweep(conn, None))
        raw = {r["result_id"]: dict(r) for r in store.latest_results(conn, sweep.sweep["sweep_id"])}
        windows = lambda rid: [dict(w) for w in conn.execute("SELECT * FROM windows WHERE result_id = ? AND kind = 'measure'", (rid,))]  # noqa: E731
        steps = lambda rid: [dict(s) for s in conn.execute("SELECT * FROM steps WHERE result_id = ? AND kind = 'measure'", (rid,))]  # noqa: E731
        memory = lambda rid: [dict(m) for m in conn.execute("SELECT * FROM memory WHERE result_id = ?", (rid,))]  # noqa: E731
        out = []
        failed = [r for r in raw.values() if r["status"] in ("failed", "interrupted")]
        out.append(("every configuration ran", not failed, "; ".join(f"{r['config_key']}: {r['reason']}" for r in failed) or
                    f"{sum(r['status'] == 'ok' for r in raw.values())} ok, {sum(r['status'] == 'skipped' for r in raw.values())} skipped"))
        for r in (r for r in raw.values() if r["mode"] == "bench" and r["status"] == "ok"):
            w, s = windows(r["result_id"]), steps(r["result_id"])
            window_sps = stats.window_throughput(w)[0]
            # Each rank's steps partition its own window: the slowest rank's mean step is the window's step.
            per_rank = {}
            for row in s:
                per_rank.setdefault(row["rank"], []).append(row["step_ms"])
            mean_ms = max((sum(v) / len(v) for v in per_rank.values()), default=math.nan)
            event_sps = r["global_batch"] / (mean_ms / 1e3) if per_rank else math.nan
            agree = abs(window_sps / event_sps - 1) if event_sps > 0 else math.nan
            out.append((f"timing agrees: {r['config_key']}", agree <= TIMING_AGREEMENT,
                        f"window {window_sps:.1f} samples/s, per-step {r['timing_method']} {event_sps:.1f} ({agree:.1%} apart)"))
            mem = memory(r["result_id"])
            if r["device_type"] == "cuda":
                gpus = [m for m in mem if str(m["device"]).startswith("cuda")]
                ok = bool(gpus) and all(m["peak_allocated_mib"] and m["peak_reserved_mib"] and m["device_used_mib"] and
                                        m["device_used_mib"] >= m["peak_reserved_mib"] >= m["peak_allocated_mib"] > 0 for m in gpus)
                detail = ", ".join(f"{m['device']}: {m['peak_allocated_mib']:.0f} / {m['peak_reserved_mib']:.0f} / "
                                   f"{m['device_used_mib'] or float('nan'):.0f} MiB ({m['method']})" for m in gpus)
            else:
                ok = bool(mem) and all((m["peak_rss_mib"] or 0) > 0 for m in mem)
                detail = ", ".join(f"rank {m['rank']}: RSS {m['peak_rss_mib']:.0f} MiB" for m in mem)
            out.append((f"memory recorded: {r['config_key']}", ok, detail))
        for r in (r for r in raw.values() if r["mode"] == "equivalence"):
            out.append((f"equivalence: {r['strategy']} x{r['device_count']} [{r['precision']}]", r["status"] == "ok",
                        r["reason"] or "parameters match"))
        for r in (r for r in raw.values() if r["status"] == "ok" and r["device_type"] == "cuda" and r["details_json"]):
            ranks = json.loads(r["details_json"]).get("rank_devices")
            if ranks and len(ranks) > 1:
                out.append((f"each rank on its own GPU: {r['config_key']}", *machinecheck.own_devices(r["config_key"], ranks)))
        for n, _, rows in sweep.comm:
            best = max((x["busbw_gbps"] or 0 for x in rows), default=0)
            out.append((f"all-reduce on {n}", best > 0, f"peak busbw {best:.2f} GB/s"))
        return out
    finally:
        conn.close()


def main(argv: list) -> int:
    p = argparse.ArgumentParser(prog="./run_bench.sh selfcheck", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cuda (default) or cpu (the CPU/gloo path)")
    p.add_argument("--store", default="results/selfcheck.sqlite", help="the self-check's own store")
    ns = p.parse_args(argv)
    from bench.sweep import plan
    if ns.device == "cuda":
        machine = plan.detect_machine()
        n = machine.cuda_devices
        if machine.gpus_unusable:  # GPUs present but unusable: the machine cannot give a number
            print(f"selfcheck: FAIL: the driver shows NVIDIA GPU(s), but {machine.gpus_unusable}", file=sys.stderr)
            return 1
        if n == 0:
            print("selfcheck: no CUDA GPU visible (torch.cuda.device_count() == 0): nothing was checked. "
                  "Run it on a GPU machine (or `selfcheck --device cpu` to check the CPU/gloo path).")
            return 0
        # bf16 in hardware (Ampere and later), never emulation, and no tensor made on a GPU in this process
        bf16 = min(machine.gpu_capabilities) >= (8, 0)
    else:
        machine, n, bf16 = None, min(2, len(os.sched_getaffinity(0))), False
    from bench import options
    from bench.sweep import run as sweep_run
    args = sweep_args(ns.device, n, os.path.abspath(ns.store), bf16)
    print(f"selfcheck: {n} {'GPU(s)' if ns.device == 'cuda' else 'CPU process(es)'}: ./run_bench.sh " + " ".join(args))
    cfg, given, machine = options.prepare(args, machine=machine)
    before = []
    if ns.device == "cuda":  # NVML only: no CUDA context in this, the sweep's, process before the sweep
        from bench.machine import gpuinfo
        before.append(("no other process on the GPUs", *machinecheck.other_gpu_processes(gpuinfo.load_nvml(), (os.getpid(),))))
    sweep_run.run_sweep(cfg, sweep_run.command_line(args), given=given, machine=machine)
    rows = before + checks(ns.store)
    if ns.device == "cuda":  # the sweep is over: a context here disturbs nothing
        rows += [(f"event timing vs host clock: GPU {i}", *machinecheck.clock_agreement(machinecheck.CudaClockAPI(i)))
                 for i in range(n)]
    width = max(len(c) for c, _, _ in rows)
    print("\nselfcheck results:")
    for check, ok, detail in rows:
        print(f"  {'PASS' if ok else 'FAIL'}  {check:<{width}}  {detail}")
    bad = sum(not ok for _, ok, _ in rows)
    print(f"selfcheck: {len(rows) - bad} passed, {bad} failed" + (f"; store {ns.store}" if bad else ""))
    return 1 if bad else 0
