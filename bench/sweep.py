"""Launching a sweep: every configuration in its own process(es), each result into the store.

single and dp run as one plain process (`python -m bench.worker`); ddp and the all-reduce
microbenchmark run under torchrun (static rendezvous on 127.0.0.1 at a free port, --max-restarts=0).
Each configuration has a wall-clock limit; when it fails, hangs or is interrupted, its whole process
group is terminated, the failure is recorded with the failing rank and its exception or signal, and
the sweep moves on (or, on Ctrl-C / SIGTERM, records 'interrupted' and stops with 130 / 143).
"""
from __future__ import annotations

import ctypes
import dataclasses
import glob
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from bench import config, store
from bench.config import RunSpec, Skip, SweepConfig

PORT_RETRIES = 3
KILL_GRACE_S = 5.0
EQUIVALENCE_STEPS = 3
EQUIVALENCE_RTOL, EQUIVALENCE_ATOL = 1e-4, 1e-5


class Interrupted(Exception):
    """The sweep received SIGTERM (SIGINT arrives as KeyboardInterrupt)."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signum}")
        self.signum = signum


@dataclass
class Outcome:
    status: str                     # ok | failed | interrupted
    reason: str = ""
    payload: dict = field(default_factory=dict)
    failed_rank: Optional[int] = None
    started_at: str = ""
    ended_at: str = ""
    wall_s: float = 0.0
    out_dir: str = ""


# ---------------------------------------------------------------- one configuration

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(spec: RunSpec, spec_path: str, port: int) -> list:
    if spec.strategy == "ddp":
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={spec.device_count}",
                "--max-restarts=0", "--master-addr=127.0.0.1", f"--master-port={port}", "--local-addr=127.0.0.1",
                "-m", "bench.worker", spec_path]
    return [sys.executable, "-m", "bench.worker", spec_path]


def _die_with_parent() -> None:
    """In the child: receive SIGTERM if the sweep dies (even by SIGKILL), so nothing is left behind."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the configuration's process group (torchrun forwards it to its workers), then SIGKILL."""
    for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    # torchrun's workers live in sessions of their own: end any that outlived their agent.
    for pid in worker_pids(proc.args[-1]):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def worker_pids(spec_path: str) -> list:
    """Live processes whose command line names this configuration's spec file."""
    pids = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(os.path.join(d, "cmdline"), "rb") as f:
                if spec_path.encode() in f.read():
                    pids.append(int(os.path.basename(d)))
        except OSError:
            continue
    return [p for p in pids if p != os.getpid()]


def run_config(spec: RunSpec, timeout_s: float) -> Outcome:
    """Run one configuration in fresh processes and collect its result file or its failure."""
    out_dir = tempfile.mkdtemp(prefix="bench-run-")
    spec = dataclasses.replace(spec, out_dir=out_dir)
    spec_path = os.path.join(out_dir, "spec.json")
    with open(spec_path, "w") as f:
        f.write(spec.to_json())
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if spec.threads:
        env["OMP_NUM_THREADS"] = str(spec.threads)
    started, t0 = store.now(), time.monotonic()
    outcome = Outcome("failed", out_dir=out_dir, started_at=started)
    try:
        for attempt in range(PORT_RETRIES):
            log_path = os.path.join(out_dir, f"log{attempt}.txt")
            with open(log_path, "w") as log:
                proc = subprocess.Popen(command(spec, spec_path, free_port()), stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                                        preexec_fn=_die_with_parent)
                try:
                    rc = proc.wait(timeout=max(1.0, timeout_s - (time.monotonic() - t0)))
                except subprocess.TimeoutExpired:
                    _kill_group(proc)
                    outcome = diagnose(out_dir, log_path, None)
                    outcome.reason = (f"timed out after {timeout_s:g} s (--timeout); all processes of the configuration "
                                      f"were killed" + (f". First error: {outcome.reason}" if outcome.failed_rank is not None else ""))
                    break
                except BaseException:
                    _kill_group(proc)
                    raise
            result = os.path.join(out_dir, "result.json")
            if rc == 0 and os.path.exists(result):
                with open(result) as f:
                    outcome = Outcome("ok", payload=json.load(f), out_dir=out_dir)
                break
            outcome = diagnose(out_dir, log_path, rc)
            if not _port_collision(log_path):
                break
    finally:
        outcome.started_at, outcome.ended_at, outcome.wall_s = started, store.now(), time.monotonic() - t0
    return outcome


