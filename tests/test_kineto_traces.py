"""Traces in the forms a GPU gives, read on the CPU: hand-made Chrome traces laid out as Kineto writes them on CUDA
(pytorch/kineto libkineto/src/output_json.cpp). Each traced step's `ProfilerStep#N` is there once on the host
(user_annotation) and again on every GPU stream its kernels ran on (gpu_user_annotation, 1 ns before the first
kernel to 1 ns after the last); NCCL's kernels carry the collective's args from record_param_comms ("Collective
name", "Process Group Name", "Seq"). Also: how the trace was read is stored and never switched silently, the
free-space check before a trace is written, and a cut that never counts a step whose GPU work it cut.
"""
from __future__ import annotations

import gzip
import math
import json
import os

import pytest

from bench.analysis import traces, waits
from bench.rank import tracefile

HOST, TID = 4242, 4242       # the process and its main thread, as Kineto names them
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _ev(name, ts, dur, cat, pid=HOST, tid=TID, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _step(n, ts, dur) -> dict:
    return _ev(f"ProfilerStep#{n}", ts, dur, "user_annotation", **{"External id": n})


def _gpu_step(n, first, last_end, stream) -> dict:
    """Kineto's copy of ProfilerStep#n on one stream: from 1 ns before its first kernel to 1 ns after its last."""
    return _ev(f"ProfilerStep#{n}", first - 0.001, last_end - first + 0.002, "gpu_user_annotation", pid=0, tid=stream,
               **{"External id": n})


def _kernel(name, ts, dur, stream=7, **args) -> dict:
    return _ev(name, ts, dur, "kernel", pid=0, tid=stream, **{"device": 0, "stream": stream, **args})


def _nccl(ts, dur, seq=None, group="0") -> dict:
    coll = {"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "Group size": 2,
            "dtype": "Float", "Process Group Name": group, "Process Group Description": "default_pg"}
    return _kernel(NCCL, ts, dur, stream=20, **(coll if seq is None else {**coll, "Seq": seq}))


def _cuda_rank(nccl_us: tuple, seq0: int = 0) -> list:
    """Two DDP steps of 1000 us on the host; per step a GEMM (600 us, stream 7) and an all-reduce (stream 20) that
    starts 500 us into the step and lasts nccl_us[k]; the second step's all-reduce ends past its host annotation."""
    events = [{"ph": "M", "name": "process_name", "pid": HOST, "tid": 0, "args": {"name": "python"}}]
    for k, ms in enumerate(nccl_us):
        t = k * 1000
        events += [_step(k + 1, t, 1000), _ev("aten::mm", t + 50, 40, "cpu_op"),
                   _ev("cudaLaunchKernel", t + 60, 10, "cuda_runtime"),
                   _kernel("sm90_xmma_gemm_f32f32", t + 100, 600), _nccl(t + 500, ms, seq=seq0 + k),
                   _gpu_step(k + 1, t + 100, t + 700, 7), _gpu_step(k + 1, t + 500, t + 500 + ms, 20)]
    return events


def _write(tmp_path, name: str, events: list) -> str:
    path = str(tmp_path / f"{name}.pt.trace.json.gz")
    with gzip.open(path, "wt") as f:
        json.dump({"schemaVersion": 1, "traceEvents": events, "traceName": name}, f)
    return path


def test_a_cuda_trace_counts_the_hosts_step_annotations_not_their_copies_on_each_gpu_stream(tmp_path):
    f = traces.figures({"traceEvents": _cuda_rank((500, 700))})
    assert f.steps == 2 and f.method == "device_kernels"  # 6 annotations named ProfilerStep#: 2 host, 4 GPU copies
    # the window: from where step 1's GPU work began (its first kernel, 100; the copies begin 1 ns before it) to the end
    # of the last step's GPU work (the all-reduce ends at 2200): the GPU runs behind the host (bench.analysis.kernelsteps)
    assert f.span_ms * 1e3 == pytest.approx(2100, abs=0.01) and f.window == "gpu_steps"
    # computation 1200, communication [500, 1000] + [1500, 2200] = 1200, of which 400 under a GEMM
    assert (f.compute_ms * 1e3, f.comm_ms * 1e3, f.overlap_ms * 1e3) == pytest.approx((1200, 1200, 400), abs=0.01)
    rows = traces.derive([{"rank": r, "path": _write(tmp_path, f"r{r}", _cuda_rank(us)), "steps": 2, "device_type": "cuda"}
                          for r, us in ((0, (500, 700)), (1, (2500, 2700)))])
    # rank 1 spends 2 ms longer in each of the two all-reduces: 4 ms in all, 2 ms per traced step
    assert [(r["steps"], r["wait_ms"]) for r in rows] == [(2, 0.0), (2, pytest.approx(4.0))]
    assert rows[1]["wait_ms"] / rows[1]["steps"] == pytest.approx(2.0)
    assert [r["method"] for r in rows] == ["device_kernels"] * 2 and all(r.get("note") is None for r in rows)


def test_collectives_are_matched_by_the_sequence_number_the_trace_records_not_by_their_order(tmp_path):
    """Rank 1 takes part in one more all-reduce (another process group) before the two both ranks share: matched by
    order, it would pair with rank 0's first and misalign the rest."""
    rank0 = _cuda_rank((100, 300)) + [_step(0, -300, 300)]
    rank1 = _cuda_rank((400, 100)) + [_step(0, -300, 300), _nccl(-200, 50, seq=0, group="5")]  # a group rank 0 is not in
    per_rank = {0: traces.calls({"traceEvents": rank0}), 1: traces.calls({"traceEvents": rank1})}
    assert [c.seq for c in per_rank[1]] == [("5", 0, "allreduce"), ("0", 0, "allreduce"), ("0", 1, "allreduce")]
    got, how = waits.match(per_rank)
    # seq 0: rank 1 spends 0.3 ms longer; seq 1: rank 0 spends 0.2 ms longer
    assert how == "seq" and got == {0: pytest.approx(0.2), 1: pytest.approx(0.3)}
    assert traces.waits_ms(per_rank) == got
    unnumbered = {r: [(c.name, c.ms) for c in cs] for r, cs in per_rank.items()}  # as gloo's: no sequence numbers
    assert waits.match(unnumbered)[1] == "order" and waits.waits_ms(unnumbered) != got
    rows = traces.derive([{"rank": r, "path": _write(tmp_path, f"r{r}", ev), "device_type": "cuda"}
                          for r, ev in ((0, rank0), (1, rank1))])
    assert [(r["wait_ms"], r["wait_match"]) for r in rows] == [(pytest.approx(0.2), "seq"), (pytest.approx(0.3), "seq")]


def test_a_cuda_trace_without_kernels_is_read_from_host_operations_and_says_so(tmp_path):
    """CUPTI gave no kernels on rank 1: its figures come from host operations, stored as such with why, and its
    waits are not set against rank 0's kernel times."""
    host_only = [e for e in _cuda_rank((500, 700)) if e.get("pid") == HOST]
    host_only += [_ev("nccl:all_reduce", 520, 30, "user_annotation"), _ev("nccl:all_reduce", 1520, 30, "user_annotation")]
    rows = traces.derive([{"rank": 0, "path": _write(tmp_path, "r0", _cuda_rank((500, 700))), "device_type": "cuda"},
                          {"rank": 1, "path": _write(tmp_path, "r1", host_only), "device_type": "cuda"}])
    assert [r["method"] for r in rows] == ["device_kernels", "host_ops"]
    assert "recorded no GPU kernels (CUPTI gave none): figures from host operations" in rows[1]["note"]
    assert all(r["wait_ms"] is None and "read by different methods" in r["note"] for r in rows), rows
    cpu = traces.derive([{"rank": 0, "path": _write(tmp_path, "c0", host_only), "device_type": "cpu"}])
    assert cpu[0]["method"] == "host_ops" and cpu[0].get("note") is None  # on a CPU that is the method, not a fallback


class _Prof:
    """Stands in for torch.profiler.profile: exports `events` laid out as Kineto writes them (an event over several
    lines, the other keys after the array); `profiler.kineto_results.events()` is how many the profiler holds."""
    def __init__(self, events: list, held: int | None = None):
        self.events = events
        held = len(events) if held is None else held
        self.profiler = type("P", (), {"kineto_results": type("R", (), {"events": lambda _: [None] * held})()})()

    def export_chrome_trace(self, path: str) -> None:
        with open(path, "w") as f:
            f.write('{\n  "schemaVersion": 1,\n  "traceEvents": [\n')
            f.write(",\n".join(json.dumps(e, indent=4) for e in self.events))
            f.write('\n  ],"traceName": "x.json" }')


def test_the_space_check_is_against_the_traces_expected_size_for_every_rank_writing_at_once(tmp_path, monkeypatch):
    free = {"bytes": 0}
    monkeypatch.setattr(tracefile.shutil, "disk_usage", lambda _: type("U", (), {"free": free["bytes"]})())
    small = _Prof(_cuda_rank((500, 700)))
    free["bytes"] = 1e9  # 1 GB free: under 10 x the default 200 MB limit, ample for a trace of 15 events
    kept = tracefile.write(small, str(tmp_path / "a.pt.trace.json.gz"), 200e6, writers=8)
    assert kept["note"] is None and os.path.getsize(kept["path"]) == kept["trace_bytes"] > 0
    free["bytes"] = 50e6  # 50 MB free, a 1 MB limit: a profiler holding 30000 events writes ~30 MB of JSON per rank
    refused = tracefile.write(_Prof(_cuda_rank((500, 700)), held=30000), str(tmp_path / "b.pt.trace.json.gz"), 1e6,
                              writers=2)
    assert refused["note"].startswith("no trace written: ") and "50 MB free" in refused["note"], refused
    assert "69 MB needed" in refused["note"] and "30000 events" in refused["note"] and "2 ranks" in refused["note"]
    assert sorted(os.listdir(tmp_path)) == ["a.pt.trace.json.gz"]  # nothing of b, no temporary JSON


STEP_US, KERNELS = 10000, 300


def _behind(steps: int) -> list:
    """A GPU-bound loop: the host launches step k in [kS, (k+1)S] and the GPU runs it one step later, 300 kernels
    over 9 ms from (k+1)S: each step's GPU work ends 9 ms after its host annotation."""
    events = [{"ph": "M", "name": "process_name", "pid": HOST, "tid": 0, "args": {"name": "python"}}]
    for k in range(steps):
        events.append(_step(k + 1, k * STEP_US, STEP_US))
        first = (k + 1) * STEP_US
        events += [_kernel(f"k{k + 1}_{i}_{(i * 7919) % 997}", first + i * 30, 25) for i in range(KERNELS)]
        events.append(_gpu_step(k + 1, first, first + (KERNELS - 1) * 30 + 25, 7))
    return events


def test_a_cut_trace_never_counts_a_step_whose_gpu_work_it_cut(tmp_path):
    big = tracefile.write(_Prof(_behind(6)), str(tmp_path / "c.pt.trace.json.gz"), 8e3)
    note = big["note"]
    assert note.startswith("cut:") and big["trace_bytes"] <= 8e3 and " of 6 traced steps" in note, note
    whole = int(note.split("kept its first ")[1].split(" ")[0])
    with gzip.open(big["path"], "rt") as f:
        kept = json.load(f)["traceEvents"]
    hosts = sorted(int(e["name"].split("#")[1]) for e in kept if e.get("cat") == "user_annotation")
    assert 1 <= whole < hosts[-1], (whole, hosts)  # the next host step was kept in part: the GPU still ran its previous
    for k in range(1, whole + 1):  # every kernel of every step counted
        assert sum(e["name"].startswith(f"k{k}_") for e in kept) == KERNELS, k
    assert sum(e["name"].startswith(f"k{whole + 1}_") for e in kept) < KERNELS
    f = traces.figures(traces.load(big["path"]))
    # the counted steps on the GPU, a step behind the host: from step 1's first kernel (at S) to the end of the last
    # counted one's GPU work (bench.analysis.kernelsteps)
    assert f.steps == whole and f.span_ms * 1e3 == pytest.approx((whole - 1) * STEP_US + (KERNELS - 1) * 30 + 25, abs=0.01)
    assert f.compute_ms * 1e3 == pytest.approx(whole * KERNELS * 25, abs=0.01)


# ---- the GPU's busy share and the straggler: the evidence of the recommendation's bound --------------------------

def _config(rows: list, median_ms: float, iqr_ms: float = 0.0, device_count: int = 2):
    """A Config as bench.analysis.results reads it, holding these traces rows (repeat 0) and a measured median step."""
    from bench import stats
    from bench.analysis.results import Config
    steps = [median_ms - iqr_ms, median_ms - iqr_ms / 2, median_ms, median_ms + iqr_ms / 2, median_ms + iqr_ms]
    return Config(key="k", workload="w", strategy="ddp", device_type="cuda", device_count=device_count, global_batch=8,
                  scaling="weak", data="synthetic", step_ms=steps, summary=stats.summarize(steps), samples_per_s=1.0,
                  process_sps=[1.0], phases_ms={}, exposed_comm_ms=math.nan, grad_mib=None, comm_method=None,
                  memory_mib={}, epoch_wall_s=[], traces=[dict(r, repeat=0) for r in rows])


def _stored(rows: list) -> list:
    """Rows as the store gives them back: only the traces table's columns."""
    from bench.store.schema import TRACE_COLUMNS
    return [{k: r.get(k) for k in TRACE_COLUMNS} for r in rows]


def test_a_collective_kernel_waiting_for_a_peer_is_not_the_gpus_work(tmp_path):
    # Rank 1 computes 200 us of a 1000 us step and then sits 700 us in an NCCL kernel, waiting for rank 0: the kernel
    # spans the step, but the GPU did 20% of a step's work; pooled with computation it read 90% busy.
    def rank(gemm_us: float) -> list:
        return [e for k in range(3) for e in (_step(k + 1, k * 1000, 1000), _kernel("sm90_gemm", k * 1000 + 50, gemm_us),
                                              _nccl(k * 1000 + 50 + gemm_us, 900 - gemm_us, seq=k))]
    f = traces.figures({"traceEvents": rank(200)})
    assert f.work_ms == pytest.approx(0.6) and f.comm_ms == pytest.approx(2.1)   # 3 steps: 3 x 200 us, 3 x 700 us
    rows = traces.derive([{"rank": r, "path": _write(tmp_path, f"w{r}", rank(us)), "steps": 3, "device_type": "cuda"}
                          for r, us in ((0, 850), (1, 200))])
    from bench.report.busy import busy
    b = busy(_config(_stored(rows), median_ms=1.0))
    assert b.device == "rank 1" and b.share == pytest.approx(0.2) and b.devices["rank 0"] == pytest.approx(0.85)
    assert b.comm_share == pytest.approx(0.7) and b.words() == "GPU busy 20% (rank 1; rank 0 85%)"


def test_dataparallels_gpus_are_read_one_by_one_not_pooled_into_one(tmp_path):
    # One process drives 4 GPUs: GPU 0 gathers and computes 800 us a step, GPUs 1-3 200 us each, all in parallel. Their
    # union reads 80% busy; GPUs 1-3 starve 80% of the step.
    events = []
    for k in range(2):
        events.append(_step(k + 1, k * 1000, 1000))
        for d, us in ((0, 800), (1, 200), (2, 200), (3, 200)):
            events.append(_ev("sm90_gemm", k * 1000 + 100, us, "kernel", pid=d, tid=7, device=d, stream=7))
    f = traces.figures({"traceEvents": events})
    assert f.work_ms == pytest.approx(1.6)   # the union: GPU 0's 800 us a step
    assert {d: v["work_ms"] for d, v in f.devices.items()} == {"0": pytest.approx(1.6), "1": pytest.approx(0.4),
                                                               "2": pytest.approx(0.4), "3": pytest.approx(0.4)}
    rows = traces.derive([{"rank": 0, "path": _write(tmp_path, "dp", events), "steps": 2, "device_type": "cuda"}])
    from bench.report import traces as trace_report
    from bench.report.busy import busy
    b = busy(_config(_stored(rows), median_ms=1.0, device_count=4))
    assert b.share == pytest.approx(0.2) and b.device == "cuda:1" and b.devices["cuda:0"] == pytest.approx(0.8)
    assert b.words() == "GPU busy 20% (cuda:1; cuda:0 80%)"
    # the traces table: the rank's row is its GPUs' union (80% computation); a row per GPU follows with its own
    table = next(x for x in trace_report.blocks([_config(_stored(rows), median_ms=1.0, device_count=4)], "w")
                 if x[0] == "table")[2]
    assert table[0][1] == "0" and table[0][4] == "80%"
    per_gpu = {r[1]: (r[3], r[4], r[7]) for r in table[1:]}
    assert per_gpu == {"0, cuda:0": ("80%", "80% (with copies)", "20%"), "0, cuda:1": ("20%", "20% (with copies)", "80%"),
                       "0, cuda:2": ("20%", "20% (with copies)", "80%"), "0, cuda:3": ("20%", "20% (with copies)", "80%")}
    # and the plot: the union's bar, then one per GPU, GPU 1's computation 20% high (not the union's 80%)
    fig = trace_report.figure([_config(_stored(rows), median_ms=1.0, device_count=4)], "w", "w")
    left = fig.axes[0]
    names = [t.get_text() for t in left.get_xticklabels()]
    assert len(names) == 5 and "union" in names[0] and names[2].endswith("cuda:1 (with copies)"), names
    computation = left.containers[0]   # the first segment's bars: computation
    assert [round(b.get_height()) for b in computation] == [80, 80, 20, 20, 20]


def test_a_straggler_is_named_only_when_the_same_rank_waits_least_in_every_traced_step():
    # 8 ranks, 3 traced steps: which rank waits least changes from step to step (jitter): averaged over the steps
    # one rank looked like the straggler; per step, nobody is.
    jitter = {r: [30.0, 30.0, 30.0] for r in range(8)}
    jitter[2][0], jitter[5][1], jitter[7][2] = 0.0, 0.0, 0.0
    jitter[2][1] = 5.0   # rank 2 also waits less in a second step: its average is the lowest by far
    means = {r: sum(w) / 3 for r, w in jitter.items()}
    assert waits.straggler(means, step_ms=100.0) == 2                  # the old rule: named from the average
    assert waits.straggler_steps(jitter, step_ms=100.0, jitter_ms=1.0) is None
    slow = {r: [30.0, 31.0, 29.0] for r in range(8)}
    slow[4] = [0.5, 0.2, 0.4]   # rank 4 computes 30 ms longer every step: every other rank waits for it
    assert waits.straggler_steps(slow, step_ms=100.0, jitter_ms=1.0) == 4
    assert waits.straggler_steps(slow, step_ms=100.0, jitter_ms=35.0) is None   # a lead inside the steps' jitter
    assert waits.straggler_steps({r: w[:1] for r, w in slow.items()}, step_ms=100.0, jitter_ms=1.0) is None  # one step


def test_per_step_waits_come_from_the_trace_and_carry_the_straggler_to_the_report(tmp_path):
    # rank 0 computes 600 us longer in steps 1 and 3 but not in step 2: rank 1 waits in two steps of three
    def rank(extra: tuple) -> list:
        return [e for k, x in enumerate(extra) for e in (_step(k + 1, k * 2000, 2000), _kernel("sm90_gemm", k * 2000, 300 + x),
                                                         _nccl(k * 2000 + 300 + x, 100 + (600 - x), seq=k))]
    rows = traces.derive([{"rank": r, "path": _write(tmp_path, f"s{r}", rank(x)), "steps": 3, "device_type": "cuda"}
                          for r, x in ((0, (600, 0, 600)), (1, (0, 0, 0)))])
    assert json.loads(rows[1]["step_waits_json"]) == pytest.approx([0.6, 0.0, 0.6])
    from bench.report import traces as trace_report
    assert trace_report.straggler(_config(_stored(rows), median_ms=2.0)) is None   # not in every step
    steady = traces.derive([{"rank": r, "path": _write(tmp_path, f"t{r}", rank(x)), "steps": 3, "device_type": "cuda"}
                            for r, x in ((0, (600, 600, 600)), (1, (0, 0, 0)))])
    assert trace_report.straggler(_config(_stored(steady), median_ms=2.0))[0] == 0
