"""From a checked SweepConfig to the list of configurations to run, each a RunSpec (or a Skip with its reason).

    machine = detect_machine()
    cfg = resolve(cfg, machine)      # bench.sweep.resolve: every default filled for this device, printed, stored
    items = plan(cfg, machine)       # RunSpecs and Skips in run order: benchmarks, equivalence, loader, collectives

Everything that can be known before a process starts is checked here and raises ConfigError (exit 2):
counts against the machine, batch splits, data sets, weights files, user models. What the device
cannot do (fp16 on CPU, DataParallel over several nodes, channels_last for a 2-D model) is a Skip,
recorded in the store with its reason, never silently dropped.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
from dataclasses import dataclass
from typing import Optional

from bench.config import ConfigError, SweepConfig, comm_hook_parts
from bench.machine import cudacompat
from bench.machine.cores import usable_cores
from bench.shared import rehearsal
from bench.shared.spec import FSDP_BASED, PER_DEVICE, RunSpec, Skip
from bench.sweep import settings, shm
from bench.sweep.settings import strategy_options
from bench.workloads import registry, transformer
from bench.workloads.workload import WorkloadInfo

EQUIVALENCE_STEPS = 3
PRECISION_NEEDS_AMPERE = ("tf32", "bf16")



@dataclass(frozen=True)
class Machine:
    """What the sweep can run on; detected once by `detect_machine()`, faked in tests."""
    cuda_devices: int
    cpu_cores: int
    gpu_names: tuple = ()
    gpu_capabilities: tuple = ()        # (major, minor) per GPU
    slurm_nodes: int = 0                # nodes of the SLURM allocation this sweep runs in (0: none)
    arch_list: tuple = ()               # the architectures the installed torch has kernels for (sm_80, ...)
    gpus_unusable: Optional[str] = None  # why torch sees no GPU although the driver shows some (None: it can)
    shm_free_bytes: Optional[int] = None  # free /dev/shm, where loader workers' batches wait (None: not checked)
    gpu_memory_bytes: tuple = ()        # total memory per GPU, as CUDA sees it (the default memory budget)
    slurm_gpus: Optional[str] = None    # 'NAME=VALUE' saying the SLURM allocation holds GPUs (None: no GPU allocation)
    host_memory_bytes: Optional[int] = None  # this node's RAM (None: unknown, not checked): the CPU's device memory
    slurm_on_node: bool = True          # inside a SLURM allocation: on one of its nodes (False: a login node's salloc shell)


def detect_machine() -> Machine:
    import torch
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    names = tuple(torch.cuda.get_device_name(i) for i in range(n))
    caps = tuple(tuple(torch.cuda.get_device_capability(i)) for i in range(n))
    cores = usable_cores()
    from bench.sweep import slurm
    return Machine(cuda_devices=n, cpu_cores=cores, gpu_names=names, gpu_capabilities=caps,
                   gpu_memory_bytes=tuple(torch.cuda.get_device_properties(i).total_memory for i in range(n)),
                   slurm_nodes=slurm.allocation_nodes(), arch_list=tuple(torch.cuda.get_arch_list()) if n else (),
                   gpus_unusable=None if n else cudacompat.why_torch_cannot_use_gpus(torch), shm_free_bytes=shm.free_bytes(),
                   slurm_gpus=slurm.allocation_gpus(), host_memory_bytes=_host_memory_bytes(),
                   slurm_on_node=slurm.on_allocated_node())


def _host_memory_bytes() -> Optional[int]:
    """The node's physical RAM (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _precision_skip(precision: str, cuda: bool, machine: Machine) -> Optional[str]:
    if not cuda and precision in ("tf32", "fp16"):
        return (f"{precision} needs a GPU: TF32 is a tensor-core format of NVIDIA Ampere and later" if precision == "tf32"
                else "fp16 autocast with a gradient scaler is a GPU precision; on CPU use bf16")
    if cuda and precision in PRECISION_NEEDS_AMPERE and machine.gpu_capabilities and min(machine.gpu_capabilities) < (8, 0):
        cap = ".".join(map(str, min(machine.gpu_capabilities)))
        return f"{precision} needs compute capability 8.0 (Ampere) or later; this GPU has {cap}"
    return None


