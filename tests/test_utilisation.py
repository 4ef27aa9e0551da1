"""Model FLOPs utilisation: the table of dense peaks, which peak a configuration is held against, MFU on a fake H100
with a known peak, an MFU above 100% refused as a result, unknown devices and the CPU without a peak, --peak-tflops;
and where it is shown: the configuration table, the recommendation, the plot, the side-by-side and history pages."""
from __future__ import annotations

import json
import math
import re
import sqlite3

import pytest

from bench.analysis import results, utilisation
from bench.config import ConfigError, SweepConfig, check_values
from bench.machine import peaks
from bench.report import recommend, report, sidebyside
from bench.report import utilisation as utilisation_report
from bench.store import store
from bench.sweep import record
from bench.sweep.plan import RunSpec
from bench.workloads import synthetic

H100 = "NVIDIA H100 80GB HBM3"
MLP_FLOPS = synthetic.flops_per_sample(4096, 8)   # the default CUDA MLP, per sample


@pytest.mark.parametrize("name,precision,tflops", [
    (H100, "fp32", 67.0), (H100, "tf32", 495.0), (H100, "bf16", 989.0), ("NVIDIA H100 PCIe", "bf16", 756.0),
    ("NVIDIA H200", "fp16", 989.0), ("NVIDIA A100-SXM4-80GB", "tf32", 156.0), ("NVIDIA A100-PCIE-40GB", "fp32", 19.5),
    ("Tesla V100-SXM2-32GB", "fp16", 125.0), ("Tesla V100-PCIE-16GB", "fp32", 14.0), ("NVIDIA L40S", "bf16", 362.0),
    ("NVIDIA L4", "tf32", 60.0)])
def test_the_table_gives_each_known_gpu_its_dense_peak_with_its_source(name, precision, tflops):
    p = peaks.lookup(name, precision)
    assert p.tflops == tflops and "nvidia.com" in p.source and "datasheet" in p.source


@pytest.mark.parametrize("name", ["NVIDIA H100 NVL", "Tesla V100S-PCIE-32GB", "NVIDIA GeForce RTX 4090", "H100", "cpu", ""])
def test_a_device_the_table_does_not_name_whole_gets_no_peak_never_a_neighbours(name):
    assert peaks.lookup(name, "bf16") is None and peaks.lookup(name, "fp32") is None


def test_the_precision_that_ran_picks_the_peak_fsdp_bf16_parameters_run_the_matmuls_in_bf16():
    assert peaks.precision_key("fp32") == "fp32" and peaks.precision_key("fp16", {}) == "fp16"
    assert peaks.precision_key("fp32", {"mixed_precision": "bf16", "reshard": True}) == "bf16"
    assert peaks.lookup("Tesla V100-SXM2-16GB", "bf16") is None  # no BF16 unit: no peak to hold it to


def test_tf32_asked_of_a_gpu_without_tf32_is_held_to_the_fp32_units_it_ran_on_and_says_so():
    p = peaks.lookup("Tesla V100-SXM2-16GB", "tf32")
    assert p.tflops == 15.7 and "no TF32 unit" in p.source and "FP32 units" in p.source


def test_peak_tflops_overrides_or_adds_a_device_and_refuses_bad_values_naming_them():
    over = peaks.parse_override("bf16=400, 50")
    assert over == {"bf16": 400.0, "*": 50.0}
    assert peaks.lookup(H100, "bf16", over).tflops == 400.0 and peaks.lookup("NVIDIA GeForce RTX 4090", "fp32", over).tflops == 50
    assert peaks.lookup(H100, "tf32", {"bf16": 1.0}).tflops == 495.0   # the table for the precisions not typed
    for bad, says in (("bf16=-1", "'-1' is not a peak"), ("int8=100", "'int8' is not a precision"), ("nan", "'nan'"),
                      ("fp32=1,fp32=2", "fp32 is given twice"), ("", "'' is not a peak")):
        with pytest.raises(ConfigError, match=re.escape(says)):
            check_values(SweepConfig(peak_tflops=bad))


def test_report_peak_tflops_is_refused_by_argparse_with_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        report.main(["--store", "missing.sqlite", "--peak-tflops", "bf16=zero"])
    assert e.value.code == 2 and "'zero' is not a peak" in capsys.readouterr().err


