"""What a GPU user read wrong on the committed GPU examples' recommendation (trial A, findings 6, 7, 10, 11), each on a
store built here with known numbers: the bound where gloo's collectives hide from the kernel traces, FSDP's memory and
speed beside DDP's, an unresolved pick that is itself unstable, and a one-device wrapper without single device x1."""
from __future__ import annotations

from pathlib import Path

from bench.report import bound
from test_kineto_traces import _kernel, _step, _write
from conftest import example_stores
from test_recommend import build, payload, spec

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
