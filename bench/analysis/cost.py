"""What a run costs: a price per device-hour (a number, or a table of prices in a TOML file the user keeps; nothing
is fetched), and per configuration the cost of a million samples (a language model's: of a million tokens too) and of
one epoch of the reference experiment.

    prices = parse_price(ns.price_per_device_hour)     # ConfigError (exit 2) unless positive finite numbers
    price = prices.lookup(label, hostname, names)       # -> Price(per_device_hour, source) or None
    cost = per_million_samples(price.per_device_hour, devices, samples_per_s)
    cost = per_epoch(price.per_device_hour, devices, epoch_s)

A device is what a configuration counts (`device_count`: GPUs; on the CPU, gloo processes), so a run holds
devices x its time of them: DDP on 4 GPUs that is 10% slower than on 8 costs 4 / (8 x 0.9) = 0.56 of it.

The TOML file maps names to prices per device-hour; a sweep takes the first name that matches (case aside): its
`--label`, its host, its GPU model (as the environment table names it) or CPU model, then `default`:

    currency = "USD"                     # optional: shown with every cost
    default = 2.00                       # optional: any machine not named below
    "NVIDIA H100 80GB HBM3" = 4.10       # a GPU model
    "p4d-node" = 2.75                    # a sweep's --label, or a host name
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Optional, Sequence

from bench.analysis import reference
from bench.config import ConfigError

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

FLAG = "--price-per-device-hour"
HELP = ("price of one device (GPU; on CPU one gloo process) for an hour: a number, or a TOML file of prices by "
        "--label, host, GPU or CPU model and 'default' (bench/analysis/cost.py); adds the cost per million samples "
        "and per epoch of the reference experiment")


@dataclass(frozen=True)
class Price:
    per_device_hour: float
    source: str                      # what matched: "--price-per-device-hour 2.5" or "prices.toml: 'NVIDIA H100'"


@dataclass(frozen=True)
class Prices:
    """Prices per device-hour by name (lower case); flat: one price for every machine."""
    by_name: dict = field(default_factory=dict)
    flat: Optional[float] = None
    currency: str = ""
    origin: str = ""                 # the flag's value, for messages

    def lookup(self, label: Optional[str] = None, hostname: Optional[str] = None,
               names: Sequence[str] = ()) -> Optional[Price]:
        """The price of a machine: the flat one, else the first of label, host, device names, 'default' that the
        table names; None when it names none of them."""
        if self.flat is not None:
            return Price(self.flat, f"{FLAG} {self.origin}")
        for name in [label, hostname, *names, "default"]:
            if name and name.strip().lower() in self.by_name:
                return Price(self.by_name[name.strip().lower()], f"{self.origin}: {name.strip()!r}")
        return None

    def unit(self) -> str:
        return self.currency or "price units"


def _positive(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{what}: {value!r} is not a number; expected a price per device-hour, a positive number")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{what}: {value!r} is not allowed; expected a price per device-hour, a positive finite number")
    return float(value)


def parse_price(text: Optional[str]) -> Optional[Prices]:
    """The flag's value -> Prices (None when not given). A number must be positive and finite; anything else names a
    TOML file whose every price is. ConfigError naming the value or the file and key."""
    if text is None:
        return None
    text = str(text).strip()
    try:
        number = float(text)
    except ValueError:
        number = None
    if number is not None:
        return Prices(flat=_positive(number, f"{FLAG} {text!r}"), origin=text)
    if not os.path.isfile(text):
        raise ConfigError(f"{FLAG} {text!r}: expected a price per device-hour (a positive number) or a TOML file of "
                          f"prices; there is no file {text!r}")
    try:
        with open(text, "rb") as f:
            table = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{FLAG} {text!r}: cannot be read as TOML: {e}") from None
    currency = table.pop("currency", "")
    if not isinstance(currency, str):
        raise ConfigError(f"{FLAG} {text!r}: currency = {currency!r}; expected a string such as \"USD\"")
    by_name = {}
    for key, value in table.items():
        name = key.strip().lower()
        if name in by_name:
            raise ConfigError(f"{FLAG} {text!r}: {key!r} names a machine twice (names are matched regardless of case)")
        by_name[name] = _positive(value, f"{FLAG} {text!r}: {key!r}")
    if not by_name:
        raise ConfigError(f"{FLAG} {text!r}: names no price; expected lines such as default = 2.0 or "
                          "\"NVIDIA H100 80GB HBM3\" = 4.1")
    return Prices(by_name=by_name, currency=currency, origin=text)


def device_hours(devices: int, seconds: float) -> float:
    """Device-hours a run of `seconds` holds on `devices` devices."""
    return devices * seconds / 3600.0


def per_million_samples(per_device_hour: float, devices: int, samples_per_s: float) -> float:
    """Cost of training on a million samples at a throughput, on `devices` devices; nan without a throughput."""
    if not samples_per_s or math.isnan(samples_per_s) or samples_per_s <= 0:
        return float("nan")
    return per_device_hour * device_hours(devices, 1e6 / samples_per_s)


def per_epoch(per_device_hour: float, devices: int, epoch_s: float) -> float:
    """Cost of one epoch that takes `epoch_s` seconds on `devices` devices; nan without a time."""
    if epoch_s is None or math.isnan(epoch_s) or epoch_s <= 0:
        return float("nan")
    return per_device_hour * device_hours(devices, epoch_s)


def machine_names(env: dict) -> list:
    """The device names a price table may name for a sweep's environment: its GPU models, else its CPU model."""
    gpus = [n.strip() for n in str(env.get("gpu_names") or "").split(",") if n.strip()]
    return list(dict.fromkeys(gpus)) or ([str(env["cpu_model"])] if env.get("cpu_model") else [])


def cheapest(items: Sequence, cost_of) -> Optional[object]:
    """The item of least cost (cost_of(item) -> number, nan for unknown); None when none has a cost."""
    known = [(cost_of(i), n, i) for n, i in enumerate(items)]
    known = [k for k in known if not math.isnan(k[0])]
    return min(known, key=lambda k: (k[0], k[1]))[2] if known else None


@dataclass(frozen=True)
class Cost:
    """What one configuration costs at a price: a million samples, and (DeepLabV3) one epoch of the reference
    experiment, with the epoch's time (measured, or estimated from throughput: bench.analysis.reference)."""
    per_million_samples: float
    per_epoch: float = float("nan")
    epoch_s: float = float("nan")
    per_million_tokens: float = float("nan")   # a language model's: LM users price tokens (nan for any other workload)


def of_configs(configs: list, per_device_hour: float) -> dict:
    """{config key: Cost} of one workload's configurations (bench.analysis.results.Config)."""
    epoch: dict = {}
    if configs and configs[0].workload == "deeplabv3":
        bars, _ = reference.train_times(configs)
        epoch = {c.key: s / reference.REFERENCE_EPOCHS for c, (_, s) in zip(configs, bars)}
    return {c.key: Cost(per_million_samples(per_device_hour, c.device_count, c.samples_per_s),
                        per_epoch(per_device_hour, c.device_count, epoch.get(c.key, float("nan"))),
                        epoch.get(c.key, float("nan")),
                        per_million_samples(per_device_hour, c.device_count, getattr(c, "tokens_per_s", float("nan"))))
            for c in configs}