def _port_collision(log_path: str) -> bool:
    with open(log_path, errors="replace") as f:
        text = f.read()
    return "EADDRINUSE" in text or "Address already in use" in text


def diagnose(out_dir: str, log_path: str, rc: Optional[int]) -> Outcome:
    """Why a configuration failed: the first rank's own error file, else torchrun's root cause, else the exit."""
    with open(log_path, errors="replace") as f:
        log = f.read()
    tail = "\n".join(log.strip().splitlines()[-30:])
    errors = []
    for path in glob.glob(os.path.join(out_dir, "error-rank*.json")):
        try:
            with open(path) as f:
                errors.append(json.load(f))
        except (OSError, ValueError):
            continue
    if errors:
        first = min(errors, key=lambda e: e["time"])
        return Outcome("failed", f"rank {first['rank']}: {first['type']}: {first['message']}".strip(),
                       {"log_tail": tail, "traceback": first.get("traceback", "")}, failed_rank=first["rank"])
    root = re.search(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+).*?traceback\s*:\s*([^\n]*)", log, re.S)
    if root:
        rank, code, why = int(root.group(1)), int(root.group(2)), root.group(3).strip()
        return Outcome("failed", f"rank {rank}: exit code {code}" + (f" ({_signal_name(-code)})" if code < 0 else "")
                       + (f": {why}" if why and "error_file" not in why else ""), {"log_tail": tail}, failed_rank=rank)
    if rc is not None and rc < 0:
        return Outcome("failed", f"rank 0: killed by {_signal_name(-rc)}", {"log_tail": tail}, failed_rank=0)
    if rc is None:
        return Outcome("failed", "", {"log_tail": tail})
    return Outcome("failed", f"exit code {rc}: {tail.splitlines()[-1] if tail else 'no output'}", {"log_tail": tail})


def _signal_name(num: int) -> str:
    try:
        return f"signal {num} ({signal.Signals(num).name})"
    except ValueError:
        return f"signal {num}"


# ---------------------------------------------------------------- equivalence gate

def compare_params(ref_path: str, cand_path: str) -> dict:
    import torch
    ref, cand = torch.load(ref_path, weights_only=True), torch.load(cand_path, weights_only=True)
    max_abs, worst, passed = 0.0, "", True
    for name, a in ref.items():
        b = cand[name]
        if not a.is_floating_point():
            continue
        d = (a - b).abs().max().item() if a.numel() else 0.0
        if d > max_abs:
            max_abs, worst = d, name
        passed = passed and torch.allclose(a, b, rtol=EQUIVALENCE_RTOL, atol=EQUIVALENCE_ATOL)
    return {"max_abs_diff": max_abs, "worst_tensor": worst, "rtol": EQUIVALENCE_RTOL, "atol": EQUIVALENCE_ATOL,
            "passed": bool(passed), "tolerance": f"torch.allclose(rtol={EQUIVALENCE_RTOL:g}, atol={EQUIVALENCE_ATOL:g})"}


def equivalence_specs(spec: RunSpec) -> tuple:
    """(reference, candidate): one process with the global batch vs the strategy over its devices, k steps."""
    cand = dataclasses.replace(spec, mode="equivalence", steps=EQUIVALENCE_STEPS, warmup=0, epochs=0, repeat=0)
    chunks = spec.device_count if spec.strategy in ("dp", "ddp") else 1
    ref = dataclasses.replace(cand, strategy="single", device_count=1, emulate_ranks=chunks)
    return ref, cand


