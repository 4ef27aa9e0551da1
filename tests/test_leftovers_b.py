"""Leftovers (helper B) of the GPU user's read of the committed examples, each on stored rows or stand-ins.

(a) The busy-over-100% line held one share beside another figure: the H100 DeepLabV3 single x1 read 'GPU busy 103% ...
    111.0 ms of kernels per traced step against 108.4 ms (traced steps' own wall time)', where 111.0/108.4 is 102%;
    the 103% is against the 108.0 ms measured median. Every share now stands beside the figure it is of.
(b) Two equally busy GPUs read 'GPU busy 10% (rank 0; rank 0 10%)': the busiest named is now the other one.
(c) The 'fastest within the memory budget' table named DDP x1 [bf16] in the H100 self-check where the recommendation
    row read 'not resolved: --repeats 3 (DDP x1 [bf16], unstable, or DataParallel x1 [bf16])'; it gives the same cell.
(d) A CPU transformer's memory check counted fp32 weights only: gradients and optimizer state are counted too.
"""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.report import frontier, pages
from bench.report import traces as trace_report
from bench.report.busy import busy
from conftest import example_stores

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h100-2026-11-26"


def test_each_busy_share_stands_beside_the_figure_it_is_of(tmp_path, monkeypatch):
    sweep = example_stores(EXAMPLE, ("gpu.sqlite",), tmp_path, monkeypatch)("gpu.sqlite", 1)
    c = {c.label: c for c in sweep.bench["deeplabv3"]}["single device x1"]
    b = busy(c)
    text = b.error()
    assert text.startswith("GPU busy 103% is a measurement error, not a full GPU: 111.0 ms of kernels per traced step "
                           "against the 108.0 ms measured median step (102% of the traced steps' own wall time, "
                           "108.4 ms)")
    # every 'N% ... M ms' pair in the sentence: N is the kernels' 111.0 ms over M, whichever M is named
    for share, ms in [(b.measured, b.step_ms), (b.work_ms / b.traced_ms, b.traced_ms)]:
        assert f"{share:.0%}" in text and f"{ms:.1f} ms" in text
        assert f"{b.work_ms / ms:.0%}" == f"{share:.0%}"
    assert "past the traced steps' 108.4 ms, so it counts kernels outside the traced steps" in text
    assert not re.search(r"103%[^;]*against 108\.4 ms", text)
    md = pages.to_markdown(trace_report.blocks([c], "deeplabv3"), str(tmp_path))
    assert "against the 108.0 ms measured median step (102% of the traced steps' own wall time, 108.4 ms)" in md


def _two_ranks(work_ms: tuple) -> SimpleNamespace:
    """A stand-in DDP x2 whose ranks' traced kernels took `work_ms` per step (3 traced steps) in 100 ms steps."""
    rows = [{"rank": r, "span_ms": 300.0, "steps": 3, "method": "device_kernels", "work_ms": 3 * w,
             "exposed_comm_ms": 0.0, "compute_share": w / 100, "comm_share": 0.0, "copy_share": 0.0,
             "idle_share": 1 - w / 100} for r, w in enumerate(work_ms)]
    return SimpleNamespace(summary=SimpleNamespace(median_ms=100.0), traces=rows)


def test_equally_busy_gpus_name_the_other_one_as_the_busiest():
    assert busy(_two_ranks((10.0, 10.0))).words() == "GPU busy 10% (rank 0; rank 1 10%)"
    assert busy(_two_ranks((30.0, 10.0))).words() == "GPU busy 10% (rank 1; rank 0 30%)"


def test_the_budget_table_gives_the_recommendations_not_resolved_cell(tmp_path, monkeypatch):
    sweep = example_stores(EXAMPLE, ("selfcheck.sqlite",), tmp_path, monkeypatch)("selfcheck.sqlite", 1)
    budget, how = frontier.budget_mib(sweep)
    md = pages.to_markdown(frontier.blocks(sweep, budget, how), str(tmp_path))
    cell = "not resolved: --repeats 3 (DDP x1 [bf16], unstable, or DataParallel x1 [bf16])"
    assert f"| synthetic | bf16, sgd | {cell} | – | – | – |" in md
    assert "DDP x1 [bf16] stands" not in md and "Recommended within" not in md
    assert ("Not resolved within 79.18 GiB per GPU: DDP x1 [bf16], 85913.3 samples/s at a peak of 2.76 GiB per GPU, "
            "unstable, or DataParallel x1 [bf16], 145527.8 samples/s") in md
    assert "| synthetic | fp32, sgd | single device x1 | 78911.6 | 1.58 GiB | – |" in md   # a resolved pick stays
    assert frontier.UNRESOLVED_RULE in md   # the paragraph says what the cell means, where a row reads so, else not
    other = example_stores(EXAMPLE, ("gpu.sqlite",), tmp_path, monkeypatch)("gpu.sqlite", 1)
    assert frontier.UNRESOLVED_RULE not in pages.to_markdown(frontier.blocks(other, *frontier.budget_mib(other)),
                                                             str(tmp_path))
    from bench.report import recommend
    row, _ = recommend.answer(sweep, "synthetic", sweep.bench["synthetic"], "bf16")
    assert row[2] == cell   # the same words as the recommendation's row, from the same rule


