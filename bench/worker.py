"""The per-process worker: runs one configuration (a RunSpec) and leaves its raw measurements behind.

Launched by the sweep, never by hand:
    python -m bench.worker OUT_DIR/spec.json                       # single, dp
    torchrun --nproc-per-node N ... -m bench.worker OUT_DIR/spec.json  # ddp, comm
Modes: 'bench' times warm-up + measured steps (and, under DDP, the same steps under no_sync() to
expose the communication backward did not hide); 'equivalence' trains k steps and saves the final
parameters; 'comm' runs the all-reduce microbenchmark. Every rank's raw rows are gathered to rank 0,
which alone writes OUT_DIR/result.json (atomically). A rank that fails writes OUT_DIR/error-rank<R>.json
first, so the sweep can say which rank failed and why.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from bench import faults
from bench.config import RunSpec
from bench.strategies import STRATEGIES, Ctx, unwrap
from bench.sweep import die_with_parent
from bench.timing import PhaseTimer, peak_memory, reset_peaks
from bench.workloads import WORKLOADS, Workload

LR = 0.01
MOMENTUM = 0.9


def make_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)


def batch_stream(wl: Workload):
    """Endless (epoch, batch) stream: real data runs through epochs, synthetic data cycles."""
    epoch = 0
    while True:
        n = 0
        for batch in wl.batches(epoch):
            n += 1
            yield epoch, batch
        if n == 0:
            raise RuntimeError("the data source produced no batch (split smaller than one batch?)")
        epoch += 1


def train_step(model: nn.Module, opt: torch.optim.Optimizer, wl: Workload, it, timer: PhaseTimer,
               device: torch.device) -> dict | None:
    """One timed training step; None when the iterator is exhausted (end of an epoch)."""
    timer.start()
    try:
        batch = next(it)
    except StopIteration:
        return None
    x, y = batch
    timer.mark("data")
    if not wl.on_device:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    timer.mark("h2d")
    loss = wl.loss_fn(model(x), y)
    timer.mark("forward")
    loss.backward()
    timer.mark("backward")
    opt.step()
    opt.zero_grad(set_to_none=True)
    timer.mark("optimizer")
    row = timer.stop()
    row["loss"] = loss.item()  # after the step's synchronisation: costs nothing more
    row["samples"] = int(x.shape[0])
    return row


def measure(spec: RunSpec, ctx: Ctx, model: nn.Module, wl: Workload, devices: list, fault) -> dict:
    opt = make_optimizer(model)
    timer = PhaseTimer(ctx.device, devices)
    steps, epochs = [], []
    reset_peaks(devices)
    n = 0
    if spec.epochs:
        for epoch in range(spec.epochs):
            t0 = time.perf_counter()  # the epoch's wall time includes starting its loader workers
            it = wl.batches(epoch)
            losses, wait_ms, samples = [], 0.0, 0
            while True:
                if fault:
                    fault(n)
                row = train_step(model, opt, wl, it, timer, ctx.device)
                if row is None:
                    break
                row.update(kind="warmup" if n < spec.warmup else "measure", rank=ctx.rank, step=n)
                steps.append(row)
                losses.append(row["loss"])
                wait_ms += row["data_ms"]
                samples += row["samples"]
                n += 1
            if spec.checkpoint and ctx.rank == 0:  # inside the epoch's time, like the reference experiment
                torch.save(unwrap(model).state_dict(), os.path.join(spec.out_dir, "checkpoint.pt"))
            if ctx.cuda:
                for d in devices:
                    torch.cuda.synchronize(d)
            wall_s = time.perf_counter() - t0
            row = _epoch_row(epoch, wall_s, losses, wait_ms, samples)
            row.update(indices=wl.epoch_indices(epoch), n_images=wl.n_images)  # for the coverage check, outside the timing
            epochs.append(row)
    else:
        it = (b for _, b in batch_stream(wl))
        for i in range(spec.warmup + spec.steps):
            if fault:
                fault(i)
            row = train_step(model, opt, wl, it, timer, ctx.device)
            row.update(kind="warmup" if i < spec.warmup else "measure", rank=ctx.rank, step=i)
            steps.append(row)
        n = spec.warmup + spec.steps
        if isinstance(model, nn.parallel.DistributedDataParallel):
            # The same steps without gradient synchronisation: the difference is the communication
            # that backward did not hide (exposed), measured the only way both NCCL and gloo allow.
            with model.no_sync():
                for i in range(spec.steps):
                    if fault:
                        fault(n + i)
                    row = train_step(model, opt, wl, it, timer, ctx.device)
                    row.update(kind="no_sync", rank=ctx.rank, step=i)
                    steps.append(row)
    out = {"steps": steps, "memory": peak_memory(devices, ctx.rank), "epochs": epochs}
    if isinstance(model, nn.parallel.DistributedDataParallel):
        out["comm_method"] = "no_sync_delta: median step - median step under no_sync(), slowest rank per step"
        try:
            out["ddp_logging"] = {k: v for k, v in model._get_ddp_logging_data().items() if isinstance(v, (int, float, str))}
        except Exception as e:  # private API: record its absence, never fail the run for it
            out["ddp_logging"] = {"unavailable": repr(e)}
    return out


def _epoch_row(epoch: int, wall_s: float, losses: list, wait_ms: float, samples: int) -> dict:
    return {"epoch": epoch, "wall_s": wall_s, "loss_sum": sum(losses), "loss_n": len(losses),
            "data_wait_s": wait_ms / 1000.0, "samples": samples, "steps": len(losses)}


def equivalence(spec: RunSpec, ctx: Ctx, model: nn.Module, wl: Workload, fault) -> dict:
    """k plain optimizer steps; rank 0 saves the final parameters for the sweep to compare.

    The reference is one process that takes the global batch every step. BatchNorm rule: DDP without
    SyncBatchNorm, and DataParallel, normalise each replica's batch with that batch's statistics, so
    the reference feeds its global batch as N replica-sized micro-batches and averages their
    gradients: the same arithmetic, one process. With --sync-bn (DDP on CUDA) statistics span the
    global batch, and the reference takes it in one piece. Dropout (DeepLabV3's ASPP) draws different
    masks for different batch splits, so it is off on both sides. Parameters are compared, not
    buffers (running statistics are updated per replica by design).
    """
    if ctx.cuda:
        # TF32 convolutions (cuDNN's default on Ampere and later) round differently for different batch
        # splits; the check compares float32 arithmetic, deterministic kernels.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    opt = make_optimizer(model)
    model.train()
    for m in model.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd):
            m.eval()
    whole_batch = spec.sync_bn and ctx.cuda
    micro = spec.emulate_ranks if spec.strategy == "single" and not whole_batch else 1
    it = (b for _, b in batch_stream(wl))
    losses = []
    for i in range(spec.steps):
        if fault:
            fault(i)
        x, y = next(it)
        if not wl.on_device:
            x, y = x.to(ctx.device), y.to(ctx.device)
        total = 0.0
        for xc, yc in zip(x.chunk(micro), y.chunk(micro)):
            loss = wl.loss_fn(model(xc), yc) / micro
            loss.backward()
            total += loss.detach()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if dist.is_initialized():  # the loss over the global batch, as the reference reports it
            dist.all_reduce(total)
            total /= dist.get_world_size()
        losses.append(total.item())
    if ctx.rank == 0:
        params = {k: v.detach().cpu() for k, v in unwrap(model).named_parameters()}
        torch.save(params, os.path.join(spec.out_dir, "params.pt"))
    return {"losses": losses, "dropout": "off",
            "batchnorm": "statistics over the global batch (SyncBatchNorm)" if whole_batch else
                         "statistics per replica batch" + (f" (reference: {micro} micro-batches)" if micro > 1 else "")}


def run(spec: RunSpec) -> None:
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    distributed = "RANK" in os.environ and spec.strategy in ("ddp", "comm")
    if spec.threads:
        torch.set_num_threads(spec.threads)
    cuda = spec.device_type == "cuda"
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if distributed:
        dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=spec.pg_timeout_s),
                                **({"device_id": device} if cuda else {}))
    ctx = Ctx(device=device, count=spec.device_count, rank=rank, world_size=world, sync_bn=spec.sync_bn)
    fault = faults.hook(rank)
    devices = [torch.device("cuda", i) for i in range(spec.device_count)] if cuda and spec.strategy == "dp" else [device]

    if spec.mode == "comm":
        from bench.commbench import allreduce_sweep
        payload = {"comm": allreduce_sweep(device, spec.comm_max_bytes)}
    else:
        if spec.data == "voc" and spec.download:
            from bench import voc
            if rank == 0:
                voc.download(spec.voc_root)
            if distributed:
                dist.barrier()  # the other ranks wait until rank 0's download is complete
        torch.manual_seed(spec.seed)  # identical initial weights on every rank (DDP also broadcasts rank 0's)
        wl = WORKLOADS[spec.workload](spec, ctx)
        params = sum(p.numel() for p in wl.model.parameters())
        model = STRATEGIES[spec.strategy](wl.model, ctx)
        if spec.mode == "equivalence":
            payload = equivalence(spec, ctx, model, wl, fault)
        else:
            payload = measure(spec, ctx, model, wl, devices, fault)
        payload.update(params=params, grad_bytes=params * 4, threads=torch.get_num_threads(), pid=os.getpid(),
                       workload_details=wl.details or {},
                       tf32={"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32})

    payloads = [payload]
    if distributed:
        payloads = [None] * world
        dist.all_gather_object(payloads, payload)
    if rank == 0:
        write_json(os.path.join(spec.out_dir, "result.json"), merge(payloads))
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


def merge(payloads: list) -> dict:
    """Rank 0's payload with every rank's raw rows; per-epoch losses averaged over ranks."""
    out = dict(payloads[0])
    for key in ("steps", "memory"):
        if key in out:
            out[key] = [row for p in payloads for row in p.get(key, [])]
    if out.get("epochs"):
        merged = []
        for e, row in enumerate(out["epochs"]):
            rows = [p["epochs"][e] for p in payloads]
            from bench.voc import coverage
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
        print("usage: python -m bench.worker SPEC.json (launched by the sweep)", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        spec = RunSpec.from_json(f.read())
    try:
        run(spec)
    except BaseException as e:
        rank = int(os.environ.get("RANK", 0))
        write_json(os.path.join(spec.out_dir, f"error-rank{rank}.json"),
                   {"rank": rank, "type": type(e).__name__, "message": str(e), "time": time.time(),
                    "traceback": traceback.format_exc()})
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
