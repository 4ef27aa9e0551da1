"""What bounds a configuration's step, in the report's words, with its evidence: data (the loader alone barely keeps up,
or steps wait for data), a straggler (the traces: the same rank waits least in every traced step, beyond the steps'
jitter), and on CUDA the GPU's busy share from its kernels (computation and copies, collectives left out;
bench.report.busy): at COMPUTE_BOUND_BUSY or more compute-bound where the kernels reach KERNELS_NEAR_PEAK MFU, else
GPU-bound (the kernels set the pace, far from the math units' limit: their efficiency is the lever), else host-bound (with the advice that fits its
cause: fewer, larger kernels, what the sweep's compiled twin measured where it ran one, or FSDP's CPU offload named
as the host's work) or communication-bound by what fills the rest, "not measured" without kernel traces (a fit's
measured runs are traced on CUDA; an older fit's were not, said so); on CPU what is measured (data, exposed communication) and that the rest is not split. After data and a straggler, before the rest: a step above its
no-overlap bound (compute and a whole all-reduce one after the other) is contention, said by device, never
communication-bound with DDP's settings as the remedy.

    bound(sweep, workload, config) -> (kind, sentence)   # the recommendation's and bench.report.tables' alike
    bound_category(kind)           -> compute, host, between bounds, communication, contention, data, straggler, cpu or
                                      not measured
"""
from __future__ import annotations

import math
from typing import Optional

from bench.analysis import reference
from bench.analysis.results import Sweep
from bench.forecast import memory as mm
from bench.report import choice, frontier, levers
from bench.report import comm as comm_report
from bench.report import traces as trace_report
from bench.report.busy import COMPUTE_BOUND_BUSY, percent, verdict_busy
from bench.report.plots import where
from bench.shared import rehearsal

DATA_BOUND_LOADER = 1.1      # the loader alone delivers less than 1.1x the training throughput
DATA_BOUND_WAIT = 0.10       # or steps wait for data more than 10% of the time
COMM_BOUND = 0.20            # exposed communication above 20% of the step


KERNELS_NEAR_PEAK = 0.50     # MFU at which a GPU-bound step's kernels are near the math units' limit: compute-bound

BOUND_CATEGORIES = {"compute-bound": "compute", "GPU-bound": "compute", "host-bound": "host", "CPU work": "cpu"}


def bound_category(kind: str) -> str:
    """A bound's category, for a table's column: compute, host, between bounds, communication, contention, data,
    straggler, cpu or not measured."""
    head = kind.split(" (")[0]
    return BOUND_CATEGORIES.get(head, head)


