"""The forecast's verdict where efficiency is under 75% already at the first count (DeepLabV3 on two CPU processes):
never read as both under and over 75% there, and the what-if that lifts it named, with where it takes it."""
from __future__ import annotations

import numpy as np

from bench.forecast import outlook as fo
from bench.forecast import settings as fs


class _Setting:
    label, strategy, variant, single = "deeplabv3 DDP [fp32]", "ddp", "fp32", object()

    def __init__(self):
        self.any = type("C", (), {"device_type": "cpu"})()
        self.configs = {2: type("C", (), {"efficiency": 0.72})()}


def _line(effs: dict, central_range: tuple = None) -> list:
    """Points at 2, 4, 8 with these efficiencies; at 2 with draws spanning central_range (then its range)."""
    out = []
    for n, eff in effs.items():
        p = fs.Point(count=n, nodes=1, efficiency=eff, bound="exposed communication")
        if central_range and n == 2:
            draws = np.linspace(*central_range, 400)
            p.draws["efficiency"], p.ranges["efficiency"] = draws, central_range
        elif central_range:
            p.draws["efficiency"] = np.full(400, eff)
        out.append(p)
    return out


def test_under_75_percent_at_the_first_count_never_reads_as_paying_there_and_names_the_what_if_that_lifts_it():
    # 'below 75% already at 2 processes on this network (at the range's high end it stays at or above 75% up to 2)',
    # and nothing of bf16 gradients, which kept DeepLabV3 at 75% at 2 processes
    this = _line({2: 0.69, 4: 0.62, 8: 0.58}, (0.61, 0.77))
    whatifs = [("this network", this), ("4x faster inter-node network", _line({2: 0.69, 4: 0.62, 8: 0.58})),
               ("bf16 gradients (bf16_compress_hook)", _line({2: 0.753, 4: 0.70, 8: 0.66}))]
    said = fo.recommendation(_Setting(), this, whatifs)
    assert said.startswith("deeplabv3 DDP [fp32]: under 75% already at 2 processes on this network "
                           "(forecast 69%, its range reaching 77%; measured 72%)"), said
    assert "up to 2)" not in said and "stays at or above" not in said
    assert ("a what-if lifts it: bf16 gradients (bf16_compress_hook) keeps it at or above 75% up to 2 processes "
            "(under from 4 processes)") in said
    assert "4x faster" not in said                   # a what-if that moves nothing is not named as lifting it
    # none lifts it: said as before
    flat = fo.recommendation(_Setting(), this, whatifs[:2])
    assert "no what-if moves it" in flat and "lifts" not in flat
