"""HSDP's mesh note gives the sweep's own HSDP beside FSDP at the same count and settings, never another run's figure:
the H200 reports printed one H100's '53% slower than fsdp' beside their own HSDP x1 9% slower and HSDP x2 2.4x as fast
(trial A, finding 2). Stored sweeps built here (test_recommend's helpers)."""
from __future__ import annotations

import dataclasses

from test_recommend import build, payload, spec

from bench.report import training_state


def hsdp(n: int, **kw):
    return dataclasses.replace(spec("hsdp", n, options=(("shard_size", n),)), **kw)


def fsdp(n: int, **kw):
    return dataclasses.replace(spec("fsdp", n), **kw)


def unstable(n: int, step_ms: float) -> dict:
    """One process whose steps alternate 0.7x and 1.3x step_ms: an IQR far above 10% of the median (unstable)."""
    p = payload(n, step_ms)
    for row in p["steps"]:
        row["step_ms"] = step_ms * (0.7 if row["step"] % 2 else 1.3)
    return p


def mesh_line(sweep) -> str:
    return "; ".join(training_state.hsdp_meshes(sweep.bench["synthetic"]))


def test_hsdp_is_given_beside_fsdp_at_its_count_and_settings_with_the_sweeps_own_figure(tmp_path):
    # Three steady processes each: HSDP x2 steps 110 ms, FSDP x2 100 ms (HSDP 9% slower, a lead beyond their repeats'
    # noise). FSDP x2 [ac=full] differs in a setting, so it is not HSDP x2's twin; HSDP x2 [bf16] has no twin at all.
    runs = [(hsdp(2, repeat=r), payload(2, 110.0 + r * 0.1)) for r in range(3)] \
        + [(fsdp(2, repeat=r), payload(2, 100.0 + r * 0.1)) for r in range(3)] \
        + [(fsdp(2, activation_checkpointing="full", repeat=r), payload(2, 200.0 + r * 0.1)) for r in range(3)] \
        + [(hsdp(2, precision="bf16"), payload(2, 50.0))]
    line = mesh_line(build(str(tmp_path / "s.sqlite"), runs))
    own = line.split("HSDP x2: ")[1].split("; HSDP x2 [")[0]
    # the median process of each: 640 samples in 10 steps of 110.1 ms (581.3 samples/s) and of 100.1 ms (639.4)
    assert "in this sweep it ran 581.3 samples/s against 639.4 for FSDP x2 (9% slower)" in own, own
    assert "not resolved" not in own and "FSDP x2 [fp32, ac=full]" not in own and "%" not in own.split("in this sweep")[0]
    assert "H100" not in line and "53%" not in line
    bf16 = line.split("HSDP x2 [bf16]: ")[1]
    assert "in this sweep" not in bf16 and "one shard group, as above" in bf16   # no FSDP x2 [bf16] ran: the note alone


def test_a_gap_the_noise_does_not_resolve_or_an_unstable_side_reads_not_resolved(tmp_path):
    # One process each, both unstable (as the H200's HSDP x1 105.8 against FSDP x1 116.7 samples/s): the figure is
    # given, and that it is not resolved. HSDP faster by 2.4x (the H200 rehearsal's gloo case): both readings of it.
    runs = [(hsdp(1), unstable(1, 110.0)), (fsdp(1), unstable(1, 100.0)),
            (hsdp(2), payload(2, 41.0)), (fsdp(2), unstable(2, 100.0))]
    line = mesh_line(build(str(tmp_path / "u.sqlite"), runs))
    x1, x2 = line.split("HSDP x1: ")[1].split("; HSDP x2: ")
    assert "against" in x1 and "slower; not resolved: each ran one unstable process)" in x1, x1
    assert "2.44x as fast, FSDP 59% slower; not resolved: FSDP x2 ran one unstable process)" in x2, x2


def test_a_tie_within_the_floor_is_not_called_a_difference(tmp_path):
    # Steady repeats 2% apart: under the 5% floor, so not resolved as a lead either way.
    runs = [(hsdp(2, repeat=r), payload(2, 102.0 + r * 0.1)) for r in range(3)] \
        + [(fsdp(2, repeat=r), payload(2, 100.0 + r * 0.1)) for r in range(3)]
    line = mesh_line(build(str(tmp_path / "t.sqlite"), runs))
    assert "(2% slower; not resolved: under the 5% floor the suite calls a difference)" in line, line
