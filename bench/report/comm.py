"""The report's communication sections, from the collectives microbenchmark's raw rows (bench.rank.commbench):
DDP against the bounds of its step (per workload), and the microbenchmark's tables (one per collective).

    b += ddp_bounds_blocks(sweep, workload, configs, unit)
    b += microbenchmark_blocks(sweep)
    resolved(c), probe_words(c)     # DDP's probe where it is told from the steps' spread, and how a sentence says it
    above_bound(sweep, c), contention_words(sweep, c)   # a step slower than its no-overlap bound, and why, by device

DDP's probe is a difference of two medians (synchronised steps against no_sync() steps): inside the p10-p90 spread of
the measured steps, or of the probe's own steps, it is 'not resolved', never a clamped 0 or a share; at one rank DDP communicates nothing, so the probe
there is DDP's own work at one rank (its bucket copies, its hooks), not exposed communication.
"""
from __future__ import annotations

import math
import statistics
from typing import Optional

from bench import stats
from bench.report.pages import fmt
from bench.analysis.results import Sweep


def has_step_bounds(c) -> bool:
    """Whether DDP's probe and gradient size give this configuration's step its bounds."""
    return c.strategy == "ddp" and bool(c.grad_mib) and not math.isnan(c.exposed_comm_ms)


def step_bounds_ms(sweep: Sweep, c) -> tuple:
    """(compute under no_sync, the microbenchmark's all-reduce of the gradients, the no-overlap bound, the full-overlap
    bound) of a DDP step, ms; NaN where the configuration has no bounds (`has_step_bounds`) or its count no all-reduce."""
    if not has_step_bounds(c):
        return (math.nan,) * 4
    runs = [[r for r in rows if r.get("scope", "world") == "world" and r.get("op", "all_reduce") == "all_reduce"]
            for n, _, rows in sweep.comm if n == c.device_count]   # every comm run at this count (repeats)
    sent = sent_bytes(c)
    each = [stats.allreduce_ms_at(sent, [r["size_bytes"] for r in cr], [r["time_ms"] for r in cr])
            for cr in runs if cr] if sent is not None else []
    each = [x for x in each if not math.isnan(x)]
    ar = statistics.median(each) if each else math.nan   # the median of the runs: the last of three read 175.58 ms of 170-176
    compute = compute_ms(c)
    return compute, ar, compute + ar, max(compute, ar) if not math.isnan(ar) else math.nan


def above_bound(sweep: Sweep, c) -> Optional[tuple]:
    """(compute, all-reduce, no-overlap bound) ms where c's steps run above their no-overlap bound: their p10, not only
    their median, slower than the compute and a whole all-reduce one after the other; else None. No setting of DDP's
    explains that: on a 2-core CPU DDP x2's step took 933 ms against 667 + 175 = 842 ms, and the verdict read
    'Communication-bound ... `./run_bench.sh tune` searches DDP's settings' where the processes and gloo contended for
    the cores."""
    compute, ar, no_overlap, _ = step_bounds_ms(sweep, c)
    if c.device_count < 2 or math.isnan(no_overlap) or not c.summary.p10_ms > no_overlap:
        return None
    return compute, ar, no_overlap


def interference_words(sweep: Sweep, c) -> str:
    """'computation 1.8x slower beside an all-reduce of 25 MiB at 2 ranks': the stored interference measurement at c's
    count (its largest size, as the forecast's words give it: bench.forecast.interference), '' where the sweep did not
    measure it (sweep.interference: [(count, nodes, rows)], bench.store.forecasts.read_interference)."""
    from bench.forecast import interference as itf
    rows = [{**r, "nodes": nodes} for n, nodes, rs in getattr(sweep, "interference", None) or ()
            if n == c.device_count for r in rs]
    table = itf.from_rows(rows, c.device_type).table if rows else {}
    fits = sorted(((nodes != getattr(c, "nodes", 1), f) for (op, _, nodes), f in table.items() if op == "all_reduce"),
                  key=lambda x: x[0])   # c's own node count first
    if not fits:
        return ""
    f = fits[0][1]
    x = f.compute_x(f.sizes[-1])
    slower = "stopped" if x >= itf.STOPPED else f"{x:.2g}x slower"
    return f"computation {slower} beside an all-reduce of {f.sizes[-1] / 2**20:.3g} MiB at {c.device_count} ranks"


