"""Configuration of a sweep: one frozen dataclass, its command-line flags, and its validation.

`SweepConfig` holds what the user asked for (flags carry the field names, `--per-device-batch` for
`per_device_batch`). `validate(cfg, machine)` checks everything up front, before any process is
spawned or the store is touched, and raises `ConfigError` naming the bad value and what was expected.
`plan(cfg, machine)` turns a valid config into `RunSpec`s (one per configuration and repeat, each
run in fresh processes) plus the configurations that are skipped, each with its reason.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
from dataclasses import dataclass, field, fields
from typing import Optional

STRATEGIES = ("single", "dp", "ddp")
WORKLOADS = ("synthetic", "deeplabv3")
DATA_SOURCES = ("synthetic", "voc")
MIN_REPLICA_BATCH = {"synthetic": 1, "deeplabv3": 2}  # DeepLabV3's BatchNorm needs 2 samples per replica


class ConfigError(ValueError):
    """A bad user input; the message names the value and what was expected (exit status 2)."""


@dataclass(frozen=True)
class Machine:
    """What the sweep can run on; detected once by `detect_machine()`, faked in tests."""
    cuda_devices: int
    cpu_cores: int
    gpu_names: tuple = ()


def detect_machine() -> Machine:
    import torch
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    names = tuple(torch.cuda.get_device_name(i) for i in range(n))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return Machine(cuda_devices=n, cpu_cores=cores, gpu_names=names)


@dataclass(frozen=True)
class SweepConfig:
    gpus: tuple = field(default=(), metadata={"help": "device counts, e.g. 1,4,8 (on CPU: gloo processes); default: 1 and 4/8 where the machine has them (CPU: 1,2)"})
    strategies: tuple = field(default=STRATEGIES, metadata={"help": "strategies to run: single,dp,ddp (single runs once, at 1 device, as the baseline)"})
    workloads: tuple = field(default=WORKLOADS, metadata={"help": "workloads to run: synthetic,deeplabv3"})
    device: str = field(default="auto", metadata={"help": "auto|cuda|cpu (auto: CUDA if present, else CPU)"})
    steps: int = field(default=0, metadata={"help": "measured steps per configuration (default: 30 on CUDA, 8 on CPU)"})
    warmup: int = field(default=-1, metadata={"help": "warm-up steps, run and discarded (default: 10 on CUDA, 2 on CPU)"})
    per_device_batch: int = field(default=0, metadata={"help": "samples per device (default: synthetic 64; deeplabv3 8 on CUDA as in the reference experiment, 2 on CPU)"})
    scaling: str = field(default="weak", metadata={"help": "weak: batch per device fixed, global batch grows with the count; strong: global batch fixed"})
    global_batch: int = field(default=0, metadata={"help": "global batch for --scaling strong (default: per-device batch x largest count)"})
    image_size: int = field(default=0, metadata={"help": "DeepLabV3 image side in pixels (default: 256 on CUDA as in the reference experiment, 64 on CPU)"})
    store: str = field(default="results/bench.sqlite", metadata={"help": "SQLite results store (created if missing)"})
    timeout: float = field(default=0.0, metadata={"help": "wall-clock limit per configuration in seconds (default: 1800 on CUDA, 600 on CPU)"})
    pg_timeout: float = field(default=0.0, metadata={"help": "process-group (collective) timeout in seconds (default: 300 on CUDA, 120 on CPU, at most half of --timeout)"})
    threads_per_process: int = field(default=0, metadata={"help": "torch threads per process on CPU (default: cores // largest count)"})
    repeats: int = field(default=1, metadata={"help": "run each configuration this many times, each in fresh processes"})
    seed: int = field(default=0, metadata={"help": "seed for weights and synthetic data"})
    synthetic_width: int = field(default=1024, metadata={"help": "synthetic MLP hidden width (parameters ~ depth x width^2)"})
    synthetic_depth: int = field(default=4, metadata={"help": "synthetic MLP hidden layers"})
    synthetic_repeats: int = field(default=1, metadata={"help": "apply each synthetic layer this many times: more compute, same parameters"})
    weights: str = field(default="", metadata={"help": "local DeepLabV3 state_dict file (default: random init, nothing downloaded)"})
    data: str = field(default="synthetic", metadata={"help": "deeplabv3 data: synthetic|voc"})
    voc_root: str = field(default="", metadata={"help": "folder holding VOCdevkit/VOC2012 (or VOC2012 itself) for --data voc"})
    download: bool = field(default=False, metadata={"help": "download VOC 2012 into --voc-root first (rank 0 only)"})
    epochs: int = field(default=0, metadata={"help": "with --data voc: train whole epochs and time each (0: fixed steps)"})
    checkpoint: bool = field(default=False, metadata={"help": "with --epochs: rank 0 saves a checkpoint at the end of every epoch, inside the timed region (as the reference experiment did)"})
    num_workers: int = field(default=2, metadata={"help": "DataLoader workers per process (--data voc)"})
    pin_memory: bool = field(default=True, metadata={"help": "pin host memory in the DataLoader (CUDA only)"})
    persistent_workers: bool = field(default=True, metadata={"help": "keep DataLoader workers across epochs"})
    sync_bn: bool = field(default=False, metadata={"help": "convert BatchNorm to SyncBatchNorm under DDP"})
    check_equivalence: bool = field(default=False, metadata={"help": "check that dp/ddp end k steps with the same parameters as single"})
    comm_bench: bool = field(default=True, metadata={"help": "run the all-reduce bandwidth microbenchmark at every count > 1"})
    resume: str = field(default="", metadata={"help": "resume a sweep: 'last' or a sweep id; runs only configurations without an ok result"})
    plots_dir: str = field(default="plots", metadata={"help": "where plots are written"})
    report_dir: str = field(default="results", metadata={"help": "where report.md and report.html are written"})
    report: bool = field(default=True, metadata={"help": "render plots and the report after the sweep (--no-report: skip)"})

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "SweepConfig":
        raw = json.loads(text)
        known = {f.name for f in fields(cls)}
        raw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in raw.items() if k in known}
        return cls(**raw)


# ---------------------------------------------------------------- command line

def _int_list(text: str, flag: str) -> tuple:
    items = [t.strip() for t in str(text).split(",")]
    out = []
    for t in items:
        try:
            v = int(t)
        except ValueError:
            raise ConfigError(f"--{flag}: {t!r} in {text!r} is not a whole number; expected a comma-separated list like 1,4,8") from None
        out.append(v)
    return tuple(out)


def _name_list(text: str) -> tuple:
    return tuple(t.strip() for t in str(text).split(","))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per SweepConfig field, same name with dashes."""
    for f in fields(SweepConfig):
        flag = "--" + f.name.replace("_", "-")
        help_ = f.metadata.get("help", "")
        if f.type in ("bool",) or isinstance(f.default, bool):
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=f.default, help=help_)
        else:
            parser.add_argument(flag, dest=f.name, default=None, metavar=f.name.upper(), help=help_)


