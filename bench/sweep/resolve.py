"""Every default of a SweepConfig filled in for the device it runs on, and checked against the machine.

    machine = detect_machine()                 # bench.sweep.plan
    cfg = resolve(cfg, machine)                # ConfigError (exit 2) on what this machine cannot run
    items = plan(cfg, machine)                 # bench.sweep.plan

A field the user left out (None) gets the device's default below; the sweep prints each value filled in and stores
it. resolve also plans once, so that an impossible batch split or user model fails here, before anything runs.
"""
from __future__ import annotations

import dataclasses

from bench.config import DEFAULT_STRATEGIES, ConfigError, SweepConfig, activation_checkpointing
from bench.machine import cudacompat
from bench.shared import rehearsal
from bench.shared.spec import FSDP_BASED, RunSpec, Skip
from bench.sweep import settings, shm
from bench.sweep.plan import Machine, checkpointing_skip, plan
from bench.workloads import registry, synthetic, transformer

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
# of (25% measured between fresh processes on 2-core CPUs, 0.2-1% on one H100) and at the precision it speaks of (one
# H200: fp32 DeepLabV3 processes 0.6% apart, bf16 ones 38%): on CUDA the cheapest configuration at each precision runs in
# 3 processes (`noise_probes`), two more model builds and CUDA start-ups each; on CPU every configuration already does.
DEFAULT_NOISE_REPEATS = {"cuda": 3, "cpu": 1}
# The bound's evidence: on CUDA a few traced steps after every measured window (bench.rank.profile) give the GPU's
# busy share; on CPU no device sits idle, so the traces are --profile's alone.
DEFAULT_PROFILE = {"cuda": True, "cpu": False}


def to_a_node() -> str:
    """The way onto an allocation's node, for a sweep started off one: its shell step asks for the node's CPUs (a bare
    `srun --pty bash` holds one, and every one-node configuration's ranks would share it)."""
    from bench.sweep import slurm
    return ("run it on the allocation's first node (sbatch slurm/bench.sbatch), or from a shell there "
            f"({slurm.shell_command()}, then ./run_bench.sh), or pass --device cpu to measure this machine's CPU")


def off_the_allocation(cfg: SweepConfig, machine: Machine) -> str:
    """Why a sweep is refused in a salloc shell on a login node: its one-node configurations would run on this host
    (on its own GPUs where it has some, planned at its count a node) while the multi-node steps run on the allocation's."""
    import os
    import socket
    host = socket.gethostname()
    listed = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    what = ", ".join(x for x in (f"{machine.slurm_nodes} node(s)" if machine.slurm_nodes else "",
                                 machine.slurm_gpus or "") if x)
    own = (f" Its own {machine.cuda_devices} GPU(s) ({', '.join(dict.fromkeys(machine.gpu_names)) or '?'}) are not the "
           "allocation's: the one-node configurations would be measured on them, and planned at their count a node."
           if machine.cuda_devices else "")
    return (f"--device {cfg.device}: this sweep runs inside a SLURM allocation ({what}) but not on one of its nodes: "
            f"here is {host}, a login node (SLURMD_NODENAME, which slurmd sets in batch scripts and srun steps, is unset"
            + (f", and {host} is not in SLURM_JOB_NODELIST={listed}" if listed else "") + ")." + own
            + (" A GPU sweep" if machine.slurm_gpus or machine.cuda_devices else
               " A sweep of the allocation (its one-node configurations run where the sweep starts)")
            + " runs on the allocation's nodes: " + to_a_node())


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


