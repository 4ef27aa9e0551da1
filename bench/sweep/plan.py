"""From a checked SweepConfig to the list of configurations to run, each a RunSpec (or a Skip with its reason).

    machine = detect_machine()
    cfg = resolve(cfg, machine)      # every default filled for this device, printed by the sweep, stored
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

from bench.config import DEFAULT_STRATEGIES, ConfigError, SweepConfig, activation_checkpointing, comm_hook_parts
from bench.machine import cudacompat
from bench.shared import rehearsal
from bench.shared.spec import FSDP_BASED, PER_DEVICE, RunSpec, Skip
from bench.sweep import settings, shm
from bench.sweep.settings import strategy_options
from bench.workloads import registry, synthetic, transformer
from bench.workloads.workload import WorkloadInfo

# CPU: 6, where a DeepLabV3 step at one thread takes 0.6-0.9 s: the median of a process's first 6 steps was within
# 0-1.4% of its 8's (9 runs), inside the 2.6% its processes differ, and the probe's half-length blocks moved the
# exposed communication 2-6%, inside its processes' spread; the 2 steps and 4 probe steps less took the default CPU
# sweep from 3m06s to 2m26s, with the bucket and co-run cuts (docs/running.md). Faster models run more (--min-window-s).
DEFAULT_STEPS = {"cuda": 30, "cpu": 6}
DEFAULT_WARMUP = {"cuda": 10, "cpu": 2}
DEFAULT_PG_TIMEOUT_S = {"cuda": 300.0, "cpu": 120.0}
DEFAULT_NUM_WORKERS = {"cuda": 2, "cpu": 1}
# The shortest measured window when --steps is left to the defaults: 8 CPU steps of the synthetic MLP lasted 0.2 s,
# too short to average the step-to-step swings of a shared machine (24 vs 31 ms steps within one process here),
# so one process's throughput spread 12-20% and compare could not call a 30% slowdown from it (issue 18).
# pyperf and pytest-benchmark calibrate loops to a minimum time in the same way.
DEFAULT_MIN_WINDOW_S = 1.0
# Processes per configuration. On CPU a process is cheap, and on a shared machine about one DDP x2 process in seven
# ran 1.5x slow throughout (measured, issue 18): one process per configuration cannot tell that from a slower
# build, three can (compare then called 30% slowdowns of every configuration of the default CPU sweep, docs/comparing.md).
# On CUDA a process costs a model build and a CUDA start-up, so one, and --repeats where compare must decide.
DEFAULT_REPEATS = {"cuda": 1, "cpu": 3}
# The process-to-process noise the report holds a single process against must be measured on the device it speaks
# of (25% measured between fresh processes on 2-core CPUs, 0.2-1% on one H100): on CUDA the cheapest configuration
# runs in 3 processes (`noise_probe`), two more model builds and CUDA start-ups; on CPU every configuration already does.
DEFAULT_NOISE_REPEATS = {"cuda": 3, "cpu": 1}
# The bound's evidence: on CUDA a few traced steps after every measured window (bench.rank.profile) give the GPU's
# busy share; on CPU no device sits idle, so the traces are --profile's alone.
DEFAULT_PROFILE = {"cuda": True, "cpu": False}
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


def detect_machine() -> Machine:
    import torch
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    names = tuple(torch.cuda.get_device_name(i) for i in range(n))
    caps = tuple(tuple(torch.cuda.get_device_capability(i)) for i in range(n))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    from bench.sweep import slurm
    return Machine(cuda_devices=n, cpu_cores=cores, gpu_names=names, gpu_capabilities=caps,
                   gpu_memory_bytes=tuple(torch.cuda.get_device_properties(i).total_memory for i in range(n)),
                   slurm_nodes=slurm.allocation_nodes(), arch_list=tuple(torch.cuda.get_arch_list()) if n else (),
                   gpus_unusable=None if n else cudacompat.why_torch_cannot_use_gpus(torch), shm_free_bytes=shm.free_bytes(),
                   slurm_gpus=slurm.allocation_gpus())


# ---------------------------------------------------------------- defaults and machine checks

def device_type(cfg: SweepConfig, machine: Machine) -> str:
    if cfg.device == "auto":
        return "cuda" if machine.cuda_devices > 0 else "cpu"
    return cfg.device


def _default_counts(cuda: bool, machine: Machine) -> tuple:
    if cuda:
        counts = {1} | {n for n in (4, 8) if n <= machine.cuda_devices}
        if machine.cuda_devices in (2, 3, 5, 6, 7):
            counts.add(machine.cuda_devices)
        return tuple(sorted(counts))
    return (1, 2) if machine.cpu_cores >= 2 else (1,)


def resolve(cfg: SweepConfig, machine: Machine) -> SweepConfig:
    """Every device-dependent default filled in and checked against the machine. Raises ConfigError."""
    if machine.gpus_unusable and cfg.device in ("cuda", "auto"):
        raise ConfigError(f"--device {cfg.device}: this machine's driver shows NVIDIA GPU(s), but {machine.gpus_unusable}. "
                          f"No GPU sweep becomes a CPU sweep: fix the install, or pass --device cpu to measure the CPU on purpose")
    if cfg.device == "auto" and machine.cuda_devices == 0 and machine.slurm_gpus:
        import socket  # salloc's shell runs where salloc was typed (a login node) unless the cluster starts a step
        raise ConfigError(f"--device auto: this sweep runs inside a SLURM allocation with GPUs ({machine.slurm_gpus}), "
                          f"but no GPU is visible here on {socket.gethostname()} (torch.cuda.device_count() == 0): a "
                          "login node, or a shell outside the allocation's GPUs. No GPU sweep becomes a CPU sweep: run "
                          "it on the allocation's first node (sbatch slurm/bench.sbatch), or from a shell there "
                          "(srun --pty bash, then ./run_bench.sh), or pass --device cpu to measure this machine's CPU")
    if cfg.device == "cuda" and machine.cuda_devices == 0:
        raise ConfigError("--device cuda: this machine has 0 CUDA GPUs visible (torch.cuda.device_count() == 0); "
                          "use --device cpu or auto")
    dev = device_type(cfg, machine)
    cuda = dev == "cuda"
    missing = cudacompat.unsupported_gpus(machine.gpu_names, machine.gpu_capabilities, machine.arch_list) if cuda else []
    if missing:
        raise ConfigError("no kernel image for this machine's GPUs in the installed torch (every CUDA configuration "
                          "would fail): " + "; ".join(missing))
    names = tuple(registry.canonical(w) for w in cfg.workloads)
    per_node = cfg.gpus_per_node or (machine.cuda_devices if cuda else machine.cpu_cores)
    if cuda and per_node > machine.cuda_devices:
        raise ConfigError(f"--gpus-per-node: {per_node} asked for, but this node has {machine.cuda_devices} CUDA GPU(s)")
    counts = set(cfg.gpus or (() if cfg.nodes else _default_counts(cuda, machine)))
    counts |= {k * per_node for k in (cfg.nodes or ())}
    if cfg.comm_counts and not cfg.comm_bench:
        raise ConfigError(f"--comm-counts {','.join(map(str, cfg.comm_counts))}: measures the collectives there, which "
                          "--no-comm-bench turns off; leave one of the two out")
    trained = tuple(sorted(counts))
    counts = tuple(sorted(counts | set(cfg.comm_counts or ())))  # every count this sweep starts processes at
    # Outside SLURM, with no node flags, every count runs on this machine (and must fit it).
    single_node = not machine.slurm_nodes and cfg.nodes is None and cfg.gpus_per_node is None
    local = list(counts) if single_node else [n for n in counts if n <= per_node]
    multi = [n for n in counts if n not in local]
    for n in multi:
        if n % per_node:
            raise ConfigError(f"--gpus: {n} devices do not fill whole nodes of {per_node} (--gpus-per-node); "
                              f"expected a multiple of {per_node} above one node")
    most_nodes = max([n // per_node for n in multi], default=1)
    if most_nodes > 1 and machine.slurm_nodes < most_nodes:
        where = (f"this SLURM allocation has {machine.slurm_nodes} node(s)" if machine.slurm_nodes
                 else "this sweep does not run inside a SLURM allocation (salloc/sbatch)")
        raise ConfigError(f"{most_nodes} nodes needed for {max(multi)} devices at {per_node} per node, but {where}")
    if cfg.launcher == "slurm" and not machine.slurm_nodes:
        raise ConfigError("--launcher slurm: this sweep does not run inside a SLURM allocation (salloc/sbatch)")
    if local and cuda and max(local) > machine.cuda_devices and not (rehearsal.active() and single_node):
        raise ConfigError(f"--gpus: {max(local)} GPUs asked for, but this machine has {machine.cuda_devices} CUDA GPU(s) visible")
    if local and not cuda and max(local) > machine.cpu_cores:
        raise ConfigError(f"--gpus: {max(local)} CPU processes asked for, but this machine has {machine.cpu_cores} CPU core(s); "
                          f"on CPU each count is a gloo process with at least one core, so at most {machine.cpu_cores}")
    if single_node:
        per_node = max(counts)
    counts = trained
    if cfg.epochs and cfg.data != "voc":
        raise ConfigError(f"--epochs {cfg.epochs}: whole epochs need a real data set; use --data voc or --steps")
    if cfg.checkpoint and not cfg.epochs:
        raise ConfigError("--checkpoint: saves once per epoch; it needs --epochs N")
    if cfg.data == "voc":
        if cfg.workloads != ("deeplabv3",):
            raise ConfigError(f"--data voc: trains deeplabv3 only; got --workloads {','.join(cfg.workloads)} (use --workloads deeplabv3)")
        if not cfg.voc_root:
            raise ConfigError("--data voc: needs --voc-root PATH (the folder holding VOCdevkit/VOC2012)")
        if not cfg.download:
            from bench.workloads import voc
            voc.check_tree(cfg.voc_root)
    if cfg.sync_bn and not cuda:
        raise ConfigError("--sync-bn: SyncBatchNorm runs on CUDA only; on CPU DDP keeps per-process BatchNorm "
                          "(the equivalence check then normalises per replica on both sides)")
    if cfg.weights:
        registry.check_weights(cfg.weights, [w for w in cfg.workloads if w != "synthetic"])
    if any(cfg.compile) and cfg.warmup == 0:
        raise ConfigError("--warmup 0 with --compile: compilation happens in the first step; expected --warmup >= 1 "
                          "so that it stays out of the measured steps")
    profile = DEFAULT_PROFILE[dev] if cfg.profile is None else cfg.profile
    for name in ("profile_steps", "profile_max_mb"):  # set, but no trace would be taken: refused, never ignored
        if not profile and getattr(cfg, name) != SweepConfig.__dataclass_fields__[name].default:
            raise ConfigError(f"--{name.replace('_', '-')}: takes effect with --profile only (on {dev} traces are off "
                              f"unless --profile); add --profile, or leave --{name.replace('_', '-')} out")
    shape = transformer.resolve_shape(cfg, dev) if "transformer" in names else None
    timeout = cfg.timeout
    pg = cfg.pg_timeout or (min(DEFAULT_PG_TIMEOUT_S[dev], timeout / 2) if timeout else DEFAULT_PG_TIMEOUT_S[dev])
    resolved = dataclasses.replace(
        cfg, workloads=names, device=dev, strategies=cfg.strategies or DEFAULT_STRATEGIES[dev], gpus=counts, gpus_per_node=per_node,
        steps=cfg.steps or DEFAULT_STEPS[dev], repeats=cfg.repeats or DEFAULT_REPEATS[dev], profile=profile,
        noise_repeats=cfg.noise_repeats or DEFAULT_NOISE_REPEATS[dev],
        min_window_s=cfg.min_window_s or (DEFAULT_MIN_WINDOW_S if cfg.steps is None else None), warmup=DEFAULT_WARMUP[dev] if cfg.warmup is None else cfg.warmup,
        pg_timeout=pg, fresh_interpreters=cuda if cfg.fresh_interpreters is None else cfg.fresh_interpreters,
        num_workers=DEFAULT_NUM_WORKERS[dev] if cfg.num_workers is None else cfg.num_workers,
        # One rule for every strategy, CPU and CUDA alike: the node's cores shared by the most processes a node
        # runs (torchrun would give its ranks 1 and single/DataParallel every core). Stored as threads_per_process.
        threads_per_process=cfg.threads_per_process or max(1, machine.cpu_cores // min(per_node, max(counts + (cfg.comm_counts or ())))),
        synthetic_width=cfg.synthetic_width or synthetic.DEFAULTS[dev]["width"],
        synthetic_depth=cfg.synthetic_depth or synthetic.DEFAULTS[dev]["depth"],
        activation_checkpointing=tuple(activation_checkpointing(a) for a in cfg.activation_checkpointing),
        **({"transformer_preset": cfg.transformer_preset or transformer.DEFAULTS[dev]["preset"], "transformer_layers": shape.layers,
            "transformer_width": shape.width, "transformer_heads": shape.heads, "seq_len": shape.seq_len} if shape else {}),
        # the recommendation's memory budget: the smallest GPU's memory; on CPU none unless given
        memory_budget_gib=cfg.memory_budget_gib or (round(min(machine.gpu_memory_bytes) / 2**30, 2)
                                                    if cuda and machine.gpu_memory_bytes else None))
    settings.check_hsdp(resolved)  # every count in whole HSDP shard groups
    items = plan(resolved, machine)  # impossible batch splits and user models fail here, before anything runs
    # the prefetched batches and NCCL's segments of every configuration fit in /dev/shm
    shm.check([s for s in items if isinstance(s, RunSpec)], machine.shm_free_bytes, resolved.num_workers)
    return resolved


# ---------------------------------------------------------------- the plan

def _precision_skip(precision: str, cuda: bool, machine: Machine) -> Optional[str]:
    if not cuda and precision in ("tf32", "fp16"):
        return (f"{precision} needs a GPU: TF32 is a tensor-core format of NVIDIA Ampere and later" if precision == "tf32"
                else "fp16 autocast with a gradient scaler is a GPU precision; on CPU use bf16")
    if cuda and precision in PRECISION_NEEDS_AMPERE and machine.gpu_capabilities and min(machine.gpu_capabilities) < (8, 0):
        cap = ".".join(map(str, min(machine.gpu_capabilities)))
        return f"{precision} needs compute capability 8.0 (Ampere) or later; this GPU has {cap}"
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


def noise_probe(cfg: SweepConfig) -> tuple:
    """(workload, strategy, precision, channels_last, compile, optimizer) of the configuration that runs in
    --noise-repeats processes: the cheapest one, single at 1 device (else the first strategy at the smallest count) in the
    first of every axis, of the synthetic MLP where the sweep trains it."""
    wl = "synthetic" if "synthetic" in cfg.workloads else cfg.workloads[0]
    strategy = "single" if "single" in cfg.strategies else cfg.strategies[0]
    return wl, strategy, cfg.precision[0], cfg.channels_last[0], cfg.compile[0], cfg.optimizer[0]


def bench_specs(cfg: SweepConfig, machine: Machine) -> list:
    """Benchmark configurations (RunSpec or Skip) of a resolved config, in run order."""
    out = []
    cuda = cfg.device == "cuda"
    probe = noise_probe(cfg)
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
                noisy = first and (wl, strategy, precision, cl, comp, opt) == probe and (ac, aux) == (
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
                                  or settings.option_skip(cfg, strategy, dict(options), unused, wl, aux))
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
        items += [dataclasses.replace(s, mode="equivalence", steps=EQUIVALENCE_STEPS, warmup=0, epochs=0)
                  for s in runnable if s.strategy in ("dp",) + PER_DEVICE and s.repeat == 0 and not s.compile
                  and s.option("comm_hook", "none") == "none"]
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