def bound(sweep: Sweep, workload: str, c) -> tuple:
    """(kind, sentence): what bounds configuration c's step, as the recommendation says it for the one it picks, with
    its evidence: data, a straggler, on CUDA the GPU's busy share (compute-bound, host-bound, communication, or not
    measured without kernel traces), on CPU what was measured (bench.report.tables gives it for every configuration)."""
    step = c.summary.median_ms
    wait = c.data_wait_ms if not math.isnan(c.data_wait_ms) else c.phases_ms.get("data_ms", math.nan)
    alone = sweep.loader.get(c.device_count)
    if alone and alone < DATA_BOUND_LOADER * c.samples_per_s:
        return "data", (f"Data-bound: the loader alone delivers {alone:.1f} samples/s with {c.loader_workers or '?'} workers, barely "
                f"more than training's {c.samples_per_s:.1f}; add --num-workers (table: {workload}: the data loader alone).")
    if not math.isnan(wait) and step > 0 and wait / step > DATA_BOUND_WAIT:
        return "data", f"Data-bound: steps wait for data {wait / step:.0%} of the time {where(workload, 'phases')}."
    lagging = trace_report.straggler(c)
    if lagging:
        return f"straggler (rank {lagging[0]})", (f"Held back by a straggler, rank {lagging[0]}: {trace_report.wait_words(c)}; "
                                                  f"the same rank in every traced step, by more than the steps' jitter "
                                                  f"(table: {workload}: profiler traces).")
    over = comm_report.above_bound(sweep, c)
    if over:
        return _contention(sweep, c, over, workload)
    got = comm_report.resolved(c) if c.device_count > 1 else None  # at one rank DDP's probe is its own work
    comm = got / step if got is not None and step > 0 else math.nan
    comm_words = f"; {comm_report.probe_words(c)}" if comm_report.probe_words(c) else ""
    if c.device_type != "cuda":
        if not math.isnan(comm) and comm > COMM_BOUND:
            return f"communication ({comm:.0%})", _comm_sentence(c, comm, workload)
        data = "" if math.isnan(wait) or step <= 0 else f"steps wait for data {_share(wait / step)} of the time"
        probed = c.device_count > 1 and not math.isnan(c.exposed_comm_ms)
        return (f"CPU work ({'data ' + _share(wait / step) if data else 'data not measured'}"
                + (f", comm {_share(comm) if not math.isnan(comm) else 'not resolved'}" if probed else "") + ")",
                f"On CPU, measured: {data or 'the data wait is not recorded'}{comm_words}; the rest of the step is the "
                f"processes' own work on the cores, which is not split into computation and the host's overhead on CPU "
                f"(no device sits idle waiting for it) {where(workload, 'phases')}.")
    b = verdict_busy(c)   # a figure over 100% of the old window: its own kernels at the least
    if b is None:
        if not math.isnan(comm) and comm > COMM_BOUND:
            return f"communication ({comm:.0%})", _comm_sentence(c, comm, workload)
        measured = (f"measured: data waits {_share(wait / step) if not math.isnan(wait) else 'not recorded'}"
                    f"{comm_words} {where(workload, 'phases')}.")
        if sweep.fit:
            return "not measured (this fit's runs left no traces)", f"What bounds the step is not measured: {_fit_untraced(c)}; {measured}"
        return "not measured (no kernel traces)", (
            f"What bounds the step is not measured: no kernel traces of {c.label} (on CUDA a few traced steps run after "
            f"every measured window unless --no-profile; a failed profiler says why in the traces' notes); {measured}")
    if b.share >= COMPUTE_BOUND_BUSY:
        mfu = _mfu(c)
        if not mfu >= KERNELS_NEAR_PEAK:   # under it, or not known (nan)
            return _gpu_bound(sweep, c, b, mfu, comm_words, workload)
        return f"compute-bound ({b.words()}{'; ' if b.over else ', '}MFU {mfu:.1%})", _compute_sentence(b, comm_words, workload, mfu)
    probe = 0.0 if math.isnan(comm) else comm
    unseen = max(0.0, probe - b.comm_share)   # exposed communication the kernels do not show sits in their idle share
    if max(b.comm_share, probe) > max(b.idle_share - unseen, COMM_BOUND):
        if unseen > 0:
            return _probe_bound(c, b, probe, workload)
        share = b.comm_share
        return f"communication ({b.words()}, collectives {share:.0%})", (
            f"Communication-bound: the GPU's own work fills {b.share:.0%} of a {step:.1f} ms step and collectives outside "
            f"it {share:.0%} (table: {workload}: profiler traces; `./run_bench.sh tune` searches DDP's settings).")
    if rehearsal.shares(c.options) and got is None:
        return f"host-bound ({b.words()}; gloo's collectives among it)", _rehearsal_host(c, b, comm_words, workload)
    own = _own_work_bound(c, b, workload)
    if own:
        return own
    return f"host-bound ({b.words()})", (
        f"Host-bound: the GPU's computation and copies take {b.work_ms:.1f} ms of a {step:.1f} ms step ({b.words()}); "
        f"it waits for the host to issue work {b.idle_share:.0%} of the time{comm_words} (table: {workload}: profiler "
        f"traces); {_host_advice(sweep, workload, c)}.")