def checkpointing_skip(cfg: SweepConfig, wl: str, mode: str) -> Optional[str]:
    """selective:K past a workload's last unit checkpoints none of them (bench.rank.activations.chosen): a run of no
    checkpointing under another name, skipped with this reason where planning knows the units (registry.checkpoint_units;
    bench.sweep.resolve refuses a mode that no workload of the sweep could run)."""
    from bench.rank.activations import mode_every
    k = mode_every(mode)
    units = registry.checkpoint_units(wl, cfg) if k > 1 else None
    if units and k > units[0]:
        return (f"--activation-checkpointing {mode}: checkpoints units {k}, {2 * k}, ... but {wl} has {units[1]}, so none "
                f"would be checkpointed (a run of no checkpointing under another name); expected K <= {units[0]} for {wl} "
                f"(selective:{units[0]} checkpoints its last), full, or none")
    return None


def _skip_reason(cfg: SweepConfig, machine: Machine, wl: str, strategy: str, n: int, nodes: int,
                 precision: str, channels_last: bool, compiled: bool, info: WorkloadInfo) -> Optional[str]:
    cuda = cfg.device == "cuda"
    if strategy == "dp" and rehearsal.applies(cfg.device, n, machine.cuda_devices):
        return rehearsal.DP_SKIP
    if strategy == "dp" and nodes > 1:
        return f"DataParallel is one process on one node; {n} devices span {nodes} nodes (use ddp, zero, fsdp or hsdp)"
    if strategy == "dp" and not cuda and n > 1:
        return "DataParallel parallelises over GPUs only; on CPU it has one device, so only count 1 runs (the wrapper's overhead)"
    reason = _precision_skip(precision, cuda, machine)
    if reason:
        return reason
    if channels_last and not info.image:
        return f"channels_last applies to 4-D image inputs; {wl} takes {info.input_rank}-D inputs"
    if channels_last and strategy in FSDP_BASED:
        return "FSDP2 shards contiguous parameters only; channels_last convolution weights are not (PyTorch refuses them)"
    if compiled and strategy == "dp":
        return "torch.compile does not trace nn.DataParallel's per-step replicate/scatter; compile under ddp instead"
    if cfg.epochs and info.images:
        per_step = _global_batch(cfg, info, n)
        steps = info.images // per_step
        if steps == 0:
            return f"no full step: the split has {info.images} images, one global batch is {per_step}"
        if steps * cfg.epochs <= cfg.warmup:
            return (f"no measured step: {cfg.epochs} epoch(s) of {steps} step(s) each all fall inside the "
                    f"{cfg.warmup} warm-up step(s); lower --warmup or train more epochs")
    return None


def _global_batch(cfg: SweepConfig, info: WorkloadInfo, n: int) -> int:
    pdb = cfg.per_device_batch or info.default_batch
    return pdb * n if cfg.scaling == "weak" else (cfg.global_batch or pdb * max(cfg.gpus))


def noise_probe(cfg: SweepConfig, precision: Optional[str] = None, workload: Optional[str] = None) -> tuple:
    """(workload, strategy, precision, channels_last, compile, optimizer) of the configuration that runs in
    --noise-repeats processes for `workload` (default: the synthetic MLP where the sweep trains it, else the first) at
    `precision` (default: the sweep's first): the cheapest one, single at 1 device (else the first strategy at the
    smallest count) in the first of every other axis."""
    wl = workload or ("synthetic" if "synthetic" in cfg.workloads else cfg.workloads[0])
    strategy = "single" if "single" in cfg.strategies else cfg.strategies[0]
    return wl, strategy, precision or cfg.precision[0], cfg.channels_last[0], cfg.compile[0], cfg.optimizer[0]


def noise_probes(cfg: SweepConfig) -> list:
    """`noise_probe` of every workload at every precision of the sweep: noise measured at one precision does not speak
    for another (one H200's DeepLabV3 single x1: three fp32 processes 0.6% apart, compute-bound; two bf16 ones at 144
    and 200 samples/s, host-bound), nor one model's for another's (the MLP's 3 ms steps against DeepLabV3's host-bound
    bf16 ones), so each workload's single-process comparisons at a precision are held against its own processes."""
    return [noise_probe(cfg, p, wl) for wl in cfg.workloads for p in cfg.precision]