def _plan(args: list, tmp_path, ram_gib: float = 16):
    """options.prepare on a fake 2-core CPU host with `ram_gib` of RAM: (items, cfg, machine), or the ConfigError."""
    from bench import options
    from bench.sweep import plan
    machine = plan.Machine(cuda_devices=0, cpu_cores=2, host_memory_bytes=int(ram_gib * 2**30))
    cfg, _, machine = options.prepare(["--workloads", "transformer", "--transformer-preset", "1.4b", "--seq-len", "512",
                                       "--no-comm-bench", *args, "--device", "cpu", "--store",
                                       str(tmp_path / "s.sqlite")], machine=machine)
    return plan.plan(cfg, machine), cfg, machine


def test_a_cpu_plan_whose_gradients_and_optimizer_state_cannot_fit_the_ram_is_refused(tmp_path):
    # 1.4b: 5.1 GiB of fp32 weights, which the check alone counted, in 16 GiB of RAM; AdamW holds 16 bytes a parameter
    from bench.config import ConfigError
    with pytest.raises(ConfigError) as e:
        _plan(["--strategies", "single", "--optimizer", "adamw"], tmp_path)
    said = str(e.value)
    assert ("needs at least 20.4 GiB on one device (single x1 [adamw], the least of any configuration)" in said
            and "plus 20.3 GiB of fp32 weights, gradients and adamw state (16 bytes a parameter" in said
            and "more than this host's 16.0 GiB of RAM" in said and "--optimizer sgd" in said), said
    with pytest.raises(ConfigError) as e:   # SGD's 12 bytes a parameter fit once, not in each of two DDP processes
        _plan(["--strategies", "ddp", "--gpus", "2"], tmp_path)
    assert "needs at least 30.6 GiB in one host's RAM (ddp x2 [sgd], 2 processes a host" in str(e.value), str(e.value)
    with pytest.raises(ConfigError) as e:   # FSDP shards it, but 20.3 GiB is still more than 16
        _plan(["--strategies", "fsdp", "--gpus", "2", "--optimizer", "adamw"], tmp_path)
    assert "(16 bytes a parameter: 4 each for the weights and gradients, 4 a state; sharded over its 2 processes)" \
        in str(e.value), str(e.value)


def test_the_refusal_and_the_plans_ram_warning_count_by_one_function(tmp_path):
    from bench.sweep import describe
    from bench.shared.spec import RunSpec
    from bench.workloads import transformer
    items, cfg, machine = _plan(["--strategies", "single,ddp,zero,hsdp", "--gpus", "1,2"], tmp_path)  # single fits
    runs = {(r.strategy, r.device_count): r for r in items if isinstance(r, RunSpec) and r.mode == "bench"}
    p = transformer.parameters(transformer.spec_shape(runs[("single", 1)]))
    assert {k: transformer.state_bytes(r) / p for k, r in runs.items()} == {
        ("single", 1): 12, ("ddp", 1): 12, ("ddp", 2): 24, ("zero", 1): 12, ("zero", 2): 20, ("hsdp", 1): 12,
        ("hsdp", 2): 12}
    assert all(describe.state_bytes(r) == transformer.state_bytes(r) for r in runs.values())
    warned = [w for w in describe.ram_warnings(list(runs.values()), cfg, machine) if "will likely" in w]
    assert [w.split(" holds")[0] for w in warned] == ["WARNING: transformer ddp x2 [sgd]", "WARNING: transformer zero x2 [sgd]"]


def test_the_docs_say_the_recomputed_flops_leave_each_blocks_down_projection_out():
    # (e) docs/transformer.md said 'the forward of the checkpointed blocks again' after 37d4a61 left the down projection out
    from bench.workloads import transformer
    text = " ".join((Path(__file__).resolve().parents[1] / "docs" / "transformer.md").read_text().split())
    said = text[text.index("`recomputed_flops_per_sample` ("):][:400]
    assert "but for each block's feed-forward down projection" in said and "does not run again" in said, said
    s = transformer.shape_of("tiny", layers=4)
    assert (transformer.forward_flops_per_token(s, 4) - transformer.recomputed_flops_per_token(s, 4)
            == 4 * 2.0 * s.ffn * s.width)   # the down projection's matmul, each block's, is what the docs say is left out