def _contention(sweep: Sweep, c, over: tuple, workload: str) -> tuple:
    """A step above its no-overlap bound (bench.report.comm.above_bound): slower than its compute and a whole all-reduce
    one after the other, so neither DDP's buckets nor its overlap are what holds it back. On a 2-core CPU DDP x2 took
    933 ms against 667 + 175 = 842 ms, its probe read 248 ms of exposed communication against a 175 ms all-reduce, and
    the verdict read 'Communication-bound: 27% ... `./run_bench.sh tune` searches DDP's settings'."""
    compute, ar, no_overlap = over
    step, got = c.summary.median_ms, comm_report.resolved(c)
    probe = (f"; DDP's probe, {got:.2f} ms of exposed communication against a {ar:.2f} ms all-reduce, counts that "
             f"slowdown too" if got is not None and got > ar else "")
    return f"contention (step {step / no_overlap - 1:.0%} above its no-overlap bound)", (
        f"Above its no-overlap bound: the step, {step:.2f} ms (p10 {c.summary.p10_ms:.2f} ms), takes longer than its "
        f"compute ({compute:.2f} ms under no_sync()) and an all-reduce of every gradient ({ar:.2f} ms) one after the "
        f"other, {no_overlap:.2f} ms: {comm_report.contention_words(sweep, c)}{probe} (table: {workload}: DDP against "
        f"the bounds of its step).")


def _own_work_bound(c, b, workload: str) -> Optional[tuple]:
    """Between bounds, where a one-rank DDP step is under COMPUTE_BOUND_BUSY only by DDP's own work, as its probe
    measured it (synchronised against no_sync() steps: bucket copies, hooks; no communication at one rank): the step
    less that work holds the kernels COMPUTE_BOUND_BUSY or more. An H200's DDP x1 read 'host-bound (GPU busy 84%)' with
    '--compile' advice beside single device x1's 'compute-bound (GPU busy 91%)': 2.78 ms of kernels in a 3.32 ms step,
    0.30 ms of it DDP's own work, 92% busy without it. None otherwise: the host-bound verdict stands."""
    own = comm_report.resolved(c) if c.device_count == 1 else None
    if own is None or b.over or not 0 < own < b.step_ms:
        return None
    rest = b.work_ms / (b.step_ms - own)
    if rest < COMPUTE_BOUND_BUSY:
        return None
    step = b.step_ms
    return f"between bounds ({b.words()}; DDP's own work {own:.2f} ms of {step:.2f})", (
        f"Between bounds: the GPU's computation and copies take {b.work_ms:.2f} ms of a {step:.2f} ms step ({b.words()}, "
        f"under the {COMPUTE_BOUND_BUSY:.0%} that reads compute-bound), and DDP's own work at one rank, {own:.2f} ms by "
        f"its probe (synchronised against no_sync() steps; no communication at one rank: bucket copies, hooks), is in "
        f"that step: without it, {step - own:.2f} ms, the GPU is busy {percent(rest)}, compute-bound. What is left is "
        f"DDP's own cost at one device, not the host's launch work that fewer, larger kernels cut (table: {workload}: "
        f"profiler traces; table: {workload}: DDP against the bounds of its step).")


def _compute_sentence(b, comm_words: str, workload: str, mfu: float) -> str:
    """The compute-bound sentence, its busy share as the label gives it: above 100% a measurement error, never 'fill
    100%' (the H100 DeepLabV3 read 'fill 100% of a 108.0 ms step (111.0 ms from its kernel traces)' beside its label's
    'GPU busy 103%: over 100%, a measurement error')."""
    floor = (f"{COMPUTE_BOUND_BUSY:.0%} or more busy at {KERNELS_NEAR_PEAK:.0%} MFU or more reads compute-bound; its "
             f"kernels reach {mfu:.1%}, near the math units' dense peak")
    if b.over:
        return (f"Compute-bound, on a measurement error: the GPU's computation and copies sum to {percent(b.measured)} of a "
                f"{b.step_ms:.1f} ms step ({b.work_ms:.1f} ms from its kernel traces), over 100%: a measurement error, "
                f"not a full GPU, and the verdict ({floor}) rests on it{comm_words} (table: {workload}: profiler "
                f"traces, with its likely cause).")
    return (f"Compute-bound: the GPU's computation and copies fill {b.share:.0%} of a {b.step_ms:.1f} ms step "
            f"({b.work_ms:.1f} ms from its kernel traces{b.mended()}; {floor}){comm_words} (table: {workload}: profiler "
            f"traces).")


