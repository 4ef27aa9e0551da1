"""The test command's two parts (tests/parts.py): every module in exactly one, the lists naming real modules, the
in-process part refusing a test that starts a process, and a timing module's exclusive lock holding the other part."""
from __future__ import annotations

import fcntl
import subprocess
from pathlib import Path

import pytest

import parts


def test_every_test_module_is_in_exactly_one_part_and_the_lists_name_modules_that_exist():
    every = {f"tests/{p.name}" for p in Path(parts.TESTS).glob("test_*.py")}
    spawning, in_process = parts.files("spawning"), parts.files("in-process")
    assert set(spawning) | set(in_process) == every and not set(spawning) & set(in_process)
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
