"""The per-process worker: runs one configuration (a RunSpec) and leaves its raw measurements behind.

Launched by bench.sweep.launch, never by hand:
    python -m bench.rank.worker OUT_DIR/spec.json                             # single, dp, loader
    torchrun --nproc-per-node N ... -m bench.rank.worker OUT_DIR/spec.json    # ddp, fsdp, comm (one node)
    srun -N K torchrun --nnodes K --rdzv-backend c10d ... -m bench.rank.worker OUT_DIR/spec.json   # several nodes
Modes: 'bench' runs warm-up steps, the measured window and, under DDP, the communication probe
(bench.rank.loop), then with --profile a few traced steps (bench.rank.profile); 'equivalence' trains k steps and saves the final parameters; 'comm' runs the collectives
microbenchmark (all-reduce, all-gather, reduce-scatter: bench.rank.commbench) and the interference stage
(bench.rank.commrun); 'loader' times the data loader alone. Every rank publishes its progress
(bench.shared.heartbeat), its raw rows are gathered to rank 0, which alone writes OUT_DIR/result.json
(atomically). A rank that fails writes OUT_DIR/error-rank<R>.json first, so the sweep can say which
rank failed and why. OUT_DIR is on a filesystem every node reaches.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
import traceback
from dataclasses import replace
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from bench.machine import gpustate
from bench.rank import activations, buckets, calibrate, equivalence, memory, precision, timing
from bench.rank.optimizer import make_optimizer, optimizer_settings, zero_options
from bench.rank import epochs as epochs_mod
from bench.rank.context import Ctx
from bench.rank.loop import NoMeasuredStep, Trainer
from bench.rank.strategies import STRATEGIES, ddp_settings, is_ddp
from bench.shared import faults, forkserver, heartbeat, rehearsal
from bench.shared.procs import die_with_parent, exit_without_teardown
from bench.shared.spec import DDP_BASED, FSDP_BASED, PER_DEVICE, RunSpec
from bench.workloads import materialize
from bench.workloads.registry import builder

PROBE_BLOCKS = 2


def batch_stream(wl):
    """Endless stream of batches: real data runs through epochs, synthetic data cycles."""
    epoch = 0
    while True:
        n = 0
        for batch in wl.batches(epoch):
            n += 1
            yield batch
        if n == 0:
            raise NoMeasuredStep("no full step: the data source produced no batch (split smaller than one global batch?)")
        epoch += 1


def probe_block(spec: RunSpec) -> int:
    return max(1, spec.steps // (2 * PROBE_BLOCKS))


def planned_steps(spec: RunSpec, steps_per_epoch: int = 0) -> int:
    """Steps the run will take (the heartbeat's total, from which the sweep projects the limit)."""
    if spec.mode == "equivalence":
        return spec.steps
    if spec.epochs:
        return spec.epochs * steps_per_epoch + profiled_steps(spec)
    ddp_bench = spec.strategy in DDP_BASED and spec.mode == "bench"
    probe = 2 * PROBE_BLOCKS * probe_block(spec) + buckets.bucket_steps(spec.device_type) if ddp_bench else 0
    return spec.warmup + spec.steps + probe + profiled_steps(spec)


def profiled_steps(spec: RunSpec) -> int:
    return spec.profile_steps + 1 if spec.profile_steps and spec.mode == "bench" else 0  # + the profiler's warm-up


def prepare(model: nn.Module, spec: RunSpec, ctx: Ctx, details: dict | None = None) -> nn.Module:
    """Memory format, activation checkpointing, the strategy's wrapper, then torch.compile (wrapping DDP, as PyTorch
    recommends). details: the workload's, which learn what activation checkpointing recomputes. A model built on meta
    (the transformer) is made real on the run's device first, or unit by unit as FSDP and HSDP shard it."""
    if spec.strategy not in FSDP_BASED:
        materialize.make_real(model, ctx.device)
    if spec.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if spec.activation_checkpointing != "none":
        ac = activations.apply(model, spec.activation_checkpointing, compiled=spec.compile)
        if details is not None:
            details.update(activation_checkpointing=ac, **activations.recompute_flops(ac, details))
    model = STRATEGIES[spec.strategy](model, ctx)
    if spec.compile:
        model = torch.compile(model)
    return model


def measure(spec: RunSpec, t: Trainer, devices: list, wl, beat=None, baseline_rss_mib: float = 0.0) -> dict:
    rows, epochs = [], []
    out = {}
    run_peaks = None  # the whole run's memory peaks, where they are reset after the warm-up
    # The GPU's clocks, power, temperature and throttle reasons over the measured window: NVML only, off the stream.
    sampler = gpustate.Sampler(devices) if spec.device_type == "cuda" else None
    if spec.epochs:
        if spec.compile:  # before every epoch's time
            t.compile_s = epochs_mod.compile_before_epochs(t, wl, devices)
        reset, run_peaks = [], {}
        if sampler:
            sampler.start()
        for epoch in range(spec.epochs):
            save = None
            if spec.checkpoint:  # inside the epoch's time, like the reference experiment; every rank (FSDP gathers)
                from bench.rank.checkpoint import save_full
                save = lambda: save_full(t.model, os.path.join(spec.out_dir, "checkpoint.pt"), t.rank)
            batches = epochs_mod.started_inside(wl, epoch, t, spec.warmup, devices, reset, run_peaks)
            got = t.window(batches, None, f"epoch{epoch}", before_close=save)
            for r in got["rows"]:
                r["kind"] = "warmup" if r["step"] < spec.warmup else "measure"
            rows += got["rows"]
            w = got["window"]
            epochs.append({"epoch": epoch, "wall_s": w["wall_s"], "loss_sum": sum(got["losses"]), "loss_n": len(got["losses"]),
                           "data_wait_s": sum(r["host_data_ms"] for r in got["rows"]) / 1e3, "samples": w["samples"],
                           "steps": w["steps"], "indices": wl.epoch_indices(epoch), "n_images": wl.n_images})
        if not any(r["kind"] == "measure" for r in rows):
            raise NoMeasuredStep(f"no measured step: {spec.epochs} epoch(s) of {wl.steps_per_epoch} step(s) each fall "
                                 f"inside the {spec.warmup} warm-up step(s)")
    else:
        it = batch_stream(wl)
        warm = t.warmup(it, spec.warmup)
        rows += warm
        if spec.min_window_s:  # the default window: at least --min-window-s long; the heartbeat's total follows
            asked, spec = spec.steps, replace(spec, steps=calibrate.measured_steps(spec, warm, t.distributed, t.device))
            t.spec = spec
            if beat is not None:
                beat.total = planned_steps(spec, wl.steps_per_epoch)
            out["window_calibration"] = {"steps_asked": asked, "min_window_s": spec.min_window_s, "steps": spec.steps}
        run_peaks = memory.run_peaks(devices)  # the whole run so far: warm-up, compilation, cuDNN's autotuning
        memory.reset_peaks(devices)  # steady state: cuDNN's autotuning workspaces of the warm-up left out
        if sampler:
            sampler.start()
        rows += t.window(it, spec.steps, "measure")["rows"]
    if sampler:
        out["gpu_samples"] = sampler.stop(t.rank)
    out["memory"] = memory.peak_memory(devices, t.rank, wl.artefact_bytes, run_peaks)
    out["memory"][0].update(memory.state_mib(t.model, t.opt), baseline_rss_mib=baseline_rss_mib)
    if is_ddp(t.model):
        out["ddp_logging"] = ddp_logging(t.model, t.n)
        if spec.mode == "bench" and not spec.epochs:
            rows += t.probe(it, probe_block(spec), PROBE_BLOCKS)
            out["comm_method"] = ("probe: median step of synchronised blocks - median step of no_sync() blocks, alternated, "
                                  "slowest rank per step; buffers broadcast on their own in no_sync() blocks"
                                  + ("; SyncBatchNorm's collectives run in both, so they are not counted (and SyncBatchNorm "
                                     "itself synchronises the host once per layer per forward, in PyTorch)" if spec.sync_bn else ""))
    if spec.mode == "bench" and not spec.epochs:  # after every stored timing: the forecast's bucket times
        out["buckets"] = buckets.record(t, it)
    if spec.profile_steps:  # --profile: a few more steps under the profiler, after every measured window
        from bench.rank import profile
        profiled, trace = profile.run(spec, t, batch_stream(wl) if spec.epochs else it)
        rows, out["traces"] = rows + profiled, [trace]
    out.update(steps=rows, epochs=epochs, windows=t.windows, compile_s=t.compile_s)
    return out


def ddp_logging(model: nn.Module, iterations: int) -> dict:
    """DDP's own timings, labelled with the iterations they average (DDP samples its first 10, then every 100th)."""
    try:
        data = getattr(model, "_orig_mod", model)._get_ddp_logging_data()
    except Exception as e:  # private API: record its absence, never fail the run for it
        return {"unavailable": repr(e)}
    sampled = [i for i in range(1, iterations + 1) if i <= 10 or i % 100 == 0]
    out = {k: v for k, v in data.items() if isinstance(v, (int, float, str))}
    out["sampled_iterations"] = f"{sampled[0]}-{min(10, iterations)}" + ("".join(f",{i}" for i in sampled if i > 10)) if sampled else ""
    return out


def run(spec: RunSpec) -> None:
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    distributed = spec.processes > 1 or spec.strategy in PER_DEVICE + ("comm",)
    beat = heartbeat.Heartbeat(heartbeat.path_for(spec.out_dir, rank), rank)
    try:
        _run(spec, rank, world, local_rank, distributed, beat)
    finally:
        beat.close()


def own_gpu(local_rank: int, visible: int) -> int:
    """The GPU index of a rank (its local rank), or a RuntimeError naming why there is none: a launcher that gave the
    node's ranks fewer GPUs than ranks (under SLURM a step shaped per task: --gpus-per-task=1, --gpu-bind=per_task:1)
    failed in torch.cuda.set_device as 'CUDA error: invalid device ordinal' on local ranks 1.."""
    if local_rank >= visible:
        raise RuntimeError(f"local rank {local_rank} has no GPU of its own: this process sees {visible} GPU(s) "
                           f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}) for the node's "
                           f"{os.environ.get('LOCAL_WORLD_SIZE', '?')} rank(s); the launcher gave the node fewer GPUs "
                           "than ranks (under SLURM: an allocation made per task, --gpus-per-task or --gpu-bind=per_task)")
    return local_rank


