"""DeepLabV3 fp32 on one H200 (examples/h200-2026-11-27-pm, sweep 1 of gpu.sqlite; trial E, finding 6): the page said
'5.45 GiB, warm-up ... and cuDNN's autotuning included' while the allocator held 20.7 GiB in the warm-up (cuDNN's
benchmark search, given back before the device level was read). Read on the CPU from the committed store."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.analysis import fit, memory_rows
from bench.report import frontier
from bench.store import read, store
from conftest import example_stores

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h200-2026-11-27-pm"


@pytest.fixture
def deeplabv3(tmp_path, monkeypatch):
    """Sweep 1, each configuration with the whole run's reserved peak from its stored memory rows."""
    sweep = example_stores(EXAMPLE, ("gpu.sqlite",), tmp_path, monkeypatch)("gpu.sqlite", 1)
    conn = store.connect(str(tmp_path / "gpu.sqlite"), readonly=True)
    for c in sweep.bench["deeplabv3"]:
        ids = [r[0] for r in conn.execute("SELECT result_id FROM results WHERE config_key = ? AND sweep_id = 1", (c.key,))]
        rows = [m for rid in ids for m in read.result_rows(conn, "memory", rid)]
        c.run_reserved_mib = memory_rows.run_reserved(rows, c.device_type)
    conn.close()
    return sweep


def test_the_warm_ups_allocator_peak_is_said_beside_the_steady_figure_and_not_held_to_the_budget(deeplabv3):
    blocks = frontier.blocks(deeplabv3, 16 * 1024.0, "16.00 GiB per GPU")
    text = " ".join(b[1] for b in blocks if b[0] == "p")
    assert "cuDNN's autotuning included" not in text, text
    assert ("single device x1: steady 5.45 GiB; during the warm-up the allocator held 20.71 GiB (21.33 GiB with the "
            "CUDA context), given back before the device level was read") in text, text   # 21234 - 30 MiB; + 641
    assert "cuDNN's benchmark search in the warm-up gives its workspaces back" in text
    [fp32, bf16] = sorted(blocks[2][2], key=lambda r: r[1], reverse=True)
    assert fp32[2] == "single device x1" and fp32[4] == "5.45 GiB", fp32   # the budget still holds the device level
    by = {c.label: c for c in deeplabv3.bench["deeplabv3"]}
    assert frontier.warmup(by["single device x1 [bf16]"]) is None   # bf16's warm-up held no more than its level


def test_a_warm_up_no_higher_than_the_device_level_says_nothing():
    assert fit.warmup_held({"cuda:0": 3300.0}, {"cuda:0": 2660.0}, {"cuda:0": 2700.0}, 3330.0) is None
    assert fit.warmup_held({"cuda:0": 5545.0}, {"cuda:0": 4904.0}, {"cuda:0": 21204.0}, 5579.0) == (21204.0, 21845.0)
