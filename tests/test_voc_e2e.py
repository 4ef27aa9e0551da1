"""The real-data workload end to end: DeepLabV3 trained on a VOC-shaped tree under single and DDP."""
from __future__ import annotations

import sqlite3
import time

import pytest

from conftest import finished_ok, forkserver_env, run_bench, sweep_in_background
from voc_tree import make_voc_tree

N_IMAGES = 9
VOC_ARGS = ["--workloads", "deeplabv3", "--data", "voc", "--image-size", "32", "--per-device-batch", "2",
            "--num-workers", "1", "--warmup", "1", "--repeats", "1", "--no-comm-bench", "--no-report"]


@pytest.mark.timeout(300)
def test_a_missing_image_is_named_before_anything_starts(tmp_path, store_path):
    root = make_voc_tree(tmp_path / "voc", n_images=4)
    victim = next((root / "VOCdevkit" / "VOC2012" / "JPEGImages").glob("*.jpg"))
    victim.unlink()
    p = run_bench(VOC_ARGS + ["--voc-root", str(root), "--store", store_path], timeout=120)
    assert p.returncode == 2 and victim.name in p.stderr, p.stderr


@pytest.mark.timeout(300)
def test_an_unreadable_image_under_ddp_fails_every_rank_promptly_naming_the_file(tmp_path, store_path):
    root = make_voc_tree(tmp_path / "voc", n_images=6)
    victims = sorted((root / "VOCdevkit" / "VOC2012" / "JPEGImages").glob("*.jpg"))
    for v in victims:
        v.write_bytes(b"\xff\xd8 not a jpeg")
    t0 = time.monotonic()
    p = run_bench(VOC_ARGS + ["--voc-root", str(root), "--strategies", "ddp", "--gpus", "2", "--steps", "2",
                              "--store", store_path, "--pg-timeout", "60"], timeout=280)
    elapsed = time.monotonic() - t0
    assert p.returncode == 1, p.stdout + p.stderr
    conn = sqlite3.connect(store_path)
    got = {m: (st, r) for m, st, r in conn.execute("SELECT mode, status, reason FROM results")}
    assert set(got) == {"bench", "loader"}, got  # the loader timed alone reads the same broken files
    for status, reason in got.values():
        assert status == "failed" and "DataError" in reason and ".jpg" in reason and "sample" in reason, reason
    assert elapsed < 120, f"a broken file took {elapsed:.0f} s to end the configuration"


@pytest.mark.timeout(300)
def test_deeplabv3_on_voc_with_batchnorm_and_dropout_passes_the_gate_under_ddp(tmp_path):
    # The gate itself (bench.sweep.equivalence), as the sweep runs it for --check-equivalence, on real VOC files.
    # DataParallel's replica r gets DDP rank r's samples (test_voc: the sampler); on CPU it has one replica.
    # BatchNorm normalises each replica's batch: the reference takes its global batch as 2 micro-batches.
    from bench.sweep import equivalence
    from bench.sweep.launch import Limits
    from bench.sweep.plan import RunSpec
    root = make_voc_tree(tmp_path / "voc", n_images=8)
    forkserver_env()  # the ranks fork from the session's server, as a CPU sweep's do (the fresh path: test_forkserver.py)
    s = RunSpec(workload="deeplabv3", strategy="ddp", device_type="cpu", device_count=2, per_device_batch=2,
                global_batch=4, image_size=32, steps=2, warmup=0, threads=1, seed=0, scaling="weak", mode="equivalence",
                data="voc", voc_root=str(root), process_start="forked")
    out = equivalence.run(s, Limits(fixed_s=240.0, stall_s=60.0))
    assert out.status == "ok", out.reason
    assert out.payload["passed"] and "2 micro-batches" in out.payload["batchnorm"]
    assert out.payload["reference_losses"] == pytest.approx(out.payload["candidate_losses"], rel=1e-4)


