"""The lines a sweep starts with: every value that was filled in for the user, and the choices made for them.

    for line in describe_resolved(resolved_cfg, given_flag_names): print(line)
"""
from __future__ import annotations

from typing import Optional

from bench.config import SweepConfig
from bench.machine import peaks
from bench.shared import rehearsal
from bench.shared.spec import DDP_BASED, RunSpec
from bench.sweep import settings
from bench.sweep.plan import noise_probes
from bench.workloads import registry, synthetic, transformer


def describe_resolved(cfg: SweepConfig, given: set) -> list:
    """Lines for the start of a sweep: every value that was filled in for the user, and the choices made for them."""
    from dataclasses import fields
    lines = []
    shown = ("strategies", "gpus", "repeats", "noise_repeats", "steps", "min_window_s", "warmup", "per_device_batch", "image_size", "pg_timeout", "threads_per_process",
             "synthetic_width", "synthetic_depth", "num_workers", "gpus_per_node", "memory_budget_gib", "transformer_preset",
             "transformer_layers", "transformer_width", "transformer_heads", "seq_len")
    filled = [f"--{f.name.replace('_', '-')} {_text(getattr(cfg, f.name))}" for f in fields(cfg)
              if f.name in shown and f.name not in given and getattr(cfg, f.name) is not None and applies(cfg, f.name)]
    if filled:
        lines.append("defaults for this device: " + ", ".join(filled))
    if "strategies" not in given and "dp" not in cfg.strategies:
        lines.append("DataParallel: left out on CPU, where nn.DataParallel has no GPU to replicate to and its forward "
                     "calls the model itself (it would time single again); --strategies single,dp,ddp runs it anyway")
    if cfg.profile and "profile" not in given:
        lines.append(f"traces: {cfg.profile_steps} steps under torch.profiler after every measured window, the GPU's busy "
                     "share behind the report's bound (their cost is printed at the end; --no-profile skips them)")
    if cfg.noise_repeats and cfg.noise_repeats > cfg.repeats:
        lines.append(_noise_line(cfg))
    if cfg.fresh_interpreters is False and "fresh_interpreters" not in given:
        lines.append("processes: forked from a server that has imported torch once (~1.5 s of CPU less each; "
                     "--fresh-interpreters starts each as a new interpreter)")
    if cfg.timeout is None:
        lines.append("per-configuration limit: follows the work (start-up allowance, then 3x the time the first "
                     "measured steps project); --timeout S sets a fixed one")
    if cfg.weights:
        lines += registry.check_weights(cfg.weights, [w for w in cfg.workloads if w != "synthetic"])
    lines += settings.hsdp_lines(cfg)
    if cfg.device == "cuda" and rehearsal.active():
        lines.append(rehearsal.START_LINE)
    if cfg.scaling == "strong":
        lines.append(f"strong scaling: global batch {cfg.global_batch or 'per-device batch x ' + str(max(cfg.gpus))}; "
                     "a replica holding more than --per-device-batch samples accumulates gradients over micro-batches")
    return lines


def applies(cfg: SweepConfig, name: str) -> bool:
    """Whether a filled-in default acts on this sweep: a transformer-only sweep's header listed --synthetic-width 1024,
    and an --epochs sweep's --steps 6 and --min-window-s 1, values that decide nothing there."""
    if name.startswith("synthetic_"):
        return "synthetic" in cfg.workloads
    if name.startswith("transformer_") or name == "seq_len":
        return "transformer" in cfg.workloads
    if name in ("steps", "min_window_s"):
        return not cfg.epochs          # epochs run whole passes over the data, not a window of steps
    if name == "num_workers":          # DataLoader workers feed the VOC loader only; synthetic batches are pre-generated
        return cfg.data == "voc" and "deeplabv3" in cfg.workloads
    return True


