"""A report links a profiler trace only where the file is there at render time (bench.report.traces).

The committed H100 example's reports linked ../../../results/traces/sweep1/001-...pt.trace.json.gz and offered
`tensorboard --logdir /work/main/results/traces/sweep1`: the traces stayed on the machine that ran the sweep, and
results/traces/ is not in the repository, so every link led nowhere."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from bench.report import pages
from bench.report import traces as trace_report
from conftest import example_stores

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h100-2026-11-26"


@pytest.fixture
def deeplabv3(tmp_path, monkeypatch):
    return example_stores(EXAMPLE, ("gpu.sqlite",), tmp_path, monkeypatch)("gpu.sqlite", 1).bench["deeplabv3"]


def _markdown(configs, folder) -> str:
    return pages.to_markdown(trace_report.blocks(configs, "deeplabv3"), str(folder))


def test_a_trace_file_absent_at_render_reads_not_kept_and_no_tensorboard_line_is_given(deeplabv3, tmp_path):
    paths = [t["path"] for c in deeplabv3 for t in c.traces if t.get("path")]
    assert paths and not any(os.path.exists(p) for p in paths)   # stored on the machine that ran it, not here
    md = _markdown(deeplabv3, tmp_path)
    assert ".pt.trace.json.gz" not in md and "tensorboard --logdir" not in md
    rows = [line for line in md.splitlines() if line.startswith("| single device x1 | 0 |")]
    assert rows and all(line.endswith("| not kept |") for line in rows)
    assert (f"The trace files were written to {os.path.dirname(paths[-1])} on the machine that ran the sweep and are "
            "not there now") in md


def test_a_trace_file_present_at_render_is_linked_with_how_to_open_its_folder(deeplabv3, tmp_path):
    folder = tmp_path / "traces" / "sweep1"
    folder.mkdir(parents=True)
    kept = []
    for c in deeplabv3:
        rows = []
        for t in c.traces:
            path = folder / os.path.basename(t["path"])
            path.write_bytes(b"")
            rows.append(dict(t, path=str(path)))
        kept.append(dataclasses.replace(c, traces=rows))
    md = _markdown(kept, tmp_path)
    assert "[001-deeplabv3-single-cudax1-b8-g8-i256-synthetic-fp32-rep0-rank0.pt.trace.json.gz](" in md
    assert f"tensorboard --logdir {folder}" in md and "not kept" not in md