def contention_words(sweep: Sweep, c) -> str:
    """Why a step runs above its no-overlap bound, by device, with the measured interference where the sweep has it:
    on CPU the processes and gloo's communication share the host's cores; ranks sharing one GPU (a rehearsal) share it
    and gloo's copies through the host; on a GPU per rank NCCL's kernels share the SMs and memory bandwidth with
    backward's, or one rank waits for a slower one."""
    from bench.shared import rehearsal
    if c.device_type != "cuda":
        why = "computation and communication slow each other down, contending for the host's cores"
    elif rehearsal.shares(c.options):
        why = ("computation and communication slow each other down: the ranks share one GPU, and gloo copies every "
               "gradient through the host")
    else:
        why = ("computation and communication slow each other down (NCCL's kernels share the GPU's SMs and memory "
               "bandwidth with backward's), or a rank waits for a slower one (a straggler)")
    measured = interference_words(sweep, c)
    return f"{why} (measured: {measured})" if measured else why


HALF_HOOKS = ("fp16", "bf16")   # DDP's comm hooks that all-reduce the gradients cast to 16 bits: half the bytes


def sent_bytes(c):
    """The bytes DDP's all-reduce of the gradients sends per step: the gradients' as they are, half with an fp16/bf16
    comm hook; None with PowerSGD, whose low-rank factors the microbenchmark's all-reduce does not price (its bounds
    read '–'; the bf16 and PowerSGD rows had been priced at the uncompressed fp32 all-reduce)."""
    hook = str(c.options.get("comm_hook", "none")).split(":")[0]
    if hook == "powersgd":
        return None
    return c.grad_mib * 2**20 / (2 if hook in HALF_HOOKS else 1)


def compute_ms(c) -> float:
    """The step's compute without the all-reduce: the median of the probe's no_sync() steps as measured; stores without
    them, the median step less the probe's difference. (That difference stood in before: where one of two synchronised
    probe blocks ran 6.99 ms against 2.41, a 3.2 ms step read 0.18 ms of compute, its no_sync() steps 1.5-1.7 ms.)"""
    nosync = getattr(c, "probe_nosync_ms", None)   # a stand-in or another reader's config may carry none
    if nosync:
        return stats.median(nosync)
    return c.summary.median_ms - c.exposed_comm_ms


def _p10_p90(values: list) -> float:
    if len(values) < 2:
        return 0.0
    s = stats.summarize(values)
    return s.p90_ms - s.p10_ms


def spread_ms(c) -> float:
    """What the probe's difference of medians must exceed to be told, ms: the widest p10-p90 spread of the measured
    steps and of the probe's own synchronised and no_sync() steps (a probe with one slow block of two is not a
    measurement of communication: 2.41 and 6.99 ms against no_sync()'s 1.65 read '3.05 ms exposed, resolved' beside
    measured steps spread 2.8 ms)."""
    return max(c.summary.p90_ms - c.summary.p10_ms, _p10_p90(getattr(c, "probe_sync_ms", None) or []),
               _p10_p90(getattr(c, "probe_nosync_ms", None) or []))


def elsewhere(c) -> Optional[str]:
    """Why the probe does not speak for the measured step, or None: its synchronised steps (the step as measured, with
    DDP's communication) ran outside the measured steps' p10-p90 range by more than that range's width, so the probe
    ran in another state of the machine than the window did. A CPU transformer's probe blocks took 10.5 and 13.7 ms
    where the measured steps took 8.0-9.0: '5.20 ms exposed, communication-bound (63%)' beside 6.88 ms of compute in an
    8.31 ms step."""
    sync = getattr(c, "probe_sync_ms", None) or []
    lo, hi = c.summary.p10_ms, c.summary.p90_ms
    if not sync or math.isnan(lo) or math.isnan(hi):
        return None
    med = stats.median(sync)
    w = max(hi - lo, stats.UNSTABLE_IQR_FRACTION * c.summary.median_ms)   # steady steps (a GPU's 0.2%) still allow a probe's drift of 10%
    if lo - w <= med <= hi + w:
        return None
    return (f"the probe's synchronised steps, median {med:.2f} ms, ran outside the measured steps' {lo:.2f}-{hi:.2f} ms: "
            "the probe did not see the step that was measured")