def _mfu(c) -> float:
    """c's MFU (bench.analysis.utilisation), nan where it has none (no peak for its GPU, no FLOPs, or an error)."""
    u = getattr(c, "utilisation", None)
    return u.mfu if u is not None and not u.error else math.nan


def _gpu_bound(sweep: Sweep, c, b, mfu: float, comm_words: str, workload: str) -> tuple:
    """Busy COMPUTE_BOUND_BUSY or more with MFU under KERNELS_NEAR_PEAK, or not known: the GPU's kernels, not the host,
    set the pace, but they are far from the math units' limit, so it is no 'compute-bound' (which a performance
    engineer reads as at the hardware's limit: buy a faster GPU). The H100 transformer read 'compute-bound (GPU busy
    94%)' beside 13.9% MFU, with no lever; the levers are the kernels' efficiency. The category stays 'compute'."""
    known = not math.isnan(mfu)
    figure = f"MFU {mfu:.1%}" if known else "MFU not known"
    kind = f"GPU-bound ({b.words()}{'; ' if b.over else ', '}{figure})"
    if b.over:
        head = (f"GPU-bound, on a measurement error: the GPU's computation and copies sum to {percent(b.measured)} of a "
                f"{b.step_ms:.1f} ms step ({b.work_ms:.1f} ms from its kernel traces), over 100%: a measurement error, "
                f"not a full GPU, and the verdict ({COMPUTE_BOUND_BUSY:.0%} or more busy) rests on it")
    else:
        head = (f"GPU-bound: the GPU's computation and copies fill {b.share:.0%} of a {b.step_ms:.1f} ms step "
                f"({b.work_ms:.1f} ms from its kernel traces{b.mended()}): the GPU's kernels, not the host, set the pace")
    they = "; its kernels" if b.over else ", but they"
    how = (f"{they} reach {mfu:.1%} MFU, under the {KERNELS_NEAR_PEAK:.0%} of the math units' dense peak that reads "
           "compute-bound" if known else
           "; with no MFU (the configuration table's notes say why) how near its kernels come to the math units' "
           "limit is not known")
    twin = _compile_twin(sweep, workload, c) if not c.compiled else None
    tried = (f" (measured here: {twin.label} at {twin.samples_per_s:.1f} samples/s against {c.samples_per_s:.1f}"
             + (f", MFU {_mfu(twin):.1%}" if not math.isnan(_mfu(twin)) else "") + ")" if twin is not None else "")
    levers = ("compiled already: a larger --per-device-batch (larger matrix products)" if c.compiled
              else f"--compile (fuses elementwise and memory-bound work){tried}, a larger --per-device-batch (larger "
                   "matrix products)")
    recompute = (f"; activation checkpointing ({c.activation_checkpointing}) recomputes: none where the memory allows"
                 if c.activation_checkpointing != "none" else "")
    return kind, (f"{head}{how}{comm_words} (table: {workload}: profiler traces; table: {workload}: all "
                  f"configurations). The kernels' efficiency is the lever, not the host or a faster GPU: {levers}"
                  f"{recompute}.")