# ---------------------------------------------------------------- a fake H100 sweep with known numbers

def rspec(strategy: str, n: int, workload: str = "synthetic", precision: str = "fp32", device: str = "cuda") -> RunSpec:
    return RunSpec(workload=workload, strategy=strategy, device_type=device, device_count=n, per_device_batch=512,
                   global_batch=512 * n, image_size=0, steps=10, warmup=2, threads=0, seed=0, scaling="weak",
                   precision=precision, synthetic_width=4096, synthetic_depth=8)


def payload(n: int, step_ms: float, per_sample: float, gpu: str = H100, device: str = "cuda", gpu_samples=()) -> dict:
    """n ranks stepping step_ms at 512 samples each; FLOPs counted as the worker stores them (rank 0, first repeat)."""
    steps = [{"kind": "measure", "rank": r, "step": i, "step_ms": step_ms} for r in range(n) for i in range(10)]
    windows = [{"kind": "measure", "rank": r, "wall_s": 10 * step_ms / 1e3, "samples": 5120, "steps": 10} for r in range(n)]
    memory = ([{"rank": r, "device": f"cuda:{r}", "device_name": gpu, "peak_allocated_mib": 1000.0} for r in range(n)]
              if device == "cuda" else [{"rank": r, "device": "cpu", "peak_rss_mib": 900.0} for r in range(n)])
    return {"steps": steps, "windows": windows, "memory": memory, "gpu_samples": list(gpu_samples),
            "flops": {"flops_per_sample": per_sample, "device": "meta", "batch": 512, "uncounted": [],
                      "analytic_per_sample": MLP_FLOPS, "method": "FlopCounterMode"}}


def build(path: str, configs: list, config_json: str = "{}", gpus=(H100, H100)) -> results.Sweep:
    conn = store.connect(path)
    env = store.insert_environment(conn, {"hostname": "h", "gpu_names": list(gpus), "cpu_cores": 16})
    sid = store.begin_sweep(conn, "cmd", config_json, env)
    for sp, pl in configs:
        record.record_result(conn, sid, env, sp, "ok", payload=pl)
    store.end_sweep(conn, sid, "completed")
    conn.close()
    conn = store.connect(path, readonly=True)
    try:
        return results.load(conn, sid)
    finally:
        conn.close()


def by_label(sweep, workload="synthetic") -> dict:
    return {c.label: c for c in sweep.bench[workload]}


def test_mfu_on_an_h100_is_model_flops_times_throughput_over_its_fp32_peak(tmp_path):
    # the committed H100 example: the MLP 8 x 4096 at batch 512, fp32 (TF32 off), 10.32 ms a step
    sw = build(str(tmp_path / "s.sqlite"), [(rspec("single", 1), payload(1, 10.32, MLP_FLOPS)),
                                            (rspec("ddp", 2), payload(2, 11.0, MLP_FLOPS))])
    u = by_label(sw)["single device x1"].utilisation
    achieved = MLP_FLOPS * 512 / 0.01032 / 1e12
    assert u.achieved_tflops == pytest.approx(achieved) and u.mfu == pytest.approx(achieved / 67.0)
    assert 0.55 < u.mfu < 0.60 and u.mfu_cell() == f"{achieved / 67:.1%}" and u.words() == f"{achieved / 67:.0%} MFU"
    assert u.peak_text.startswith("H100 SXM5, FP32 without tensor cores (TF32 off): 67 TFLOP/s per device")
    assert u.flops.source.startswith("counted by FlopCounterMode on meta")
    assert "agrees with the workload's analytic figure" in u.flops.check
    ddp = by_label(sw)["DDP x2"].utilisation   # per device: the two GPUs' throughput over two peaks
    assert ddp.mfu == pytest.approx(MLP_FLOPS * 1024 / 0.011 / 2 / 1e12 / 67.0)
    assert utilisation.at(ddp, 2 * 1024 / 0.011, 4) == pytest.approx(ddp.mfu)  # the forecast's: same step at 4 GPUs
    from bench.report import tables   # bench.results' DataFrames and ./run_bench.sh export
    row = next(r for r in tables.configurations(sw) if r["label"] == "DDP x2")
    assert row["mfu"] == ddp.mfu and row["peak_tflops"] == 67.0 and row["flops_per_sample"] == MLP_FLOPS