def _noise_line(cfg: SweepConfig) -> str:
    """'process noise: single of synthetic [fp32] and [bf16], of deeplabv3 [fp32] and [bf16] each run in 3 processes,
    ...': the probe of every workload and precision (bench.sweep.plan.noise_probes), since a figure measured at one
    precision, or of one model, does not speak for another."""
    probes = noise_probes(cfg)
    strategy = probes[0][1]
    by_wl = {}
    for p in probes:
        by_wl.setdefault(p[0], []).append(f"[{p[2]}]")
    what = ", ".join(f"{wl} {' and '.join(ps)}" for wl, ps in by_wl.items())
    several = len(probes) > 1
    return (f"process noise: {strategy} of {what} {'each run' if several else 'runs'} in {cfg.noise_repeats} processes, "
            f"the spread every single-process comparison {'of that model at that precision ' if several else ''}on this "
            "device is held against (--noise-repeats sets how many)")


# ---------------------------------------------------------------- the plan's length, guessed before anything runs

COMM_RUN_S = {False: 8.0, True: 30.0}  # a collectives run with its interference stage (CPU: 25 s for 3 measured; CUDA: unmeasured)
BUCKET_STEPS_GUESS = 2  # DDP's bucket-timing steps (bench/rank/buckets.py: 2 on CPU, 3 on CUDA)
# Seconds a step at the least: what a step of a small model costs in dispatch and the strategy's own work whatever
# its FLOPs (calibrated on the default CPU sweep), and the whole guess for a workload whose FLOPs are not known here.
FLAT_STEP_S = {"cpu": {"synthetic": 0.05, "deeplabv3": 0.7, "": 0.2}, "cuda": {"synthetic": 0.02, "deeplabv3": 0.5, "": 0.2}}
# ASSUMED, not measured here: what one torch thread of a CPU process computes. One-thread processes of this suite
# reached 12.6 GFLOP/s (the MLP 4 x 1024, loaded cores) to 55 GFLOP/s (a 4 x 256 transformer) on its 2-core machines.
CPU_GFLOPS_PER_THREAD = 30.0
GPU_PEAK_FRACTION = 0.3   # ASSUMED share of a GPU's dense peak (bench.machine.peaks) a step reaches
LONG_CPU_PLAN_S = 3600.0  # a CPU plan guessed longer than this is said to be so, before it starts


def plan_summary(items: list, cfg: SweepConfig, machine=None) -> str:
    runs = [i for i in items if isinstance(i, RunSpec)]
    skips = len(items) - len(runs)
    modes = {m: sum(1 for r in runs if r.mode == m) for m in ("bench", "equivalence", "loader", "comm")}
    parts = [f"{modes['bench']} benchmark configuration(s)"] + [f"{n} {m}" for m, n in modes.items() if m != "bench" and n]
    if skips:
        parts.append(f"{skips} skipped (reasons recorded)")
    est = estimate_s(runs, cfg, machine)
    return "plan: " + ", ".join(parts) + (f"; roughly {duration(est)} (process start-up and steps; a first guess)" if est else "")


def duration(s: float) -> str:
    return (f"{s:.0f} s" if s < 90 else f"{s / 60:.1f} min" if s < 600 else f"{s / 60:.0f} min" if s < 7200
            else f"{s / 3600:.0f} h")


def estimate_s(runs: list, cfg: SweepConfig, machine=None) -> float:
    """A first guess of the sweep's length: start-up per configuration (on CPU ~6 s a new interpreter, under 1 s forked
    from the fork server), steps at `step_guess`, and a collectives run as a whole. Calibrated on the default CPU
    sweep: 138 s of configurations measured (2026-11-27), 142 s guessed."""
    return sum(run_s(r, cfg, machine) for r in runs)


def run_s(r: RunSpec, cfg: SweepConfig, machine=None) -> float:
    """One run's guess: start-up, warm-up and measured steps (a DDP run times its window twice, synchronised and under
    no_sync(), and its buckets for a few steps more)."""
    if r.mode == "comm":
        return COMM_RUN_S[cfg.device == "cuda"]
    per_start = 15.0 if cfg.device == "cuda" else 1.0 if r.process_start == "forked" else 6.0
    step_s = step_guess(r, machine)[0] * (2 if r.mode == "equivalence" else 1)
    window_s = max(r.steps * step_s, r.min_window_s)
    ddp = r.strategy in DDP_BASED
    return per_start + r.warmup * step_s + window_s * (2 if ddp else 1) + (BUCKET_STEPS_GUESS * step_s if ddp else 0)


def step_guess(r: RunSpec, machine=None) -> tuple:
    """(seconds a step, how it was guessed: '' for a flat guess). Where the FLOPs of a sample are known before anything
    runs (the transformer, the synthetic MLP), the step's FLOPs at an assumed rate of the device, never less than the
    flat guess: a flat 0.2 s once stood for a 1.4b transformer step at 4,096 tokens that took about 11 minutes on CPU."""
    flat = FLAT_STEP_S[r.device_type].get(r.workload, FLAT_STEP_S[r.device_type][""])
    work, rate = sample_flops(r), assumed_rate(r, machine)
    if not work or not rate:
        return flat, ""
    flops, what = work
    per_s, how = rate
    step = flops * r.per_device_batch / per_s
    return max(flat, step), (f"{what}, batch {r.per_device_batch} on {r.device_type.upper()}: {_flops(flops)} a sample "
                             f"at {how}")


def sample_flops(r: RunSpec) -> Optional[tuple]:
    """(training FLOPs of one sample, the workload in words), analytic, or None where not known before a run."""
    if r.workload == "transformer" and r.transformer_layers:
        s = transformer.spec_shape(r)
        name = next((f" {k}" for k, p in transformer.PRESETS.items()
                     if (p.layers, p.width, p.heads, p.vocab) == (s.layers, s.width, s.heads, s.vocab)), "")
        return (transformer.flops_per_token(s) * s.seq_len,
                f"transformer{name} ({s.layers} x {s.width}) at seq-len {s.seq_len}")
    if r.workload == "synthetic" and r.synthetic_width:
        return (synthetic.flops_per_sample(r.synthetic_width, r.synthetic_depth, r.synthetic_repeats),
                f"synthetic MLP {r.synthetic_depth} x {r.synthetic_width}")
    return None


