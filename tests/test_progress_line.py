"""The sweep's line for each configuration: a model given by path by its short name, as the report names it (trial B:
'[1/4] /work/main/examples/my_model.py:build single cpu x1: ...'), and a language model's tokens/s beside its samples/s
(trial B: '[1/4] transformer single cpu x1: ok, 609.0 samples/s' for sequences of 32 tokens), in the report's words."""
from __future__ import annotations

import json

from bench.store import store
from bench.sweep import run
from bench.sweep.diagnose import Outcome
from report_fixtures import spec
from test_short_names import SHORT, _model, _store


def _line(tmp_path, workload: str, details: dict, count: int = 2) -> tuple:
    path = _store(str(tmp_path / "t.sqlite"), workload, details=details)
    conn = store.connect(path, readonly=True)
    try:
        r = conn.execute("SELECT result_id, samples_per_s FROM results WHERE strategy = 'ddp' AND device_count = ? "
                         "AND mode = 'bench'", (count,)).fetchone()
        return run._summary_line(conn, r["result_id"], Outcome("ok")), r["samples_per_s"]
    finally:
        conn.close()


def test_the_terminal_line_gives_a_language_models_tokens_per_second(tmp_path):
    line, sps = _line(tmp_path, "transformer", {"tokens_per_sample": 32, "input_shape": [32]})
    assert line.startswith(f"ok, {sps:.1f} samples/s ({sps * 32:.0f} tokens/s, {sps * 32 / 2:.0f} per process), "
                           f"step median"), line
    on_gpus = {"details_json": json.dumps({"workload_details": {"tokens_per_sample": 32}}), "samples_per_s": 100.0,
               "device_count": 4, "device_type": "cuda"}
    assert run._tokens(on_gpus) == " (3200 tokens/s, 800 per GPU)"


def test_the_terminal_line_of_other_models_keeps_samples_alone_and_names_a_path_short(tmp_path):
    workload = _model(tmp_path)
    line, sps = _line(tmp_path, workload, {})
    assert line.startswith(f"ok, {sps:.1f} samples/s, step median") and "tokens" not in line, line
    head = run._describe(spec(workload, "ddp", 2), (workload, "resnet18"))
    assert head == f"{SHORT} ddp cpu x2", head
    other = "/elsewhere/my_model.py:build"   # two of one short name: the paths tell them apart
    assert run._describe(spec(workload, "ddp", 2), (workload, other)) == f"{workload} ddp cpu x2"