def _rehearsal_host(c, b, comm_words: str, workload: str) -> str:
    """Host-bound in a rehearsal (ranks sharing one GPU over gloo) where no DDP probe resolves the communication: gloo's
    collectives run on the host and leave no kernel in the traces, so the idle share holds them with the host's own work,
    not told apart. The H200 rehearsal's FSDP x2 and HSDP x2 read 'host-bound ... --compile' at GPU busy 2%: advice
    a rehearsal's figures, which are not scaling figures, cannot carry."""
    why = ("no DDP probe (only DDP has one)" if c.strategy not in ("ddp", "zero") else "DDP's probe not resolving it")
    return (f"Host-bound, gloo's collectives among it: the GPU's computation and copies take {b.work_ms:.1f} ms of a "
            f"{b.step_ms:.1f} ms step ({b.words()}); it waits for the host {b.idle_share:.0%} of the time, and in this "
            f"rehearsal that idle share includes gloo's collectives, which run on the host and leave no kernel in the "
            f"traces: with {why}, they are not told apart from the host's own work{comm_words} (table: {workload}: "
            f"profiler traces). A rehearsal's figures are not scaling figures (its ranks share one GPU, and gloo "
            f"copies every gradient through the host): they are no case for --compile or a larger --per-device-batch; "
            f"on a GPU per rank over NCCL the traces show the collectives and tell the bound.")


def _fit_untraced(c) -> str:
    """Fit refuses --profile, so "no kernel traces ... unless --no-profile" would send its reader after a flag never
    passed: its runs are not traced; a sweep at the batch fit found traces a few steps after its window on CUDA."""
    return (f"this fit's measured runs left no kernel traces of {c.label} (a fit stored before fit traced its measured "
            f"runs on CUDA, or a profiler that failed, as the traces' notes say); a sweep of it at that batch (--per-device-batch {c.global_batch // max(1, c.device_count)}) traces a few steps after its "
            f"measured window on CUDA and measures the bound")


def _host_advice(sweep: Sweep, workload: str, c) -> str:
    """What helps a host-bound step: fewer, larger kernels; but with FSDP's CPU offload the host runs the optimizer step
    and the copies, which neither removes (an H200's FSDP x1 [bf16, offload=cpu, adamw]: 212 ms, GPU busy 28%; 68 ms
    without offload)."""
    if c.options.get("offload", "none") != "cpu":
        return _compile_advice(sweep, workload, c)
    twin = any(on is c for _, on, _ in levers.pairs(sweep.bench.get(workload, [])))
    return ("with FSDP's CPU offload the host runs the optimizer step and the shards' copies each step: that is the "
            "offload's cost; where the memory allows, offload none " + ("(the memory-levers table has both)" if twin else
            "(--fsdp-offload none,cpu measures both; the memory-levers table then sets them side by side)"))


def _compile_twin(sweep: Sweep, workload: str, c):
    """The same configuration measured the other way, compiled against eager (bench.analysis.reference.uncompiled_key:
    every field but `compiled` kept), or None."""
    configs = sweep.bench.get(workload, [])
    if c.compiled:
        return next((e for e in configs if not e.compiled and e.key == reference.uncompiled_key(c.key)), None)
    return next((t for t in configs if t.compiled and reference.uncompiled_key(t.key) == c.key), None)


def _compile_advice(sweep: Sweep, workload: str, c) -> str:
    """What helps a host-bound step that is not under FSDP's CPU offload: fewer, larger kernels, where the sweep has not
    measured them. Where it holds a compiled twin, what that measured instead of the advice: an H200's DeepLabV3 bf16
    sweep of --compile false,true read 'fewer, larger kernels help: --compile' on the eager step, while compiling cut
    the GPU's kernels from 21.3 to 14.2 ms a step and not the step (51.0 against 54.4 ms). A compiled step is never
    advised --compile."""
    batch = f"a larger --per-device-batch amortises {{}}{_memory_used(sweep, c)}"
    twin = _compile_twin(sweep, workload, c)
    if twin is None:
        if c.compiled:
            return "compiled already: " + batch.format("the host's launch work")
        return "fewer, larger kernels help: --compile, a larger --per-device-batch"
    eager, compiled = (twin, c) if c.compiled else (c, twin)
    faster, slower = (compiled, eager) if compiled.samples_per_s > eager.samples_per_s else (eager, compiled)
    a = choice.apart(faster, slower)
    told = a.within
    helped = told is False and faster is compiled
    head = "compiled, against its eager twin measured here" if c.compiled else "--compile, measured here"
    work = [verdict_busy(x) for x in (eager, compiled)]
    kernels = (f"GPU work from {work[0].work_ms:.1f} to {work[1].work_ms:.1f} ms a step, " if None not in work else "")
    step = (f"the step from {eager.summary.median_ms:.1f} to {compiled.summary.median_ms:.1f} ms "
            f"({'told apart' if told is False else _tie_words(a) if told else 'not told apart'})")
    if helped:
        return f"{head}: {kernels}{step}: it helps; " + batch.format("the host's launch work that remains")
    return f"{head}: {kernels}{step}: the host's launch work bounds it; " + batch.format("it")