def _run(spec: RunSpec, rank: int, world: int, local_rank: int, distributed: bool, beat) -> None:
    if spec.threads:
        torch.set_num_threads(spec.threads)
    cuda = spec.device_type == "cuda"
    shared = cuda and rehearsal.shares(dict(spec.options))  # ranks share GPUs over gloo: a test-only rehearsal
    device = (torch.device("cuda", rehearsal.device_index(local_rank, torch.cuda.device_count()) if shared
                           else own_gpu(local_rank, torch.cuda.device_count()))
              if cuda else torch.device("cpu"))
    if cuda:
        torch.cuda.set_device(device)  # before any DeviceMesh, which would otherwise pick cuda:LOCAL_RANK itself
    if distributed:  # through the run folder's file (bench.sweep.launch), else torchrun's MASTER_ADDR/PORT
        init = os.environ.get("BENCH_PG_INIT")
        nccl = cuda and not shared
        dist.init_process_group("nccl" if nccl else "gloo", timeout=timedelta(seconds=spec.pg_timeout_s),
                                **({"init_method": init, "rank": rank, "world_size": world} if init else {}),
                                **({"device_id": device} if nccl else {}))
    numerics = precision.settings(spec.precision, spec.device_type, spec.mode)
    ctx = Ctx(device=device, count=spec.device_count, rank=rank, world_size=world, sync_bn=spec.sync_bn,
              options=dict(spec.options), warmup=spec.warmup)
    devices = [torch.device("cuda", i) for i in range(spec.device_count)] if cuda and spec.strategy == "dp" else [device]
    payload: dict = {"pid": os.getpid(), "host": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
                     "process_start": forkserver.started_as()}   # how this process began, as it ran (details)
    if cuda:  # which physical GPU this rank drove (selfcheck: each rank on its own)
        from bench.machine import gpuinfo
        props = torch.cuda.get_device_properties(device)
        payload["rank_devices"] = [{"rank": rank, "host": payload["host"],
                                    "device": gpuinfo.torch_pci_bus_id(props) or gpuinfo.torch_uuid(props)}]
    if spec.nodes > 1 and local_rank == 0:
        from bench.machine import env
        payload["node"] = {**env.capture(), "node_rank": int(os.environ.get("GROUP_RANK", 0)), "hostname": payload["host"],
                           "machine_hostname": socket.gethostname()}
    if spec.mode == "comm":  # the microbenchmark, then the interference stage, whose failure costs only itself
        from bench.rank.commrun import comm_run
        payload.update(comm_run(spec, device, world, rank))
    else:
        baseline_rss_mib = memory.rss_mib()  # the process before its model: the memory forecast's check starts here
        torch.manual_seed(spec.seed)  # identical initial weights on every rank (DDP also broadcasts rank 0's)
        wl = builder(spec.workload)(spec, rank, device)
        beat.total = planned_steps(spec, wl.steps_per_epoch)
        params = sum(p.numel() for p in wl.model.parameters())
        if spec.mode == "bench" and rank == 0 and spec.repeat == 0:  # once per configuration, before any wrapping
            from bench.workloads.flops import count_workload
            recompute = (None if spec.activation_checkpointing == "none" else  # the hardware's FLOPs beside the model's
                         lambda m: activations.checkpointed_meta_copy(m, spec.activation_checkpointing))
            payload["flops"] = count_workload(wl, spec, recompute)  # on meta copies: the model and random state untouched
        if spec.mode == "loader":
            payload.update(loader_only(spec, wl, rank))
        else:
            model = prepare(wl.model, spec, ctx, wl.details)
            t = Trainer(spec=spec, model=model, opt=make_optimizer(model, cuda, spec.optimizer), wl=wl, device=device,
                        clock=lambda: timing.make_clock(device, devices), rank=rank,
                        replicas=spec.device_count if spec.strategy == "dp" else spec.emulate_ranks,
                        split_replicas=spec.mode == "equivalence" and spec.emulate_ranks > 1
                                       and not (spec.sync_bn and cuda),
                        scaler=precision.grad_scaler(spec.precision, spec.device_type), beat=beat.beat,
                        fault=faults.hook(rank), distributed=distributed)
            payload.update(equivalence.train(spec, t, batch_stream(wl)) if spec.mode == "equivalence"
                           else measure(spec, t, devices, wl, beat, baseline_rss_mib))
            payload["timing_method"] = timing.make_clock(device, devices).method
            payload["strategy_settings"] = ddp_settings(model)
            payload["optimizer"] = optimizer_settings(cuda, spec.precision, spec.optimizer, zero_options(model))
        payload["buffer_bytes"] = sum(b.numel() * b.element_size() for b in wl.model.buffers())  # DDP broadcasts them
        payload.update(params=params, grad_bytes=params * 4, threads=torch.get_num_threads(), numerics=numerics,
                       workload_details=wl.details)
    beat.beat(beat.step, "gather")
    payloads = [payload]
    if distributed:
        payloads = [None] * world
        dist.all_gather_object(payloads, payload)
    if rank == 0:
        write_json(os.path.join(spec.out_dir, "result.json"), merge(payloads))
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


