"""Launching one configuration in fresh processes and supervising it until it ends.

Launchers (one function each, one registry entry):
    local   single, dp, loader: `python -m bench.rank.worker SPEC`; ddp, fsdp, comm: torchrun on this node,
            its agent forked from the sweep, which has torch loaded (bench.sweep.agent: ~2 s less a launch).
            A spec with process_start "forked" (the CPU default) starts each process through the fork server
            (bench.shared.forkserver, started at the first such launch): the same command, but its client stands
            in for `python -m`, and the rank is forked from a process that has imported torch already
    slurm   several nodes of the SLURM allocation: `srun -N K` starting one torchrun per node (bench.sweep.slurm)
Every torchrun rendezvouses with c10d through a FileStore in the run folder, and the workers join their
process group through a file as well: nothing of torch's listens on a network interface, and there is
no port to collide (a TCPStore listens on all interfaces whatever address it is given). On one node,
gloo and NCCL bind loopback unless GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME say otherwise.

`run_config(spec, limits)` starts the launcher in a session of its own and polls it: the worker's
heartbeats (bench.shared.heartbeat) name a rank that stops making progress within the collective timeout;
the wall-clock limit follows the work (start-up allowance, then 3x the run's projected length) unless
--timeout fixes it. Whatever happens (success, failure, stall, limit, a killed launcher, Ctrl-C),
no process of the configuration is left running when it returns (or re-raises).
"""
from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Optional

from bench.shared import forkserver, heartbeat, procs
from bench.shared.spec import COMM_ROWS_FILE, PER_DEVICE, RunSpec
from bench.sweep import agent
from bench.sweep.diagnose import Outcome, diagnose

WORKER = "bench.rank.worker"  # the module every launcher runs (`ab --b-repo` may name another checkout's)
TORCHRUN = "bench.sweep.torchrun"  # torchrun's own main, without the interpreter's teardown (~1.1 s a launch)
POLL_S = 0.25
STALL_FRACTION = 0.8          # name a stalled rank before the collective timeout fires (NCCL then aborts the rest)
STARTUP_S = {"cuda": 900.0, "cpu": 300.0}
WORK_FACTOR, WORK_MARGIN_S = 3.0, 60.0


@dataclass(frozen=True)
class Limits:
    """When a configuration is ended. fixed_s: --timeout (wins); else start-up allowance, then the work."""
    fixed_s: Optional[float] = None
    startup_s: float = 300.0
    stall_s: float = 96.0

    @classmethod
    def for_spec(cls, spec: RunSpec, timeout_s: Optional[float]) -> "Limits":
        return cls(fixed_s=timeout_s, startup_s=STARTUP_S.get(spec.device_type, 300.0),
                   stall_s=STALL_FRACTION * spec.pg_timeout_s)

    def deadline(self, started: float, watch: heartbeat.Watch, now: float) -> float:
        """The monotonic time past which the configuration is ended for taking too long."""
        if self.fixed_s is not None:
            return started + self.fixed_s
        if watch.total() <= 0 and watch.states:  # nothing to project from (the all-reduce microbenchmark)
            return started + 2 * self.startup_s
        projected = self.projected_s(started, watch)
        if projected is None:
            extra = 3 * self.startup_s if watch.in_phase(now, heartbeat.EXTENDED_PHASES) else 0.0
            return started + self.startup_s + extra
        return started + WORK_FACTOR * projected + WORK_MARGIN_S

    @staticmethod
    def step_s(watch: heartbeat.Watch) -> Optional[float]:
        """Seconds per step of the steps made after the first was seen (the first holds compilation, autotuning): up to
        when the slowest rank last began a step, so a stall since then is not taken for slow steps. Counted from the
        steps done when the first was seen, not from one: a compiled DeepLabV3 on the H200 was first seen at step 4
        (74 s to the first step, then 50 ms steps), and the pace read '-0 s a step'."""
        if watch.first_step is None or watch.advanced is None:
            return None
        at, count = watch.first_step
        made = watch.steps_done() - count
        return (watch.advanced - at) / made if made >= 1 else None

    def projected_s(self, started: float, watch: heartbeat.Watch) -> Optional[float]:
        """The run's whole length at the pace of its steps so far (start-up included); None before two steps."""
        per_step = self.step_s(watch)
        return None if per_step is None else (watch.first_step[0] - started) + watch.total() * per_step

    def still_progressing(self, started: float, watch: heartbeat.Watch, now: float) -> str:
        """What the limit cut short when every rank was progressing: where it was, the projection, the flag."""
        done, total = watch.steps_done(), watch.total()
        at = f"at step {done + 1} of {total}" if total > 0 and done >= 0 else "before the first step"
        projected = self.projected_s(started, watch)
        pace = f"; at this pace the run needs about {projected:.0f} s in all" if projected else ""
        if self.fixed_s is not None:
            more = f" (more than {projected:.0f})" if projected else ""
            flag = f"raise --timeout{more}, or leave it out so that the limit follows the work"
        else:
            flag = "--timeout S sets a longer, fixed limit"
        return f"the limit was reached {at} with every rank progressing{pace}; {flag}"

    def describe(self, elapsed_s: float) -> str:
        if self.fixed_s is not None:
            return f"timed out after {self.fixed_s:g} s (--timeout)"
        return (f"timed out after {elapsed_s:.0f} s (the limit follows the work: {self.startup_s:g} s to start, then "
                f"{WORK_FACTOR:g}x the run's projected length + {WORK_MARGIN_S:g} s; --timeout S fixes it)")


# ---------------------------------------------------------------- launchers

def rendezvous_args(spec: RunSpec, name: str) -> list:
    """torchrun's c10d rendezvous through a FileStore in the run folder: a TCPStore listens on every
    interface whatever address it is given, a file listens on none (and no port can collide)."""
    return ["--rdzv-backend=c10d", f"--rdzv-endpoint={os.path.join(spec.out_dir, 'rendezvous')}",
            "--rdzv-conf=store_type=file", f"--rdzv-id={name}", "--max-restarts=0"]


def launch_env(spec: RunSpec, env: dict) -> dict:
    """Variables every launch gets: workers join their process group through a file too, and on one
    node the communication backends bind loopback (unless the user chose an interface)."""
    env = dict(env, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1", BENCH_PG_INIT=f"file://{os.path.join(spec.out_dir, 'pg-store')}")
    if spec.launcher == "local":
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        env.setdefault("NCCL_SOCKET_IFNAME", "lo")
    env.pop(forkserver.ENV, None)   # a fresh launch knows no server; a forked one is told its own (run_config)
    return env


def torchrun_log_args(spec: RunSpec) -> list:
    """torchrun's own log folder inside the run folder (by default it makes a torchelastic_* folder in the
    temporary folder for every launch and never removes it)."""
    return [f"--log-dir={os.path.join(spec.out_dir, 'torchrun')}"]


_SERVER: dict = {}    # the fork server of this process, started at its first forked launch (None: it could not start)


def fork_server() -> Optional[str]:
    """The socket of this process's fork server, started on first use; None where none could be started."""
    if "server" not in _SERVER:
        _SERVER["server"] = forkserver.start(forkserver.PRELOAD_RANK)
    server = _SERVER["server"]
    return server.path if server is not None else None


def forked(spec: RunSpec, worker: str) -> bool:
    """Whether this launch goes through the fork server: asked for by the spec, on this node, this checkout's worker
    (another checkout's, `ab --b-repo`, starts fresh), and a server running."""
    return (spec.process_start == "forked" and spec.launcher == "local" and worker == WORKER
            and fork_server() is not None)


def local_command(spec: RunSpec, spec_path: str, worker: str = WORKER) -> list:
    # through the fork server its client is the program (torchrun: --no-python), the module its first argument
    client = [sys.executable, "-I", "-S", forkserver.CLIENT] if forked(spec, worker) else None
    if spec.processes > 1 or spec.strategy in PER_DEVICE + ("comm",):
        return [sys.executable, "-m", TORCHRUN, "--nnodes=1", f"--nproc-per-node={spec.device_count}",
                *rendezvous_args(spec, "bench-" + os.path.basename(spec.out_dir)), "--local-addr=127.0.0.1",
                *torchrun_log_args(spec), *(["--no-python", *client] if client else ["-m"]), worker, spec_path]
    return [*(client or [sys.executable, "-m"]), worker, spec_path]


def slurm_command(spec: RunSpec, spec_path: str, worker: str = WORKER) -> list:
    from bench.sweep import slurm
    return slurm.command(spec, spec_path, rendezvous_args(spec, slurm.step_name(spec)), worker, TORCHRUN)


LAUNCHERS: dict = {
    "local": local_command,
    "slurm": slurm_command,
}


def run_dir(spec: RunSpec, shared_dir: Optional[str]) -> str:
    """A fresh folder for the configuration's spec, logs, heartbeats and result: on the shared
    filesystem next to the store when ranks run on other nodes, else in the temporary folder."""
    if spec.launcher == "slurm" and shared_dir:
        os.makedirs(shared_dir, exist_ok=True)
        return tempfile.mkdtemp(prefix="bench-run-", dir=shared_dir)
    return tempfile.mkdtemp(prefix="bench-run-")


# ---------------------------------------------------------------- one configuration

def run_config(spec: RunSpec, limits: Limits, shared_dir: Optional[str] = None,
               on_progress: Optional[Callable[[heartbeat.Watch], None]] = None, extra_env: Optional[dict] = None,
               cwd: Optional[str] = None, keep: bool = False, worker: str = WORKER) -> Outcome:
    """Run one configuration in fresh processes and collect its result file or its failure.
    extra_env / cwd / worker: an A/B variant's environment, working folder and worker module (another
    checkout: bench.commands.abtest).
    The run folder is removed when it returns (what matters is in the outcome: the result, or the log tail and
    tracebacks of a failure); keep=True leaves it, at outcome.out_dir, for a caller that reads files from it."""
    out_dir = run_dir(spec, shared_dir)
    spec = dataclasses.replace(spec, out_dir=out_dir)
    spec_path = os.path.join(out_dir, "spec.json")
    started_at, t0 = _now(), time.monotonic()
    outcome = Outcome("failed", out_dir=out_dir)
    proc: Optional[subprocess.Popen] = None
    log_path = os.path.join(out_dir, "log.txt")
    try:  # from here on the run folder goes whatever happens (an interrupt while the fork server starts included)
        with open(spec_path, "w") as f:
            f.write(spec.to_json())
        env = procs.clean_env(os.environ) if spec.processes == 1 and spec.launcher == "local" else dict(os.environ)
        env = launch_env(spec, dict(env, PYTHONUNBUFFERED="1", **(extra_env or {})))
        if spec.threads:
            env["OMP_NUM_THREADS"] = str(spec.threads)
        command = LAUNCHERS[spec.launcher](spec, spec_path, worker)
        if forkserver.CLIENT in command:
            env[forkserver.ENV] = fork_server()
        started_at, t0 = _now(), time.monotonic()  # the fork server's own start is not this configuration's time
        with open(log_path, "w") as log:
            with procs.signals_deferred():  # an interrupt lands after the launcher starts, with proc known
                if command[1:3] == ["-m", TORCHRUN] and spec.launcher == "local":
                    proc = agent.start(command[3:], env, log.fileno(), cwd)
                else:
                    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=env, start_new_session=True, cwd=cwd, preexec_fn=procs.child_setup)
            outcome = kept_comm_rows(spec, supervise(proc, spec, spec_path, log_path, limits, t0, on_progress))
    except BaseException:
        if proc is not None:
            _end(proc, spec, spec_path)
        raise
    finally:
        outcome.out_dir = out_dir
        outcome.started_at, outcome.ended_at, outcome.wall_s = started_at, _now(), time.monotonic() - t0
        if not keep:
            shutil.rmtree(out_dir, ignore_errors=True)
    return outcome


