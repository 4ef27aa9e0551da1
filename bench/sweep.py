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
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Optional

from bench import config, faults, store
from bench.config import RunSpec, Skip, SweepConfig

PORT_RETRIES = 3
KILL_GRACE_S = 5.0
EQUIVALENCE_STEPS = 3
EQUIVALENCE_RTOL, EQUIVALENCE_ATOL = 1e-4, 1e-5


class Interrupted(Exception):
    """The sweep received SIGTERM or SIGHUP (SIGINT arrives as KeyboardInterrupt)."""

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


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel to send `sig` to this process when its parent dies (even by SIGKILL).

    The sweep sets it in every launcher it starts; torchrun starts its workers in sessions of
    their own, so the worker calls it too (with SIGKILL) to go with torchrun if torchrun is killed.
    """
    parent = os.getppid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(sig))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request was made: nobody will send it
        os.kill(os.getpid(), sig)


DEFERRED_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@contextmanager
def signals_deferred():
    """Hold SIGINT/SIGTERM/SIGHUP until the block is done (a result and its rows are written whole)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, DEFERRED_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _child_setup() -> None:
    """In the launcher, before exec: die with the sweep, and take signals again (the mask is inherited)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, DEFERRED_SIGNALS)
    die_with_parent()


def _kill_group(proc: subprocess.Popen, spec_path: str) -> None:
    """SIGTERM the configuration's process group (torchrun forwards it to its workers), then SIGKILL;
    then SIGKILL whatever still names the spec file (torchrun's workers live in sessions of their own)."""
    with signals_deferred():  # a second Ctrl-C must not leave processes behind
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
        _kill_leftovers(spec_path)


def _kill_leftovers(spec_path: str) -> list:
    """SIGKILL the processes of a configuration that outlived its launcher; returns their pids."""
    pids = worker_pids(spec_path)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + KILL_GRACE_S
    while pids and time.monotonic() < deadline and worker_pids(spec_path):
        time.sleep(0.05)
    return pids


def worker_pids(spec_path: str) -> list:
    """Live processes whose command line names this configuration's spec file."""
    pids = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(os.path.join(d, "cmdline"), "rb") as f:
                if spec_path.encode() not in f.read():
                    continue
            with open(os.path.join(d, "stat"), "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue  # a zombie is already dead, only not yet reaped by its parent
        except (OSError, IndexError):
            continue
        pids.append(int(os.path.basename(d)))
    return [p for p in pids if p != os.getpid()]


def run_config(spec: RunSpec, timeout_s: float) -> Outcome:
    """Run one configuration in fresh processes and collect its result file or its failure.

    Returns within timeout_s (plus the kill grace) whatever the processes do, and leaves none of them
    running: not on success, failure, timeout, a killed launcher, nor an interrupt (re-raised).
    """
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
    proc: Optional[subprocess.Popen] = None
    try:
        for attempt in range(PORT_RETRIES):
            log_path = os.path.join(out_dir, f"log{attempt}.txt")
            with open(log_path, "w") as log:
                with signals_deferred():  # an interrupt lands after Popen returns, with proc known
                    proc = subprocess.Popen(command(spec, spec_path, free_port()), stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                                            preexec_fn=_child_setup)
                try:
                    rc = proc.wait(timeout=max(1.0, timeout_s - (time.monotonic() - t0)))
                except subprocess.TimeoutExpired:
                    _kill_group(proc, spec_path)
                    outcome = diagnose(out_dir, log_path, None, spec)
                    outcome.reason = (f"timed out after {timeout_s:g} s (--timeout); all processes of the configuration "
                                      f"were killed" + (f". {outcome.reason}" if outcome.reason else ""))
                    break
            # A launcher that died (torchrun SIGKILLed) leaves its workers in their own sessions.
            orphans = _kill_leftovers(spec_path)
            result = os.path.join(out_dir, "result.json")
            if rc == 0 and os.path.exists(result):
                with open(result) as f:
                    outcome = Outcome("ok", payload=json.load(f), out_dir=out_dir)
                break
            outcome = diagnose(out_dir, log_path, rc, spec)
            if orphans:
                outcome.reason += f" ({len(orphans)} orphaned worker process(es) killed)"
            if not _port_collision(log_path):
                break
    except BaseException:
        if proc is not None:
            _kill_group(proc, spec_path)
        raise
    finally:
        outcome.started_at, outcome.ended_at, outcome.wall_s = started, store.now(), time.monotonic() - t0
    return outcome


def _port_collision(log_path: str) -> bool:
    with open(log_path, errors="replace") as f:
        text = f.read()
    return "EADDRINUSE" in text or "Address already in use" in text


TIMEOUT_WORDS = re.compile(r"timed out|timeout", re.I)


def diagnose(out_dir: str, log_path: str, rc: Optional[int], spec: Optional[RunSpec] = None) -> Outcome:
    """Why a configuration failed, naming the rank that caused it.

    In order: a rank killed by a signal (torchrun's root cause: SIGKILL from the OOM killer leaves no
    error file, and the other ranks' errors are only its echo); a rank that stopped making progress
    (the others timed out waiting for it in a collective and it reported nothing); the first rank's
    own error file; torchrun's root cause; the launcher's exit. rc None: the sweep killed it (--timeout).
    """
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
    errors.sort(key=lambda e: e["time"])
    with_error = {e["rank"] for e in errors}
    exits = {int(r): int(c) for r, c in re.findall(r"rank\s*:\s*(\d+)[^\n]*\n\s*exitcode\s*:\s*(-?\d+)", log)}
    root = re.search(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+).*?traceback\s*:\s*([^\n]*)", log, re.S)
    details = {"log_tail": tail}
    if errors:
        details["traceback"] = errors[0].get("traceback", "")

    if root and rc is not None:
        rank, code = int(root.group(1)), int(root.group(2))
        if code < 0 and rank not in with_error:
            return Outcome("failed", f"rank {rank}: killed by {_signal_name(-code)}"
                           + (f"; then {_error_text(errors[0])}" if errors else ""), details, failed_rank=rank)
    if errors and TIMEOUT_WORDS.search(errors[0]["message"]):
        ranks = set(exits) | with_error | (set(range(spec.device_count)) if spec and spec.strategy == "ddp" else set())
        silent = sorted(ranks - with_error)
        if silent:
            who = ", ".join(map(str, silent))
            return Outcome("failed", f"rank {who}: stopped making progress (reported no error; the other rank(s) timed out "
                           f"waiting for it, --pg-timeout); first error: {_error_text(errors[0])}", details,
                           failed_rank=silent[0])
    if errors:
        return Outcome("failed", _error_text(errors[0]), details, failed_rank=errors[0]["rank"])
    if root:
        rank, code, why = int(root.group(1)), int(root.group(2)), root.group(3).strip()
        return Outcome("failed", f"rank {rank}: exit code {code}" + (f" ({_signal_name(-code)})" if code < 0 else "")
                       + (f": {why}" if why and "error_file" not in why else ""), details, failed_rank=rank)
    if rc is None:
        if spec is not None and spec.strategy not in ("ddp",):  # one process: rank 0 is the one that stalled
            return Outcome("failed", "rank 0: stopped making progress (reported no error)", details, failed_rank=0)
        return Outcome("failed", "no rank reported an error before the limit", details)
    if rc < 0:
        if spec is not None and spec.strategy == "ddp":
            return Outcome("failed", f"torchrun (the launcher) was killed by {_signal_name(-rc)}", details)
        return Outcome("failed", f"rank 0: killed by {_signal_name(-rc)}", details, failed_rank=0)
    return Outcome("failed", f"exit code {rc}: {tail.splitlines()[-1] if tail else 'no output'}", details)


def _error_text(err: dict) -> str:
    return f"rank {err['rank']}: {err['type']}: {err['message']}".strip()


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
    ref = dataclasses.replace(cand, strategy="single", device_count=1, emulate_ranks=chunks,
                              sync_bn=cand.sync_bn and cand.strategy == "ddp")
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
    verdict.update(optimizer_steps=EQUIVALENCE_STEPS, reference_losses=ref.payload.get("losses"),
                   candidate_losses=cand.payload.get("losses"), batchnorm=ref.payload.get("batchnorm"))
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
        one_per_workload = {s.workload: s for s in runnable}.values()  # building DeepLabV3 even on meta takes ~2 s
        max_bytes = max(gradient_bytes(s) for s in one_per_workload) if runnable else 2**20
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
    """Run a resolved, validated config (or resume one). Returns the process exit status.

    Ctrl-C (SIGINT), SIGTERM and SIGHUP stop the running configuration (all its processes), record it
    'interrupted', keep every finished result, mark the sweep 'interrupted' and return 128 + signal.
    """
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:  # respect nohup
            signal.signal(sig, _raise_interrupted)
    try:  # tests' fault injection: a malformed BENCH_FAULT is an input error, before anything runs
        faults.parse(os.environ.get("BENCH_FAULT", ""))
    except ValueError as e:
        raise config.ConfigError(str(e)) from None
    conn = None
    sweep_id: Optional[int] = None
    current: Optional[RunSpec] = None
    started = ""
    failures = 0
    try:
        conn = store.connect(cfg.store)
        resumed = bool(cfg.resume)
        if resumed:
            row = store.find_sweep(conn, cfg.resume)
            if row["status"] == "running":
                raise store.StoreError(f"sweep {row['sweep_id']} is still running (pid {row['pid']} on {row['hostname']})")
            original = SweepConfig.from_json(row["config_json"])
            kept = {"store": cfg.store, "resume": "", "report": cfg.report, "plots_dir": cfg.plots_dir,
                    "report_dir": cfg.report_dir}
            ignored = [f.name for f in dataclasses.fields(SweepConfig) if f.name not in kept
                       and getattr(cfg, f.name) != f.default and getattr(cfg, f.name) != getattr(original, f.name)]
            if ignored:
                log(f"note: a resumed sweep keeps its original settings; ignoring --"
                    + ", --".join(n.replace("_", "-") for n in ignored))
            cfg = dataclasses.replace(original, **kept)
        from bench import env as env_mod
        env_id = store.insert_environment(conn, env_mod.capture())
        with signals_deferred():  # the sweep row exists exactly when sweep_id is known here
            if resumed:
                sweep_id = row["sweep_id"]
                store.reopen_sweep(conn, sweep_id)
            else:
                sweep_id = store.begin_sweep(conn, command_line, cfg.to_json(), env_id)
        if resumed:
            done = store.ok_keys(conn, sweep_id)
            log(f"resuming sweep {sweep_id} in {cfg.store}: {len(done)} configuration(s) already done")
        else:
            done = set()
            log(f"sweep {sweep_id} -> {cfg.store} ({cfg.device}, counts {','.join(map(str, cfg.gpus))}, "
                f"{cfg.scaling} scaling, " + (f"{cfg.epochs} epoch(s) of {cfg.data}" if cfg.epochs else f"{cfg.steps} steps after {cfg.warmup} warm-up")
                + (f", {cfg.threads_per_process} torch thread(s) per process" if cfg.device == "cpu" else "") + ")")

        items = build_items(cfg)
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
            with signals_deferred():  # a finished configuration is recorded, not lost to a late Ctrl-C
                rid = store.record_result(conn, sweep_id, env_id, spec, outcome.status, outcome.reason, outcome.payload,
                                          outcome.started_at, outcome.ended_at, outcome.wall_s, outcome.failed_rank)
                current = None
            failures += outcome.status != "ok"
            log(f"{head}: {_summary_line(conn, rid, outcome)}")
            if outcome.status == "ok":
                shutil.rmtree(outcome.out_dir, ignore_errors=True)
        with signals_deferred():
            store.end_sweep(conn, sweep_id, "completed")
            conn.close()
    except (KeyboardInterrupt, Interrupted) as e:
        signum = e.signum if isinstance(e, Interrupted) else signal.SIGINT
        name = "SIGINT (Ctrl-C)" if signum == signal.SIGINT else signal.Signals(signum).name
        with signals_deferred():
            if sweep_id is not None:
                if current is not None:
                    store.record_result(conn, sweep_id, env_id, current, "interrupted", f"sweep interrupted by {name}",
                                        started_at=started, ended_at=store.now())
                store.end_sweep(conn, sweep_id, "interrupted")
            if conn is not None:
                conn.close()
        log(f"interrupted by {name}: finished results are kept"
            + (f"; resume with ./run_bench.sh --resume {sweep_id} --store {cfg.store}" if sweep_id is not None else ""))
        return 128 + int(signum)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
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