def assumed_rate(r: RunSpec, machine=None) -> Optional[tuple]:
    """(FLOP/s one process computes, in words naming it an assumption) or None (a GPU whose peak is not known)."""
    if r.device_type == "cpu":
        threads = max(1, r.threads)
        cores = getattr(machine, "cpu_cores", 0)
        if cores:  # processes sharing the cores take turns
            threads = min(threads, max(1, cores // max(1, r.processes)))
        return (CPU_GFLOPS_PER_THREAD * threads * 1e9,
                f"an assumed {CPU_GFLOPS_PER_THREAD:g} GFLOP/s a torch thread ({threads} a process)")
    names = getattr(machine, "gpu_names", ())
    peak = peaks.lookup(names[0], peaks.precision_key(r.precision, dict(r.options))) if names else None
    if peak is None:
        return None
    return (GPU_PEAK_FRACTION * peak.tflops * 1e12,
            f"an assumed {GPU_PEAK_FRACTION:.0%} of the {peak.device}'s dense {r.precision} peak of {peak.tflops:g} TFLOP/s")


def _flops(f: float) -> str:
    unit, scale = next((u, s) for u, s in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("", 1.0)) if f >= s or not u)
    return f"{f / scale:.3g} {unit}FLOP"


def plan_warnings(items: list, cfg: SweepConfig, machine=None) -> list:
    """Lines said before a plan starts that it will not go as a user expects: a CPU plan guessed at hours (the 1.4b
    sweep file, meant for GPUs, was promised in '2.3 min' on a 2-core CPU and would have taken days) with its biggest
    contributor, a transformer configuration whose fp32 state and activations cannot fit this host's RAM, and a node
    whose usable cores are fewer than a one-node configuration's ranks need (`short_of_cores`). Warnings, not
    refusals: the guess is rough, and a user may mean it."""
    runs = [i for i in items if isinstance(i, RunSpec)]
    out = []
    total = estimate_s(runs, cfg, machine)
    bench = [r for r in runs if r.mode != "comm"]
    if cfg.device == "cpu" and total > LONG_CPU_PLAN_S and bench:
        big = max(bench, key=lambda r: run_s(r, cfg, machine))
        step, how = step_guess(big, machine)
        same = [r for r in bench if step_guess(r, machine) == (step, how)]
        what = how or f"{big.workload}: a flat guess of {step:g} s a step"
        out.append(f"WARNING: this plan is guessed at about {duration(total)} on this CPU (a rough guess, not a "
                   f"measurement); the biggest contributor: {what}: about {duration(step)} a step, "
                   f"{duration(sum(run_s(r, cfg, machine) for r in same))} for the {len(same)} run(s) of that shape. "
                   "Transformer presets above tiny and sweeps/transformer.toml are meant for GPUs; on CPU "
                   "--transformer-preset tiny runs in minutes. Ctrl-C stops it and keeps finished results")
    out += ram_warnings(runs, cfg, machine)
    out += short_of_cores(runs, machine)
    return out


def short_of_cores(runs: list, machine=None, env=None) -> list:
    """A line where this node's usable cores (the CPUs this process may run on: Machine.cpu_cores) are fewer than the
    ranks of a one-node configuration the plan starts here need, on any device: a core each and one per loader worker
    (bench.analysis.nodes.least_cores, the report's rule after the fact). A bare `srun --pty bash` step holds one CPU,
    and 8 ranks (with NCCL's proxies and the loaders) then share it while the multi-node steps get each node's CPUs:
    the 1 -> 2 node step would read superlinear. `env`: SLURM's variables (os.environ by default), for the way out."""
    from bench.analysis.nodes import least_cores
    from bench.sweep import slurm
    cores = getattr(machine, "cpu_cores", 0)
    short = {}   # 'ddp x8' -> (need, ranks, loader workers a rank)
    for r in runs:
        if r.mode not in ("bench", "comm") or r.nodes > 1:
            continue
        workers = r.num_workers if r.data == "voc" and r.mode != "comm" else 0
        need = least_cores(r.processes, workers)
        if cores and cores < need:
            short.setdefault(f"{'the collectives' if r.mode == 'comm' else r.strategy} x{r.device_count}",
                             (need, r.processes, workers))
    if not short:
        return []
    need, ranks, workers = max(short.values())
    return [f"WARNING: this node has {cores} usable CPU core(s) (the CPUs this process may run on), fewer than the ranks "
            f"of {', '.join(sorted(short, key=lambda k: -short[k][0]))} need: up to {ranks} rank(s) that need {need} "
            f"({ranks} x (1 torch thread + {workers} loader worker(s))). They would share cores, and those one-node "
            "figures would measure that confinement, not the strategy (a 1 -> 2 node step, whose srun steps get each "
            f"node's CPUs, would read faster than it is). To measure them: {slurm.cores_way_out(need, env)}"]


def state_bytes(r: RunSpec) -> Optional[int]:
    """The host RAM a CPU transformer run's processes hold together AT LEAST for its fp32 training state
    (bench.workloads.transformer.state_bytes, which the plan's refusal counts too); None for other workloads."""
    if r.workload != "transformer" or not r.transformer_layers:
        return None
    return transformer.state_bytes(r)


# What a CPU transformer process's peak RSS came to over the training state transformer.state_bytes counts: the 134m
# preset, single x1, 1 x 256 tokens, 2026-11-27 on the 2-core machine: peak 2986 MiB less 381 MiB before the model
# against 2046 MiB of weights, gradients and AdamW state (1.27x; SGD 1.22x): the for-loop optimizer's temporaries, the
# allocator, the logits. The 1.4b preset, single x1 with AdamW, counted 20.3 GiB of the machine's 23.0 and was killed.
PEAK_OVER_STATE = 1.27   # AdamW's, applied to SGD too: it errs high there (1.22x), a warning, never a refusal
TORCH_BASELINE_BYTES = 381 * 2**20  # a CPU rank's RSS before its model is built (torch, the suite, the data)


def ram_warnings(runs: list, cfg: SweepConfig, machine=None) -> list:
    """One line per CPU transformer configuration that does not fit this host's RAM by transformer.host_bytes (fp32
    weights, gradients and optimizer state plus each process's activations, per host), at the batch the plan's memory
    check counts (transformer.floor_batch). That check (bench.sweep.resolve.check_cpu_ram) refuses a plan none of
    whose configurations fits, by the same function; this warns of each one that does not, in a plan where another
    does. It once counted the state alone, over every node's processes: a configuration whose state fit but whose
    state and activations did not was neither refused (another fit) nor warned of. A configuration whose floor fits
    but whose measured-like peak (PEAK_OVER_STATE, TORCH_BASELINE_BYTES) does not is warned of as 'may run out'."""
    ram = getattr(machine, "host_memory_bytes", None)
    if cfg.device != "cpu" or not ram:
        return []
    given = cfg.per_device_batch or cfg.global_batch   # what resolve hands check_transformer_memory
    over = {}
    for r in runs:
        if r.mode != "bench" or state_bytes(r) is None:
            continue
        batch = transformer.floor_batch(r, given)
        total, act, state = transformer.host_bytes(r, transformer.spec_shape(r), batch)
        likely = total + ((PEAK_OVER_STATE - 1) * state + r.processes * TORCH_BASELINE_BYTES) / r.nodes
        if likely > ram:
            over.setdefault((r.strategy, r.device_count, r.optimizer), (total, act, state, batch, likely))
    return [_ram_line(key, *figures, ram) for key, figures in over.items()]


def _ram_line(key: tuple, total: float, act: float, state: float, batch: int, likely: float, ram: float) -> str:
    (s, n, opt), gib = key, 2**30
    head = (f"WARNING: transformer {s} x{n} [{opt}] holds at least {total / gib:.1f} GiB in one host's RAM ({state / gib:.1f} "
            f"GiB of fp32 weights, gradients and {opt} state, {act / gib:.1f} GiB of activations at {batch} sequence(s) per "
            f"device)")
    if total > ram:
        return head + f", more than its {ram / gib:.1f} GiB: it will likely run out of memory"
    return (head + f"; measured runs peaked about {likely / gib:.1f} GiB for such a count (the state {PEAK_OVER_STATE}x, "
            f"torch's {TORCH_BASELINE_BYTES / gib:.1f} GiB a process), more than its {ram / gib:.1f} GiB: it may run "
            "out of memory, and the kernel then kills it (SIGKILL)")


def _text(v) -> str:
    return ",".join(map(str, v)) if isinstance(v, tuple) else f"{v:g}" if isinstance(v, float) else str(v)

def oversubscribed(cfg: SweepConfig, machine) -> str:
    """A note where a CPU sweep's largest count runs more torch threads than the node has cores (--threads-per-process
    2 at 2 processes on 2 cores: DDP x2 stepped 14.7 ms against 4.8 at one thread, and the report blamed scaling), ''
    otherwise. A note, not a refusal: oversubscribing can be the question."""
    if cfg.device != "cpu" or not machine.cpu_cores or not cfg.threads_per_process:
        return ""
    per_node = min(max(cfg.gpus), cfg.gpus_per_node or max(cfg.gpus))
    threads = per_node * cfg.threads_per_process
    if threads <= machine.cpu_cores:
        return ""
    return (f"note: at {per_node} processes x {cfg.threads_per_process} torch thread(s) the sweep runs {threads} threads "
            f"on {machine.cpu_cores} core(s): they take turns, and the largest counts' steps measure that contention, not "
            f"scaling (--threads-per-process {max(1, machine.cpu_cores // per_node)} fits)")