def bench_specs(cfg: SweepConfig, machine: Machine) -> list:
    """Benchmark configurations (RunSpec or Skip) of a resolved config, in run order."""
    out = []
    cuda = cfg.device == "cuda"
    probes = noise_probes(cfg)
    for wl in cfg.workloads:
        info = registry.info(wl, cfg)
        pdb = cfg.per_device_batch or info.default_batch
        shape = (transformer.shape_of(cfg.transformer_preset, cfg.transformer_layers, cfg.transformer_width,
                                      cfg.transformer_heads, cfg.seq_len) if wl == "transformer" else None)
        auxes = cfg.deeplabv3_aux if wl == "deeplabv3" else ("false",)
        for strategy, precision, cl, comp, opt, ac, aux in itertools.product(
                cfg.strategies, cfg.precision, cfg.channels_last, cfg.compile, cfg.optimizer, cfg.activation_checkpointing, auxes):
            unused = settings.unused_parameters(cfg, wl, aux, info)
            for n in ((1,) if strategy == "single" else cfg.gpus):
                nodes = max(1, n // cfg.gpus_per_node) if n > cfg.gpus_per_node else 1
                global_b = _global_batch(cfg, info, n)
                if global_b % n:
                    raise ConfigError(f"--global-batch {global_b} cannot be split evenly over {n} devices "
                                      f"(--scaling strong); choose a multiple of {n}")
                replica = global_b // n
                micro = min(pdb, replica)
                if replica % micro:
                    raise ConfigError(f"{wl} on {n} device(s): {replica} samples per replica do not split into "
                                      f"micro-batches of {micro} (--per-device-batch); choose a global batch that does")
                if micro < info.min_replica_batch:
                    raise ConfigError(f"{wl} with {strategy} on {n} device(s): {micro} sample(s) per replica "
                                      f"(global batch {global_b}); {wl} needs at least {info.min_replica_batch} per replica "
                                      f"(BatchNorm in training mode)")
                first = n == (1 if strategy == "single" else min(cfg.gpus))
                noisy = first and (wl, strategy, precision, cl, comp, opt) in probes and (ac, aux) == (
                    cfg.activation_checkpointing[0], auxes[0])
                runs = strategy_options(cfg, strategy, n)
                if strategy in PER_DEVICE:  # a rehearsal's ranks sharing a GPU: labelled so (bench.shared.rehearsal)
                    runs = [tuple(sorted(o + rehearsal.options(cfg.device, n, machine.cuda_devices))) for o in runs]
                if runs and all(settings.needs_unused(strategy, dict(o), unused) for o in runs):
                    raise ConfigError(settings.unused_refusal(wl, unused, aux))  # not one configuration of it could run
                for k, options in enumerate(runs):
                    for r in range(max(cfg.repeats, cfg.noise_repeats or 1) if noisy and k == 0 else cfg.repeats):
                        spec = RunSpec(
                            workload=wl, strategy=strategy, device_type=cfg.device, device_count=n,
                            per_device_batch=replica, global_batch=global_b, micro_batch=micro if micro < replica else 0,
                            image_size=(cfg.image_size or info.default_image_size) if info.image or info.default_image_size else 0,
                            steps=cfg.steps, min_window_s=cfg.min_window_s or 0.0, warmup=cfg.warmup,
                            threads=cfg.threads_per_process,
                            seed=cfg.seed, scaling=cfg.scaling, repeat=r, precision=precision, channels_last=cl,
                            compile=comp, options=options, nodes=nodes, launcher=_launcher(cfg, nodes),
                            data=cfg.data if wl == "deeplabv3" else "synthetic", voc_root=cfg.voc_root or "",
                            download=cfg.download, epochs=cfg.epochs or 0, checkpoint=cfg.checkpoint,
                            num_workers=cfg.num_workers * (n if strategy in ("single", "dp") else 1),
                            pin_memory=cfg.pin_memory and cuda, persistent_workers=cfg.persistent_workers,
                            synthetic_width=cfg.synthetic_width, synthetic_depth=cfg.synthetic_depth,
                            synthetic_repeats=cfg.synthetic_repeats, weights=cfg.weights or "",
                            sync_bn=cfg.sync_bn, pg_timeout_s=cfg.pg_timeout, optimizer=opt, activation_checkpointing=ac,
                            deeplabv3_aux=aux, **(transformer.spec_fields(shape) if shape else {}))
                        reason = (_skip_reason(cfg, machine, wl, strategy, n, nodes, precision, cl, comp, info)
                                  or settings.option_skip(cfg, strategy, dict(options), unused, wl, aux)
                                  or checkpointing_skip(cfg, wl, ac))
                        if reason and r > 0:
                            continue  # a configuration that cannot run is recorded as skipped once, not per repeat
                        out.append(Skip(spec, reason) if reason else spec)
    # Repeats in rounds (every configuration once, then again): a configuration's processes spread over the sweep, so
    # a slow minute of a shared machine slows one process of several configurations, not every process of one
    # (three back-to-back DataParallel processes once all ran 20% slow and widened compare's bound to 55%).
    # Started as the config says (forked or fresh) here, where ab, tune and fit take their configurations too.
    return [_started(x, cfg) for x in sorted(out, key=lambda item: (item.spec if isinstance(item, Skip) else item).repeat)]


def loader_spec(s: RunSpec, cfg: SweepConfig, runnable: list) -> RunSpec:
    """The loader-alone run beside count n: n loader processes of --num-workers each where DDP or FSDP runs
    n ranks on one node (n loaders compete for cores and /dev/shm at once), else one loader with the
    count's whole budget (DataParallel's and a single device's one process)."""
    n = s.device_count
    ranks = any(r.device_count == n and r.strategy in PER_DEVICE and r.nodes == 1 for r in runnable)
    loaders = n if ranks and n > 1 else 1
    return dataclasses.replace(s, mode="loader", strategy="loader", num_workers=cfg.num_workers * n // loaders,
                               loaders=loaders, precision="fp32", channels_last=False, compile=False, options=(),
                               nodes=1, launcher="local", optimizer="sgd")


def _launcher(cfg: SweepConfig, nodes: int) -> str:
    if cfg.launcher != "auto":
        return cfg.launcher
    return "slurm" if nodes > 1 else "local"


def plan(cfg: SweepConfig, machine: Machine) -> list:
    """Benchmarks and skips, then equivalence checks, loader-only runs and collective baselines."""
    items = bench_specs(cfg, machine)
    runnable = [s for s in items if isinstance(s, RunSpec)]
    if cfg.check_equivalence:
        # Compressed gradients (fp16/bf16 hooks, PowerSGD) change the step on purpose: they are left out of the gate.
        checks = [dataclasses.replace(s, mode="equivalence", steps=EQUIVALENCE_STEPS, warmup=0, epochs=0)
                  for s in runnable if s.strategy in ("dp",) + PER_DEVICE and s.repeat == 0 and not s.compile
                  and s.option("comm_hook", "none") == "none"]
        items += [Skip(s, why) if why else s for s in checks
                  for why in [reference_skip(s, machine, cfg.per_device_batch or cfg.global_batch)]]
    if cfg.data == "voc" and cfg.loader_bench:
        seen = set()
        for s in runnable:  # the loader alone, as many loaders at once as the configurations of this count run
            if s.repeat == 0 and s.device_count not in seen:
                seen.add(s.device_count)
                items.append(loader_spec(s, cfg, runnable))
    comm = []
    if cfg.comm_bench and (set(PER_DEVICE) & set(cfg.strategies) or cfg.comm_counts) and runnable:
        one_per_workload = {s.workload: s for s in runnable}.values()  # building a model even on meta takes seconds
        states = tuple(sorted({int(registry.gradient_bytes(s)) for s in one_per_workload}))
        max_bytes = max(states)
        buckets = sorted({int(mb * 2**20) for mb in (cfg.bucket_cap_mb or (25.0,))} | {2**20})  # DDP's first bucket: 1 MiB
        # DDP all-reduces its gradients, FSDP all-gathers parameters and reduce-scatters gradients; the all-reduce
        # always runs: the forecast's network levels are fitted from it
        ops = ("all_reduce",) + (("all_gather", "reduce_scatter") if set(FSDP_BASED) & set(cfg.strategies) else ())
        load = _load_shape(cfg, machine) if cfg.interference else ()
        # one comm run per repeat, each in fresh processes: the between-run spread the forecast's range draws from
        for r, n in [(r, n) for r in range(cfg.repeats) for n in sorted(set(cfg.gpus) | set(cfg.comm_counts or ()))]:
            if n > 1:
                nodes = max(1, n // cfg.gpus_per_node) if n > cfg.gpus_per_node else 1
                comm.append(RunSpec(workload="allreduce", strategy="comm", device_type=cfg.device, device_count=n,
                                     per_device_batch=0, global_batch=0, image_size=0, steps=0, warmup=0,
                                     threads=cfg.threads_per_process, seed=cfg.seed, repeat=r,
                                     scaling=cfg.scaling, pg_timeout_s=cfg.pg_timeout, mode="comm", nodes=nodes,
                                     launcher=_launcher(cfg, nodes), comm_max_bytes=max_bytes, comm_state_bytes=states,
                                     comm_extra_bytes=tuple(buckets), comm_ops=ops, interference=cfg.interference,
                                     comm_load=load, options=rehearsal.options(cfg.device, n, machine.cuda_devices)))
    return [_started(x, cfg) for x in _in_rounds(items, comm)]


def reference_skip(check: RunSpec, machine: Machine, given_batch=None) -> Optional[str]:
    """Why an equivalence check cannot run here (None: it can): its reference is one process holding the whole model,
    its gradients and optimizer state on one GPU (bench.sweep.equivalence.specs; FSDP's bf16 reference is FSDP on one
    rank, the same), which a transformer that only fits sharded cannot: it would run out of memory, and every strategy's
    gate at that count would read 'failed', as if the strategy computed wrongly. Counted by the plan's memory floors,
    lower bounds (transformer.state_bytes of one process, memory_floor's activations at transformer.floor_batch), so
    only a reference that certainly cannot fit the largest GPU is skipped. CUDA transformers only."""
    memory = max(machine.gpu_memory_bytes, default=0)
    if check.workload != "transformer" or check.device_type != "cuda" or not memory or not check.transformer_layers:
        return None
    one = dataclasses.replace(check, strategy="single", device_count=1, options=(), nodes=1)
    batch = transformer.floor_batch(check, given_batch)
    state, act = transformer.state_bytes(one), transformer.memory_floor(transformer.spec_shape(check), batch)[1]
    if state + act <= memory:
        return None
    gib = 2**30
    return (f"equivalence not checked: the gate's reference is one process holding the whole model, at least "
            f"{(state + act) / gib:,.1f} GiB ({state / gib:,.1f} GiB of fp32 weights, gradients and {check.optimizer} "
            f"state, {act / gib:,.1f} GiB of activations at {batch} sequence(s)), more than the largest GPU's "
            f"{memory / gib:,.1f} GiB: it would run out of memory and read as {check.strategy} x{check.device_count} "
            "failing the gate. Check equivalence at a smaller --transformer-preset (or fewer --transformer-layers) with "
            "the same flags: the same strategy, settings and code path on a model whose one-process reference fits")


def _in_rounds(items: list, comm: list) -> list:
    """The comm runs in the rounds of the repeats (bench_specs): repeat r's right after the configurations' round r, so
    that the machine's runs spread over the sweep as its configurations' processes do (the forecast's range draws on
    their spread); the checks and loader-only runs, then comm runs past the last round, at the end."""
    rep = lambda item: (item.spec if isinstance(item, Skip) else item).repeat  # noqa: E731
    bench = [x for x in items if (x.spec if isinstance(x, Skip) else x).mode == "bench"]
    rest = [x for x in items if (x.spec if isinstance(x, Skip) else x).mode != "bench"]
    rounds = sorted({rep(x) for x in bench})
    out = []
    for r in rounds:
        out += [x for x in bench if rep(x) == r] + [c for c in comm if c.repeat == r]
    return out + rest + [c for c in comm if c.repeat not in rounds]


def _started(item, cfg: SweepConfig):
    """The item with how its processes start: forked from the fork server unless --fresh-interpreters (the CUDA
    default) or it spans nodes (the server is on this one)."""
    forked = cfg.fresh_interpreters is False and (item.spec if isinstance(item, Skip) else item).launcher == "local"
    if not forked:
        return item
    if isinstance(item, Skip):
        return Skip(dataclasses.replace(item.spec, process_start="forked"), item.reason)
    return dataclasses.replace(item, process_start="forked")


def _load_shape(cfg: SweepConfig, machine: Machine) -> tuple:
    """The interference load's GEMM (M, K): the synthetic MLP's layer (batch x width) where the sweep trains it, else
    the device's default (bench.rank.interference.LOAD_DEFAULT)."""
    if "synthetic" not in cfg.workloads:
        return ()
    return (cfg.per_device_batch or registry.info("synthetic", cfg).default_batch, cfg.synthetic_width)


def check_hooks(cfg: SweepConfig) -> None:
    for h in cfg.comm_hook:
        comm_hook_parts(h)