def supervise(proc: subprocess.Popen, spec: RunSpec, spec_path: str, log_path: str, limits: Limits, t0: float,
              on_progress: Optional[Callable] = None) -> Outcome:
    """Poll until the launcher exits, a rank stalls or the limit passes; then diagnose."""
    watch = heartbeat.Watch(spec.out_dir, spec.processes)
    while True:
        try:
            rc = proc.wait(timeout=POLL_S)
            break
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        watch.poll(now)
        if on_progress:
            on_progress(watch)
        stalled = watch.stall(limits.stall_s, now)
        if stalled:
            ranks, why = stalled
            _end(proc, spec, spec_path)
            out = diagnose(spec.out_dir, log_path, None, spec)
            return Outcome("failed", f"stalled: {why}; no progress for {limits.stall_s:.0f} s "
                                     f"({STALL_FRACTION:.0%} of --pg-timeout); all processes of the configuration were killed",
                           out.payload, failed_rank=ranks[0])
        if now > limits.deadline(t0, watch, now):
            watch.poll(now)
            _end(proc, spec, spec_path)
            out = diagnose(spec.out_dir, log_path, None, spec)
            found = watch.at_limit(now, heartbeat.still_interval_s(limits.step_s(watch)))
            why = f"at the limit {found[1]}" if found else limits.still_progressing(t0, watch, now)
            return Outcome("failed", f"{limits.describe(now - t0)}; all processes of the configuration were killed; {why}"
                           + (f". {out.reason}" if out.reason and "no rank reported" not in out.reason else ""),
                           out.payload, failed_rank=found[0][0] if found else out.failed_rank)
    watch.poll()
    orphans = procs.kill_leftovers(spec_path)  # a launcher that died leaves its workers in their own sessions
    if spec.launcher == "slurm":
        from bench.sweep import slurm
        slurm.cancel(spec)
    result = os.path.join(spec.out_dir, "result.json")
    if rc == 0 and os.path.exists(result):
        with open(result) as f:
            return Outcome("ok", payload=json.load(f))
    out = diagnose(spec.out_dir, log_path, rc, spec, watch)
    if orphans:
        out.reason += f" ({len(orphans)} orphaned worker process(es) killed)"
    return out


