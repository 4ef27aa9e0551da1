"""A host-bound step's advice where the sweep measured --compile: what the compiled twin measured, never '--compile'
advised on a sweep that ran it, nor on a compiled step (the H200 afternoon's DeepLabV3 bf16, eager against compiled)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from bench.report import bound, choice
from conftest import example_stores
from test_recommend import build, payload, spec
from test_recommend_gpu_read import _traced

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h200-2026-11-27-pm"


def test_a_sweep_that_measured_compile_quotes_it_instead_of_advising_it(tmp_path, monkeypatch):
    # Compiling cut the GPU's kernels from 21.3 to 14.2 ms a step, and the step went 51.0 -> 54.4 ms (one unstable
    # process each, not a lead); the eager step read 'fewer, larger kernels help: --compile'.
    sweep = example_stores(EXAMPLE, ("gpu.sqlite",), tmp_path, monkeypatch)("gpu.sqlite", 2)
    by = {c.label: c for c in sweep.bench["deeplabv3"]}
    within = choice.apart(by["single device x1 [bf16]"], by["single device x1 [bf16, compiled]"]).within
    told = {True: "within the noise", None: "not told apart", False: "told apart"}[within]   # the lead column's rule
    for label, head in (("single device x1 [bf16]", "--compile, measured here: "),
                        ("single device x1 [bf16, compiled]", "compiled, against its eager twin measured here: ")):
        kind, why = bound.bound(sweep, "deeplabv3", by[label])
        assert kind.startswith("host-bound"), kind
        assert "fewer, larger kernels" not in why and "--compile, a larger" not in why, why
        assert (head + "GPU work from 21.3 to 14.2 ms a step, the step from 51.0 to 54.4 ms (" + told + "): the host's launch "
                "work bounds it; a larger --per-device-batch amortises it (3.") in why, why
        assert "of the GPU's 139.80 GiB used)" in why, why


def test_a_compiled_step_without_its_eager_twin_is_not_advised_compile(tmp_path):
    compiled = dataclasses.replace(spec("single", 1, "bf16"), compile=True)   # 1 ms of kernels in 10 ms steps
    sw = build(str(tmp_path / "c.sqlite"), [(compiled, {**payload(1, 10.0), "traces": _traced(tmp_path, "c", 1000.0, 1)})])
    kind, why = bound.bound(sw, "synthetic", sw.bench["synthetic"][0])
    assert kind.startswith("host-bound") and "--compile" not in why, why
    assert "compiled already: a larger --per-device-batch amortises the host's launch work" in why, why
