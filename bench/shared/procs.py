"""Process helpers shared by the sweep, the launchers and the worker: dying with the parent, signal
deferral around store writes, killing a configuration's processes and finding what is left of them.

A configuration's processes are found by their command line, which names the configuration's spec
file (OUT_DIR/spec.json): torchrun starts its workers in sessions of their own, so a process group
alone does not reach them.
"""
from __future__ import annotations

import atexit
import ctypes
import glob
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

KILL_GRACE_S = 5.0
DEFERRED_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
# Launcher variables that must never leak from the user's shell into a single-process worker.
LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                      "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                      "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE")


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


@contextmanager
def signals_deferred():
    """Hold SIGINT/SIGTERM/SIGHUP until the block is done (a result and its rows are written whole). The main thread's
    mask alone does not hold them: once torch is imported the process has other threads, the kernel may deliver a
    signal to one of them, and Python then runs its handler in the main thread anyway (a SIGTERM sent inside a fit's
    end of sweep left it 'running'). So the block's handlers only note a signal, and it is raised again, to the
    handlers before the block, once the block is done. Outside the main thread, where handlers cannot be set, the mask."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, DEFERRED_SIGNALS)
    if threading.current_thread() is not threading.main_thread():
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        return
    caught: list = []
    before = {sig: signal.getsignal(sig) for sig in DEFERRED_SIGNALS}
    for sig, handler in before.items():
        if handler not in (None, signal.SIG_IGN):   # None: a handler not set from Python, left as it is
            signal.signal(sig, lambda num, _frame: caught.append(num))
    try:
        yield
    finally:
        for sig, handler in before.items():
            if handler not in (None, signal.SIG_IGN):
                signal.signal(sig, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        for num in dict.fromkeys(caught):
            signal.raise_signal(num)


class Interrupted(Exception):
    """The process received SIGTERM or SIGHUP (SIGINT arrives as KeyboardInterrupt)."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signum}")
        self.signum = signum


def raise_interrupted(signum, frame):
    raise Interrupted(signum)


@contextmanager
def interruptible(handler=raise_interrupted):
    """SIGTERM and SIGHUP go to `handler` (one that raises, so that a sweep or a fit ends 'interrupted', not 'died',
    under `timeout` or a closed terminal) for the block; nohup's SIG_IGN is respected; the handlers before it are
    restored first thing on the way out."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    for sig, h in before.items():
        if h is not signal.SIG_IGN:
            signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, h in before.items():
            if h is not None:
                signal.signal(sig, h)


def exit_without_teardown(code: int) -> None:
    """End a worker whose work is done and written: run the atexit handlers (multiprocessing's ends the
    loader's worker processes, torch's its own) and flush, then skip the interpreter's module teardown,
    which takes ~1.3 s with torch and its compiler stack loaded, in every process of every configuration."""
    atexit._run_exitfuncs()
    flush_std()
    os._exit(code)


def flush_std() -> None:
    """Flush stdout and stderr, ignoring a closed or broken one (before os._exit or os.fork)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def stdout_closed():
    """Standard output's reader is gone (`| head`, a pager quit): later writes go nowhere (not another BrokenPipeError,
    at exit either). Returns a log function that writes to stderr, for what is left to say."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError):
        pass
    return lambda line: print(line, file=sys.stderr, flush=True)


def child_setup() -> None:
    """In a launcher, before exec: die with the sweep, and take signals again (the mask is inherited)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, DEFERRED_SIGNALS)
    die_with_parent()


def clean_env(env: dict) -> dict:
    """The environment without stray launcher variables (a user's RANK=3 must not reach a worker)."""
    return {k: v for k, v in env.items() if k not in LAUNCHER_VARIABLES}


def kill_group(proc: subprocess.Popen, spec_path: str, first: int = signal.SIGTERM) -> None:
    """`first` to the configuration's process group (torchrun and srun forward it), then SIGKILL;
    then SIGKILL whatever still names the spec file."""
    with signals_deferred():  # a second Ctrl-C must not leave processes behind
        for sig in (first, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=KILL_GRACE_S)
                break
            except subprocess.TimeoutExpired:
                continue
        kill_leftovers(spec_path)


def kill_leftovers(spec_path: str) -> list:
    """SIGKILL the local processes of a configuration that outlived its launcher; returns their pids."""
    pids = worker_pids(spec_path)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)  # a stopped process dies of SIGKILL too, but be explicit
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
            if process_state(int(os.path.basename(d))) == "Z":
                continue  # a zombie is already dead, only not yet reaped by its parent
        except (OSError, ValueError):
            continue
        pids.append(int(os.path.basename(d)))
    return [p for p in pids if p != os.getpid()]


def process_state(pid: int) -> str:
    """The one-letter state of /proc/PID/stat (R, S, D, T stopped, Z zombie); '' if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return ""
