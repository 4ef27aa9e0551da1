"""torchrun's agent forked from the sweep (bench.sweep.agent): set up as subprocess.Popen sets up an exec'd
launcher, and seen by the supervisor as a Popen. The targets here stand in for torchrun's main; every real
DDP, FSDP and all-reduce configuration of the suite runs through the real one."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from bench.shared import procs
from bench.sweep import agent


def _reports(args: list) -> None:
    print("args", " ".join(args))
    print("env", os.environ.get("AGENT_TEST"), os.environ.get("AGENT_PARENT_ONLY"))
    print("cwd", os.getcwd())
    print("session", os.getsid(0) == os.getpid())
    print("sigint", signal.getsignal(signal.SIGINT) is signal.SIG_DFL)
    print("blocked", sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])))
    print("stdin", os.read(0, 10) == b"")
    print("to stderr", file=sys.stderr)


def _raises(args: list) -> None:
    raise RuntimeError("the worker group failed")


def _exits(args: list) -> None:
    sys.exit(int(args[0]))


def _sleeps(args: list) -> None:
    time.sleep(60)


def start(tmp_path, target, args=(), env=None):
    log = tmp_path / "log.txt"
    with open(log, "w") as f, procs.signals_deferred():
        proc = agent.start(list(args), env if env is not None else {"AGENT_TEST": "given"}, f.fileno(), str(tmp_path), target)
    return proc, log


def test_the_agent_runs_in_a_session_of_its_own_with_the_given_environment_folder_log_and_signals(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_PARENT_ONLY", "leaked")
    proc, log = start(tmp_path, _reports, ["--nproc-per-node=2", "-m", "w"])
    assert proc.wait(30) == 0 and proc.returncode == 0 and proc.poll() == 0
    out = log.read_text()
    assert "args --nproc-per-node=2 -m w" in out
    assert "env given None" in out  # exactly the launch environment, nothing of the sweep's own
    assert f"cwd {tmp_path}" in out and "session True" in out and "stdin True" in out and "to stderr" in out
    assert "sigint True" in out and "blocked []" in out  # the sweep's deferral is not inherited


def test_a_failure_in_the_agent_is_printed_to_its_log_as_python_would_and_is_exit_status_1(tmp_path):
    proc, log = start(tmp_path, _raises)
    assert proc.wait(30) == 1
    out = log.read_text()
    assert "Traceback" in out and "RuntimeError: the worker group failed" in out


@pytest.mark.parametrize("code", [0, 3])
def test_the_agents_exit_status_is_its_own(tmp_path, code):
    proc, _ = start(tmp_path, _exits, [str(code)])
    assert proc.wait(30) == code


def test_a_killed_agent_reads_as_minus_its_signal_and_wait_times_out_as_popens(tmp_path):
    proc, _ = start(tmp_path, _sleeps)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.2)
    assert proc.poll() is None
    procs.kill_group(proc, str(tmp_path / "no-such-spec.json"))  # the supervisor's way: its session, then SIGKILL
    assert proc.returncode == -signal.SIGTERM


def test_the_agent_leads_its_own_session_when_start_returns_so_a_signal_to_it_lands(tmp_path):
    for _ in range(5):  # without the wait for the child's set-up, its session did not exist yet at once
        proc, _ = start(tmp_path, _sleeps)
        assert os.getsid(proc.pid) == proc.pid
        os.killpg(proc.pid, signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL
