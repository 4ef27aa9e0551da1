"""selfcheck's per-host noise names the workload it was measured on wherever a report falls back on it
(bench.stats.host_noise, bench.store.hostnoise). The committed H100 DeepLabV3 report held a 1.27% gap against "1.0%,
selfcheck's spread between 3 processes of single device x1": those were the synthetic MLP's 3.2 ms steps, not
DeepLabV3's 108 ms ones, and nothing said so."""
from __future__ import annotations

from pathlib import Path

from bench import stats
from bench.stats.noise import not_carried
from bench.report import recommend
from conftest import example_stores

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h100-2026-11-26"
ENTRY = {"hostname": "vm", "device_type": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "precision": "fp32",
         "measured_at": "2026-11-26T17:19:08+0000", "configuration": "single device x1",
         "process_sps": [78328.6, 79106.0, 78911.6], "store": "selfcheck.sqlite", "sweep_id": 1}


def test_the_host_figure_names_selfchecks_synthetic_mlp_or_the_workload_its_entry_names(tmp_path):
    import json
    from bench.store import hostnoise
    where = tmp_path / "host-noise.json"
    where.write_text(json.dumps({"entries": [ENTRY]}))
    (read,) = hostnoise.entries(str(where))   # older entries name no workload: selfcheck's main sweep ran the MLP alone
    n = stats.host_noise(read)
    assert n.words().startswith("1.0%, selfcheck's spread between 3 processes of single device x1 on the synthetic MLP, "
                                "on host vm, NVIDIA H100 80GB HBM3, 2026-11-26")
    assert n.source_words() == "selfcheck on the synthetic MLP"
    assert "fp32's 1.0% (selfcheck on the synthetic MLP) does not carry over" in not_carried("bf16", {"fp32": n}).detail
    assert stats.host_noise(dict(ENTRY, workload="deeplabv3")).source_words() == "selfcheck on deeplabv3"


def test_the_deeplabv3_report_says_its_noise_came_from_the_synthetic_mlp(tmp_path, monkeypatch):
    sweep = example_stores(EXAMPLE, ("gpu.sqlite",), tmp_path, monkeypatch)("gpu.sqlite", 1)
    text = " ".join(recommend.answer(sweep, "deeplabv3", sweep.bench["deeplabv3"], "fp32")[1])
    assert "1.0%, selfcheck's spread between 3 processes of single device x1 on the synthetic MLP, on host vm" in text