def kept_comm_rows(spec: RunSpec, outcome: Outcome) -> Outcome:
    """A comm run that failed after its rank 0 had written the bandwidth rows (in its interference stage: bench.rank.
    commrun): ok with those rows, the failure kept as the stage's error. Any other outcome as it is."""
    path = os.path.join(spec.out_dir, COMM_ROWS_FILE)
    if spec.mode != "comm" or outcome.status != "failed" or not os.path.isfile(path):
        return outcome
    try:
        with open(path) as f:
            rows = json.load(f)
    except (OSError, ValueError):
        return outcome
    first = []  # the ranks' own exceptions in the stage, before the others timed out waiting for them
    for name in sorted(glob.glob(os.path.join(spec.out_dir, "interference-error-rank*.txt"))):
        with open(name, errors="replace") as f:
            first.append(f.read().strip())
    why = "; ".join(first) + "; then " if first else ""
    return Outcome("ok", payload={"comm": rows, "interference_error": f"{why}the run failed in it: {outcome.reason}",
                                  "interference_failure": outcome.payload})


def _end(proc: subprocess.Popen, spec: RunSpec, spec_path: str) -> None:
    if spec.launcher == "slurm":  # first the step on every node (killing srun's process group would orphan it)
        from bench.sweep import slurm
        slurm.cancel(spec)
    procs.kill_group(proc, spec_path)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
