"""A new user's default CPU sweep, read on its first screen (trial D): the '≥ 75% up to' column read '1' where no count
past one reached 75% (DDP x2 at 72%: '1' reads as a count that scales), and nothing there said that on CPU x2 uses two
cores where single device x1 uses one."""
from __future__ import annotations

from bench.report import recommend
from conftest import read_sweep
from report_fixtures import build_sweep_store


def _sweep(path: str, device: str = "cpu"):
    build_sweep_store(path, device=device)
    return read_sweep(path)


def test_no_count_past_one_at_75_percent_reads_none_with_the_first_count_below(tmp_path):
    sweep = _sweep(str(tmp_path / "s.sqlite"))
    row, _ = recommend.answer(sweep, "synthetic", sweep.bench["synthetic"], "fp32")
    ddp2 = next(c for c in sweep.bench["synthetic"] if c.strategy == "ddp" and c.device_count == 2)
    assert ddp2.efficiency < recommend.EFFICIENCY_FLOOR
    assert row[6] == f"none ({ddp2.efficiency:.0%} at 2)", row


def test_a_cpu_sweeps_first_screen_says_what_a_device_is_and_a_gpu_sweeps_does_not(tmp_path):
    words = " ".join(b[-1] for b in recommend.blocks(_sweep(str(tmp_path / "c.sqlite"))) if b[0] == "p")
    assert "On CPU a device is one process with 1 torch thread: x2 uses two cores where single device x1 uses one" in words
    gpu = " ".join(b[-1] for b in recommend.blocks(_sweep(str(tmp_path / "g.sqlite"), "cuda")) if b[0] == "p")
    assert "On CPU a device" not in gpu
