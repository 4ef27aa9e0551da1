"""torchrun's agent on this node, forked from the sweep instead of started as a new Python.

A new `python -m torch.distributed.run` spends ~2 s of CPU importing torch before it starts a single worker,
in every multi-process configuration (measured here: 1.9-2.2 s of a 2-core machine, more than the steps of a
CPU configuration). The sweep has torch loaded already (planning builds models on the meta device), so a
fork of it starts the agent at once. The agent only supervises: it rendezvouses through the run folder's
FileStore and starts the workers with exec as torchrun always does, so every rank that is measured is still a
fresh process. The child is set up as `subprocess.Popen(..., start_new_session=True, preexec_fn=child_setup)`
sets up an exec'd launcher: a session of its own, the log as stdout and stderr, /dev/null as stdin, the given
environment and folder, signals back at their defaults and unblocked, death with the sweep. It never returns
into the sweep's code: it ends with os._exit, so nothing the sweep holds (its store connection) is touched.

On CUDA the sweep may have initialised CUDA while detecting the machine; the agent never uses CUDA (only the
exec'd workers do), which is what torch requires of a forked child.

SLURM's launcher still execs torchrun on every node through srun (bench.sweep.slurm, bench.sweep.torchrun).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import traceback
from typing import Callable, Optional

from bench.shared import procs

RESET_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGXFSZ)


class Forked:
    """The agent as the supervisor sees a subprocess.Popen: pid, returncode, poll(), wait(timeout)."""

    def __init__(self, pid: int, args: list):
        self.pid, self.args, self.returncode = pid, args, None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: it is gone, its status unknown
                self.returncode = 1
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)  # -N for a signal, as Popen says it
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.0005
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(delay if deadline is None else min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(2 * delay, 0.05)
        return self.returncode


def torchrun(args: list) -> None:
    from torch.distributed.run import main  # after the environment is set: its loggers read LOGLEVEL
    main(args)


def start(torchrun_args: list, env: dict, log_fd: int, cwd: Optional[str] = None,
          target: Callable[[list], None] = torchrun) -> Forked:
    """torchrun with these arguments (as after `torchrun`), forked; call it with the sweep's signals blocked
    (procs.signals_deferred) so that an interrupt lands once the caller knows the pid. target: what the child
    runs with the arguments (torchrun; a test's stand-in)."""
    procs.flush_std()  # nothing buffered in the sweep is written twice
    ready, set_up = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready)
        _child(target, torchrun_args, env, log_fd, cwd, set_up)  # never returns
    os.close(set_up)
    try:  # as Popen returns only once its child is set up: a signal to the agent's session then reaches it
        os.read(ready, 1)  # end of file: the child closed its end, or died
    finally:
        os.close(ready)
    return Forked(pid, ["torchrun", *torchrun_args])


def _child(target: Callable[[list], None], torchrun_args: list, env: dict, log_fd: int, cwd: Optional[str],
           set_up: int) -> None:
    code = 1
    try:
        os.setsid()
        for sig in RESET_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        procs.child_setup()  # signals unblocked, SIGTERM when the sweep dies
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # the sweep's own may be a test's capture
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        if cwd:
            os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        os.close(set_up)
        sys.argv = ["torchrun", *torchrun_args]
        target(torchrun_args)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # as Python would print it: a failed worker group's "Root Cause" report, for diagnose
        traceback.print_exc()
        code = 1
    finally:
        procs.flush_std()  # then no atexit handler: those are the sweep's, not the agent's
        os._exit(code)
