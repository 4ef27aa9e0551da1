"""The test command's two parts, run at once by ./run_tests.sh so that the two cores are both busy.

The suite spends most of its time in processes it starts (sweeps, their ranks, the CLI, a SLURM cluster), which keep
one core or both busy by turns; the rest (reports rendered from stores the tests write, refusals, the statistics, the
forecast) runs in pytest's own process on one core. Run one after the other, one core sat idle about a third of the
run. So the modules that start processes run in one pytest (the "spawning" part, in the order and with the session
sweeps they always had) and every other module in a second pytest beside it (the "in-process" part), which:
  - starts no process: a test there that does fails, naming this file (its module belongs in SPAWNING);
  - also runs the tests of SPAWNING modules marked `@pytest.mark.no_process` (MARK): a report rendered from a store
    the test writes itself, say, beside tests of its subject that run sweeps (conftest.py deselects each test from
    the part it does not belong to: `belongs`);
  - holds no wall clock to a limit: at low priority a test can wait seconds for a core (CLOCKED: in the first part);
  - pauses while the spawning part runs a module that times something (TIMING): a shared lock per in-process test,
    an exclusive one for the whole of such a module, on the file QUIET_LOCK names.
With arguments (`./run_tests.sh -k store`, `--run-gpu -m gpu`) or BENCH_TESTS_ONE_PROCESS=1 the command runs one pytest
as before, everything in order.

    python tests/parts.py spawning|in-process      # that part's test files, one per line (what run_tests.sh runs)
"""
from __future__ import annotations

import _posixsubprocess
import contextlib
import fcntl
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PART = "BENCH_TEST_PART"              # "in-process" in the second pytest
QUIET_LOCK = "BENCH_TEST_QUIET_LOCK"  # the lock file both parts share (set by run_tests.sh only)

# Modules whose tests start processes (the CLI, sweeps, ranks, torchrun, SLURM, a fork server) or read a session sweep.
SPAWNING = frozenset({
    "test_ab.py", "test_agent.py", "test_axes.py", "test_benchmarks.py", "test_cluster.py", "test_cluster_resume.py",
    "test_config.py", "test_env.py", "test_equivalence.py", "test_faults.py", "test_fit.py", "test_fit_bound.py",
    "test_fit_gpu_read.py", "test_flops.py", "test_forecast.py", "test_forkserver.py", "test_frontier.py",
    "test_fsdp.py", "test_gpu.py", "test_history.py", "test_html_tables.py", "test_interference.py", "test_levers.py",
    "test_loading.py", "test_memory_state.py", "test_models.py", "test_parts.py", "test_report.py", "test_results.py",
    "test_resume_words.py", "test_selfcheck.py", "test_slurm.py", "test_slurm_cluster.py", "test_store.py",
    "test_sweep.py", "test_sweepfile.py", "test_timing.py", "test_traces.py", "test_tune.py",
    "test_usermodel_names.py", "test_voc_e2e.py", "test_voc_workers.py", "test_workloads.py",
})
# In-process modules whose tests hold the wall clock to a limit (an epoch shorter than a stand-in compilation, a
# collective's timed calls within a budget, events against the host clock): at nice 19 beside two busy cores a test
# can wait seconds for a core (an epoch of 3 tiny steps read 1.5 s, its limit 0.3 s), so they run in the first part.
CLOCKED = frozenset({"test_commbench.py", "test_same_conditions.py", "test_machinecheck.py"})
# Spawning modules that time something a neighbouring process would disturb: the in-process part waits while they run.
TIMING = frozenset({"test_ab.py", "test_benchmarks.py", "test_tune.py", "test_history.py", "test_interference.py",
                    "test_selfcheck.py"})


# A test of a SPAWNING module that starts no process and reads no shared sweep, marked to run in the in-process part.
# Not in TIMING or CLOCKED modules: what they hold to the clock is the reason they run where they do.
MARK = "no_process"
PARTS = ("spawning", "in-process")


def _check(part: str) -> None:
    if part not in PARTS:
        raise ValueError(f"part {part!r}: expected 'spawning' or 'in-process'")


def belongs(part: str, module: str, marked: bool) -> bool:
    """Whether a test of `module` (a file name), marked MARK or not, runs in `part`."""
    _check(part)
    first = (module in SPAWNING and not marked) or module in CLOCKED
    return first == (part == "spawning")


def marks(module: str) -> bool:
    """Whether the module's source marks a test MARK (the in-process part collects it, and keeps only those)."""
    return f"pytest.mark.{MARK}" in (TESTS / module).read_text()


def files(part: str) -> list:
    """The test files of `part` ("spawning" or "in-process"), in pytest's order."""
    _check(part)
    every = sorted(p.name for p in TESTS.glob("test_*.py"))
    if part == "spawning":
        return [f"tests/{n}" for n in every if n in SPAWNING or n in CLOCKED]
    return [f"tests/{n}" for n in every if not (n in SPAWNING or n in CLOCKED) or (n in SPAWNING and marks(n))]


@contextlib.contextmanager
def held(exclusive: bool):
    """The shared lock on QUIET_LOCK's file, exclusive or shared, for the body; nothing where it is not set."""
    path = os.environ.get(QUIET_LOCK)
    if not path:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def no_processes(where: str):
    """Record every process a test of the in-process part starts; fail it after its body, naming the first one.
    Three doors are watched for the test's duration: subprocess.Popen (fork_exec or posix_spawn underneath), the
    fork_exec that multiprocessing's spawn and forkserver start methods call (torch.multiprocessing's included), and
    os.fork (multiprocessing's fork method, a hand-made fork)."""
    started: list = []
    doors = [(subprocess.Popen, "_execute_child", lambda self, args, *a, **k: args),
             (_posixsubprocess, "fork_exec", lambda args, *a, **k: args),
             (os, "fork", lambda: "os.fork()")]
    originals = [getattr(owner, name) for owner, name, _ in doors]

    def watched(original, what):
        def door(*a, **k):
            started.append(what(*a, **k))
            return original(*a, **k)
        return door
    for (owner, name, what), original in zip(doors, originals):
        setattr(owner, name, watched(original, what))
    try:
        yield started
    finally:
        for (owner, name, _), original in zip(doors, originals):
            setattr(owner, name, original)
    if started:
        import pytest
        pytest.fail(f"{where} started a process ({str(started[0])[:160]}) in the in-process part of the test command: "
                    f"list its module in SPAWNING in {Path(__file__).relative_to(TESTS.parent)}, or drop the test's "
                    f"@pytest.mark.{MARK} where it has one", pytrace=False)


if __name__ == "__main__":
    try:
        print("\n".join(files(sys.argv[1] if len(sys.argv) > 1 else "")))
    except ValueError as e:
        print(f"tests/parts.py: {e}", file=sys.stderr)   # the value named; run_tests.sh then finds an empty part
        sys.exit(2)