def resolved(c) -> Optional[float]:
    """DDP's probe (ms) where it exceeds the spread of the measured steps and of its own, and its synchronised steps are
    the measured step's (`elsewhere`); None where it is not measured or not resolved."""
    ms = c.exposed_comm_ms
    if ms is None or math.isnan(ms) or math.isnan(spread_ms(c)) or ms <= spread_ms(c) or elsewhere(c):
        return None
    return ms


def probe_words(c) -> str:
    """'exposed communication: 0.82 ms, 7% of a step', 'exposed communication not resolved (...)', at one rank 'DDP's
    own work at one rank (no communication): 0.30 ms a step by DDP's probe, 9% of its 3.32 ms median step' (its basis
    said: the wrapper cell's overhead beside it is time a sample, by throughput); '' without a probe."""
    ms = c.exposed_comm_ms
    if ms is None or math.isnan(ms):
        return ""
    what = "DDP's own work at one rank (no communication)" if c.device_count == 1 else "exposed communication"
    got = resolved(c)
    if got is None:
        if ms > spread_ms(c) and elsewhere(c):
            return f"{what} not resolved ({ms:.2f} ms between synchronised and no_sync() steps; {elsewhere(c)})"
        return (f"{what} not resolved ({ms:.2f} ms between synchronised and no_sync() steps, inside the steps' "
                f"{spread_ms(c):.2f} ms p10-p90 spread{_whose(c)})")
    share = got / c.summary.median_ms
    share_words = 'less than 1%' if share < 0.01 else f'{share:.0%}'
    if c.device_count == 1:   # beside the wrapper cell's overhead (time a sample, by throughput): which figure this is
        return (f"{what}: {got:.2f} ms a step by DDP's probe, {share_words} of its {c.summary.median_ms:.2f} ms median "
                f"step")
    return f"{what}: {got:.2f} ms, {share_words} of a step"


def _whose(c) -> str:
    """', the probe's own' where the probe's steps, not the measured ones, set the spread a difference must exceed."""
    return ", the probe's own" if spread_ms(c) > c.summary.p90_ms - c.summary.p10_ms else ""


def ddp_bounds_blocks(sweep: Sweep, workload: str, configs: list, u: str) -> list:
    """DDP against the no-overlap and full-overlap bounds of its step, from the probe and the microbenchmark. The
    probe's compute and exposed communication add up to its own synchronised step, a column of its own beside the
    measured median step: a new user's CPU read 666.54 + 248.41 ms under a 933.26 ms step and took the table for wrong."""
    ddp = [c for c in configs if has_step_bounds(c)]
    if not ddp:
        return []
    rows = []
    for c in ddp:
        compute, ar, no_overlap, full_overlap = step_bounds_ms(sweep, c)
        rows.append([str(c.device_count), c.variant, fmt(c.grad_mib, ".1f"), fmt(c.summary.median_ms, ".2f"),
                     fmt(_sync_ms(c), ".2f"), fmt(compute, ".2f"), _probe_cell(c), fmt(ar, ".2f"), fmt(no_overlap, ".2f"),
                     fmt(full_overlap, ".2f")])
    return [("h", 3, f"{workload}: DDP against the bounds of its step"),
            ("table", [u, "precision / settings", "grad MiB", "median step ms", "probe's synchronised step ms",
                       "compute ms (under no_sync)", "exposed comm ms", "all-reduce of grads ms (microbenchmark)",
                       "no-overlap bound ms", "full-overlap bound ms"], rows),
            ("p", f"DDP's probe runs blocks of synchronised steps and of no_sync() steps (no gradient all-reduce) apart from "
                  f"the measured ones: the compute is the median of its no_sync() steps, the exposed communication its "
                  f"synchronised steps' median less that, so the two add up to the probe's synchronised step, not to the "
                  f"median step, which is measured in other steps. Exposed communication inside the p10-p90 spread of the "
                  f"measured steps, or of the probe's own, reads 'not resolved'; at one rank DDP communicates nothing, so "
                  f"the difference there is DDP's own work (bucket copies, hooks), not communication. Method: "
                  f"{(ddp[0].comm_method or '–').rstrip('.')}."),
            ("p", f"No-overlap bound: compute plus an all-reduce of every gradient (with an fp16/bf16 comm hook, of half "
                  f"their bytes; PowerSGD's low-rank factors are not priced: '–'); full-overlap bound: the larger of the "
                  f"two. A step near the full-overlap bound has little left to gain from DDP settings; a step above the "
                  f"no-overlap bound is slower than no overlap at all: computation and communication slowing each other "
                  f"down, or a rank waiting for a slower one, not DDP's settings.{_above_words(sweep, ddp)}")]