def loader_only(spec: RunSpec, wl, rank: int) -> dict:
    """The data loader alone, with the worker budget of a configuration of this count: can it keep up?"""
    it = batch_stream(wl)
    for _ in range(spec.warmup):
        next(it)
    t0, samples = time.perf_counter(), 0
    for _ in range(spec.steps):
        samples += int(next(it)[0].shape[0])
    wall = time.perf_counter() - t0
    return {"windows": [{"kind": "loader", "rank": rank, "wall_s": wall, "samples": samples, "steps": spec.steps,
                         "first_step": spec.warmup}], "loader_workers": spec.num_workers}


def merge(payloads: list) -> dict:
    """Rank 0's payload with every rank's raw rows; per-epoch rows merged over ranks."""
    out = dict(payloads[0])
    for key in ("steps", "memory", "windows", "traces", "rank_devices", "buckets", "gpu_samples"):  # every rank's own rows
        if key in out:
            out[key] = [row for p in payloads for row in p.get(key, [])]
    errors = list(dict.fromkeys(p["interference_error"] for p in payloads if p.get("interference_error")))
    if errors:  # every rank's, once each (rank 0's alone may be the others' echo: a timeout)
        out["interference_error"] = "; ".join(errors)
    out["nodes"] = [p["node"] for p in payloads if p.get("node")]
    out.pop("node", None)
    out["hosts"] = sorted({p.get("host") for p in payloads if p.get("host")})
    if out.get("epochs"):
        from bench.workloads.voc import coverage
        merged = []
        for e, row in enumerate(out["epochs"]):
            rows = [p["epochs"][e] for p in payloads]
            merged.append({"epoch": row["epoch"], "wall_s": max(r["wall_s"] for r in rows),
                           "mean_loss": sum(r["loss_sum"] for r in rows) / max(1, sum(r["loss_n"] for r in rows)),
                           "data_wait_s": max(r["data_wait_s"] for r in rows),
                           "samples": sum(r["samples"] for r in rows), "steps": row["steps"],
                           **coverage([r["indices"] for r in rows], row["n_images"])})
        out["epochs"] = merged
    return out


def write_json(path: str, obj: dict) -> None:
    tmp = path + f".tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def main(argv: list) -> int:
    die_with_parent(signal.SIGKILL)  # torchrun starts workers in sessions of their own: go when it goes
    if len(argv) != 1:
        print("usage: python -m bench.rank.worker SPEC.json (launched by the sweep)", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        spec = RunSpec.from_json(f.read())
    try:
        run(spec)
    except BaseException as e:
        rank = int(os.environ.get("RANK", 0))
        write_json(os.path.join(spec.out_dir, f"error-rank{rank}.json"),
                   {"rank": rank, "type": type(e).__name__, "message": str(e), "time": time.time(),
                    "host": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
                    "no_measured_step": isinstance(e, NoMeasuredStep), "traceback": traceback.format_exc()})
        raise
    return 0


if __name__ == "__main__":
    exit_without_teardown(main(sys.argv[1:]))  # a failure raises out of main: the traceback and exit 1 as usual