def check_machine(cfg: SweepConfig, machine: Machine) -> None:
    """The device asked for against the machine itself: a login node off the allocation, GPUs the driver shows but
    torch cannot use, a GPU allocation with no GPU here, and GPUs the installed torch has no kernels for. ConfigError.
    A resume runs it on its stored configuration (`check_resumed`)."""
    if not machine.slurm_on_node and (machine.slurm_gpus or machine.slurm_nodes) and cfg.device in ("cuda", "auto"):
        raise ConfigError(off_the_allocation(cfg, machine))
    if machine.gpus_unusable and cfg.device in ("cuda", "auto"):
        raise ConfigError(f"--device {cfg.device}: this machine's driver shows NVIDIA GPU(s), but {machine.gpus_unusable}. "
                          f"No GPU sweep becomes a CPU sweep: fix the install, or pass --device cpu to measure the CPU on purpose")
    if cfg.device == "auto" and machine.cuda_devices == 0 and machine.slurm_gpus:
        import socket  # salloc's shell runs where salloc was typed (a login node) unless the cluster starts a step
        raise ConfigError(f"--device auto: this sweep runs inside a SLURM allocation with GPUs ({machine.slurm_gpus}), "
                          f"but no GPU is visible here on {socket.gethostname()} (torch.cuda.device_count() == 0): a "
                          "login node, or a shell outside the allocation's GPUs. No GPU sweep becomes a CPU sweep: "
                          + to_a_node())
    if cfg.device == "cuda" and machine.cuda_devices == 0:
        raise ConfigError("--device cuda: this machine has 0 CUDA GPUs visible (torch.cuda.device_count() == 0); "
                          "use --device cpu or auto")
    cuda = device_type(cfg, machine) == "cuda"
    missing = cudacompat.unsupported_gpus(machine.gpu_names, machine.gpu_capabilities, machine.arch_list) if cuda else []
    if missing:
        raise ConfigError("no kernel image for this machine's GPUs in the installed torch (every CUDA configuration "
                          "would fail): " + "; ".join(missing))


def check_resumed(stored: SweepConfig, machine: Machine, done: set) -> list:
    """A resume's pre-flight checks, on the sweep's stored (resolved) configuration and this machine, which may not be
    the one it started on (a new allocation, a fresh container): `check_machine`, and /dev/shm against the
    configurations left to run. Returns those (RunSpecs); nothing is checked where none is left (a finished sweep's
    resume only renders its report). `done`: the (config key, repeat) pairs the resume leaves alone."""
    left = [s for s in plan(stored, machine) if isinstance(s, RunSpec) and (s.key, s.repeat) not in done]
    if left:
        check_machine(stored, machine)
        shm.check(left, machine.shm_free_bytes, stored.num_workers)
    return left


def resolve(cfg: SweepConfig, machine: Machine) -> SweepConfig:
    """Every device-dependent default filled in and checked against the machine. Raises ConfigError."""
    check_machine(cfg, machine)
    dev = device_type(cfg, machine)
    cuda = dev == "cuda"
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
    if cfg.num_workers and cfg.data != "voc":   # synthetic batches are made ahead of the window: no loader to staff
        raise ConfigError(f"--num-workers {cfg.num_workers}: loader workers serve --data voc; with {cfg.data} data the "
                          "batches are generated before the measured window and no loader runs (it was ignored)")
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
        **({"transformer_preset": (transformer.DEFAULTS[dev]["preset"] if cfg.transformer_preset is None else cfg.transformer_preset), "transformer_layers": shape.layers,
            "transformer_width": shape.width, "transformer_heads": shape.heads, "seq_len": shape.seq_len} if shape else {}),
        # the recommendation's memory budget: the smallest GPU's memory; on CPU none unless given
        memory_budget_gib=cfg.memory_budget_gib or (round(min(machine.gpu_memory_bytes) / 2**30, 2)
                                                    if cuda and machine.gpu_memory_bytes else None))
    settings.check_hsdp(resolved)  # every count in whole HSDP shard groups
    settings.check_torch(resolved)  # a strategy's rank code needs a newer torch than the suite's floor
    check_checkpointing(resolved)
    items = plan(resolved, machine)  # impossible batch splits and user models fail here, before anything runs
    check_image_size(resolved, items)
    if shape:
        check_transformer_memory(resolved, machine, shape, items, cfg.per_device_batch or cfg.global_batch)
    refuse_all_skipped(items)
    # the prefetched batches and NCCL's segments of every configuration fit in /dev/shm
    shm.check([s for s in items if isinstance(s, RunSpec)], machine.shm_free_bytes, resolved.num_workers)
    return resolved


