"""A GPU user's second read of the committed examples (trial C, findings 5, 8 and 10).

5: every bf16 'noise not measured' paragraph, on every device, printed 'on one H200, three fp32 processes of DeepLabV3
   single x1 ran 0.5% apart, two host-bound bf16 ones 144 and 200 samples/s': another run's figures (and 0.5% where
   that store's spread is 0.606%). The reason stays; the figures do not.
8: the traces table's shares are of the traced steps, which on the H100 transformer ran 97.8 ms against a 42.9 ms
   measured median, beside 'GPU busy 94%' of the measured step ('idle 59%' in the same row).
10: power's 'at least 5 readings from 1 s into a window' was met in the H100 rehearsal by 3 readings of its one GPU
   (cuda:0) counted once for each of the two ranks that sampled it.
"""
from __future__ import annotations

from bench.stats.noise import Noise, not_carried


def test_the_bf16_noise_paragraph_gives_the_reason_and_no_figure_of_another_run():
    fp32 = Noise(0.0098, "host", "selfcheck's spread between 3 processes", workload="the synthetic MLP")
    detail = not_carried("bf16", {"fp32": fp32}).detail
    assert detail.endswith("fp32's 1.0% (selfcheck on the synthetic MLP) does not carry over, since processes of one "
                           "precision can differ far more than another's")
    for other_run in ("H200", "DeepLabV3", "144", "200 samples/s", "0.5%"):
        assert other_run not in detail, other_run