def from_args(ns: argparse.Namespace) -> SweepConfig:
    """Parse raw flag strings into a SweepConfig; malformed values raise ConfigError."""
    kw = {}
    for f in fields(SweepConfig):
        raw = getattr(ns, f.name, None)
        if raw is None:
            continue
        flag = f.name.replace("_", "-")
        if isinstance(f.default, bool):
            kw[f.name] = bool(raw)
        elif f.name == "gpus":
            kw[f.name] = _int_list(raw, flag)
        elif f.name in ("strategies", "workloads"):
            kw[f.name] = _name_list(raw)
        elif isinstance(f.default, int):
            try:
                kw[f.name] = int(raw)
            except ValueError:
                raise ConfigError(f"--{flag}: {raw!r} is not a whole number") from None
        elif isinstance(f.default, float):
            try:
                kw[f.name] = float(raw)
            except ValueError:
                raise ConfigError(f"--{flag}: {raw!r} is not a number of seconds") from None
        else:
            kw[f.name] = str(raw)
    return SweepConfig(**kw)


# ---------------------------------------------------------------- validation and defaults

def device_type(cfg: SweepConfig, machine: Machine) -> str:
    if cfg.device == "auto":
        return "cuda" if machine.cuda_devices > 0 else "cpu"
    return cfg.device


