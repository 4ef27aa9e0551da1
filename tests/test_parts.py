"""The test command's two parts (tests/parts.py): every module in a part (a module that starts processes in both where
it marks tests that start none, and each test in exactly one), the lists naming real modules, the in-process part
refusing a test that starts a process by any door, and a timing module's exclusive lock holding the other part."""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

import parts


def test_every_test_module_is_in_a_part_and_the_lists_name_modules_that_exist():
    every = {f"tests/{p.name}" for p in Path(parts.TESTS).glob("test_*.py")}
    spawning, in_process = parts.files("spawning"), parts.files("in-process")
    both = {f"tests/{n}" for n in parts.SPAWNING if parts.marks(n)}   # their marked tests run in the in-process part
    assert set(spawning) | set(in_process) == every and set(spawning) & set(in_process) == both
    assert both, "no module of the spawning part marks a test to run beside it"
    assert not any(parts.marks(n) for n in parts.TIMING | parts.CLOCKED), "a module held to the clock marks a test"
    assert not any(parts.marks(p[len("tests/"):]) for p in set(in_process) - both), \
        "a mark in a module of the in-process part says nothing"
    assert {f"tests/{n}" for n in parts.SPAWNING | parts.CLOCKED} <= every, "an entry names no module"
    assert {f"tests/{n}" for n in parts.CLOCKED} <= set(spawning)   # held to the clock: never at nice 19
    assert parts.TIMING <= parts.SPAWNING, "a module that times something must run in the spawning part"
    assert "tests/test_parts.py" in spawning   # this module starts a process below
    with pytest.raises(ValueError, match="'both'"):
        parts.files("both")


def test_a_test_of_the_in_process_part_that_starts_a_process_fails_naming_where_its_module_belongs():
    with pytest.raises(pytest.fail.Exception, match=r"x::y started a process .*SPAWNING in tests/parts\.py"):
        with parts.no_processes("x::y"):
            subprocess.run(["true"], check=True)
    with parts.no_processes("x::z") as started:   # no process: nothing said
        pass
    assert started == []


def test_the_guard_sees_multiprocessings_doors_too():
    # torch.multiprocessing's spawn starts its ranks through multiprocessing.util.spawnv_passfds, its fork method
    # through os.fork: neither passes subprocess.Popen
    import multiprocessing.util
    with pytest.raises(pytest.fail.Exception, match=r"x::spawn started a process .*python"):
        with parts.no_processes("x::spawn"):
            os.waitpid(multiprocessing.util.spawnv_passfds(os.fsencode(sys.executable), [sys.executable, "-c", "pass"], []), 0)
    with pytest.raises(pytest.fail.Exception, match=r"x::fork started a process \(os\.fork\(\)\)"):
        with parts.no_processes("x::fork"):
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
    assert subprocess.Popen._execute_child.__name__ == "_execute_child" and os.fork.__name__ == "fork"   # restored


def test_a_timing_modules_exclusive_lock_keeps_the_in_process_part_waiting(tmp_path, monkeypatch):
    lock = tmp_path / "quiet"
    monkeypatch.setenv(parts.QUIET_LOCK, str(lock))
    with parts.held(exclusive=True):
        with open(lock) as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_SH | fcntl.LOCK_NB)
    with parts.held(exclusive=False), open(lock) as other:   # shared beside shared: both go on
        fcntl.flock(other, fcntl.LOCK_SH | fcntl.LOCK_NB)
    monkeypatch.delenv(parts.QUIET_LOCK)
    with parts.held(exclusive=True):   # not set (one pytest): no lock at all
        pass


class _Item:
    def __init__(self, module: str, marked: bool):
        self.fspath, self.marked, self.fixturenames, self.keywords = f"/repo/tests/{module}", marked, (), {}

    def get_closest_marker(self, name):
        return object() if self.marked and name == parts.MARK else None


@pytest.mark.parametrize("part", [*parts.PARTS, None])
def test_each_test_runs_in_the_part_it_belongs_to_and_the_rest_are_deselected(part, monkeypatch):
    import conftest

    class Config:
        def getoption(self, name):
            return False

        class hook:
            @staticmethod
            def pytest_deselected(items):
                deselected.extend(items)
    spawning, marked, clocked, plain = (_Item("test_sweep.py", False), _Item("test_sweep.py", True),
                                        _Item("test_commbench.py", False), _Item("test_stats.py", False))
    items, deselected = [spawning, marked, clocked, plain], []
    if part:
        monkeypatch.setenv(parts.PART, part)
    else:   # one pytest: everything, in order
        monkeypatch.delenv(parts.PART, raising=False)
    monkeypatch.setitem(conftest._EARLY, "wanted", set())
    conftest.pytest_collection_modifyitems(Config(), items)
    want = {"spawning": [spawning, clocked], "in-process": [marked, plain], None: [spawning, marked, clocked, plain]}
    assert items == want[part] and len(items) + len(deselected) == 4
    assert parts.belongs("spawning", "test_sweep.py", False) and not parts.belongs("spawning", "test_sweep.py", True)
    monkeypatch.setenv(parts.PART, "both")
    with pytest.raises(pytest.UsageError, match="BENCH_TEST_PART='both': expected one of spawning, in-process"):
        conftest.pytest_collection_modifyitems(Config(), [spawning])
    with pytest.raises(ValueError, match="'nowhere'"):
        parts.belongs("nowhere", "test_sweep.py", False)