def test_an_mfu_above_100_percent_is_an_error_in_the_peak_or_the_count_never_a_result(tmp_path):
    sw = build(str(tmp_path / "s.sqlite"), [(rspec("single", 1), payload(1, 10.32, MLP_FLOPS * 2))])
    u = sw.bench["synthetic"][0].utilisation
    assert math.isnan(u.mfu) and u.measured > 1.0
    assert u.error.startswith(f"MFU {u.measured:.0%} is above 100%, which no device reaches: the peak (H100 SXM5")
    assert "or the FLOP count" in u.error and u.mfu_cell() == f"error: {u.measured:.0%} > 100%" and u.words() == ""
    row, text = recommend.answer(sw, "synthetic", sw.bench["synthetic"], "fp32")
    assert row[-1] == u.mfu_cell() and "an error in the peak or the count" in text[0]
    blocks = utilisation_report.blocks("synthetic", sw.bench["synthetic"])
    assert any(b[0] == "p" and b[1].startswith("ERROR in single device x1 [fp32]: MFU") for b in blocks)


def test_with_recomputation_the_hardware_flops_utilisation_stands_beside_mfu_and_is_held_to_100_percent_too(tmp_path):
    pl = payload(1, 10.32, MLP_FLOPS)
    pl["flops"]["hw_flops_per_sample"] = MLP_FLOPS * 4 / 3   # the forward again, in backward
    u = build(str(tmp_path / "s.sqlite"), [(rspec("single", 1), pl)]).bench["synthetic"][0].utilisation
    assert u.hfu == pytest.approx(u.mfu * 4 / 3) and u.mfu_cell() == f"{u.mfu:.1%} (HFU {u.hfu:.1%})"
    pl["flops"]["hw_flops_per_sample"] = MLP_FLOPS * 2   # more than the device can do: an error, not a result
    u = build(str(tmp_path / "t.sqlite"), [(rspec("single", 1), pl)]).bench["synthetic"][0].utilisation
    assert u.error.startswith("HFU (recomputation included) 114% is above 100%") and u.mfu_cell() == "error: 114% > 100%"


def test_an_unknown_gpu_has_no_mfu_and_a_line_saying_so_until_peak_tflops_adds_it(tmp_path):
    gpu = "NVIDIA GeForce RTX 4090"
    sw = build(str(tmp_path / "s.sqlite"), [(rspec("single", 1), payload(1, 10.32, MLP_FLOPS, gpu=gpu))], gpus=(gpu,))
    u = sw.bench["synthetic"][0].utilisation
    assert math.isnan(u.mfu) and u.mfu_cell() == "–" and u.achieved_cell() == f"{MLP_FLOPS * 512 / 0.01032 / 1e12:.1f}"
    assert u.note == f"no MFU: {gpu} is not in the table of peaks (bench/machine/peaks.py); --peak-tflops fp32=TFLOPS adds it"
    assert ("p", "No MFU: " + u.note[len("no MFU: "):] + ".") in utilisation_report.blocks("synthetic", sw.bench["synthetic"])
    utilisation.attach(sw, "fp32=82.6")   # report --peak-tflops
    assert sw.bench["synthetic"][0].utilisation.mfu == pytest.approx(u.achieved_tflops / 82.6)
    # the sweep's own --peak-tflops, stored with it, is the report's default
    sw2 = build(str(tmp_path / "t.sqlite"), [(rspec("single", 1), payload(1, 10.32, MLP_FLOPS, gpu=gpu))],
                config_json=json.dumps({"peak_tflops": "82.6"}), gpus=(gpu,))
    assert sw2.bench["synthetic"][0].utilisation.peak_text.endswith("82.6 TFLOP/s per device (--peak-tflops)")


