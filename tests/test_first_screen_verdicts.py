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


def _jitter(n: int, ms: float) -> dict:
    """Steps alternating 0.7x and 1.3x of `ms`: an interquartile range far above 10% of the median (unstable)."""
    p = payload(n, ms)
    for i, row in enumerate(p["steps"]):
        row["step_ms"] = ms * (0.7 if i % 2 else 1.3)
    return p


def _first_screen(sweep) -> tuple:
    """(the synthetic fp32 row of the summary table, its verdict paragraph)."""
    blocks = recommend.blocks(sweep)
    row = next(b for b in blocks if b[0] == "table")[2][0]
    said = next(b[1] for b in blocks if b[0] == "p" and b[1].startswith("synthetic, fp32:"))
    return row, said


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_an_unstable_pick_says_so_in_its_samples_cell_and_its_verdict_with_the_stored_spread(tmp_path, device):
    shaky = build(str(tmp_path / "shaky.sqlite"), [(_on(device, "single", 1), _jitter(1, 100.0)),
                                                    (_on(device, "ddp", 2), payload(2, 274.0))])
    pick = next(c for c in shaky.bench["synthetic"] if c.strategy == "single")
    assert pick.unstable and recommend.recommended(shaky, shaky.bench["synthetic"], "fp32") is pick
    spread = f"{pick.summary.iqr_ms / pick.summary.median_ms:.0%}"   # from the stored steps, not a constant
    row, said = _first_screen(shaky)
    assert row[3] == f"{pick.samples_per_s:.1f} (unstable: its steps spread {spread} of their median)", row
    assert (f"single device x1 is unstable: its steps spread {spread} of their median (interquartile range, its one "
            "process's steps; unstable above 10%; table: synthetic: all configurations).") in said, said
    steady = build(str(tmp_path / "steady.sqlite"), [(_on(device, "single", 1), payload(1, 100.0)),
                                                      (_on(device, "ddp", 2), payload(2, 274.0))])
    row, said = _first_screen(steady)
    assert row[3] == f"{recommend.recommended(steady, steady.bench['synthetic'], 'fp32').samples_per_s:.1f}"
    assert "unstable" not in said, said


def test_processes_spread_apart_are_named_with_their_spread_and_the_flag_follows_the_stored_verdict(tmp_path):
    # three steady processes of DDP x2, 6% and 24% slower than the first: their throughputs spread more than 10%
    rows = [(_on("cpu", "single", 1), payload(1, 300.0))] + [
        (_on("cpu", "ddp", 2, repeat=r), payload(2, ms)) for r, ms in enumerate((100.0, 106.0, 124.0))]
    sweep = build(str(tmp_path / "s.sqlite"), rows)
    pick = recommend.recommended(sweep, sweep.bench["synthetic"], "fp32")
    assert pick.label == "DDP x2" and pick.repeat_spread > 0.10
    row, said = _first_screen(sweep)
    words = f"its 3 processes' throughputs spread {pick.repeat_spread:.0%}"
    assert words in row[3] and f"DDP x2 is unstable: {'its steps' if pick.summary.unstable else words}" in said, said
    for sw in (sweep, build(str(tmp_path / "one.sqlite"), rows[:2])):   # the flag where, and only where, it is stored
        best = recommend.recommended(sw, sw.bench["synthetic"], "fp32")
        row, said = _first_screen(sw)
        assert ("unstable" in row[3]) == ("is unstable:" in said) == best.unstable, (row, said)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_verdicts_come_first_then_a_cpu_sweeps_notes_then_the_rule(tmp_path, device):
    sweep = build(str(tmp_path / "s.sqlite"), [(_on(device, "single", 1), payload(1, 100.0)),
                                               (_on(device, "ddp", 2), payload(2, 150.0))],
                  command="./run_bench.sh --gpus 1,2", config='{"strategies": ["single", "ddp"]}')
    kinds = [b[0] for b in recommend.blocks(sweep)]
    words = [b[1] for b in recommend.blocks(sweep) if b[0] == "p"]
    assert kinds[:3] == ["h", "table", "p"] and words[0].startswith("synthetic, fp32: Fastest: DDP x2"), words
    assert words[-1].startswith("One row per workload and precision (and model") and words[-1] == recommend.rule_words()
    cpu = [w for w in words if w.startswith("DataParallel is not in this CPU sweep")]
    assert len(cpu) == (device == "cpu") and (not cpu or words.index(cpu[0]) == len(words) - 2), words
