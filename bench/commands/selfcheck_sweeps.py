"""What `selfcheck` runs: its sweeps, each into the self-check's own store, and the configurations it then checks
ran (bench.commands.selfcheck reads them back).

    for title, argv in sweeps("cuda", 8, bf16=True, store="results/selfcheck.sqlite"): ...   # run each as a sweep
    steps("cuda", 8, bf16=True)   # [Step]: what each 'runs one step: <what>' check looks for in the store

1. The main sweep: the synthetic model under single, DataParallel and DDP at 1 device and at all of them, fp32 (and
   bf16 where the GPUs have it in hardware) and the all-reduce microbenchmark (with the equivalence gate on up to
   GATE_COUNT devices); single x1 in NOISE_PROCESSES processes at each precision (fp32 and bf16 on CUDA: the sweep's
   noise probe, bench.sweep.plan.noise_probes). The timing, memory and bus-bandwidth checks read it, and the spread
   between those processes is kept as this host's process noise per precision (bench.store.hostnoise).
2. One step (the fewest a sweep measures, ONE_STEP) of each configuration a machine must carry, at the largest count:
   DDP (the main sweep's own), FSDP, fp16 with the gradient scaler, bf16, torch.compile, DeepLabV3 in channels_last on
   synthetic images (nothing is downloaded). A smoke test: that the path runs; its samples/s is no speed
   (Step.smoke_words), and the self-check prints none for it.
3. The equivalence gate at GATE_COUNT devices for DataParallel, DDP and FSDP: inside the main and FSDP sweeps when
   their count is GATE_COUNT, else a sweep of its own at GATE_COUNT (with the all-reduce there: a second count for the
   bandwidth check). With one device there is no gate to run; selfcheck says so.

The CPU path (`selfcheck --device cpu`, the suite's own test) must stay short: fp16 is recorded as skipped by design
(a GPU precision), its gate is DDP's alone (FSDP's runs in tests/test_fsdp.py), and torch.compile and DeepLabV3 are
left out (CPU_LEFT_OUT says why); the CUDA list is unit-tested without a GPU.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

GATE_COUNT = 2     # the count for the equivalence gate: the fewest devices with replicas to compare
ONE_STEP = 2       # measured steps of a one-step run: the fewest a sweep takes (bench.config: --steps >= 2)
SYNTHETIC = {  # the synthetic model: on CUDA its 268 MB of fp32 gradients (4 x 4096^2 x 4 B) are the all-reduce's largest
    # message, large enough for NCCL to near its link rate (NVIDIA/nccl-tests#212: smaller sizes fall short of the peak)
    "cuda": ["--synthetic-width", "4096", "--synthetic-depth", "4", "--per-device-batch", "256"],
    "cpu": ["--synthetic-width", "256", "--synthetic-depth", "2", "--per-device-batch", "16"],
}
MAIN_STEPS = {"cuda": "20", "cpu": "8"}
NOISE_PROCESSES = 3   # the main sweep's single x1 runs in 3 processes at each precision: this host's process noise there
# A one-step run proves a path runs, nothing more: one process, no trace. Without these a CUDA one-step sweep took the
# device defaults (3 processes for its noise, 3 traced steps): on one H100 the self-check's one-step sweeps ran 3x as
# many processes and the whole check outran a 240 s limit it had kept in 166 s (examples/h100-2026-11-26).
ONE_PROCESS = ("--noise-repeats", "1", "--no-profile")
# DeepLabV3 at a small image; 2 samples per replica: the fewest its BatchNorm trains on (bench.workloads.registry)
DEEPLAB = {"cuda": ["--per-device-batch", "2", "--image-size", "64"], "cpu": ["--per-device-batch", "2", "--image-size", "32"]}
CPU_LEFT_OUT = ("torch.compile (inductor's C++ build) and DeepLabV3 (a 60M-parameter model on two gloo ranks) are not "
                "on the CPU path: one step of each took 16 and 20 s on 2 cores, half the rest of the self-check each")


@dataclass(frozen=True)
class Step:
    """One configuration the self-check runs for one step, and what its 'runs one step' check looks for."""
    what: str                          # in the check's name: 'runs one step: <what>'
    strategy: str
    count: int
    workload: str = "synthetic"
    precision: str = "fp32"
    channels_last: bool = False
    compile: bool = False
    by_design: Optional[str] = None    # why a skip is expected here: stated, not a failure
    in_main: bool = False              # the main sweep runs it: no sweep of its own
    gate: bool = False                 # its sweep runs the equivalence gate too (its count is GATE_COUNT)

    def matches(self, row: dict) -> bool:
        """Is this results row (of any of the self-check's sweeps) this configuration's benchmark?"""
        return (row["mode"] == "bench" and row["workload"] == self.workload and row["strategy"] == self.strategy
                and int(row["device_count"]) == self.count and (row["precision"] or "fp32") == self.precision
                and bool(row["channels_last"]) == self.channels_last and bool(row["compiled"]) == self.compile
                and not json.loads(row["options_json"] or "{}"))

    def label(self) -> str:
        return f"runs one step: {self.what} ({self.strategy} x{self.count})"

    def title(self) -> str:
        """Its sweep's title, when it runs one of its own."""
        return f"one step: {self.what}"

    @property
    def warmup(self) -> int:
        """Warm-up steps of its one-step run: compilation happens in a warm-up step, out of the measured ones."""
        return 1 if self.compile else 0

    def smoke_words(self, n_steps: int = ONE_STEP) -> str:
        """What its run's figure is: a path that ran, not a speed. Its samples/s over 2 steps after no warm-up sat in
        the terminal and the check's line as a result (an H200's torch.compile '22456.8 samples/s' beside DDP's
        75,233 from the main sweep's 20 steps, as if compiling were 3.3x slower)."""
        return f"ran {n_steps} step{'s' if n_steps != 1 else ''} after {self.warmup} warm-up (a smoke test, not a speed)"


def gate_strategies(device: str) -> tuple:
    """The strategies the equivalence gate checks at GATE_COUNT on this device."""
    return ("dp", "ddp", "fsdp") if device == "cuda" else ("ddp",)


def steps(device: str, count: int, bf16: bool) -> list:
    """The one-step configurations at `count` (the largest count: every device). bf16: the GPUs have it in hardware."""
    cuda = device == "cuda"
    out = [Step("DDP", "ddp", count, in_main=True),
           Step("FSDP", "fsdp", count, gate=cuda and count == GATE_COUNT),
           Step("fp16 with the gradient scaler", "ddp", count, precision="fp16",
                by_design=None if cuda else "fp16 with a gradient scaler is a GPU precision"),
           Step("bf16 autocast", "ddp", count, precision="bf16", in_main=cuda and bf16,
                by_design="these GPUs have no bf16 in hardware (compute capability below 8.0)" if cuda and not bf16 else None)]
    if cuda:
        out += [Step("torch.compile", "ddp", count, compile=True),
                Step("DeepLabV3, channels_last, synthetic images", "ddp", count, workload="deeplabv3", channels_last=True)]
    return out


def main_args(device: str, count: int, bf16: bool, store: str) -> list:
    """The main sweep: bf16 only on GPUs that have it (the CPU path checks bf16 in a one-step run); the equivalence
    gate where its counts are at most GATE_COUNT (above, the gate's own sweep runs it at GATE_COUNT: on 8 GPUs a gate
    at 1 and 8 in two precisions would add 8 runs)."""
    counts = ("1" if count == 1 else f"1,{count}") if device == "cuda" else str(count)  # CPU: single runs at 1 anyway
    return ["--device", device, "--gpus", counts, "--workloads", "synthetic", "--strategies", "single,dp,ddp",
            "--precision", "fp32,bf16" if bf16 and device == "cuda" else "fp32", *SYNTHETIC[device],
            "--steps", MAIN_STEPS[device], "--warmup", "3", "--repeats", "1", "--noise-repeats", str(NOISE_PROCESSES),
            *(["--check-equivalence"] if count <= GATE_COUNT else []),
            "--store", store, "--no-report"]


def step_args(step: Step, device: str, store: str) -> list:
    size = SYNTHETIC[device] if step.workload == "synthetic" else DEEPLAB[device]
    return ["--device", device, "--gpus", str(step.count), "--workloads", step.workload, "--strategies", step.strategy,
            "--precision", step.precision, *(["--channels-last"] if step.channels_last else []),
            *(["--compile"] if step.compile else []), *size, "--steps", str(ONE_STEP), "--repeats", "1", *ONE_PROCESS,
            "--warmup", str(step.warmup),
            "--no-comm-bench", *(["--check-equivalence"] if step.gate else []), "--store", store, "--no-report"]


def gate_args(device: str, store: str) -> list:
    return ["--device", device, "--gpus", str(GATE_COUNT), "--workloads", "synthetic",
            "--strategies", ",".join(gate_strategies(device)), "--precision", "fp32", *SYNTHETIC[device],
            "--steps", str(ONE_STEP), "--warmup", "0", "--repeats", "1", *ONE_PROCESS, "--check-equivalence", "--store", store,
            "--no-report"]


def sweeps(device: str, count: int, bf16: bool, store: str) -> list:
    """[(title, argv)] in run order: the main sweep, a sweep per one-step configuration it does not run, the gate. A step
    skipped by design here (fp16 on CPU) runs no sweep: planning refuses a sweep whose every configuration is skipped."""
    out = [("main sweep", main_args(device, count, bf16, store))]
    out += [(s.title(), step_args(s, device, store)) for s in steps(device, count, bf16)
            if not s.in_main and not s.by_design]
    if count > GATE_COUNT:
        out.append((f"equivalence gate at {GATE_COUNT}", gate_args(device, store)))
    return out
