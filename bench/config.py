"""What the user asked for: one frozen dataclass, its command-line flags, and the checks of each value.

`SweepConfig` has one field per flag (`--per-device-batch` is `per_device_batch`). A field that is
None was not given: `bench.sweep.resolve.resolve` fills it with the device's default, prints it and stores it.
A number the user types is never a sentinel: `--steps 0`, `--warmup -1` or `--timeout 0` are errors.
Flags that are sweep axes take comma-separated lists (`--precision fp32,bf16`, `--bucket-cap-mb 25,100`).

    cfg = from_args(run_parser().parse_args(argv))   # ConfigError on a malformed value
    check_values(cfg)                                 # ConfigError on a value out of range
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import math
from dataclasses import dataclass, field, fields
from typing import Optional

STRATEGIES = ("single", "dp", "ddp", "zero", "fsdp", "hsdp")
# Per device (filled by bench.sweep.resolve.resolve): without a GPU nn.DataParallel has no device to replicate to and
# its forward calls the module (device_ids is empty), so on CPU it would time `single` again; asked for, it runs.
DEFAULT_STRATEGIES = {"cuda": ("single", "dp", "ddp"), "cpu": ("single", "ddp")}
DEFAULT_WORKLOADS = ("synthetic", "deeplabv3")
DEVICES = ("auto", "cuda", "cpu")
DATA_SOURCES = ("synthetic", "voc")
SCALINGS = ("weak", "strong")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
COMM_HOOKS = ("none", "fp16", "bf16", "powersgd")   # powersgd takes a rank: powersgd:4
FSDP_MIXED = ("none", "bf16")
OPTIMIZERS = ("sgd", "adamw")
ACTIVATION_CHECKPOINTING = ("none", "full", "selective")   # selective takes every how many blocks: selective:3
SELECTIVE_EVERY = 2          # selective alone: every 2nd block (torchtitan's default)
FSDP_OFFLOAD = ("none", "cpu")
DEEPLABV3_AUX = ("false", "true", "unused")
LAUNCHERS = ("auto", "local", "slurm")
INT64_MAX = 2**63 - 1  # what SQLite's INTEGER and torch's int64 hold: --image-size 99999999999999999999 was not stored
MAX_REPEATS = 1000     # process sets per configuration; past it a typo (99999999999999999999 hung building the plan)


class ConfigError(ValueError):
    """A bad user input; the message names the value and what was expected (exit status 2)."""


def _f(default, help_: str, parse: str, minimum=None, maximum=None, **extra):
    """A SweepConfig field: default, one-line meaning with unit, how its flag parses, smallest and largest value."""
    top = INT64_MAX if maximum is None and parse in ("int", "ints") else maximum   # every whole number has one
    return field(default=default, metadata={"help": help_, "parse": parse, "min": minimum, "max": top, **extra})


@dataclass(frozen=True)
class SweepConfig:
    gpus: Optional[tuple] = _f(None, "device counts, e.g. 1,4,8 (on CPU: gloo processes); default: 1 and 4/8 where the machine has them (CPU: 1,2)", "ints", 1)
    nodes: Optional[tuple] = _f(None, "node counts inside a SLURM allocation, e.g. 1,2,4: adds N x --gpus-per-node devices per count (multi-node: ddp and fsdp)", "ints", 1)
    gpus_per_node: Optional[int] = _f(None, "devices per node for multi-node configurations (default: this node's GPUs; CPU: 1)", "int", 1)
    strategies: Optional[tuple] = _f(None, "strategies: single,dp,ddp,zero,fsdp,hsdp (single runs at 1 device, the baseline; zero: DDP with ZeroRedundancyOptimizer; hsdp: FSDP2 sharding within --hsdp-shard-size devices, replicated across them; default: single,dp,ddp on CUDA, single,ddp on CPU, where DataParallel without a GPU is a pass-through that would time single again)", "names")
    workloads: tuple = _f(DEFAULT_WORKLOADS, "workloads: synthetic, deeplabv3, any torchvision classification/segmentation model name, or MODULE:FUNCTION / FILE.py:FUNCTION", "names")
    device: str = _f("auto", "auto|cuda|cpu (auto: CUDA if present, else CPU)", "str")
    precision: tuple = _f(("fp32",), "precisions to sweep: fp32 (TF32 off), tf32, bf16 (autocast), fp16 (autocast + gradient scaler)", "names")
    channels_last: tuple = _f((False,), "memory format axis for image models: false,true (bare flag: true)", "bools")
    compile: tuple = _f((False,), "torch.compile axis: false,true (bare flag: true); DDP is wrapped first, then compiled", "bools")
    steps: Optional[int] = _f(None, "measured steps per configuration (default: 30 on CUDA, 6 on CPU, more where they would fill less than --min-window-s)", "int", 2)
    min_window_s: Optional[float] = _f(None, "shortest measured window, s: the step count grows past --steps until the warm-up's step time says the window lasts this long (default: 1 when --steps is not given; with --steps alone, exactly that many steps)", "float", 0.0)
    warmup: Optional[int] = _f(None, "warm-up steps, run and discarded (default: 10 on CUDA, 2 on CPU; with --compile at least 1)", "int", 0)
    per_device_batch: Optional[int] = _f(None, "samples per device (default: synthetic 512 on CUDA / 64 on CPU; deeplabv3 8 on CUDA as the reference experiment, 2 on CPU; transformer 8 / 2 sequences; torchvision models 32 / 2)", "int", 1)
    scaling: str = _f("weak", "weak: batch per device fixed; strong: global batch fixed", "str")
    global_batch: Optional[int] = _f(None, "global batch for --scaling strong (default: per-device batch x largest count, split into per-device micro-batches where a replica holds more)", "int", 1)
    image_size: Optional[int] = _f(None, "image side in pixels for image models (default: deeplabv3 256 on CUDA as the reference, 64 on CPU; torchvision models their natural size on CUDA, 64 on CPU)", "int", 1)
    store: str = _f("results/bench.sqlite", "SQLite results store (created if missing)", "str")
    timeout: Optional[float] = _f(None, "wall-clock limit per configuration, s (default: follows the work: start-up allowance plus 3x the time the measured steps project)", "float", 1.0)
    pg_timeout: Optional[float] = _f(None, "collective timeout, s; a rank making no progress for this long is named (default: 300 on CUDA, 120 on CPU)", "float", 1.0)
    threads_per_process: Optional[int] = _f(None, "torch threads per process, every strategy (default: cores // processes per node at the largest count)", "int", 1)
    repeats: Optional[int] = _f(None, "run each configuration this many times, each in fresh processes (the independent samples of compare; default: 3 on CPU, 1 on CUDA)", "int", 1, MAX_REPEATS)
    noise_repeats: Optional[int] = _f(None, "processes the sweep's cheapest configuration at each precision runs in (at least --repeats), to measure how far fresh processes differ on this device: the noise the report holds every single-process comparison at that precision against (default: 3 on CUDA; 1 on CPU, where --repeats 3 already repeats every configuration)", "int", 1, MAX_REPEATS)
    seed: int = _f(0, "seed for weights and synthetic data", "int", 0)
    synthetic_width: Optional[int] = _f(None, "synthetic MLP hidden width (default: 4096 on CUDA, 1024 on CPU; parameters ~ depth x width^2)", "int", 1)
    synthetic_depth: Optional[int] = _f(None, "synthetic MLP hidden layers (default: 8 on CUDA, 4 on CPU)", "int", 1)
    synthetic_repeats: int = _f(1, "apply each synthetic layer this many times: more compute, same parameters", "int", 1)
    transformer_preset: Optional[str] = _f(None, "transformer size preset: tiny, 134m, 374m, 1.4b, 2.7b, 6.7b (parameters; default 134m on CUDA, tiny on CPU; docs/transformer.md)", "str")
    transformer_layers: Optional[int] = _f(None, "transformer blocks (default: the preset's)", "int", 1)
    transformer_width: Optional[int] = _f(None, "transformer model width, a multiple of --transformer-heads (default: the preset's)", "int", 1)
    transformer_heads: Optional[int] = _f(None, "transformer attention heads (default: the preset's)", "int", 1)
    seq_len: Optional[int] = _f(None, "transformer sequence length, tokens per sample (default: the preset's: 1024 or 2048 on the GPU presets, 32 for tiny)", "int", 2)
    deeplabv3_aux: tuple = _f(("false",), "deeplabv3 auxiliary classifier axis: false, true (its loss added at weight 0.5, as torchvision's segmentation reference), unused (built and run but left out of the loss: DDP then needs --find-unused-parameters true)", "names")
    weights: Optional[str] = _f(None, "local state_dict file for deeplabv3 (default: random init; nothing is downloaded)", "str")
    data: str = _f("synthetic", "deeplabv3 data: synthetic|voc", "str")
    voc_root: Optional[str] = _f(None, "folder holding VOCdevkit/VOC2012 (or VOC2012 itself) for --data voc", "str")
    download: bool = _f(False, "download VOC 2012 into --voc-root first (in the sweep process, before any run)", "bool")
    epochs: Optional[int] = _f(None, "with --data voc: train this many whole epochs and time each (default: fixed --steps)", "int", 1)
    checkpoint: bool = _f(False, "with --epochs: the whole model saved every epoch by rank 0 (FSDP gathers its shards first), inside the timed region (as the reference experiment did)", "bool")
    num_workers: Optional[int] = _f(None, "DataLoader workers per device (--data voc; default 2 on CUDA, 1 on CPU); single/dp get count x this in their one loader", "int", 0)
    pin_memory: bool = _f(True, "pin host memory in the DataLoader (CUDA only)", "bool")
    persistent_workers: bool = _f(True, "keep DataLoader workers across epochs", "bool")
    sync_bn: bool = _f(False, "convert BatchNorm to SyncBatchNorm under DDP (CUDA)", "bool")
    bucket_cap_mb: Optional[tuple] = _f(None, "DDP bucket sizes to sweep, MiB (default: DDP's own, 25)", "floats", 0.0, INT64_MAX / 2**20)  # DDP holds it in bytes, an int64
    gradient_as_bucket_view: tuple = _f((False,), "DDP gradient_as_bucket_view axis: false,true", "bools")
    static_graph: tuple = _f((False,), "DDP static_graph axis: false,true", "bools")
    find_unused_parameters: tuple = _f((False,), "DDP find_unused_parameters axis (ddp, zero): false,true (true: a graph traversal after every forward; needed where a parameter gets no gradient)", "bools")
    sync_buffers: tuple = _f((True,), "DDP buffer synchronisation every forward (forward_sync_buffers, formerly broadcast_buffers) axis: true,false", "bools")
    comm_hook: tuple = _f(("none",), "DDP communication hooks to sweep: none,fp16,bf16,powersgd:RANK (e.g. powersgd:4)", "names")
    fsdp_reshard: tuple = _f((True,), "FSDP reshard_after_forward axis: true,false", "bools")
    fsdp_offload: tuple = _f(("none",), "FSDP/HSDP CPU offload axis: none, cpu (FSDP2 CPUOffloadPolicy: shards, gradients and the optimizer step on the host; CUDA only)", "names")
    fsdp_mixed_precision: tuple = _f(("none",), "FSDP/HSDP mixed-precision policy axis: none (fp32) or bf16 (bf16 parameters, fp32 gradient reduction)", "names")
    zero_bucket_view: tuple = _f((False,), "ZeroRedundancyOptimizer parameters_as_bucket_view axis: false,true (true: parameters live in flat buckets, broadcast one bucket at a time)", "bools")
    hsdp_shard_size: Optional[tuple] = _f(None, "HSDP devices per shard group, an axis (default: the devices per node, or the count below one node); every count must be a multiple of it", "ints", 1)
    optimizer: tuple = _f(("sgd",), "optimizers to sweep: sgd (momentum 0.9, lr 0.01), adamw (torch's defaults: lr 1e-3, betas 0.9/0.999, weight_decay 0.01); one implementation for every strategy", "names")
    activation_checkpointing: tuple = _f(("none",), "activation checkpointing axis: none, full (every block), selective (every 2nd block; selective:K every K-th): the transformer's blocks, ResNet blocks, the MLP's layers; recomputed in backward", "names")
    memory_budget_gib: Optional[float] = _f(None, "memory the recommendation must fit, GiB: per GPU on CUDA (default: the GPU's memory); on CPU per node, held against the peak RSS of the processes one node runs, summed (none unless given)", "float", 0.0)
    check_equivalence: bool = _f(False, "check that dp/ddp/fsdp end k steps with the same parameters as one process", "bool")
    comm_bench: bool = _f(True, "run the collectives microbenchmark (all-reduce, all-gather, reduce-scatter) at every count > 1", "bool")
    comm_counts: Optional[tuple] = _f(None, "device counts at which only the machine is measured (the collectives and their interference), with no training there: the forecast's held-out form, e.g. --gpus 1 --comm-counts 2; threads per process follow these counts too", "ints", 2)
    interference: bool = _f(True, "with the collectives microbenchmark, time each collective beside a compute load on every rank, and the load beside it (the forecast's interference; --no-interference: skip)", "bool")
    loader_bench: bool = _f(True, "with --data voc: time the data loader alone at each count's worker budget", "bool")
    launcher: str = _f("auto", "auto|local|slurm (auto: slurm for configurations spanning several nodes of a SLURM allocation)", "str")
    resume: Optional[str] = _f(None, "resume a sweep: 'last' or a sweep id; runs only configurations without an ok result", "str")
    plots_dir: str = _f("plots", "where plots are written", "str")
    report_dir: str = _f("results", "where report.md and report.html are written", "str")
    report: bool = _f(True, "render plots and the report after the sweep (--no-report: skip)", "bool")
    peak_tflops: Optional[str] = _f(None, "dense peak TFLOP/s per device that the report's model FLOPs utilisation (MFU) is measured against: a number for every precision, or PRECISION=TFLOPS,... (e.g. bf16=989,fp32=67); overrides the table of known GPUs (bench/machine/peaks.py) or adds this device (on CPU: MFU only with it, and per process: the peak of the --threads-per-process cores one process runs on, not the machine's)", "str")
    label: Optional[str] = _f(None, "a name for this sweep, stored with it: the column title when sweeps are reported side by side (report --store a --store b), and a key of a --price-per-device-hour table (e.g. the cloud instance type)", "str")
    fresh_interpreters: Optional[bool] = _f(None, "start every process of a configuration as a new Python interpreter (default: on CUDA; on CPU the processes on this node fork from a server that has imported torch once, ~1.5 s of CPU less each)", "bool")
    profile: Optional[bool] = _f(None, "after each configuration's measured window (and DDP's probe), run a few more steps under torch.profiler on every rank and keep one gzipped trace per rank next to the store (default: on with CUDA, where the GPU's busy share is what the recommendation's bound rests on; off on CPU)", "bool")
    profile_steps: int = _f(3, "steps traced per configuration with --profile, after 1 untraced profiler warm-up step", "int", 1)
    profile_max_mb: float = _f(200.0, "largest trace kept per rank, MB (gzipped); a larger one is cut, with a note", "float", 0.0)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "SweepConfig":
        raw = json.loads(text)
        known = {f.name for f in fields(cls)}
        raw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in raw.items() if k in known}
        for k, v in list(raw.items()):  # stores of schema 1 wrote 0 / -1 / "" for "not given"
            if k in ("steps", "per_device_batch", "global_batch", "image_size", "timeout", "pg_timeout",
                     "threads_per_process", "epochs") and v in (0, 0.0):
                raw[k] = None
            elif k == "warmup" and v == -1 or k in ("weights", "voc_root", "resume") and v == "":
                raw[k] = None
            elif k == "gpus" and v == ():
                raw[k] = None
        return cls(**raw)


# --help shows the flags in these groups, in this order; every SweepConfig field is in exactly one.
GROUPS = {
    "what to run": ("strategies", "workloads", "repeats", "noise_repeats", "check_equivalence", "comm_bench", "comm_counts", "interference",
                    "loader_bench", "resume"),
    "devices and counts": ("gpus", "nodes", "gpus_per_node", "device", "launcher", "threads_per_process"),
    "workloads and data": ("per_device_batch", "scaling", "global_batch", "image_size", "synthetic_width",
                           "synthetic_depth", "synthetic_repeats", "transformer_preset", "transformer_layers",
                           "transformer_width", "transformer_heads", "seq_len", "deeplabv3_aux", "weights", "data", "voc_root", "download", "epochs",
                           "checkpoint", "num_workers", "pin_memory", "persistent_workers", "seed"),
    "precision and compilation": ("precision", "channels_last", "compile"),
    "DDP settings": ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph", "find_unused_parameters", "sync_buffers",
                     "comm_hook", "sync_bn"),
    "FSDP settings": ("fsdp_reshard", "fsdp_mixed_precision", "fsdp_offload"),
    "ZeRO and HSDP settings": ("zero_bucket_view", "hsdp_shard_size"),
    "optimizer and memory": ("optimizer", "activation_checkpointing", "memory_budget_gib"),
    "measurement": ("steps", "min_window_s", "warmup", "fresh_interpreters"),
    "faults and limits": ("timeout", "pg_timeout"),
    "output": ("store", "plots_dir", "report_dir", "report", "label", "peak_tflops"),
    "profiling (traces)": ("profile", "profile_steps", "profile_max_mb"),
}


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


# ---------------------------------------------------------------- parsing

_TRUE, _FALSE = ("true", "on", "yes", "1"), ("false", "off", "no", "0")


def _parse_bool(t: str, name: str, text: str) -> bool:
    if t.lower() in _TRUE:
        return True
    if t.lower() in _FALSE:
        return False
    raise ConfigError(f"{flag(name)}: {t!r} in {text!r} is not true or false; expected e.g. {flag(name)} false,true")


def _items(text: str, name: str) -> list:
    items = [t.strip() for t in str(text).split(",")]
    if any(not t for t in items):
        raise ConfigError(f"{flag(name)}: {text!r} has an empty item; expected a comma-separated list")
    return items


def parse_value(name: str, kind: str, text) -> object:
    """One flag's raw string as its field's type; ConfigError naming the flag and the value."""
    if kind == "bool":
        return bool(text)
    if kind == "str":
        if not str(text).strip():  # `--resume "$RUN"` with RUN unset would otherwise start a new sweep
            raise ConfigError(f"{flag(name)}: {text!r} is empty; expected a value, or the flag left out for its default "
                              "(an unset shell variable?)")
        return str(text)
    if kind == "names":
        return tuple(_items(text, name))
    if kind == "bools":
        items = _items(text, name)
        values = tuple(_parse_bool(t, name, text) for t in items)
        _refuse_repeated_bools(name, items, values)
        return values
    if kind in ("int", "ints"):
        out = []
        for t in (_items(text, name) if kind == "ints" else [str(text).strip()]):
            try:
                out.append(int(t))
            except ValueError:
                raise ConfigError(f"{flag(name)}: {t!r} is not a whole number"
                                  + (f" (in {text!r}); expected a comma-separated list like 1,4,8" if kind == "ints" else "")) from None
        return tuple(out) if kind == "ints" else out[0]
    if kind in ("float", "floats"):
        out = []
        for t in (_items(text, name) if kind == "floats" else [str(text).strip()]):
            out.append(finite(t, flag(name)))
        return tuple(out) if kind == "floats" else out[0]
    raise AssertionError(kind)


def _refuse_repeated_bools(name: str, typed: list, values: tuple) -> None:
    """A bool axis naming one value twice, said in the words typed (`yes,on`), not Python's (True,True)."""
    for j, v in enumerate(values):
        if v in values[:j]:
            a, b = typed[values.index(v)], typed[j]
            note = "" if a.lower() == b.lower() else f" ({a} and {b} are both {str(v).lower()})"
            raise _twice(name, ",".join(typed), note)