def check_image_size(cfg: SweepConfig, items: list) -> None:
    """--image-size given where no configuration takes it (plan hands it to image workloads alone) would change
    nothing: refused, as the transformer's and deeplabv3's flags are without their workload (bench.config). None: left
    out (resolve never fills it)."""
    specs = [x.spec if isinstance(x, Skip) else x for x in items]
    if cfg.image_size is None or any(s.image_size for s in specs if s.mode == "bench"):
        return
    raise ConfigError(f"--image-size {cfg.image_size}: sets the image side of image workloads (deeplabv3 and torchvision "
                      f"image models such as resnet50), and none of --workloads {','.join(cfg.workloads)} takes images; "
                      "add an image workload, or leave --image-size out")


def check_checkpointing(cfg: SweepConfig) -> None:
    """A selective:K that checkpoints nothing in every workload of the sweep is refused (plan.checkpointing_skip); where
    one workload can run it, the others' configurations of it are recorded as skipped with the reason."""
    for mode in cfg.activation_checkpointing:
        why = [checkpointing_skip(cfg, w, mode) for w in cfg.workloads]
        if all(why):
            raise ConfigError("; ".join(why))


def _size(b: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if b >= scale:
            return f"{b / scale:,.1f} {unit}"
    return f"{b:,.0f} bytes"


def check_transformer_memory(cfg: SweepConfig, machine: Machine, shape, items: list, given_batch=None) -> None:
    """Refuses a transformer that no configuration of the sweep could hold, by transformer.memory_floor's lower bounds.
    CUDA only (on CPU every process's state sits in the host's RAM: `check_cpu_ram`): its fp32 weights against every
    GPU of the largest configuration together (with FSDP's CPU offload, the nodes' RAM too), and the least any
    configuration needs on one GPU (activations at the batch given, --micro-batch or --per-device-batch, else at 1
    sequence, where `fit` starts; plus its share of the weights: all of them, a 1/n shard under FSDP, none with FSDP's
    CPU offload) against the largest GPU's memory. Unknown memory (None): not checked."""
    cuda = cfg.device == "cuda"
    device = max(machine.gpu_memory_bytes, default=None) if cuda else machine.host_memory_bytes
    runs = [s for s in items if isinstance(s, RunSpec) and s.mode == "bench" and s.workload == "transformer"]
    if not runs or not device:
        return
    if not cuda:
        return check_cpu_ram(runs, shape, device, given_batch)
    params = transformer.parameters(shape)
    weights = 4 * params
    shape_flags = "--transformer-preset, --transformer-width or --transformer-layers"
    offload = lambda s: s.strategy in FSDP_BASED and s.option("offload", "none") == "cpu"  # noqa: E731

    def pool(s: RunSpec) -> int:
        return device * s.device_count + ((machine.host_memory_bytes or 0) * s.nodes if offload(s) else 0)

    largest = max(runs, key=pool)
    if weights > pool(largest):
        n = largest.device_count
        held = (f"the {n} x {_size(device)} = {_size(device * n)} of GPU memory"
                + (" plus the nodes' RAM (FSDP's CPU offload)" if offload(largest) else "")
                + f" of this sweep's largest configuration ({largest.strategy} x{n}) together")
        raise ConfigError(f"transformer of {params:,} parameters: its fp32 weights alone are {_size(weights)} (4 bytes "
                          f"a parameter), more than {held}; choose a smaller {shape_flags}, or more devices (--gpus, "
                          "--nodes)")

    def need(s: RunSpec) -> tuple:
        w, act = transformer.memory_floor(shape, transformer.floor_batch(s, given_batch))
        share = 0 if offload(s) else w // s.device_count if s.strategy in FSDP_BASED else w
        return act + share, act, share, s

    total, act, share, least = min((need(s) for s in runs), key=lambda t: t[0])
    if total > device:
        batch = transformer.floor_batch(least, given_batch)
        raise ConfigError(f"transformer of {params:,} parameters at {batch} sequence(s) per device needs at least "
                          f"{_size(total)} on one device ({least.strategy} x{least.device_count}, the least of any "
                          f"configuration): {_size(act)} of activations counted as one saved 16-bit tensor per block "
                          f"({batch} x --seq-len {shape.seq_len} x width {shape.width} x {shape.layers} layers x 2 bytes) "
                          f"plus {_size(share)} of fp32 weights, more than the largest GPU's {_size(device)} of GPU "
                          f"memory; lower --seq-len or --per-device-batch, or choose a smaller {shape_flags}, or shard "
                          "it over more devices (--strategies fsdp, --gpus)")


def check_cpu_ram(runs: list, shape, ram: int, given_batch=None) -> None:
    """Refuses a CPU transformer plan none of whose configurations fits the host's RAM, by transformer.host_bytes (its
    processes' fp32 weights, gradients and optimizer state plus each process's activations, per host), the count the
    plan's RAM warning (bench.sweep.describe.ram_warnings) gives each configuration. Counting the fp32 weights alone
    let a plan through that the first steps then ran out of memory on (ddp x2 with AdamW holds 16 bytes a parameter
    in each of its processes)."""
    def need(s: RunSpec) -> tuple:
        batch = transformer.floor_batch(s, given_batch)
        return (*transformer.host_bytes(s, shape, batch), batch, s)

    total, act, state, batch, least = min((need(s) for s in runs), key=lambda t: t[0])
    if total <= ram:
        return
    k = least.processes // least.nodes
    where, procs = ("on one device", "") if least.processes == 1 else ("in one host's RAM", f", {k} processes a host")
    each = "" if least.processes == 1 else f", x {least.processes} processes"
    raise ConfigError(
        f"transformer of {transformer.parameters(shape):,} parameters at {batch} sequence(s) per device needs at least "
        f"{_size(total)} {where} ({least.strategy} x{least.device_count} [{least.optimizer}]{procs}, the least of any "
        f"configuration): {_size(act)} of activations counted as one saved 16-bit tensor per block ({batch} x --seq-len "
        f"{shape.seq_len} x width {shape.width} x {shape.layers} layers x 2 bytes{each}) plus {_size(state)} of fp32 "
        f"weights, gradients and {least.optimizer} state ({_state_words(least)}), more than this host's {_size(ram)} "
        "of RAM; lower --seq-len or --per-device-batch, or choose a smaller --transformer-preset, --transformer-width "
        "or --transformer-layers" + ("" if least.optimizer == "sgd" else ", or --optimizer sgd (one state, not two)"))


def _state_words(s: RunSpec) -> str:
    """How `transformer.state_bytes` counted a run's state: '16 bytes a parameter, once per process'."""
    per = 8 + 4 * transformer.OPTIMIZER_STATES[s.optimizer]
    how = {"zero": "weights and gradients once per process, the optimizer state sharded over them",
           "fsdp": f"sharded over its {s.processes} processes",
           "hsdp": "sharded within each shard group, once per group"}.get(s.strategy, "once per process")
    return f"{per} bytes a parameter: 4 each for the weights and gradients, 4 a state; {how}"


def refuse_all_skipped(items: list) -> None:
    """A sweep whose every benchmark configuration is a Skip would start, store rows of skips and measure nothing:
    refused with each distinct reason. Where one configuration runs, the others stay recorded as skipped (bench.sweep.plan)."""
    bench = [x for x in items if (x.spec if isinstance(x, Skip) else x).mode == "bench"]
    if not bench or any(isinstance(x, RunSpec) for x in bench):
        return
    reasons = list(dict.fromkeys(x.reason for x in bench))
    raise ConfigError(f"every one of this sweep's {len(bench)} benchmark configuration(s) would be skipped, so it would "
                      "measure nothing:\n" + "\n".join(f"  - {r}" for r in reasons) + "\nchange or drop the flags "
                      "these name (a strategy, --precision, --channels-last, --fsdp-offload, ...) so that at least one "
                      "configuration runs here; the rest are then recorded as skipped with their reason")
