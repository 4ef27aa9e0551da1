"""Under activation checkpointing the transformer's details state the hardware's FLOPs (bench.rank.activations
recompute_flops, from the workload's per-block recompute figure) beside the result's own count (FlopCounterMode on a
checkpointed meta copy, bench.workloads.flops), which HFU uses. Trial B saw them 6% apart at ac=full: the details
counted each block's whole forward again, but non-reentrant checkpoint stops before the down projection."""
from __future__ import annotations

import pytest
import torch

from bench.rank import activations
from bench.workloads import transformer as T
from bench.workloads.flops import count_step


@pytest.mark.parametrize("mode", ["full", "selective:2"])
def test_the_details_recomputed_flops_are_what_the_counter_counts_the_checkpointed_step_doing(mode):
    s = T.shape_of("tiny", layers=4)
    with torch.device("meta"):
        model = T.Transformer(s)
    x, y = T.make_batch(s, torch.Generator().manual_seed(0), 2)
    counted = count_step(model, x.to("meta"), y.to("meta"), T.lm_loss,
                         lambda m: activations.checkpointed_meta_copy(m, mode))
    details = T.details(s, 2)
    ac = activations.apply(activations.checkpointed_meta_copy(model, "none"), mode)
    analytic = activations.recompute_flops(ac, details)
    assert analytic["recomputed_flops_per_sample"] == (counted.recomputed - counted.total) / 2   # exactly
    # The hardware figures then differ only as the model figures do (RMSNorm's weights, well under 1%).
    model_gap = details["flops_per_sample"] - counted.total / 2
    assert analytic["hardware_flops_per_sample"] - counted.recomputed / 2 == model_gap
    assert abs(model_gap) < 0.005 * details["flops_per_sample"]