def _twice(name: str, shown: str, note: str = "") -> ConfigError:
    return ConfigError(f"{flag(name)}: {shown} names an entry twice{note}; expected each entry once")


def finite(text, what: str) -> float:
    """A number that is finite: float() also takes 'nan', 'inf', '-inf' and '1e999' (inf), none of which is a
    meaningful count, size or time. ConfigError naming `what` (a flag, a file's key) and the value."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ConfigError(f"{what}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise ConfigError(f"{what}: {text!r} is not a finite number ({value}); expected a number such as 25 or 0.5")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> dict:
    """One flag per SweepConfig field, same name with dashes, in the --help groups of GROUPS; every value arrives
    as a string. Returns the argument groups by title (a command adds its own flags to one)."""
    by_name = {f.name: f for f in fields(SweepConfig)}
    groups = {}
    for title, names in GROUPS.items():
        group = groups[title] = parser.add_argument_group(title)
        for name in names:
            f = by_name[name]
            kind, help_ = f.metadata["parse"], f.metadata["help"]
            if kind == "bool":
                group.add_argument(flag(f.name), dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_)
            elif kind == "bools":  # `--compile` alone means true
                group.add_argument(flag(f.name), dest=f.name, nargs="?", const="true", default=None, metavar="BOOLS", help=help_)
            else:
                group.add_argument(flag(f.name), dest=f.name, default=None, metavar=f.name.upper(), help=help_)
    return groups


def from_args(ns: argparse.Namespace) -> SweepConfig:
    """Raw flag strings -> SweepConfig; a malformed value raises ConfigError. Flags not given stay default."""
    kw = {}
    for f in fields(SweepConfig):
        raw = getattr(ns, f.name, None)
        if raw is not None:
            kw[f.name] = parse_value(f.name, f.metadata["parse"], raw)
    cfg = SweepConfig(**kw)
    check_values(cfg)
    for name in ("profile_steps", "profile_max_mb"):
        if name in kw and cfg.profile is False:  # would silently do nothing (None: on CUDA, checked in bench.sweep.resolve)
            raise ConfigError(f"{flag(name)}: takes effect with --profile only; add --profile, or leave {flag(name)} out")
    # left to the default: the strategies every device's default has (the device is known only in bench.sweep.resolve)
    asked = cfg.strategies or tuple(s for s in DEFAULT_STRATEGIES["cuda"] if s in DEFAULT_STRATEGIES["cpu"])
    for name, strategy in (("zero_bucket_view", "zero"), ("hsdp_shard_size", "hsdp")):
        if name in kw and strategy not in asked:
            raise ConfigError(f"{flag(name)}: takes effect with --strategies {strategy} only; add {strategy}, or leave {flag(name)} out")
    for name, strategies in (("find_unused_parameters", ("ddp", "zero")), ("fsdp_offload", ("fsdp", "hsdp"))):
        if name in kw and not set(strategies) & set(asked):
            raise ConfigError(f"{flag(name)}: takes effect with --strategies {' or '.join(strategies)} only; add one, or "
                              f"leave {flag(name)} out")
    for name, workload in (("transformer_preset", "transformer"), ("transformer_layers", "transformer"),
                           ("transformer_width", "transformer"), ("transformer_heads", "transformer"),
                           ("seq_len", "transformer"), ("deeplabv3_aux", "deeplabv3")):
        if name in kw and workload not in cfg.workloads:
            named = [w for w in cfg.workloads if ":" not in w]  # MODULE:FUNCTION is the user's model, never a typo
            near = [w for w in named if w.lower() == workload] or difflib.get_close_matches(workload, named, n=1, cutoff=0.85)
            if near:  # `--workloads Transformer`: the name is the error, said first (bench.workloads.registry says it too)
                raise ConfigError(f"--workloads: unknown model {near[0]!r}; did you mean {workload}?")
            raise ConfigError(f"{flag(name)}: sets the {workload} workload, which --workloads does not name; add {workload}, "
                              f"or leave {flag(name)} out")
    return cfg


def given(ns: argparse.Namespace) -> set:
    """Names of the fields the user gave on the command line."""
    return {f.name for f in fields(SweepConfig) if getattr(ns, f.name, None) is not None}


# ---------------------------------------------------------------- checks of single values

def _expected(f, x) -> str:
    kind, minimum, top = f.metadata["parse"], f.metadata["min"], f.metadata["max"]
    what = "whole number" if kind in ("int", "ints") else "number"
    bound = f">= {minimum:g}" if kind in ("int", "ints") or minimum != 0.0 else "> 0"
    bound += f" and <= {top if isinstance(top, int) else f'{top:g}'}" if top and (top != INT64_MAX or x > top) else ""
    default = " (leave the flag out for the default)" if f.default is None else ""
    return f"a {what} {bound}{default}"


def check_values(cfg: SweepConfig) -> None:
    """Every number within its range, every name known, lists without repeats. Raises ConfigError."""
    for f in fields(SweepConfig):
        v, minimum, kind = getattr(cfg, f.name), f.metadata["min"], f.metadata["parse"]
        if v is None or minimum is None:
            continue
        for x in (v if isinstance(v, tuple) else (v,)):
            too_small = x <= minimum if kind in ("float", "floats") and minimum == 0.0 else x < minimum
            if too_small or (f.metadata["max"] is not None and x > f.metadata["max"]):
                raise ConfigError(f"{flag(f.name)}: {x if isinstance(x, int) else format(x, 'g')} is not allowed; expected {_expected(f, x)}")
        if isinstance(v, tuple) and len(set(v)) != len(v):
            shown = ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in v)
            raise ConfigError(f"{flag(f.name)}: {shown} lists a value twice; expected distinct values")
    for name, allowed in (("device", DEVICES), ("scaling", SCALINGS), ("data", DATA_SOURCES), ("launcher", LAUNCHERS)):
        if getattr(cfg, name) not in allowed:
            raise ConfigError(f"{flag(name)}: {getattr(cfg, name)!r} is not one of {', '.join(allowed)}")
    for name, allowed in (("strategies", STRATEGIES), ("precision", PRECISIONS), ("fsdp_mixed_precision", FSDP_MIXED),
                          ("optimizer", OPTIMIZERS), ("fsdp_offload", FSDP_OFFLOAD), ("deeplabv3_aux", DEEPLABV3_AUX)):
        values = getattr(cfg, name) or ()   # strategies: None until bench.sweep.resolve knows the device
        for n in values:
            if n not in allowed:
                raise ConfigError(f"{flag(name)}: unknown name {n!r}; expected a comma-separated subset of {','.join(allowed)}")
    for name in ("strategies", "workloads", "precision", "comm_hook", "fsdp_mixed_precision", "channels_last", "compile",
                 "gradient_as_bucket_view", "static_graph", "sync_buffers", "fsdp_reshard", "zero_bucket_view", "optimizer",
                 "find_unused_parameters", "fsdp_offload", "deeplabv3_aux"):
        values = getattr(cfg, name) or ()
        if len(set(values)) != len(values):
            raise _twice(name, ",".join(str(v).lower() if isinstance(v, bool) else str(v) for v in values))
    for hook in cfg.comm_hook:
        comm_hook_parts(hook)
    _refuse_repeated_checkpointing(cfg.activation_checkpointing)
    if cfg.label is not None:
        check_label(cfg.label)
    if cfg.peak_tflops is not None:
        from bench.machine.peaks import parse_override
        try:
            parse_override(cfg.peak_tflops)
        except ValueError as e:
            raise ConfigError(str(e)) from None


def _refuse_repeated_checkpointing(typed: tuple) -> None:
    """Two entries that measure one setting: the same text, or two spellings of it (selective is selective:2,
    selective:1 is full: every block); the note names the spelling only where one was used."""
    def same(text):
        mode = activation_checkpointing(text)
        return "full" if mode == "selective:1" else mode

    modes = [same(t) for t in typed]
    for j, mode in enumerate(modes):
        if mode in modes[:j]:
            a, b = typed[modes.index(mode)], typed[j]
            if same(a) == a:  # the spelling first: (selective is selective:2), whichever order they came in
                a, b = b, a
            raise _twice("activation_checkpointing", ",".join(typed), f" ({a} is {b})" if a != b else "")


def check_label(label: str) -> None:
    """A sweep's --label: printable text of 1 to 80 characters, not one ab or tune gives its own sweeps."""
    if not label.strip() or len(label) > 80 or not label.isprintable():
        raise ConfigError(f"--label {label!r}: expected a name of 1 to 80 printable characters, e.g. --label p5.48xlarge")
    low = label.strip().lower()
    if low in ("a", "b") or low.startswith(("b:", "tune:")):
        raise ConfigError(f"--label {label!r}: 'a', 'b', 'b: ...' and 'tune: ...' name the sweeps of ab and tune; "
                          "choose another name")


