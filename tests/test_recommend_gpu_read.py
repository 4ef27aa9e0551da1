"""What a GPU user read wrong on the committed GPU examples' recommendation (trial A, findings 6, 7, 10, 11), each on a
store built here with known numbers: the bound where gloo's collectives hide from the kernel traces, FSDP's memory and
speed beside DDP's, an unresolved pick that is itself unstable, and a one-device wrapper without single device x1."""
from __future__ import annotations

from pathlib import Path

from bench.report import bound, recommend
from test_kineto_traces import _kernel, _step, _write
from conftest import example_stores
from test_recommend import build, host_noise, payload, spec, text

H100 = Path(__file__).resolve().parents[1] / "examples" / "h100-2026-11-26"

REHEARSAL = (("rehearsal", "2 ranks on 1 GPU, gloo"),)


def _traced(tmp_path, name: str, kernel_us: float, ranks: int = 2) -> list:
    """Two traced steps per rank, one kernel of `kernel_us` each and no collective kernel (gloo's run on the host)."""
    events = [e for k in range(2) for e in (_step(k + 1, k * 2000, 2000), _kernel("sm90_xmma_gemm", k * 2000 + 100, kernel_us))]
    return [{"rank": r, "device_type": "cuda", "path": _write(tmp_path, f"{name}{r}", events)} for r in range(ranks)]


def test_exposed_communication_the_probe_resolves_bounds_the_step_though_the_kernel_traces_miss_it(tmp_path):
    # The H100 rehearsal: GPU busy 12%, the probe's 8.83 ms exposed communication 78% of the step, and the verdict read
    # "host-bound ... fewer, larger kernels help: --compile" (gloo's all-reduce runs on the host: no kernel to trace).
    ddp = {**payload(2, 10.0, nosync_ms=2.0), "traces": _traced(tmp_path, "r", 1000.0)}   # 8 ms exposed of 10, busy 10%
    sw = build(str(tmp_path / "s.sqlite"), [(spec("ddp", 2, options=REHEARSAL), ddp)])
    c = sw.bench["synthetic"][0]
    kind, why = bound.bound(sw, "synthetic", c)
    assert kind == "communication (probe: 8.00 ms, 80% of a step)" and bound.bound_category(kind) == "communication"
    assert "Communication-bound: DDP's probe measures 8.00 ms of exposed communication, 80% of a 10.0 ms step" in why
    assert ("the kernel traces show 0.00 ms of exposed communication against the probe's 8.00 ms, and disagree: gloo's "
            "collectives run on the host, where kernel traces do not see them") in why
    assert "--bucket-cap-mb" in why and "--comm-hook" in why and "NCCL" in why and "--compile" not in why, why
    # a small probe share beside a GPU that waits on the host: host-bound still, with the probe as evidence
    host = {**payload(2, 10.0, nosync_ms=9.0), "traces": _traced(tmp_path, "h", 1000.0)}   # 1 ms exposed, 10%
    hs = build(str(tmp_path / "h.sqlite"), [(spec("ddp", 2, options=REHEARSAL), host)])
    kind, why = bound.bound(hs, "synthetic", hs.bench["synthetic"][0])
    assert kind.startswith("host-bound") and "--compile" in why


def test_the_h100_rehearsals_ddp_step_is_bound_by_the_probes_exposed_communication(tmp_path, monkeypatch):
    # The committed store: busy 12%, the probe's 8.83 ms of an 11.24 ms step; the traces show none of it (gloo).
    sweep = example_stores(H100, ("rehearsal.sqlite",), tmp_path, monkeypatch)("rehearsal.sqlite", 1)
    ddp = next(c for c in sweep.bench["synthetic"] if c.strategy == "ddp")
    kind, why = bound.bound(sweep, "synthetic", ddp)
    assert kind == "communication (probe: 8.83 ms, 78% of a step)", kind
    assert "gloo's collectives run on the host" in why and "--compile" not in why


def test_fsdp_beside_ddp_in_a_rehearsal_holds_each_ranks_allocated_peak_not_the_shared_gpus_level(tmp_path):
    # The H100 rehearsal read "FSDP holds 29% more memory per GPU" (the one GPU's device level, 2582 against 2000 MiB:
    # both ranks' CUDA contexts) beside 117 against 163 MiB allocated and 60% less training state on the same page.
    sw = build(str(tmp_path / "s.sqlite"), [
        (spec("ddp", 2, options=REHEARSAL), payload(2, 10.0, mem_mib=163.0, level_mib=2000.0)),
        (spec("fsdp", 2, options=REHEARSAL), payload(2, 50.0, mem_mib=117.0, level_mib=2582.0))])
    t = text(sw)
    assert "FSDP holds 28% less memory per rank and is 80% slower than DDP at 2 GPUs" in t, t
    assert ("Memory there: the peak allocated per rank, since the ranks share one GPU, whose device level counts every "
            "rank's CUDA context.") in t


