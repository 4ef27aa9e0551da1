"""The lines a sweep starts with (bench.sweep.describe): the defaults filled in that act on this sweep, and HSDP's
mesh with what one shard group still runs, said once and the H100's figure named as that machine's."""
from __future__ import annotations

from bench.config import SweepConfig
from bench.sweep.describe import describe_resolved
from bench.sweep.plan import Machine
from bench.sweep.resolve import resolve

CPU2 = Machine(cuda_devices=0, cpu_cores=2)


def _defaults(cfg: SweepConfig) -> str:
    return next(line for line in describe_resolved(resolve(cfg, CPU2), set()) if line.startswith("defaults for this device"))


def test_the_defaults_line_lists_only_the_defaults_that_act_on_the_sweep(tmp_path):
    from voc_tree import make_voc_tree
    # a transformer-only sweep listed --synthetic-width 1024, --synthetic-depth 4; an --epochs one --steps 6,
    # --min-window-s 1; a synthetic-data one --num-workers 1 (its batches are pre-generated, no DataLoader)
    line = _defaults(SweepConfig(workloads=("transformer",), transformer_preset="tiny", strategies=("ddp",)))
    assert "--synthetic-width" not in line and "--synthetic-depth" not in line and "--num-workers" not in line
    assert "--steps" in line and "--seq-len" in line
    synthetic = _defaults(SweepConfig(workloads=("synthetic",)))
    assert "--synthetic-width" in synthetic and "--seq-len" not in synthetic and "--transformer" not in synthetic
    epochs = SweepConfig(workloads=("deeplabv3",), data="voc", voc_root=str(make_voc_tree(tmp_path)), epochs=1, strategies=("single",))
    line = _defaults(epochs)
    assert "--steps" not in line and "--min-window-s" not in line and "--num-workers 1" in line


def test_the_hsdp_line_says_what_one_shard_group_runs_once_and_quotes_no_figure_of_another_run():
    # it quoted the H100 example's 53% (another machine, model and session) in every sweep's header
    lines = describe_resolved(resolve(SweepConfig(workloads=("synthetic",), strategies=("hsdp",), gpus=(1, 2)), CPU2), set())
    hsdp = [line for line in lines if line.startswith("hsdp mesh")]
    assert len(hsdp) == 1 and hsdp[0].count("all-reduces every gradient shard") == 1
    assert "%" not in hsdp[0] and "H100" not in hsdp[0]
    assert "x2 replicate 1 x shard 2 (one shard group, as at x1)" in hsdp[0] and "the default" in hsdp[0]