def run_equivalence(spec: RunSpec, timeout_s: float) -> Outcome:
    ref_spec, cand_spec = equivalence_specs(spec)
    ref = run_config(ref_spec, timeout_s)
    if ref.status != "ok":
        ref.reason = f"reference (single process, global batch) failed: {ref.reason}"
        return ref
    cand = run_config(cand_spec, timeout_s)
    if cand.status != "ok":
        return cand
    verdict = compare_params(os.path.join(ref.out_dir, "params.pt"), os.path.join(cand.out_dir, "params.pt"))
    verdict.update(steps=EQUIVALENCE_STEPS, reference_losses=ref.payload.get("losses"),
                   candidate_losses=cand.payload.get("losses"), batchnorm=cand.payload.get("batchnorm"))
    cand.payload = verdict
    if not verdict["passed"]:
        cand.status = "failed"
        cand.reason = (f"parameters differ after {EQUIVALENCE_STEPS} steps: max |diff| {verdict['max_abs_diff']:.3g} "
                       f"in {verdict['worst_tensor']} exceeds {verdict['tolerance']}")
    return cand


# ---------------------------------------------------------------- the sweep

def build_items(cfg: SweepConfig) -> list:
    """Benchmarks (and skips) in plan order, then equivalence checks, then all-reduce baselines."""
    items = list(config.plan(cfg))
    runnable = [s for s in items if isinstance(s, RunSpec)]
    if cfg.check_equivalence:
        items += [dataclasses.replace(s, mode="equivalence", steps=EQUIVALENCE_STEPS, warmup=0, epochs=0)
                  for s in runnable if s.strategy in ("dp", "ddp") and s.repeat == 0]
    if cfg.comm_bench and "ddp" in cfg.strategies:
        from bench.workloads import gradient_bytes
        max_bytes = max(gradient_bytes(s) for s in runnable if s.repeat == 0) if runnable else 2**20
        for n in cfg.gpus:
            if n > 1:
                items.append(RunSpec(workload="allreduce", strategy="ddp", device_type=cfg.device, device_count=n,
                                     per_device_batch=0, global_batch=0, image_size=0, steps=0, warmup=0,
                                     threads=cfg.threads_per_process if cfg.device == "cpu" else 0, seed=cfg.seed,
                                     scaling=cfg.scaling, pg_timeout_s=cfg.pg_timeout, mode="comm", comm_max_bytes=max_bytes))
    return items


def _describe(spec: RunSpec) -> str:
    what = {"bench": "", "equivalence": "equivalence check: ", "comm": "all-reduce bandwidth: "}[spec.mode]
    name = "" if spec.mode == "comm" else f"{spec.workload} {spec.strategy} "
    rep = f" (repeat {spec.repeat + 1})" if spec.repeat else ""
    return f"{what}{name}{spec.device_type} x{spec.device_count}{rep}"


def _summary_line(conn, rid: int, outcome: Outcome) -> str:
    if outcome.status != "ok":
        return f"{outcome.status.upper()}: {outcome.reason}"
    r = conn.execute("SELECT * FROM results WHERE result_id = ?", (rid,)).fetchone()
    if r["mode"] == "equivalence":
        return f"ok, parameters match (max |diff| {outcome.payload['max_abs_diff']:.2g})"
    if r["mode"] == "comm":
        best = max(outcome.payload.get("comm", []), key=lambda c: c["busbw_gbps"], default=None)
        return f"ok, peak busbw {best['busbw_gbps']:.2f} GB/s" if best else "ok"
    flag = "  [unstable: IQR > 10% of median]" if r["unstable"] else ""
    return (f"ok, {r['samples_per_s']:.1f} samples/s, step median {r['step_ms_median']:.1f} ms "
            f"(p10 {r['step_ms_p10']:.1f}, p90 {r['step_ms_p90']:.1f}){flag}")