def resolve(cfg: SweepConfig, machine: Machine) -> SweepConfig:
    """Validate and fill every device-dependent default. Raises ConfigError on bad input."""
    if cfg.device not in ("auto", "cuda", "cpu"):
        raise ConfigError(f"--device: {cfg.device!r} is not one of auto, cuda, cpu")
    if cfg.device == "cuda" and machine.cuda_devices == 0:
        raise ConfigError("--device cuda: this machine has 0 CUDA GPUs visible (torch.cuda.device_count() == 0); use --device cpu or auto")
    dev = device_type(cfg, machine)
    cuda = dev == "cuda"

    for name, allowed, flag in ((cfg.strategies, STRATEGIES, "strategies"), (cfg.workloads, WORKLOADS, "workloads")):
        if not name:
            raise ConfigError(f"--{flag}: empty; expected a comma-separated subset of {','.join(allowed)}")
        for n in name:
            if n not in allowed:
                raise ConfigError(f"--{flag}: unknown name {n!r}; expected a comma-separated subset of {','.join(allowed)}")
        if len(set(name)) != len(name):
            raise ConfigError(f"--{flag}: {','.join(name)} names an entry twice")

    gpus = cfg.gpus
    if not gpus:
        if cuda:
            gpus = (1,) + tuple(n for n in (4, 8) if n <= machine.cuda_devices)
            if machine.cuda_devices in (2, 3, 5, 6, 7):
                gpus = tuple(sorted(set(gpus) | {machine.cuda_devices}))
        else:
            gpus = (1, 2) if machine.cpu_cores >= 2 else (1,)
    for n in gpus:
        if n < 1:
            raise ConfigError(f"--gpus: {n} is not a device count; expected whole numbers >= 1, e.g. 1,4,8")
    if len(set(gpus)) != len(gpus):
        raise ConfigError(f"--gpus: {','.join(map(str, gpus))} lists a count twice; expected distinct counts")
    gpus = tuple(sorted(gpus))
    if cuda and gpus[-1] > machine.cuda_devices:
        raise ConfigError(f"--gpus: {gpus[-1]} GPUs asked for, but this machine has {machine.cuda_devices} CUDA GPU(s) visible")
    if not cuda and gpus[-1] > machine.cpu_cores:
        raise ConfigError(f"--gpus: {gpus[-1]} CPU processes asked for, but this machine has {machine.cpu_cores} CPU core(s); "
                          f"on CPU each count is a gloo process with at least one core, so at most {machine.cpu_cores}")

    steps = cfg.steps or (30 if cuda else 8)
    warmup = cfg.warmup if cfg.warmup >= 0 else (10 if cuda else 2)
    if steps < 2:
        raise ConfigError(f"--steps: {steps}; expected at least 2 measured steps")
    if cfg.scaling not in ("weak", "strong"):
        raise ConfigError(f"--scaling: {cfg.scaling!r} is not one of weak, strong")
    if cfg.repeats < 1:
        raise ConfigError(f"--repeats: {cfg.repeats}; expected >= 1")
    for name in ("per_device_batch", "global_batch", "image_size", "threads_per_process", "epochs", "num_workers"):
        if getattr(cfg, name) < 0:
            raise ConfigError(f"--{name.replace('_', '-')}: {getattr(cfg, name)} is negative; expected >= 0 (0 = default)")
    for name in ("timeout", "pg_timeout"):
        if getattr(cfg, name) < 0:
            raise ConfigError(f"--{name.replace('_', '-')}: {getattr(cfg, name)} is negative; expected seconds > 0")
    if cfg.synthetic_width < 1 or cfg.synthetic_depth < 1 or cfg.synthetic_repeats < 1:
        raise ConfigError("--synthetic-width/--synthetic-depth/--synthetic-repeats: expected whole numbers >= 1, got "
                          f"{cfg.synthetic_width}/{cfg.synthetic_depth}/{cfg.synthetic_repeats}")
    image = cfg.image_size or (256 if cuda else 64)
    if "deeplabv3" in cfg.workloads and image < 32:
        raise ConfigError(f"--image-size: {image}; DeepLabV3 needs at least 32 pixels (output stride 8 and ASPP)")
    if cfg.data not in DATA_SOURCES:
        raise ConfigError(f"--data: {cfg.data!r} is not one of {', '.join(DATA_SOURCES)}")
    if cfg.data == "voc":
        if cfg.workloads != ("deeplabv3",):
            raise ConfigError(f"--data voc: trains DeepLabV3 only; got --workloads {','.join(cfg.workloads)} (use --workloads deeplabv3)")
        if not cfg.voc_root:
            raise ConfigError("--data voc: needs --voc-root PATH (the folder holding VOCdevkit/VOC2012)")
        if not cfg.download:
            from bench import voc
            voc.check_tree(cfg.voc_root)  # raises ConfigError-compatible DataError naming the path
    if cfg.checkpoint and not cfg.epochs:
        raise ConfigError("--checkpoint: saves once per epoch; it needs --epochs N")
    if cfg.epochs and cfg.data != "voc":
        raise ConfigError(f"--epochs {cfg.epochs}: whole epochs need a real data set; use --data voc or --steps")
    if cfg.weights and not os.path.isfile(cfg.weights):
        raise ConfigError(f"--weights: {cfg.weights!r} is not a file")
    if cfg.sync_bn and not cuda:
        raise ConfigError("--sync-bn: SyncBatchNorm runs on CUDA only; on CPU DDP keeps per-process BatchNorm "
                          "(the equivalence check then freezes BatchNorm statistics on both sides)")
    threads = cfg.threads_per_process
    if not cuda:
        threads = threads or max(1, machine.cpu_cores // gpus[-1])
    store_dir = os.path.dirname(os.path.abspath(cfg.store))
    if os.path.exists(cfg.store) and not os.path.isfile(cfg.store):
        raise ConfigError(f"--store: {cfg.store!r} exists and is not a file")
    if not os.path.isdir(store_dir) and os.path.exists(store_dir):
        raise ConfigError(f"--store: parent {store_dir!r} is not a folder")

    timeout = cfg.timeout or (1800.0 if cuda else 600.0)
    # The collective timeout fires well before the wall-clock limit by default, so a rank that hangs
    # is named by its peers' timeouts instead of the whole configuration just being killed.
    pg_timeout = cfg.pg_timeout or min(300.0 if cuda else 120.0, timeout / 2)
    resolved = dataclasses.replace(cfg, device=dev, gpus=gpus, steps=steps, warmup=warmup, image_size=image,
                                   timeout=timeout, pg_timeout=pg_timeout, threads_per_process=threads)
    plan(resolved)  # raises on impossible batch splits, before anything runs
    return resolved


def per_device_batch(cfg: SweepConfig, workload: str) -> int:
    if cfg.per_device_batch:
        return cfg.per_device_batch
    if workload == "deeplabv3":
        return 8 if cfg.device == "cuda" else 2
    return 64


@dataclass(frozen=True)
class RunSpec:
    """One configuration, run once in its own process(es). Serialised to JSON for the worker."""
    workload: str
    strategy: str
    device_type: str
    device_count: int
    per_device_batch: int      # samples per replica (DDP rank or DataParallel chunk)
    global_batch: int          # samples per optimizer step, all devices together
    image_size: int
    steps: int
    warmup: int
    threads: int               # torch threads per process (CPU); 0 = torch default
    seed: int
    scaling: str
    repeat: int = 0
    data: str = "synthetic"
    voc_root: str = ""
    download: bool = False
    epochs: int = 0
    checkpoint: bool = False
    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    synthetic_width: int = 1024
    synthetic_depth: int = 4
    synthetic_repeats: int = 1
    weights: str = ""
    sync_bn: bool = False
    pg_timeout_s: float = 120.0
    mode: str = "bench"        # bench | equivalence | comm
    emulate_ranks: int = 1     # equivalence reference: one process feeding N ranks' batches at once
    comm_max_bytes: int = 0    # comm mode: largest all-reduce message (the largest model's gradients)
    out_dir: str = ""

    @property
    def key(self) -> str:
        """Identity of the configuration (without repeat/out_dir), used for resume and reports."""
        return f"{self.mode}/{self.workload}/{self.strategy}/{self.device_type}x{self.device_count}/b{self.per_device_batch}/g{self.global_batch}/i{self.image_size}/{self.data}"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "RunSpec":
        return cls(**json.loads(text))


@dataclass(frozen=True)
class Skip:
    """A configuration that will not run, recorded in the store with its reason."""
    spec: RunSpec
    reason: str


def plan(cfg: SweepConfig) -> list:
    """Every configuration of a resolved config, in run order: RunSpec or Skip. Raises ConfigError on impossible batches."""
    out = []
    max_count = cfg.gpus[-1]
    for workload in cfg.workloads:
        pdb = per_device_batch(cfg, workload)
        gb_strong = cfg.global_batch or pdb * max_count
        minimum = MIN_REPLICA_BATCH[workload]
        for strategy in cfg.strategies:
            counts = (1,) if strategy == "single" else cfg.gpus
            for n in counts:
                if cfg.scaling == "weak":
                    global_b = pdb * n
                else:
                    global_b = gb_strong
                    if global_b % n:
                        raise ConfigError(f"--global-batch {global_b} cannot be split evenly over {n} devices "
                                          f"(--scaling strong); choose a multiple of {n}")
                replica = global_b // n
                if replica < minimum:
                    raise ConfigError(f"{workload} with {strategy} on {n} device(s): {replica} sample(s) per replica "
                                      f"(global batch {global_b}); {workload} needs at least {minimum} per replica")
                for r in range(cfg.repeats):
                    spec = RunSpec(
                        workload=workload, strategy=strategy, device_type=cfg.device, device_count=n,
                        per_device_batch=replica, global_batch=global_b,
                        image_size=cfg.image_size if workload == "deeplabv3" else 0,
                        steps=cfg.steps, warmup=cfg.warmup,
                        threads=cfg.threads_per_process if cfg.device == "cpu" else 0,
                        seed=cfg.seed, scaling=cfg.scaling, repeat=r,
                        data=cfg.data if workload == "deeplabv3" else "synthetic",
                        voc_root=cfg.voc_root, download=cfg.download, epochs=cfg.epochs, checkpoint=cfg.checkpoint,
                        num_workers=cfg.num_workers, pin_memory=cfg.pin_memory and cfg.device == "cuda",
                        persistent_workers=cfg.persistent_workers,
                        synthetic_width=cfg.synthetic_width, synthetic_depth=cfg.synthetic_depth,
                        synthetic_repeats=cfg.synthetic_repeats, weights=cfg.weights,
                        sync_bn=cfg.sync_bn, pg_timeout_s=cfg.pg_timeout)
                    if strategy == "dp" and cfg.device == "cpu" and n > 1:
                        out.append(Skip(spec, "DataParallel parallelises over GPUs only; on CPU it has one device, "
                                              "so only count 1 runs (as the wrapper's overhead baseline)"))
                    else:
                        out.append(spec)
    return out