@pytest.mark.timeout(600)
def test_a_split_shorter_than_the_warmup_is_recorded_with_its_reason_and_the_sweep_goes_on(tmp_path, store_path):
    # 7 images at batch 2: single (x1 whatever --gpus says) steps 3 times an epoch, one measured after 2 warm-up steps;
    # DDP x2 (global batch 4) once, inside the warm-up. (Were every configuration so, planning would refuse the sweep:
    # nothing to measure.)
    root = make_voc_tree(tmp_path / "voc", n_images=7)
    p = run_bench(VOC_ARGS + ["--voc-root", str(root), "--epochs", "1", "--warmup", "2", "--strategies", "single,ddp",
                              "--gpus", "2", "--store", store_path], timeout=600)
    assert "Traceback" not in p.stdout + p.stderr
    conn = sqlite3.connect(store_path)
    conn.row_factory = sqlite3.Row
    got = {(r["strategy"], r["device_count"]): r for r in conn.execute("SELECT * FROM results WHERE mode = 'bench'")}
    assert got[("ddp", 2)]["status"] == "skipped" and "no measured step" in got[("ddp", 2)]["reason"]
    assert "inside the 2 warm-up step(s)" in got[("ddp", 2)]["reason"]
    assert got[("single", 1)]["status"] == "ok"
    assert conn.execute("SELECT status FROM sweeps").fetchone()[0] == "completed"
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.fixture(scope="module", autouse=True)
def epochs_sweep(tmp_path_factory):
    """The shipped reference experiment (sweeps/reference.toml) in its CPU form: 2 epochs of a 9-image tree at 32 px,
    started when this file's tests start and read by its last test, so that the minute it takes overlaps the others
    (they time nothing but their own promptness, far inside their bounds)."""
    tmp = tmp_path_factory.mktemp("voc_epochs")
    root = make_voc_tree(tmp / "voc", n_images=N_IMAGES)
    with sweep_in_background(tmp, ["--config", "sweeps/reference.toml", *VOC_ARGS, "--voc-root", str(root), "--epochs", "2",
                                   "--strategies", "single,ddp", "--gpus", "2", "--device", "cpu"]) as background:
        yield background


@pytest.mark.timeout(600)
def test_voc_epochs_under_single_and_ddp_record_time_loss_data_wait_and_coverage(epochs_sweep):
    store_path = finished_ok(epochs_sweep)
    conn = sqlite3.connect(store_path)
    conn.row_factory = sqlite3.Row
    results = conn.execute("SELECT * FROM results WHERE mode = 'bench'").fetchall()
    assert {(r["strategy"], r["device_count"], r["status"], r["data"]) for r in results} == {
        ("single", 1, "ok", "voc"), ("ddp", 2, "ok", "voc")}
    for r in results:
        epochs = conn.execute("SELECT * FROM epochs WHERE result_id = ? ORDER BY epoch", (r["result_id"],)).fetchall()
        assert [e["epoch"] for e in epochs] == [0, 1]
        g = r["global_batch"]
        for e in epochs:
            # No image twice; only the N mod G tail that cannot fill a whole global batch is left out.
            assert e["images"] == N_IMAGES and e["images_repeated"] == 0
            assert e["images_dropped"] == N_IMAGES % g and e["samples"] == N_IMAGES // g * g
            assert e["steps"] == N_IMAGES // g and e["wall_s"] > 0 and e["mean_loss"] > 0
            assert 0 <= e["data_wait_s"] < e["wall_s"]
        steps = conn.execute("SELECT * FROM steps WHERE result_id = ? AND rank = 0", (r["result_id"],)).fetchall()
        assert len(steps) == 2 * (N_IMAGES // g) and all(s["data_ms"] > 0 for s in steps)
    # Every strategy has the same loader budget per device, and the loader alone is timed at each count.
    got = {(r["mode"], r["strategy"], r["device_count"]): r for r in conn.execute("SELECT * FROM results")}
    assert got[("bench", "ddp", 2)]["loader_workers"] == 2 and got[("bench", "single", 1)]["loader_workers"] == 1
    assert got[("loader", "loader", 2)]["status"] == "ok" and got[("loader", "loader", 2)]["samples_per_s"] > 0
    loader = got[("loader", "loader", 2)]  # DDP's 2 loaders at once, 1 worker each: the count's whole budget
    assert '"loaders": 2' in loader["spec_json"] and '"num_workers": 1' in loader["spec_json"] and loader["loader_workers"] == 2