def run_sweep(cfg: SweepConfig, command_line: str, log: Callable[[str], None] = print) -> int:
    """Run a resolved, validated config (or resume one). Returns the process exit status."""
    conn = store.connect(cfg.store)
    resumed = bool(cfg.resume)
    if resumed:
        row = store.find_sweep(conn, cfg.resume)
        sweep_id = row["sweep_id"]
        if row["status"] == "running":
            raise store.StoreError(f"sweep {sweep_id} is still running (pid {row['pid']} on {row['hostname']})")
        original = SweepConfig.from_json(row["config_json"])
        cfg = dataclasses.replace(original, store=cfg.store, resume="", report=cfg.report,
                                  plots_dir=cfg.plots_dir, report_dir=cfg.report_dir)
    from bench import env as env_mod
    env_id = store.insert_environment(conn, env_mod.capture())
    if resumed:
        store.reopen_sweep(conn, sweep_id)
        done = store.ok_keys(conn, sweep_id)
        log(f"resuming sweep {sweep_id} in {cfg.store}: {len(done)} configuration(s) already done")
    else:
        sweep_id = store.begin_sweep(conn, command_line, cfg.to_json(), env_id)
        done = set()
        log(f"sweep {sweep_id} -> {cfg.store} ({cfg.device}, counts {','.join(map(str, cfg.gpus))}, "
            f"{cfg.scaling} scaling, {cfg.steps} steps after {cfg.warmup} warm-up"
            + (f", {cfg.threads_per_process} torch thread(s) per process" if cfg.device == "cpu" else "") + ")")

    items = build_items(cfg)
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    failures = 0
    current: Optional[RunSpec] = None
    try:
        for i, item in enumerate(items, 1):
            spec = item.spec if isinstance(item, Skip) else item
            if (spec.key, spec.repeat) in done:
                continue
            head = f"[{i}/{len(items)}] {_describe(spec)}"
            if isinstance(item, Skip):
                store.record_result(conn, sweep_id, env_id, spec, "skipped", item.reason)
                log(f"{head}: skipped: {item.reason}")
                continue
            current, started = spec, store.now()
            outcome = run_equivalence(spec, cfg.timeout) if spec.mode == "equivalence" else run_config(spec, cfg.timeout)
            current = None
            rid = store.record_result(conn, sweep_id, env_id, spec, outcome.status, outcome.reason, outcome.payload,
                                      outcome.started_at, outcome.ended_at, outcome.wall_s, outcome.failed_rank)
            failures += outcome.status != "ok"
            log(f"{head}: {_summary_line(conn, rid, outcome)}")
            if outcome.status == "ok":
                shutil.rmtree(outcome.out_dir, ignore_errors=True)
    except (KeyboardInterrupt, Interrupted) as e:
        signum = e.signum if isinstance(e, Interrupted) else signal.SIGINT
        name = "SIGINT (Ctrl-C)" if signum == signal.SIGINT else signal.Signals(signum).name
        if current is not None:
            store.record_result(conn, sweep_id, env_id, current, "interrupted", f"sweep interrupted by {name}",
                                started_at=started, ended_at=store.now())
        store.end_sweep(conn, sweep_id, "interrupted")
        log(f"interrupted by {name}: finished results are kept; resume with ./run_bench.sh --resume {sweep_id} --store {cfg.store}")
        return 128 + int(signum)
    finally:
        signal.signal(signal.SIGTERM, previous)
    store.end_sweep(conn, sweep_id, "completed")
    conn.close()
    log(f"sweep {sweep_id} completed: {failures} configuration(s) failed" if failures else f"sweep {sweep_id} completed")
    status = 1 if failures else 0
    if cfg.report:
        status = render_report(cfg, sweep_id, log) or status
    return status


def render_report(cfg: SweepConfig, sweep_id: int, log: Callable[[str], None]) -> int:
    try:
        from bench import report
        out = report.render(cfg.store, sweep_id, cfg.plots_dir, cfg.report_dir)
    except Exception as e:  # a rendering problem must not hide that the measurements are stored
        log(f"report: could not render ({type(e).__name__}: {e}); results are in {cfg.store}")
        return 1
    log(f"report: {out['markdown']}, {out['html']}; {len(out['plots'])} plot(s) in {cfg.plots_dir}/")
    return 0


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


def command_line(argv: list) -> str:
    return " ".join(shlex.quote(a) for a in ["./run_bench.sh", *argv])
