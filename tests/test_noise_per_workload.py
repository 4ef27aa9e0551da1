"""The process noise a workload's verdicts rest on is that workload's, or names the workload it came from
(bench.analysis.process_noise). Before 2026-11-27 the default CUDA sweep repeated the synthetic MLP alone (bench.sweep.plan.noise_probe; every workload since):
every DeepLabV3 lead was held against the MLP's 3 ms steps and worded "0.5%, this sweep's spread between the 3
processes of single device x1", which a user reads as DeepLabV3's single x1."""
from __future__ import annotations

import pytest

from bench.analysis import results
from bench.report import recommend
from bench.store import hostnoise, store
from bench.sweep import record

import report_fixtures as rf
from report_fixtures import H100, h100_payload, h100_spec, write_synthetic_processes


def build(path: str, mlp_spread: float = 0.01, deeplab_repeats: int = 1, hostname: str = "vm", mlp_processes: int = 3) -> int:
    """One CUDA sweep: the synthetic MLP single x1 [fp32] in 3 processes `mlp_spread` apart, DeepLabV3 single x1 and DDP
    x1 [fp32] (DDP about 9% slower) in `deeplab_repeats` processes each."""
    from bench.store import write
    conn = store.connect(path)
    env_id = store.insert_environment(conn, {"hostname": hostname, "gpu_names": [H100], "cpu_model": "Xeon",
                                             "gpus": [{"index": 0, "name": H100, "memory_total_mib": 81559}]})
    sid = store.begin_sweep(conn, "./run_bench.sh --workloads synthetic,deeplabv3 --strategies single,ddp", "{}", env_id)
    for strategy in ("single", "ddp"):
        for r in range(deeplab_repeats):
            pl = h100_payload((strategy, "fp32", False), traced=False)
            write.write_result(conn, sid, env_id, h100_spec("deeplabv3", strategy, repeat=r), "ok", "", pl,
                               derived=record.summary_columns(pl["steps"], pl["windows"], 8), traces=[])
    write_synthetic_processes(conn, sid, env_id, (1.0, 1.0, 1.0 / (1.0 + mlp_spread))[:mlp_processes])
    store.end_sweep(conn, sid, "completed")
    conn.close()
    return sid


@pytest.fixture
def sweep(tmp_path, monkeypatch):
    """load(**build's arguments) -> the sweep; DDP x1 DeepLabV3 9% slower than single x1; selfcheck's file empty."""
    monkeypatch.setenv("BENCH_HOST_NOISE", str(tmp_path / "host-noise.json"))
    median, p10, p90, *rest = rf.H100_DEEPLAB[("single", "fp32", False)]
    slow = 1.09
    monkeypatch.setitem(rf.H100_DEEPLAB, ("ddp", "fp32", False), (median * slow, p10 * slow, p90 * slow, median * slow,
                                                                  *rest[1:]))

    def load(**kw) -> results.Sweep:
        path = str(tmp_path / f"s{len(list(tmp_path.glob('*.sqlite')))}.sqlite")
        build(path, **kw)
        conn = store.connect(path, readonly=True)
        try:
            return results.load(conn, results.pick_sweep(conn, None))
        finally:
            conn.close()
    return load


def verdict(sweep: results.Sweep) -> tuple:
    """(DeepLabV3 fp32's lead cell, its paragraph, the noise lines under the verdicts)."""
    blocks = recommend.blocks(sweep)
    rows = {(r[0], r[1]): dict(zip(recommend.SUMMARY_HEADERS, r)) for r in blocks[1][2]}
    paragraph = next(b[1] for b in blocks if b[0] == "p" and b[1].startswith("deeplabv3"))
    lines = [b[1] for b in blocks if b[0] == "p" and b[1].startswith("Process noise")]
    return rows[("deeplabv3", "fp32")]["lead over runner-up"], paragraph, lines


def test_deeplabv3s_lead_names_the_synthetic_mlp_whose_processes_gave_its_noise(sweep):
    s = sweep()
    lead, paragraph, lines = verdict(s)
    assert lead.startswith("9%") or lead.startswith("8%"), lead
    assert "synthetic MLP" in lead or "noise not measured" in lead, lead
    assert lead.endswith("noise, this sweep on the synthetic MLP)"), lead
    assert ("1.0%, this sweep's spread between the 3 processes of single device x1 on the synthetic MLP on this GPU; "
            "deeplabv3 ran no configuration at fp32 in several processes") in paragraph
    # one line per workload and precision under the verdicts, each naming whose processes it holds
    assert any(line.startswith("Process noise on this GPU, deeplabv3 at fp32: 1.0% (") and
               "3 processes of single device x1 on the synthetic MLP, this sweep" in line for line in lines), lines
    assert any(line.startswith("Process noise on this GPU, synthetic at fp32: 1.0% (") for line in lines), lines
    # the MLP's own verdicts hold its own figure, unnamed as a stand-in
    assert s.noise_by_workload[("synthetic", "fp32")].workload == ""
    # the sweep's closing line (its figure per precision) names the workload in a sweep of several
    assert "on the synthetic MLP" in s.noise_by_precision["fp32"].figure_words()


def test_deeplabv3s_own_repeats_come_before_the_mlps(sweep):
    s = sweep(mlp_spread=0.25, deeplab_repeats=3)
    n = s.noise_by_workload[("deeplabv3", "fp32")]
    assert n.source == "sweep" and n.workload == "" and n.fraction < 0.01   # its own three processes, not the MLP's 25%
    assert s.noise_by_workload[("synthetic", "fp32")].fraction == pytest.approx(0.25, abs=0.01)


def test_selfchecks_figure_of_the_same_workload_comes_before_the_sweeps_other_workload(sweep):
    hostnoise.record({"hostname": "vm", "device_type": "cuda", "device_name": H100, "precision": "fp32",
                      "workload": "deeplabv3", "measured_at": "2026-11-27T07:30:00+0000",
                      "configuration": "single device x1", "process_sps": [74.0, 74.3, 74.5]})
    n = sweep().noise_by_workload[("deeplabv3", "fp32")]
    assert n.source == "host" and "on deeplabv3" in n.detail
    hostnoise.record({"hostname": "vm", "device_type": "cuda", "device_name": H100, "precision": "fp32",
                      "measured_at": "2026-11-28T07:30:00+0000", "configuration": "single device x1",
                      "process_sps": [74.0, 80.0, 90.0]})   # the newer entry: selfcheck's MLP (no workload named)
    n = sweep().noise_by_workload[("deeplabv3", "fp32")]
    assert n.source == "sweep" and n.workload == "the synthetic MLP"   # this sweep's MLP before selfcheck's MLP


def test_with_no_repeats_anywhere_deeplabv3_reads_not_measured(sweep):
    s = sweep(mlp_processes=1)
    assert s.noise_by_workload[("deeplabv3", "fp32")].source == "none"
    lead, paragraph, lines = verdict(s)
    assert "not resolved: noise not measured" in lead, lead
    assert "Process noise on this GPU, deeplabv3 at fp32: not measured for deeplabv3 at fp32 on this GPU." in lines