def test_on_cpu_achieved_gflops_per_process_and_mfu_only_with_a_typed_peak(tmp_path):
    s = rspec("single", 1, device="cpu")
    sw = build(str(tmp_path / "s.sqlite"), [(s, payload(1, 100.0, 1e9, device="cpu"))], gpus=())
    u = sw.bench["synthetic"][0].utilisation
    assert u.achieved_cell() == f"{1e9 * 5120 / 1.0 / 1e9:.2f}" and math.isnan(u.mfu)  # GFLOP/s per process
    assert u.note == "no MFU: on CPU there is no table of peaks; --peak-tflops gives one"
    utilisation.attach(sw, "10")
    assert sw.bench["synthetic"][0].utilisation.mfu == pytest.approx(5.12 / 10)


def test_where_the_counter_missed_work_the_analytic_figure_is_used_and_said_without_one_a_lower_bound():
    how = {"uncounted": ["aten._scaled_dot_product_flash_attention_for_cpu"], "device": "cpu"}
    f = utilisation.model_flops(1.0e6, None, how, 1.5e6)
    assert f.per_sample == 1.5e6 and f.source == ("the workload's analytic figure (the counter has no formula for "
                                                  "aten._scaled_dot_product_flash_attention_for_cpu)")
    assert "differs from the workload's analytic figure by -33%" in f.check
    low = utilisation.model_flops(1.0e6, None, how, None)
    assert low.per_sample == 1.0e6 and low.lower_bound and "a lower bound" in low.source
    assert utilisation.model_flops(None, None, {"error": "RuntimeError: x"}, 2e6).source == \
        "the workload's analytic figure (it could not be counted (RuntimeError: x))"
    # an older store: the MLP's analytic figure stored with its details is all there is
    assert utilisation.model_flops(None, None, {}, 7.0).per_sample == 7.0


def test_mfu_is_shown_in_the_recommendation_table_plot_side_by_side_and_history(tmp_path):
    path = str(tmp_path / "s.sqlite")
    sw = build(path, [(rspec("single", 1), payload(1, 10.32, MLP_FLOPS)), (rspec("ddp", 2), payload(2, 10.5, MLP_FLOPS))])
    ddp = by_label(sw)["DDP x2"]
    row, text = recommend.answer(sw, "synthetic", sw.bench["synthetic"], "fp32")
    assert recommend.SUMMARY_HEADERS[-1] == "MFU" and row[2] == "DDP x2" and row[-1] == ddp.utilisation.mfu_cell()
    assert re.match(r"Fastest: DDP x2, [\d.]+ samples/s, \d+% scaling efficiency against single device x1, "
                    rf"{ddp.utilisation.mfu:.0%} MFU \(table", text[0]), text[0]
    out = report.render(path, plots_dir=str(tmp_path / "p"), report_dir=str(tmp_path / "r"))
    md = open(out["markdown"]).read()
    assert "| TFLOP/s per GPU | MFU | throttled |" in md and f"| {ddp.utilisation.mfu:.1%} |" in md
    assert "MFU against the dense peak (no sparsity) of the precision that ran: H100 SXM5" in md
    fig = utilisation_report.figure(sw.bench["synthetic"], "synthetic", "cuda, H100")
    lines = {ln.get_label(): list(ln.get_ydata()) for ln in fig.axes[0].get_lines()}
    assert lines["DDP x2"] == [pytest.approx(ddp.utilisation.mfu * 100)] and "synthetic_utilisation.png" in " ".join(out["plots"])
    assert fig.axes[0].get_ylabel() == "MFU (% of the dense peak)"
    other = str(tmp_path / "o.sqlite")
    build(other, [(rspec("single", 1), payload(1, 20.0, MLP_FLOPS)), (rspec("ddp", 2), payload(2, 21.0, MLP_FLOPS))])
    cols = sidebyside.load_targets([(path, None), (other, None)])
    rows = [b for b in sidebyside.configuration_blocks(cols, None) if b[0] == "table"][0][2]
    ddp_row = next(r for r in rows if r[1] == "DDP x2")
    assert f"{ddp.utilisation.mfu:.0%} MFU" in ddp_row[3] and "MFU" in ddp_row[4]
    from bench.analysis import history   # a second sweep of the same store: each configuration's history
    from bench.report import history as history_report
    build(path, [(rspec("single", 1), payload(1, 10.32, MLP_FLOPS)), (rspec("ddp", 2), payload(2, 12.0, MLP_FLOPS))])
    conn = store.connect(path, readonly=True)
    try:
        h = history.build(conn, history.Filters(strategies=("ddp",)))
    finally:
        conn.close()
    head, hrows = history_report.series_table(h.series[0], None)
    assert head[4] == "MFU" and [r[4] for r in hrows] == [p.config.utilisation.mfu_cell() for p in h.series[0].points]
    assert hrows[0][4] == ddp.utilisation.mfu_cell() != hrows[1][4]


