"""The report's cost section (`--price-per-device-hour`, bench.analysis.cost): per configuration the cost of a million
samples (a language model's: of a million tokens too) and, for DeepLabV3, of one epoch of the reference experiment;
per workload and precision the cheapest run beside the fastest, right after the recommendation.

    blocks(sweep, prices)      -> report blocks ([] without a price)
    price_of(sweep, prices)    -> the Price that applies to a sweep, or None (the table names none of its machines)
"""
from __future__ import annotations

import math
from typing import Optional

from bench.analysis import cost
from bench.analysis.results import Sweep
from bench.report.choice import model_suffix, models
from bench.report.pages import fmt, slower_words


def price_of(sweep: Sweep, prices: Optional[cost.Prices]) -> Optional[cost.Price]:
    if prices is None:
        return None
    env = sweep.envs[0] if sweep.envs else {}
    return prices.lookup(sweep.sweep.get("label"), sweep.sweep.get("hostname") or env.get("hostname"),
                         cost.machine_names(env))


def _what(c) -> str:
    return c.label


def cheapest_sentence(configs: list, costs: dict, unit: str) -> str:
    """'Cheapest: DDP x4, 0.56 per million samples (on 4 devices instead of 8, 10% slower than the fastest); fastest:
    DDP x8, 1.00 per million samples.' for one workload at one precision ('' when nothing has a cost). Slower in
    throughput, 1 - cheapest / fastest (bench.report.pages.slower_words): 360 against 400 samples/s is 10% slower."""
    ran = [c for c in configs if not math.isnan(c.samples_per_s)]
    low = cost.cheapest(ran, lambda c: costs[c.key].per_million_samples)
    if low is None:
        return ""
    fast = max(ran, key=lambda c: c.samples_per_s)
    each = lambda c: f"{_what(c)}, {fmt(costs[c.key].per_million_samples, '.4g')} {unit} per million samples"  # noqa: E731
    if low is fast:
        return f"Fastest and cheapest: {each(fast)}."
    return (f"Cheapest: {each(low)} (on {low.device_count} device{'s' if low.device_count > 1 else ''} instead of "
            f"{fast.device_count}, {slower_words(fast.samples_per_s, low.samples_per_s, 'the fastest')}); "
            f"fastest: {each(fast)}.")


def blocks(sweep: Sweep, prices: Optional[cost.Prices]) -> list:
    if prices is None or not sweep.bench:
        return []
    b: list = [("h", 2, "What a run costs")]
    price = price_of(sweep, prices)
    if price is None:
        env = sweep.envs[0] if sweep.envs else {}
        names = [n for n in [sweep.sweep.get("label"), sweep.sweep.get("hostname"), *cost.machine_names(env)] if n]
        return b + [("p", f"{prices.origin} names no price for this sweep's machine (any of: "
                          f"{', '.join(map(repr, names)) or 'no name recorded'}), and no default.")]
    unit = prices.unit()
    b.append(("p", f"At {fmt(price.per_device_hour, '.4g')} {unit} per device-hour ({price.source}); a device is a GPU, "
                   f"on the CPU a gloo process, and a configuration holds all of its devices for its run."))
    for workload, configs in sweep.bench.items():
        costs = cost.of_configs(configs, price.per_device_hour)
        epochs = workload == "deeplabv3"
        tokens = any(c.tokens_per_sample for c in configs)   # a language model: per million tokens beside
        rows = []
        for c in configs:
            k = costs[c.key]
            rows.append([_what(c), str(c.device_count), fmt(c.samples_per_s),
                         fmt(cost.device_hours(c.device_count, 1e6 / c.samples_per_s) if c.samples_per_s > 0 else None, ".4g"),
                         fmt(k.per_million_samples, ".4g")] + ([fmt(k.per_million_tokens, ".4g")] if tokens else [])
                        + ([fmt(k.epoch_s, ".1f"), fmt(k.per_epoch, ".4g")] if epochs else []))
        b.append(("h", 3, f"{workload}: cost"))
        b.append(("table", ["configuration", "devices", "samples/s", "device-hours per million samples",
                            f"cost per million samples ({unit})"] + ([f"cost per million tokens ({unit})"] if tokens else [])
                  + (["reference epoch s", f"cost per reference epoch ({unit})"] if epochs else []), rows))
        for precision, group in models(configs):   # a model each: DeepLabV3's auxiliary head (choice.models)
            line = cheapest_sentence(group, costs, unit)
            if line:
                named = len({c.precision for c in configs}) > 1 or model_suffix(group[0].aux, configs)
                b.append(("p", (f"{workload} [{precision}{model_suffix(group[0].aux, configs)}]: " if named
                                else f"{workload}: ") + line))
    return b
