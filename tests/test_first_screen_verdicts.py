"""The recommendation's first screen as a new user read it on the default CPU sweep (trial D): the recommended
synthetic DDP x2 had steps spread 13% of their median and only the configurations table's stability column said so;
the ~255-word rule sat between the table and the verdicts. Built from stores with known numbers, CPU and GPU alike."""
from __future__ import annotations

import pytest

from bench.report import recommend
from bench.sweep.plan import RunSpec
from test_recommend import build, payload, spec


def _on(device: str, strategy: str, n: int, repeat: int = 0) -> RunSpec:
    return RunSpec(**{**spec(strategy, n, repeat=repeat).__dict__, "device_type": device})


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_verdicts_come_first_then_a_cpu_sweeps_notes_then_the_rule(tmp_path, device):
    sweep = build(str(tmp_path / "s.sqlite"), [(_on(device, "single", 1), payload(1, 100.0)),
                                               (_on(device, "ddp", 2), payload(2, 150.0))],
                  command="./run_bench.sh --gpus 1,2", config='{"strategies": ["single", "ddp"]}')
    kinds = [b[0] for b in recommend.blocks(sweep)]
    words = [b[1] for b in recommend.blocks(sweep) if b[0] == "p"]
    assert kinds[:3] == ["h", "table", "p"] and words[0].startswith("synthetic, fp32: Fastest: DDP x2"), words
    assert words[-1].startswith("One row per workload and precision:") and words[-1] == recommend.rule_words()
    cpu = [w for w in words if w.startswith("DataParallel is not in this CPU sweep")]
    assert len(cpu) == (device == "cpu") and (not cpu or words.index(cpu[0]) == len(words) - 2), words
