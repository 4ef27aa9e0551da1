"""The report says the image size an image workload ran at (trial B: resnet18 at --image-size 32, natural 224, said
nowhere but in the command line; samples/s at 32 and 224 px differ 50-fold)."""
from __future__ import annotations

import dataclasses

from bench.analysis import results as analysis
from bench.report import report
from bench.store import store
from bench.sweep import record
from report_fixtures import measured, memory, spec


def _sweep(path: str, workload: str, image_size: int, details: dict):
    conn = store.connect(path)
    env_id = store.insert_environment(conn, {"hostname": "h", "cpu_model": "Test CPU", "cpu_cores": 2})
    sid = store.begin_sweep(conn, "bench sweep", "{}", env_id)
    record.record_result(conn, sid, env_id, dataclasses.replace(spec(workload, "single", 1), image_size=image_size), "ok",
                         "", {**measured(1, [50.0, 51.0, 49.0, 50.0], 8), "memory": memory("cpu", "single", 1, 300.0),
                              "workload_details": details})
    store.end_sweep(conn, sid, "completed")
    s = analysis.load(conn, sid)
    conn.close()
    return s


def _first_lines(sweep, workload: str) -> list:
    """The paragraphs between the workload's heading and its configurations table."""
    b = report._workload_blocks(sweep, workload, sweep.bench[workload], {})
    assert b[0][0] == "h"
    return [x[1] for x in b[1:b.index(next(x for x in b if x[0] == "table"))] if x[0] == "p"]


def test_a_torchvision_model_at_another_size_says_both(tmp_path):
    s = _sweep(str(tmp_path / "s.sqlite"), "resnet18", 32,
               {"image_size": 32, "natural_image_size": 224, "input_shape": [3, 32, 32]})
    assert _first_lines(s, "resnet18")[0] == ("A sample is one 32x32 image (3 channels; resnet18's natural size is "
                                              "224x224, --image-size sets it).")


def test_deeplabv3_and_a_users_model_say_theirs_and_a_language_model_none(tmp_path):
    s = _sweep(str(tmp_path / "d.sqlite"), "deeplabv3", 256, {"weights": "random init"})
    assert _first_lines(s, "deeplabv3")[0] == "A sample is one 256x256 image."
    s = _sweep(str(tmp_path / "u.sqlite"), "my_model:build", 0, {"input_shape": [1, 28, 40]})
    assert _first_lines(s, "my_model:build")[0] == "A sample is one 28x40 image (1 channel)."
    s = _sweep(str(tmp_path / "t.sqlite"), "transformer", 0, {"tokens_per_sample": 32, "input_shape": [32]})
    assert not any("image" in line for line in _first_lines(s, "transformer"))
