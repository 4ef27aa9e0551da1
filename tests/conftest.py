"""Shared test helpers: run the suite's CLI as a user would, with small, fast settings, on the CPU.

The suite is a CPU/gloo suite everywhere: on a machine with GPUs the GPUs are hidden from pytest and
from every process it starts (CUDA_VISIBLE_DEVICES=""), so `--device auto` picks the CPU and counts
are CPU counts. Tests marked `gpu` need CUDA: they are skipped, with the reason, unless pytest runs
with --run-gpu on a machine that has a GPU (then the GPUs stay visible).
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/ helpers (voc_tree, report_fixtures)

# A synthetic model small enough that a DDP configuration with 2 gloo processes takes seconds.
FAST = ["--workloads", "synthetic", "--synthetic-width", "128", "--synthetic-depth", "2",
        "--per-device-batch", "8", "--steps", "3", "--warmup", "1", "--repeats", "1", "--no-report"]


def pytest_addoption(parser):
    parser.addoption("--run-gpu", action="store_true", default=False,
                     help="run the tests marked gpu on this machine's CUDA GPUs (the CPU suite keeps --device cpu)")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped unless pytest runs with --run-gpu on a GPU machine")
    if not config.getoption("--run-gpu"):
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before anything initialises CUDA; inherited by every child


def pytest_collection_modifyitems(config, items):
    _QUICK["wanted"] = any("quick_sweep" in getattr(item, "fixturenames", ()) for item in items)
    if config.getoption("--run-gpu"):
        import torch
        if torch.cuda.is_available():
            return
        reason = "needs a CUDA GPU: --run-gpu was given but torch sees none"
    else:
        reason = "needs a CUDA GPU; run ./run_tests.sh --run-gpu -m gpu on a GPU machine"
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))


def run_bench(args: list, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m bench ARGS` in the repo root, as ./run_bench.sh runs it after its set-up, on the CPU."""
    if args and args[0] not in ("report", "compare", "tune", "selfcheck", "migrate", "forecast", "history") and "--device" not in args:
        args = [*args, "--device", "cpu"]
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture
def store_path(tmp_path) -> str:
    return str(tmp_path / "bench.sqlite")


# The quick sweep runs in the background from the first test of these modules on (their tests time nothing that a
# neighbouring process would disturb; the modules before them, test_ab and test_benchmarks, do), so that its minute
# overlaps them: most of the suite keeps one of the two cores idle (one-thread processes, imports).
QUICK_OVERLAPS = ("test_commbench.py", "test_compare.py", "test_config.py", "test_cudacompat.py", "test_env.py",
                  "test_equivalence.py", "test_forecast.py", "test_sweep.py")
QUICK_ARGS = ["--config", "sweeps/quick-cpu.toml", "--no-report", "--device", "cpu"]
_QUICK: dict = {}


def start_bench(args: list) -> subprocess.Popen:
    """`python -m bench ARGS` started in the background, for a test that reads its outcome later (`finished`)."""
    return subprocess.Popen([sys.executable, "-m", "bench", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finished(proc: subprocess.Popen, timeout: float = 590) -> subprocess.CompletedProcess:
    """A background bench's outcome, as run_bench returns it."""
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@contextlib.contextmanager
def bench_in_background(args: list):
    """A fixture's background bench; killed if a test stopped before reading it."""
    proc = start_bench(args)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def sweep_in_background(folder, args: list):
    """A module fixture's sweep into FOLDER/bench.sqlite, started when its file's tests start (`finished_ok`)."""
    path = os.path.join(str(folder), "bench.sqlite")
    with bench_in_background([*args, "--store", path]) as proc:
        yield proc, path


def finished_ok(background: tuple) -> str:
    """The store of a `sweep_in_background` that ended with exit status 0."""
    proc, path = background
    p = finished(proc)
    assert p.returncode == 0, p.stdout + p.stderr
    return path


def _start_quick_sweep(folder: str) -> None:
    path = os.path.join(folder, "bench.sqlite")
    _QUICK.update(path=path, proc=start_bench([*QUICK_ARGS, "--store", path]))


def pytest_runtest_setup(item):
    if _QUICK.get("wanted") and "proc" not in _QUICK and Path(str(item.fspath)).name in QUICK_OVERLAPS:
        _start_quick_sweep(str(item.config._tmp_path_factory.mktemp("quick")))


def pytest_sessionfinish(session, exitstatus):
    proc = _QUICK.get("proc")
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def quick_sweep(tmp_path_factory) -> tuple:
    """The shipped quick CPU sweep (sweeps/quick-cpu.toml: single, DataParallel x1, DDP x1 and x2 of the synthetic
    MLP and DeepLabV3 at 32 px, and the all-reduce at 2), run once per test session (started in the background
    by pytest_runtest_setup, or here): (the completed process, its store path). Tests that need a real sweep's
    rows read this store instead of running their own."""
    if "proc" not in _QUICK:
        _start_quick_sweep(str(tmp_path_factory.mktemp("quick")))
    return finished(_QUICK["proc"], timeout=600), _QUICK["path"]


# Every per-device strategy under AdamW at 2 processes with the equivalence gate (one reference shared by the four
# checks): the gate's test, the state-counting tests and the memory-budget report read this one store.
SHARDED_ARGS = [*FAST, "--strategies", "ddp,zero,fsdp,hsdp", "--optimizer", "adamw", "--gpus", "2",
                "--check-equivalence", "--no-comm-bench"]


@pytest.fixture(scope="session")
def sharded_sweep(tmp_path_factory) -> tuple:
    """(the completed process, its store path, the TMPDIR it ran with) of SHARDED_ARGS, run once per session."""
    folder = tmp_path_factory.mktemp("sharded")
    tmp = folder / "tmp"
    tmp.mkdir()
    path = str(folder / "bench.sqlite")
    p = run_bench([*SHARDED_ARGS, "--store", path], env={"TMPDIR": str(tmp)})
    return p, path, tmp
