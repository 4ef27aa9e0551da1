"""The report's compilation table (what compiling cost and after how many steps it pays, against its eager twin) and
the reference experiment's time to train (DeepLabV3: 20 epochs of VOC 2012 train, compilation and the warm-up
included, with the published V100 times beside it). Split out of report.py, which had grown past 400 lines."""
from __future__ import annotations

import math

from bench import stats
from bench.analysis.reference import (REFERENCE_EPOCHS, REFERENCE_IMAGES, REFERENCE_V100_S, break_even, compile_cost,
                                      estimated, payback_words, process_range, shape_note, train_times)
from bench.report import choice
from bench.report.names import hms
from bench.report.pages import fmt


def blocks(workload: str, configs: list) -> list:
    """The compilation table where a configuration compiled; DeepLabV3's time to train the reference experiment."""
    b: list = []
    compiled = [c for c in configs if c.compile_s is not None and not math.isnan(c.compile_s)]
    if compiled:
        b.append(("table", ["configuration", "first step with compilation s", "warm-up s (all its steps)",
                            "compiling pays after (steps)", "that is"], [_compile_row(c, configs) for c in compiled]))
        b.append(("p", "Compiling pays after the steps whose time saved, against the same configuration uncompiled, "
                       "adds up to the longer warm-up it costs (its warm-up less the uncompiled one's: compilation); "
                       "not resolved where the two throughputs are not told apart (the recommendation's rule: the noise "
                       "between processes, an unstable process, the 5% floor), with what compiling would have to gain"
                       + ("; the time to train below includes the warm-up." if workload == "deeplabv3" else ".")))
    if workload == "deeplabv3":
        bars, how = train_times(configs)
        b.append(("h", 3, f"Time to train the reference experiment ({REFERENCE_EPOCHS} epochs of VOC 2012 train, "
                          f"{REFERENCE_IMAGES} images)"))
        b.append(("table", ["setup", "time", "how"], [[lbl, _time_cell(c, s, configs), how]
                                                       for (lbl, s), c in zip(bars, configs)]))
        if shape_note(configs):
            b.append(("p", shape_note(configs)))
        b.append(("p", "Published, on AWS V100s (DeepLabV3-ResNet101, FP32: V100s have no TF32, batch 8 per GPU, "
                       "256x256, DDP on gloo, no loader workers):"))
        b.append(("table", ["setup", "time"], [[lbl, hms(s)] for lbl, s in REFERENCE_V100_S]))
    return b


def _one_process_note(c) -> str:
    """' (one process; noise at bf16 not measured on this device)' beside a time to train from one process at a
    precision whose process-to-process noise is not measured: one H200 ran DeepLabV3 single x1 [bf16] 199.6 and 144.4
    samples/s in two sweeps (2m44s and 3m27s), each report giving its figure alone. '' otherwise."""
    if len(c.process_sps) > 1 or c.noise_fallback.measured:
        return ""
    return f" (one process; noise at {c.precision} not measured on this device)"


def _time_cell(c, seconds: float, configs: list) -> str:
    """'3m17s (3m02s-3m44s across 3 processes)' where an estimate rests on several processes (one H200's three bf16
    processes ran 140.3-166.0 samples/s; the report gave 3m17s alone), '4m32s, of which 70.5 s more warm-up than eager:
    compilation' for a compiled one with its eager twin (the 82 s between the bars read as all speed); one process as
    `_one_process_note`."""
    low, high = process_range(c) if estimated(configs) else (math.nan, math.nan)
    n = len(c.process_sps)
    spread = (f" ({hms(low)} in each of {n} processes)" if hms(low) == hms(high)
              else f" ({hms(low)}-{hms(high)} across {n} processes)")
    text = hms(seconds) + (spread if not math.isnan(low) else _one_process_note(c))
    cost = compile_cost(c, configs)
    return text + (f", of which {cost[0]:.1f} s more warm-up than eager: compilation" if cost and cost[0] > 0 else "")


def _not_told(a) -> str:
    """Why choice.apart does not tell a compiled configuration from its eager twin: its own words."""
    if a.within is None:
        return a.why or "the noise between processes at its precision is not measured on this device"
    if choice.by_floor(a):
        return choice.floor_words()
    return f"inside the {_noise(a)}"


def _noise(a) -> str:
    return f"{stats.percent(a.noise.fraction)} noise between processes ({a.noise.source_words()})"


def _compile_row(c, configs: list) -> list:
    """A compiled configuration: its first step, its warm-up, and after how many steps compiling has paid. 'never'
    only where its step is slower beyond the noise (choice.apart, the recommendation's rule); where the two are not told
    apart, 'no faster (a tie)' where the gap lies inside the measured noise or under the floor (the first screen's
    'tie'), 'not resolved' where nothing can tell, each with why and what would pay: one H200's table read 'never' on
    one unstable process each, 6% apart, while its first screen said the two could not be told apart."""
    got = break_even(c, configs)
    if got is None:
        return [c.label, fmt(c.compile_s, ".1f"), fmt(c.warmup_s, ".1f"), "– (no eager twin measured)", "–"]
    faster, slower = sorted((c, got[1]), key=lambda x: -x.samples_per_s)
    a = choice.apart(faster, slower)
    if a.within is not False:
        pay = payback_words(c, got[1], compile_cost(c, configs)[0])
        retry = " --repeats 3 tells them apart." if a.within is None and a.noise.source != "repeats" else ""
        lead = "as fast (less than 1% apart: " if a.gap < 0.005 else f"{a.gap:.0%} faster ("
        pays, that = ("no faster (a tie)" if a.within else "not resolved"), (
            f"{faster.label} ran {lead}{fmt(faster.samples_per_s)} against "
            f"{fmt(slower.samples_per_s)} samples/s), not told apart: {_not_told(a)}. {pay[:1].upper()}{pay[1:]}.{retry}")
    elif math.isnan(got[0]):
        pays, that = "never", f"slower than {got[1].label} beyond the {_noise(a)}"
    else:
        steps = math.ceil(got[0])
        epoch = REFERENCE_IMAGES / c.global_batch if c.workload == "deeplabv3" else math.nan
        pays = f"{steps}"
        that = (f"{steps / epoch:.1f} epochs of VOC 2012 train against {got[1].label}" if not math.isnan(epoch)
                else f"{hms(steps * c.global_batch / c.samples_per_s)} of training against {got[1].label}")
    return [c.label, fmt(c.compile_s, ".1f"), fmt(c.warmup_s, ".1f"), pays, that]