def comm_hook_parts(text: str) -> tuple:
    """'none' | 'fp16' | 'bf16' | 'powersgd:R' -> (name, rank or None); ConfigError otherwise."""
    name, _, rank = text.partition(":")
    if name not in COMM_HOOKS or (name == "powersgd") != bool(rank):
        raise ConfigError(f"--comm-hook: {text!r} is not one of none, fp16, bf16, powersgd:RANK (e.g. powersgd:4)")
    if rank:
        try:
            r = int(rank)
        except ValueError:
            r = 0
        if r < 1:
            raise ConfigError(f"--comm-hook: PowerSGD rank {rank!r} in {text!r}; expected a whole number >= 1")
        return name, r
    return name, None


def activation_checkpointing(text: str) -> str:
    """'none' | 'full' | 'selective' | 'selective:K' -> its stored form ('selective' is 'selective:2'); ConfigError otherwise."""
    name, colon, every = text.partition(":")
    if name not in ACTIVATION_CHECKPOINTING or (colon and name != "selective"):
        raise ConfigError(f"--activation-checkpointing: {text!r} is not one of none, full, selective, selective:K "
                          "(every K-th block, e.g. selective:3)")
    if name != "selective":
        return name
    if colon and not every:  # `selective:` is no K (as `powersgd:` is no rank), not the default one
        raise ConfigError(f"--activation-checkpointing: {text!r} has nothing after the colon; expected selective:K "
                          f"with K a whole number >= 1 (e.g. selective:3), or selective alone for selective:{SELECTIVE_EVERY}")
    try:
        k = int(every or SELECTIVE_EVERY)
    except ValueError:
        k = 0
    if k < 1:
        raise ConfigError(f"--activation-checkpointing: {text!r}: K is {every!r}; expected a whole number >= 1 "
                          "(selective:1 is full)")
    return f"selective:{k}"