def _sync_ms(c) -> float:
    """The median of the probe's synchronised steps; a store without them took the measured steps for them."""
    sync = getattr(c, "probe_sync_ms", None)
    return stats.median(sync) if sync else c.summary.median_ms


def _above_words(sweep: Sweep, ddp: list) -> str:
    """' DDP x2's steps run above it (p10 904.58 ms against 841.16 ms): ...' for each configuration above its bound."""
    out = ""
    for c in ddp:
        over = above_bound(sweep, c)
        if over:
            out += (f" {c.label}'s steps run above it (p10 {c.summary.p10_ms:.2f} ms against {over[2]:.2f} ms): "
                    f"{contention_words(sweep, c)}.")
    return out


def _probe_cell(c) -> str:
    """The probe's difference of medians; at one rank '– (no communication at 1 rank; DDP's own work 99.95 ms)': a
    column named 'exposed comm' read '99.95 (DDP's own work at one rank, no communication)'."""
    got, ms = resolved(c), c.exposed_comm_ms
    if got is not None:
        why = ""
    elif ms > spread_ms(c) and elsewhere(c):
        why = "the probe's steps ran outside the measured ones"
    else:
        why = f"inside the {spread_ms(c):.2f} ms spread"
    if c.device_count == 1:
        return f"– (no communication at 1 rank; DDP's own work {ms:.2f} ms{f', not resolved: {why}' if why else ''})"
    if not why:
        return f"{got:.2f}"
    return f"not resolved ({ms:.2f}{': ' if why.startswith('the') else ' '}{why})"


def microbenchmark_blocks(sweep: Sweep) -> list:
    """The collectives microbenchmark: one table per collective, nccl-tests' columns, from the raw rows."""
    b: list = [("h", 2, "Collectives microbenchmark"),
               ("p", "Measured as nccl-tests measures them (bench/rank/commbench.py): size is nccl-tests' S, the whole "
                     "array (all-gather: its output; reduce-scatter: its input); algbw = S / time; busbw = algbw x "
                     "2(n-1)/n for all-reduce, x (n-1)/n for all-gather and reduce-scatter. Time: the slowest rank's "
                     "mean over the timed iterations, by CUDA events around the loop on GPUs, the host clock on CPU. "
                     "All-gather and reduce-scatter run when the sweep has FSDP. Run: the comm run at that count (one per --repeats, "
                     "each in fresh processes).")]
    by_op: dict = {}
    for n, nodes, cr in sweep.comm:
        for r in cr:
            by_op.setdefault(r.get("op") or "all_reduce", []).append((n, nodes, r))
    for op in sorted(by_op, key=lambda o: (o != "all_reduce", o)):
        rows = []
        for n, nodes, r in by_op[op]:
            ranks = r.get("ranks") or n
            alg = stats.algbw_gbps(r["size_bytes"], r["time_ms"])
            size = r["size_bytes"]
            size_text = f"{size / 2**20:.2f} MiB" if size >= 2**20 else f"{size / 2**10:.1f} KiB"
            scope = "across nodes" if r.get("scope", "world") == "world" and nodes > 1 else ("within a node" if nodes > 1 else "one node")
            rows.append([str(ranks), scope, op, size_text, fmt(r["time_ms"], ".3f"), fmt(alg), fmt(stats.busbw_gbps(alg, ranks, op)),
                         str(r.get("iters") or "–"), r.get("timing") or "–", str((r.get("repeat") or 0) + 1)])
        b.append(("h", 3, op.replace("_", "-")))
        b.append(("table", ["ranks", "scope", "op", "size", "time ms", "algbw GB/s", "busbw GB/s", "iterations", "timing",
                            "run"], rows))
    for n, why in sweep.comm_notes:
        b.append(("p", f"The interference stage (collectives beside computation) at {n} failed: {why}. Its rows are missing "
                       f"(the forecast takes interference there as not measured); the bandwidth rows above were kept."))
    return b
