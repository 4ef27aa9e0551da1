"""The fork server (bench.shared.forkserver) and its client: a process forked from it must be, to everything that
starts, signals, inspects and waits for it, the `python -m MODULE ARGS` it stands for."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from bench.shared import forkserver, procs
from conftest import REPO, forkserver_env

PROBE = '''import json, os, signal, sys, time
from bench.shared import forkserver
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "mark": os.environ.get("PROBE_MARK"),
                  "path0": sys.path[0], "started": forkserver.started_as(), "pid": os.getpid()}), flush=True)
print("to stderr", file=sys.stderr, flush=True)
what = sys.argv[1]
if what == "sleep":
    time.sleep(60)
elif what == "exit":
    sys.exit(int(sys.argv[2]))
elif what == "raise":
    raise RuntimeError("probe failed")
elif what == "signal":
    os.kill(os.getpid(), int(sys.argv[2]))
'''


@pytest.fixture
def probe(tmp_path):
    (tmp_path / "fsprobe.py").write_text(PROBE)
    env = {**os.environ, **forkserver_env(), "PROBE_MARK": "m-1", "PYTHONPATH": str(REPO)}
    if forkserver.ENV not in env:
        pytest.skip("no session fork server (run without --run-gpu)")

    def start(*args, **kw):
        return subprocess.Popen([sys.executable, "-I", "-S", forkserver.CLIENT, "fsprobe", *args], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kw)
    return start


def _first_line(p: subprocess.Popen) -> dict:
    return json.loads(p.stdout.readline())


def test_a_forked_process_gets_the_clients_arguments_folder_environment_and_streams(probe, tmp_path):
    p = probe("exit", "7")
    got = _first_line(p)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 7
    assert got["argv"] == ["exit", "7"] and got["cwd"] == str(tmp_path) and got["path0"] == str(tmp_path)
    assert got["mark"] == "m-1" and got["started"] == "forked" and got["pid"] != p.pid
    assert "to stderr" in err


def test_an_uncaught_exception_prints_its_traceback_and_exits_1(probe):
    p = probe("raise")
    _, err = p.communicate(timeout=30)
    assert p.returncode == 1 and "RuntimeError: probe failed" in err and "Traceback" in err


def test_a_child_killed_by_a_signal_ends_its_client_by_the_same_signal(probe):
    p = probe("signal", str(int(signal.SIGKILL)))
    p.communicate(timeout=30)
    assert p.returncode == -signal.SIGKILL


def test_signals_go_on_to_the_child_and_proc_shows_it_as_what_it_runs(probe):
    p = probe("sleep")
    child = _first_line(p)["pid"]
    cmdline = open(f"/proc/{child}/cmdline", "rb").read().split(b"\0")
    assert cmdline[1:5] == [b"-m", b"fsprobe", b"sleep", b""] or cmdline[1:4] == [b"-m", b"fsprobe", b"sleep"]
    assert b"PROBE_MARK=m-1\0" in open(f"/proc/{child}/environ", "rb").read()
    assert os.getsid(child) == child  # a session of its own, as every launched process has
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=30)
    assert p.returncode == -signal.SIGTERM
    assert _gone(child)


def test_a_sigkilled_client_takes_its_child_with_it(probe):
    p = probe("sleep")
    child = _first_line(p)["pid"]
    p.kill()
    p.wait(timeout=30)
    assert _gone(child), "the server must kill the child of a client that died"


def test_without_a_server_the_client_starts_a_fresh_interpreter_and_says_so(tmp_path):
    (tmp_path / "fsprobe.py").write_text(PROBE)
    env = {**os.environ, forkserver.ENV: str(tmp_path / "no-such-socket"), "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-I", "-S", forkserver.CLIENT, "fsprobe", "exit", "3"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and json.loads(p.stdout.splitlines()[0])["started"] == "fresh"
    assert "as a fresh interpreter" in p.stderr


def test_a_server_whose_imports_start_a_thread_refuses_to_serve(tmp_path):
    (tmp_path / "threadmod.py").write_text("import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n")
    env_before = dict(os.environ)
    os.environ["PYTHONPATH"] = str(tmp_path)
    try:
        server = forkserver.launch(("threadmod",))
        assert not server.ready(30)
    finally:
        os.environ.clear()
        os.environ.update(env_before)


def test_a_sweep_records_how_its_processes_started(quick_sweep):
    """The quick sweep's ranks forked from the server (the CPU default), and the store says so per result."""
    _, path = quick_sweep
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT json_extract(spec_json, '$.process_start'), json_extract(details_json, '$.process_start') "
                        "FROM results WHERE status = 'ok'").fetchall()
    conn.close()
    assert rows and all(r == ("forked", "forked") for r in rows), rows


def test_fresh_interpreters_start_every_rank_as_a_new_python(tmp_path):
    from conftest import FAST, run_bench
    path = str(tmp_path / "b.sqlite")
    p = run_bench([*FAST, "--strategies", "ddp", "--gpus", "2", "--no-comm-bench", "--fresh-interpreters", "--store", path])
    assert p.returncode == 0, p.stdout + p.stderr
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT json_extract(spec_json, '$.process_start'), json_extract(details_json, '$.process_start') "
                        "FROM results").fetchall()
    conn.close()
    assert rows == [("fresh", "fresh")]


def test_a_fork_server_that_does_not_answer_is_said_on_the_terminal_and_in_the_environment(tmp_path, monkeypatch, capsys):
    # The server gone mid-sweep (a SIGINT to it, once): its clients start fresh interpreters and said so only in the
    # ranks' logs; the report then set fresh and forked processes' peak RSS side by side.
    from types import SimpleNamespace
    from conftest import FAST
    from bench import cli
    from bench.analysis import results
    from bench.report import environment
    from bench.store import store
    from bench.sweep import launch
    monkeypatch.setitem(launch._SERVER, "server", SimpleNamespace(path=str(tmp_path / "gone.sock")))
    path = str(tmp_path / "f.sqlite")
    assert cli.main([*FAST, "--strategies", "single", "--gpus", "1", "--no-comm-bench", "--device", "cpu",
                     "--store", path]) == 0
    out = capsys.readouterr().out
    assert "note: the fork server did not answer: this configuration's processes started as fresh interpreters" in out
    conn = store.connect(path, readonly=True)
    sweep = results.load(conn, 1)
    conn.close()
    assert environment.process_starts(sweep) == "fresh interpreters"


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if procs.process_state(pid) in ("", "Z"):
            return True
        time.sleep(0.05)
    return False


def test_an_interrupt_while_the_fork_server_starts_leaves_no_run_folder_behind(tmp_path, monkeypatch):
    # Ctrl-C in a sweep's first seconds lands while the fork server imports torch: the configuration's run folder,
    # made just before, was left in the temporary folder with its spec.json (56 of them on one machine).
    import tempfile
    from report_fixtures import spec as make_spec
    from bench.sweep import launch

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(launch, "fork_server", interrupted)
    monkeypatch.setattr(launch, "forked", lambda spec, worker: True)
    with pytest.raises(KeyboardInterrupt):
        launch.run_config(make_spec("synthetic", "single", 1), launch.Limits())
    assert [p.name for p in tmp_path.iterdir()] == []
