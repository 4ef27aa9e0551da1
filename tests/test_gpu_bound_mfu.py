"""A GPU busy 85% or more whose kernels reach well under the math units' limit is GPU-bound, not "compute-bound"
(bench.report.bound). The H100 transformer's recommendation read "compute-bound (GPU busy 94%)" beside 13.9% MFU, which a
performance engineer reads as at the hardware's limit (buy a faster GPU), with no lever; the lever is the kernels'
efficiency. The stored category stays "compute"."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bench.report import bound, recommend
from conftest import example_stores

H100 = Path(__file__).resolve().parents[1] / "examples" / "h100-2026-11-26"
TRANSFORMER = 2   # gpu.sqlite's sweep of the 134m transformer, bf16


@pytest.fixture
def sweep(tmp_path, monkeypatch):
    return example_stores(H100, ("gpu.sqlite",), tmp_path, monkeypatch)("gpu.sqlite", TRANSFORMER)


def single(sweep):
    return next(c for c in sweep.bench["transformer"] if c.label == "single device x1 [bf16, adamw]")


def test_busy_94_at_14_percent_mfu_reads_gpu_bound_with_the_kernel_levers(sweep):
    c = single(sweep)
    kind, why = bound.bound(sweep, "transformer", c)
    assert kind == "GPU-bound (GPU busy 94%, MFU 13.9%)", kind
    assert "compute-bound (GPU busy 94%)" not in kind and bound.bound_category(kind) == "compute"
    assert "the GPU's kernels, not the host, set the pace" in why and "13.9% MFU" in why
    assert "--compile" in why and "--per-device-batch" in why and "not the host or a faster GPU" in why, why
    rows = {(r[0], r[1]): dict(zip(recommend.SUMMARY_HEADERS, r)) for r in recommend.blocks(sweep)[1][2]}
    cell = next(r["bound"] for (w, _), r in rows.items() if w == "transformer")
    assert "MFU" in cell and not cell.startswith("compute-bound"), cell


def test_kernels_near_the_peak_read_compute_bound_and_no_mfu_reads_gpu_bound(sweep):
    c = single(sweep)
    near = replace(c, utilisation=replace(c.utilisation, mfu=0.62))
    kind, why = bound.bound(sweep, "transformer", near)
    assert kind == "compute-bound (GPU busy 94%, MFU 62.0%)" and "near the math units' dense peak" in why, kind
    unknown = replace(c, utilisation=None)
    kind, why = bound.bound(sweep, "transformer", unknown)
    assert kind == "GPU-bound (GPU busy 94%, MFU not known)" and "is not known" in why, kind
    assert {bound.bound_category(k) for k in (kind, "compute-bound (GPU busy 94%, MFU 62.0%)")} == {"compute"}