def test_fsdp_beside_ddp_flags_a_speed_gap_the_noise_does_not_resolve_and_at_one_gpu_that_sharding_cannot_show(
        tmp_path, monkeypatch):
    # An H100 page: "FSDP holds 6% less memory per GPU and is 39% slower than DDP at 1 GPU", flatly, where the table
    # beside it resolved neither (one unstable process each, the noise not measured), and DDP's 6% more was its buckets.
    one = build(str(tmp_path / "one.sqlite"), [(spec("ddp", 1), payload(1, 100.0, level_mib=1600.0)),
                                               (spec("fsdp", 1), payload(1, 164.0, level_mib=1500.0))])
    t = text(one)
    assert "FSDP holds 6% less memory per GPU and is 39% slower than DDP at 1 GPU " in t, t
    assert "FSDP's 39% against DDP is not resolved: noise not measured." in t
    assert ("Memory there: the device level, the memory budget's figure; at 1 GPU FSDP has nothing to shard across, so "
            "its sharding shows only at 2 or more GPUs.") in t
    host_noise(monkeypatch, tmp_path, 0.01)   # selfcheck's 1% for this host: a steady 39% is resolved, no flag
    told = build(str(tmp_path / "two.sqlite"), [(spec("ddp", 2), payload(2, 100.0, level_mib=1600.0)),
                                                (spec("fsdp", 2), payload(2, 164.0, level_mib=1500.0))])
    t = text(told)
    assert "and is 39% slower than DDP at 2 GPUs" in t and "39% against DDP" not in t and "nothing to shard" not in t, t
    assert "Memory there: the device level, the memory budget's figure." in t


def _unstable(pl: dict) -> dict:
    """The payload's measured steps spread about their median: p10-p90 far past 10% of it (one unstable process)."""
    rows = [dict(r, step_ms=r["step_ms"] * (0.7 + 0.08 * r["step"])) if r["kind"] == "measure" else r for r in pl["steps"]]
    return {**pl, "steps": rows}


def test_an_unstable_pick_that_stands_only_because_dataparallels_lead_is_not_resolved_is_no_answer(tmp_path):
    # The H100 self-check in bf16: DDP x1 [bf16] (unstable, 2.3-3.8 ms) was "the" recommendation, its 3.2% "the" MFU,
    # beside DataParallel x1 [bf16], steady and 69% faster: the rule keeps DataParallel out of an unresolved lead, but
    # nothing showed DDP x1 was the answer.
    sw = build(str(tmp_path / "s.sqlite"), [(spec("ddp", 1, "bf16"), _unstable(payload(1, 100.0))),
                                            (spec("dp", 1, "bf16"), payload(1, 60.0))])
    configs = sw.bench["synthetic"]
    assert recommend.recommended(sw, configs, "bf16").strategy == "ddp"   # DataParallel only on a resolved lead
    row, said = recommend.answer(sw, "synthetic", configs, "bf16")
    assert row[2] == "not resolved: --repeats 3 (DDP x1 [bf16], unstable, or DataParallel x1 [bf16])", row
    assert row[3] == row[9] == "–" and row[8].startswith("DataParallel x1 [bf16] 67% faster (not resolved:"), row
    t = " ".join(said)
    assert t.startswith("Not resolved: DDP x1 [bf16], ") and ", or DataParallel x1 [bf16], " in t, t
    assert ("DDP x1 [bf16], the simpler, ran one unstable process, so neither is recommended until --repeats 3 tells "
            "them apart") in t and "so DDP x1 [bf16] is recommended" not in t
    steady = build(str(tmp_path / "t.sqlite"), [(spec("ddp", 1, "bf16"), payload(1, 100.0)),
                                                (spec("dp", 1, "bf16"), payload(1, 60.0))])
    row, said = recommend.answer(steady, "synthetic", steady.bench["synthetic"], "bf16")
    assert row[2].startswith("DDP x1 [bf16]") and "so DDP x1 [bf16] is recommended" in " ".join(said)   # steady: stands


def test_a_one_device_wrapper_picked_without_single_device_x1_says_what_it_was_chosen_among(tmp_path):
    # An H200 sweep recommended FSDP x1 [bf16, adamw] with no single device x1 in it (on an H100, single device x1 of
    # the same model stepped 46% faster than FSDP x1); only the efficiency column said "its own baseline".
    sw = build(str(tmp_path / "s.sqlite"), [(spec("fsdp", 1, "bf16"), payload(1, 100.0)),
                                            (spec("ddp", 1, "bf16"), payload(1, 150.0))])
    row, said = recommend.answer(sw, "synthetic", sw.bench["synthetic"], "bf16")
    assert row[2] == ("FSDP x1 [bf16] (among the strategies swept; no single device x1 with its settings in this sweep "
                      "to hold it against)"), row
    assert ("It is chosen among the strategies swept: no single device x1 with its settings ran in this sweep to hold "
            "it against") in " ".join(said)
    held = build(str(tmp_path / "h.sqlite"), [(spec("single", 1, "bf16"), payload(1, 150.0)),
                                              (spec("fsdp", 1, "bf16"), payload(1, 100.0))])
    row, said = recommend.answer(held, "synthetic", held.bench["synthetic"], "bf16")
    assert row[2] == "FSDP x1 [bf16]" and "chosen among the strategies swept" not in " ".join(said)   # single ran