def test_a_version_5_store_reads_without_flops_or_samples_and_migrates_to_hold_them(tmp_path):
    from bench.store import read, schema
    path = str(tmp_path / "v5.sqlite")
    build(path, [(rspec("single", 1), payload(1, 10.32, MLP_FLOPS))])
    conn = sqlite3.connect(path)  # as version 5 wrote it: no FLOP columns, no gpu_samples table
    conn.executescript("ALTER TABLE results DROP COLUMN flops_per_sample; ALTER TABLE results DROP COLUMN hw_flops_per_sample;"
                       "ALTER TABLE results DROP COLUMN flops_json; DROP TABLE gpu_samples; PRAGMA user_version = 5;")
    conn.close()
    old = read.connect(path)   # read as it is: migrated in a copy in memory
    try:
        c = results.load(old, 1).bench["synthetic"][0]
    finally:
        old.close()
    assert c.flops == {} and c.gpu is None and c.utilisation.note == "no FLOPs per sample: not counted (an older store)"
    conn = store.connect(path)  # the next sweep migrates it in place
    cols = {r[1] for r in conn.execute("PRAGMA table_info(results)")}
    assert {"flops_per_sample", "hw_flops_per_sample", "flops_json"} <= cols
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
    assert conn.execute("SELECT COUNT(*) FROM gpu_samples").fetchone()[0] == 0
    conn.close()


@pytest.mark.parametrize("name,precision,how", [
    ("NVIDIA H200", "fp32", "as listed"), ("NVIDIA H200", "bf16", "half the sparse figure"),
    (H100, "tf32", "half the sparse figure"), ("NVIDIA A100-SXM4-80GB", "fp32", "as listed"),
    ("Tesla V100-SXM2-32GB", "fp16", "as listed")])
def test_each_precisions_peak_says_how_it_was_read_off_the_datasheet(name, precision, how):
    # The H200's FP32 67 TFLOP/s (no tensor cores) was sourced '(dense: half the sparse figure)', as the BF16 989 is:
    # the datasheet's FP32 figure is not a sparsity figure, nor is anything on a V100's.
    src = peaks.lookup(name, precision).source
    assert how in src and ("half the sparse" in src) is (how == "half the sparse figure")


def test_mfu_at_two_precisions_side_by_side_says_each_is_against_its_own_peak_and_to_compare_tflops(tmp_path):
    # DeepLabV3 on an H200 read MFU 40.5% at fp32 beside 5.6% at bf16, as if fp32 were the efficient one, where bf16 did
    # 55.4 TFLOP/s of the model's work against fp32's 27.2: the note under the table says to compare TFLOP/s.
    fp32, bf16 = rspec("single", 1), rspec("single", 1, precision="bf16")
    sw = build(str(tmp_path / "s.sqlite"), [(fp32, payload(1, 10.32, MLP_FLOPS)), (bf16, payload(1, 2.0, MLP_FLOPS))])
    got = {c.precision: c.utilisation for c in sw.bench["synthetic"]}
    assert got["fp32"].mfu > got["bf16"].mfu and got["bf16"].achieved_tflops > got["fp32"].achieved_tflops
    text = " ".join(b[1] for b in utilisation_report.blocks("synthetic", sw.bench["synthetic"]) if b[0] == "p")
    assert (f"MFU is against each precision's own peak (bf16 989, fp32 67 TFLOP/s), so across precisions compare "
            f"TFLOP/s per GPU, not MFU: the most each reached, bf16 {got['bf16'].achieved_tflops:.1f} against fp32 "
            f"{got['fp32'].achieved_tflops:.1f}.") in text
    one = build(str(tmp_path / "t.sqlite"), [(fp32, payload(1, 10.32, MLP_FLOPS))])   # one precision: nothing to say
    assert "each precision's own peak" not in str(utilisation_report.blocks("synthetic", one.bench["synthetic"]))