def _tie_words(a) -> str:
    """Why two steps are a tie, in the rule's own terms: under the 5% floor, or inside the noise between processes."""
    return choice.floor_words() if choice.by_floor(a) else "within the noise"


def _memory_used(sweep: Sweep, c) -> str:
    """' (3.38 GiB of the GPU's 139.80 GiB used)': the room a larger batch has; '' where either is not recorded."""
    peak, total = frontier.peak_mib(c), mm.device_memory_mib(sweep)
    if peak is None or total is None or c.device_type != "cuda":
        return ""
    return f" ({frontier.size(peak)} of the GPU's {frontier.size(total)} used)"


def _probe_bound(c, b, share: float, workload: str) -> tuple:
    """Communication-bound on DDP's probe where the kernel traces do not show it: a rehearsal's gloo all-reduce runs on
    the host, so its GPU sat 88% idle and the step read "host-bound ... --compile" beside the probe's 8.83 ms, 78% of
    the step. The idle share left once that is taken out is the host's own."""
    step, ms = c.summary.median_ms, comm_report.resolved(c)
    return f"communication (probe: {ms:.2f} ms, {share:.0%} of a step)", (
        f"Communication-bound: DDP's probe measures {ms:.2f} ms of exposed communication, {share:.0%} of a {step:.1f} ms "
        f"step (table: {workload}: DDP against the bounds of its step); the GPU's computation and copies take "
        f"{b.work_ms:.1f} ms ({b.words()}){_traces_beside_probe(c)} (table: {workload}: profiler traces). "
        f"{_comm_advice(c)}")


def _traces_beside_probe(c) -> str:
    """What the kernel traces say of the probe's exposed communication: agreeing, or not, and why where it is known."""
    agree = trace_report.probe_agreement(c)
    if agree is None:
        return ""
    trace_ms, probe_ms, noise, _ = agree
    if abs(trace_ms - probe_ms) <= noise:
        return f"; the kernel traces agree ({trace_ms:.2f} ms of exposed communication)"
    why = ("gloo's collectives run on the host, where kernel traces do not see them" if rehearsal.shares(c.options)
           else "the probe counts contention for cores or links too, the traces only the collectives' kernels")
    return (f"; the kernel traces show {trace_ms:.2f} ms of exposed communication against the probe's {probe_ms:.2f} ms, "
            f"and disagree: {why}")


def _comm_advice(c) -> str:
    """What helps exposed communication: less to send or fewer, larger messages (DDP's settings), and where the ranks
    share one GPU, that gloo copies every gradient through the host (NCCL, on a GPU per rank, does not)."""
    backend = (" In this rehearsal the ranks share one GPU over gloo, which copies every gradient through the host; on "
               "a GPU per rank NCCL carries them." if rehearsal.shares(c.options) else "")
    return ("Less to send or fewer, larger messages help: --bucket-cap-mb, --comm-hook bf16 (`./run_bench.sh tune` "
            f"searches DDP's settings).{backend}")


def _share(x: float) -> str:
    return "less than 1%" if 0 <= x < 0.01 else f"{x:.0%}"


def _comm_sentence(c, comm: float, workload: str) -> str:
    return (f"Communication-bound: {comm:.0%} of a step is exposed communication (table: {workload}: DDP against the "
            f"bounds of its step; `./run_bench.sh tune` searches DDP's settings).")
