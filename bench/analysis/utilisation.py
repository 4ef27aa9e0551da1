"""How close each configuration came to the physical limit: achieved FLOP/s per device and model FLOPs utilisation
(MFU) against the device's dense peak for the precision that ran (bench.machine.peaks).

    attach(sweep, "bf16=989")       # every Config of a sweep gets .utilisation (the override: --peak-tflops, else the
                                    # sweep's own --peak-tflops, else the table)
    u = c.utilisation               # Utilisation: flops, achieved_tflops, peak, mfu, hfu, error, note
    at(u, samples_per_s, count)     # MFU at another throughput and count (the forecast's)
    at_cell(u, samples_per_s, count)  # the same as the forecast's MFU column shows it: above 100% an error

Model FLOPs per sample: the count FlopCounterMode made on the model (bench.workloads.flops), checked against the
workload's analytic figure where it gives one; the analytic figure where the counter missed work (an op it has no
formula for) or could not count; neither: no MFU. achieved = FLOPs per sample x samples/s / devices; MFU = achieved /
the peak of each device (their sum on mixed devices). MFU counts model FLOPs only; where activation checkpointing
recomputes, the hardware's FLOPs utilisation (HFU) stands beside it (MLPerf's utilisation appendix, llm-foundry). A
device the table does not know has no peak and no MFU, never a neighbour's; on CPU MFU needs --peak-tflops. An MFU
above 100% cannot be measured: it is reported as an error in the peak or the count (nanoGPT #464, torchtitan PR #1201
showed 104% and 200% from a wrong peak), never as a result.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Optional

from bench.machine import peaks

AGREE = 0.10        # counted and analytic figures within 10% of each other agree


@dataclass(frozen=True)
class Flops:
    """The model FLOPs per sample a configuration is measured with, and where they came from."""
    per_sample: Optional[float]
    hw_per_sample: Optional[float] = None    # with recomputation (activation checkpointing); None: nothing recomputed
    source: str = ""                         # 'counted by FlopCounterMode ...' / 'analytic ...'
    check: str = ""                          # the count against the analytic figure
    lower_bound: bool = False                # counted, but the counter missed work and no analytic figure was given
    counted: Optional[float] = None
    analytic: Optional[float] = None


def model_flops(counted: Optional[float], hw: Optional[float], how: dict, analytic: Optional[float]) -> Flops:
    """Which FLOPs per sample to use: the count, unless the counter missed work or failed and the workload gives an
    analytic figure; the count as a lower bound where it missed work and there is no analytic figure."""
    missed = list(how.get("uncounted") or [])
    where = f" on {how['device']}" if how.get("device") else ""
    check = ""
    if counted is not None and analytic:
        apart = counted / analytic - 1
        check = (f"the count agrees with the workload's analytic figure ({abs(apart):.1%} apart)" if abs(apart) <= AGREE
                 else f"the count differs from the workload's analytic figure by {apart:+.0%} ({_g(counted)} against "
                      f"{_g(analytic)} FLOP per sample)")
    if counted is not None and not missed:
        return Flops(counted, hw, f"counted by FlopCounterMode{where}, one forward and backward", check, False, counted,
                     analytic)
    if analytic:
        why = (f"the counter has no formula for {', '.join(missed)}" if missed
               else f"it could not be counted ({how['error']})" if how.get("error") else "it was not counted")
        return Flops(analytic, None, f"the workload's analytic figure ({why})", check, False, counted, analytic)
    if counted is not None:
        return Flops(counted, hw, f"counted by FlopCounterMode{where}, a lower bound: it has no formula for "
                     f"{', '.join(missed)}", "", True, counted, None)
    return Flops(None, None, f"not counted ({how['error']})" if how.get("error") else "not counted (an older store)")


@dataclass(frozen=True)
class Utilisation:
    flops: Flops
    achieved_tflops: float                 # per device; nan without FLOPs
    hw_tflops: float = math.nan            # per device, with recomputation
    peak_tflops: float = math.nan          # per device (mean over the devices)
    peak_text: str = ""                    # 'H100 SXM5, bf16 tensor: 989 TFLOP/s (NVIDIA H100 datasheet ...)'
    mfu: float = math.nan                  # nan: no peak, no FLOPs, or an error
    hfu: float = math.nan
    error: str = ""                        # MFU above 100%: the peak or the count is wrong
    note: str = ""                         # why there is no MFU
    device_type: str = "cuda"
    precision_key: str = ""                # the peak's precision (bench.machine.peaks.precision_key); '' without one

    @property
    def measured(self) -> float:
        """MFU as measured, even above 100% (for the error's words); nan without a peak."""
        return self.achieved_tflops / self.peak_tflops if self.peak_tflops > 0 else math.nan

    @property
    def highest(self) -> float:
        """The larger of MFU and HFU as measured: what an error is about."""
        hfu = self.hw_tflops / self.peak_tflops if self.peak_tflops > 0 and not math.isnan(self.hw_tflops) else math.nan
        return max(self.measured, hfu) if not math.isnan(hfu) else self.measured

    def mfu_cell(self) -> str:
        """The MFU column: '38.2%', '>= 12.0%' (a lower bound), 'error: 104%' or '–'."""
        if self.error:
            return f"error: {self.highest:.0%} > 100%"
        if math.isnan(self.mfu):
            return "–"
        return ("≥ " if self.flops.lower_bound else "") + f"{self.mfu:.1%}" + (f" (HFU {self.hfu:.1%})"
                                                                                if not math.isnan(self.hfu) else "")

    def achieved_cell(self) -> str:
        """The achieved column, per device: TFLOP/s on a GPU, GFLOP/s on the CPU."""
        if math.isnan(self.achieved_tflops):
            return "–"
        return f"{self.achieved_tflops:.1f}" if self.device_type == "cuda" else f"{self.achieved_tflops * 1e3:.2f}"

    def words(self) -> str:
        """'38% MFU' for a sentence, '' without one."""
        return "" if math.isnan(self.mfu) else ("at least " if self.flops.lower_bound else "") + f"{self.mfu:.0%} MFU"


def _g(x: float) -> str:
    return f"{x:.4g}"


def _key_words(key: str, cuda: bool = True) -> str:
    if not cuda:
        return key
    return {"fp32": "FP32 without tensor cores (TF32 off)", "tf32": "TF32 tensor", "bf16": "BF16 tensor",
            "fp16": "FP16 tensor"}[key]


def of(c, override: Optional[dict] = None, env_names: tuple = ()) -> Utilisation:
    """A Config's utilisation. override: parsed --peak-tflops; env_names: the sweep's GPU names, where the results do
    not name each device (older stores)."""
    f = model_flops(c.flops.get("flops_per_sample"), c.flops.get("hw_flops_per_sample"), c.flops.get("how") or {},
                    c.flops.get("analytic_per_sample"))
    cuda = c.device_type == "cuda"
    achieved = (f.per_sample * c.samples_per_s / c.device_count / 1e12
                if f.per_sample is not None and c.samples_per_s > 0 else math.nan)
    hw = (f.hw_per_sample * c.samples_per_s / c.device_count / 1e12 if f.hw_per_sample and c.samples_per_s > 0
          else math.nan)
    base = dict(flops=f, achieved_tflops=achieved, hw_tflops=hw, device_type=c.device_type)
    if math.isnan(achieved):
        return Utilisation(**base, note=f"no FLOPs per sample: {f.source}")
    key = peaks.precision_key(c.precision, c.options)
    names = list(c.device_names) if cuda else ["cpu"] * c.device_count
    if cuda and len(names) != c.device_count:
        names = [env_names[0]] * c.device_count if env_names and len(set(env_names)) == 1 else []
    if not names:
        return Utilisation(**base, note="the devices it ran on are not recorded, so no peak is known")
    found = {n: peaks.lookup(n, key, override) for n in dict.fromkeys(names)}
    unknown = [n for n, p in found.items() if p is None]
    if unknown:
        if not cuda:
            why = "on CPU there is no table of peaks; --peak-tflops gives one"
        elif peaks.device_entry(unknown[0]) is not None:
            why = f"{unknown[0]} has no {_key_words(key)} unit"
        else:
            why = (f"{unknown[0]} is not in the table of peaks (bench/machine/peaks.py); --peak-tflops "
                   f"{key}=TFLOPS adds it")
        return Utilisation(**base, note=f"no MFU: {why}")
    peak = sum(found[n].tflops for n in names) / len(names)
    p = found[names[0]]
    text = f"{p.device}, {_key_words(key, cuda)}: {peak:.4g} TFLOP/s per {'device' if cuda else 'process'} ({p.source})"
    base["precision_key"] = key
    mfu = achieved / peak
    hfu = hw / peak if not math.isnan(hw) else math.nan
    if mfu > 1.0 or hfu > 1.0:
        what = f"MFU {mfu:.0%}" if mfu > 1.0 else f"HFU (recomputation included) {hfu:.0%}"
        return Utilisation(**base, peak_tflops=peak, peak_text=text,
                           error=(f"{what} is above 100%, which no device reaches: the peak ({text}) or the FLOP "
                                  f"count ({_g(f.per_sample)} FLOP per sample, {f.source}) is wrong, so it is not "
                                  "reported as a result"))
    return Utilisation(**base, peak_tflops=peak, peak_text=text, mfu=mfu, hfu=hfu)


def _raw_at(u: Utilisation, samples_per_s: float, count: int) -> float:
    """MFU at a throughput and device count, unchecked; nan where u has no peak or FLOPs."""
    if u is None or u.flops.per_sample is None or not u.peak_tflops > 0 or not samples_per_s > 0:
        return math.nan
    return u.flops.per_sample * samples_per_s / count / 1e12 / u.peak_tflops


def at(u: Utilisation, samples_per_s: float, count: int) -> float:
    """MFU at another throughput and device count (the forecast's points); nan where u has no peak or FLOPs, or the
    result would pass 100%."""
    mfu = _raw_at(u, samples_per_s, count)
    return mfu if mfu <= 1.0 and not u.error else math.nan


def at_cell(u: Utilisation, samples_per_s: float, count: int) -> str:
    """A forecast point's MFU column: '38%'; 'error: 104% > 100%' where it would pass 100% (the peak or the FLOP count
    is wrong, as the report says of a measured one: never a result, never a silent '–'); 'error: measured 104% >
    100%' where the measured configuration it rests on already read above; '–' without a peak or FLOPs."""
    mfu = _raw_at(u, samples_per_s, count)
    if math.isnan(mfu):
        return "–"
    if mfu > 1.0:
        return f"error: {mfu:.0%} > 100%"
    return f"error: measured {u.highest:.0%} > 100%" if u.error else f"{mfu:.0%}"


def override_of(sweep, text: Optional[str] = None) -> dict:
    """The peaks typed for this report: `text` (report --peak-tflops) or the sweep's own --peak-tflops."""
    if text is None:
        text = json.loads(sweep.sweep.get("config_json") or "{}").get("peak_tflops")
    return peaks.parse_override(text)


def attach(sweep, text: Optional[str] = None) -> None:
    """Set .utilisation on every Config of a sweep (see `override_of` for the peaks typed)."""
    override = override_of(sweep, text)
    names = tuple(n.strip() for e in sweep.envs[:1] for n in str(e.get("gpu_names") or "").split(",") if n.strip())
    for cs in sweep.bench.values():
        for c in cs:
            c.utilisation = of(c, override, names)
