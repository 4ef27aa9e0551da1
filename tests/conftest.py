"""Shared test helpers: run the suite's CLI as a user would, with small, fast settings, on the CPU.

The suite is a CPU/gloo suite everywhere: on a machine with GPUs the GPUs are hidden from pytest and
from every process it starts (CUDA_VISIBLE_DEVICES=""), so `--device auto` picks the CPU and counts
are CPU counts. Tests marked `gpu` need CUDA: they are skipped, with the reason, unless pytest runs
with --run-gpu on a machine that has a GPU (then the GPUs stay visible).
"""
from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.shared import forkserver

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/ helpers (voc_tree, report_fixtures)
import parts  # noqa: E402  (the test command's two parts: tests/parts.py)

# A synthetic model small enough that a DDP configuration with 2 gloo processes takes seconds; no interference run
# beside the collectives microbenchmark (the forecast's tests ask for it: the quick sweep and the held-out pair).
FAST = ["--workloads", "synthetic", "--synthetic-width", "128", "--synthetic-depth", "2",
        "--per-device-batch", "8", "--steps", "3", "--warmup", "1", "--repeats", "1", "--no-report", "--no-interference"]


def pytest_addoption(parser):
    parser.addoption("--run-gpu", action="store_true", default=False,
                     help="run the tests marked gpu on this machine's CUDA GPUs (the CPU suite keeps --device cpu)")


# The CLI runs as a user runs it, `python -m bench ...`, but forked from one server that imported torch and the suite
# once for the whole session (bench.shared.forkserver: ~1.5-2 s of CPU less for each of the ~150 commands a run
# starts); every sweep's ranks fork from it too. Not with --run-gpu (a GPU machine has the cores, and its sweeps start
# fresh interpreters anyway).
_SESSION: dict = {}


def bench_command() -> list:
    """The command line that runs `python -m bench`: through the session's fork server where it runs."""
    server = _SESSION.get("server")
    if server is not None and (server.path == os.environ.get(forkserver.ENV) or server.ready()):
        os.environ[forkserver.ENV] = server.path   # inherited by every sweep: its ranks fork from the same server
        return [sys.executable, "-I", "-S", forkserver.CLIENT, "bench"]
    _SESSION["server"] = None
    os.environ.pop(forkserver.ENV, None)
    return [sys.executable, "-m", "bench"]


def forkserver_env() -> dict:
    """{BENCH_FORKSERVER: the session server's socket} where it runs, else {}: for a test that starts the CLI as a new
    interpreter itself but wants its ranks forked from the session's server (not from a server of the sweep's own)."""
    bench_command()
    return {forkserver.ENV: os.environ[forkserver.ENV]} if forkserver.ENV in os.environ else {}


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped unless pytest runs with --run-gpu on a GPU machine")
    config.addinivalue_line("markers", f"{parts.MARK}: starts no process and reads no shared sweep; a test of a module "
                            "that starts processes, run in the in-process part of the test command (tests/parts.py)")
    if not config.getoption("--run-gpu"):
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before anything initialises CUDA; inherited by every child
    # selfcheck's per-host process noise (bench.store.hostnoise) in a file of this session's, never the user's: a
    # report falls back on it, so a figure left in ~/.cache would change what single-process tests read
    import tempfile
    _SESSION["host_noise"] = tempfile.mkdtemp(prefix="bench-host-noise-")   # removed at the session's end
    os.environ["BENCH_HOST_NOISE"] = os.path.join(_SESSION["host_noise"], "host-noise.json")
    if not config.getoption("--run-gpu") and os.environ.get(parts.PART) != "in-process":
        _SESSION["server"] = forkserver.launch(forkserver.PRELOAD_CLI)   # ready by the first command


def pytest_collection_modifyitems(config, items):
    part = os.environ.get(parts.PART)
    if part:   # one of the test command's two parts: each test runs in the one it belongs to (tests/parts.py)
        if part not in parts.PARTS:
            raise pytest.UsageError(f"{parts.PART}={part!r}: expected one of {', '.join(parts.PARTS)} (set by run_tests.sh)")
        here = [parts.belongs(part, Path(str(i.fspath)).name, i.get_closest_marker(parts.MARK) is not None) for i in items]
        if not all(here):
            config.hook.pytest_deselected(items=[i for i, h in zip(items, here) if not h])
            items[:] = [i for i, h in zip(items, here) if h]
    _EARLY["wanted"] = {name for name in EARLY_SWEEPS for item in items if name in getattr(item, "fixturenames", ())}
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


@pytest.fixture(scope="module", autouse=True)
def _timing_module_alone(request):
    """A module that times something runs with the in-process part of the test command paused (tests/parts.py) and
    with no session sweep running in the background: it waits for those started (EARLY_SWEEPS), which the lock never
    paused. (Nothing else guaranteed it: they are started early so as to be done by then, and in the runs timed they
    were, at no cost to this wait.)"""
    timing = Path(str(request.node.fspath)).name in parts.TIMING and os.environ.get(parts.PART) != "in-process"
    with parts.held(exclusive=True) if timing else contextlib.nullcontext():
        if timing:
            for name in [n for n in EARLY_SWEEPS if n in _EARLY]:
                _finish_early(name)
        yield


@pytest.fixture(autouse=True)
def _in_process_part(request):
    """In the in-process part of the test command: each test under the shared lock, and starting no process."""
    if os.environ.get(parts.PART) != "in-process":
        yield
        return
    # torch imported before the watch starts: its import runs `/sbin/ldconfig -p` (cuda.pathfinder, torch 2.14), which
    # is no test's doing; a test that imports it first (test_docs.py run alone: the CLI imports it late) was blamed
    import torch  # noqa: F401
    with parts.held(exclusive=False), parts.no_processes(request.node.nodeid):
        yield


def script_module(script: str, name: str = ""):
    """A script of the repo (scripts/NAME.py: not a package) imported by its path, its main left unrun."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name or Path(script).stem, REPO / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_bench(args: list, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m bench ARGS` in the repo root, as ./run_bench.sh runs it after its set-up, on the CPU."""
    if args and args[0] not in ("report", "compare", "tune", "selfcheck", "migrate", "forecast", "history") and "--device" not in args:
        args = [*args, "--device", "cpu"]
    return subprocess.run([*bench_command(), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture
def store_path(tmp_path) -> str:
    return str(tmp_path / "bench.sqlite")


QUICK_ARGS = ["--config", "sweeps/quick-cpu.toml", "--no-report", "--device", "cpu"]
# Every per-device strategy under AdamW at 2 processes with the equivalence gate (one reference shared by the four
# checks): the gate's test, the state-counting tests and the memory-budget report read this one store.
SHARDED_ARGS = [*FAST, "--strategies", "ddp,zero,fsdp,hsdp", "--optimizer", "adamw", "--gpus", "2",
                "--check-equivalence", "--no-comm-bench", "--device", "cpu"]
# ~60M parameters (4 layers 3872 wide) under AdamW at 2 processes: DDP holds 458 MiB of AdamW state per rank, ZeRO half.
ADAMW_60M_ARGS = [*FAST, "--synthetic-width", "3872", "--synthetic-depth", "4", "--per-device-batch", "2", "--strategies",
                  "ddp,zero", "--optimizer", "adamw", "--gpus", "2", "--no-comm-bench", "--device", "cpu", "--warmup", "0"]
# The transformer under activation checkpointing with DDP (find_unused_parameters on) at 2 processes, one launch: what
# test_levers reads of the store and the report (the levers' numerics are checked in its own two ranks).
LEVERS_ARGS = ["--workloads", "transformer", "--strategies", "ddp", "--gpus", "2", "--activation-checkpointing", "full",
               "--find-unused-parameters", "true", "--optimizer", "adamw", "--per-device-batch", "2", "--steps", "3",
               "--warmup", "1", "--repeats", "1", "--no-report", "--no-comm-bench", "--device", "cpu",
               "--check-equivalence"]  # the transformer's gate through the sweep itself, levers on
# The forecast's held-out form as a user runs it: sweep 1 trains x1 and measures the machine at 2, sweep 2 trains x2.
HELD_OUT_ARGS = [*FAST, "--strategies", "ddp", "--device", "cpu", "--interference"]
HELD_OUT_SWEEPS = ([*HELD_OUT_ARGS, "--gpus", "1", "--comm-counts", "2"], [*HELD_OUT_ARGS, "--gpus", "2", "--no-comm-bench"])

# Session sweeps that run in the background from the first test of the listed modules on, whose tests time nothing
# a neighbouring process would disturb (the modules that do: test_ab, test_benchmarks, test_tune, test_history's
# marks, test_interference's stand-ins), so that their minutes overlap the rest of the suite (most of it keeps one of
# the two cores idle: one-thread processes, imports). A test reads one through `early_sweep` (started there if no
# module started it): its fixture name -> (the modules that start it, the sweeps it runs one after another).
# A test by its node id (module::name) starts sweeps too: from this one on test_faults' shared run waits about 25 s on its
# hung ranks and fixed limits with both cores about 90% idle, and timing there is only against those limits.
FAULTS_IDLE = "test_faults.py::test_a_stopped_rank_that_never_raises_is_named_within_the_collective_timeout"
EARLY_SWEEPS = {
    "quick_sweep": (("test_commbench.py", "test_compare.py", "test_config.py", "test_cudacompat.py", "test_env.py",
                     "test_equivalence.py", "test_forecast.py", "test_sweep.py"), (QUICK_ARGS,)),
    "sharded_sweep": (("test_cost.py", "test_cudacompat.py", "test_env.py", "test_equivalence.py"), (SHARDED_ARGS,)),
    "held_out_pair": (("test_faults.py", "test_forecast.py"), HELD_OUT_SWEEPS),
    "adamw_60m": ((FAULTS_IDLE, "test_kineto_traces.py", "test_layout.py", "test_loading.py", "test_machinecheck.py",
                   "test_memory_state.py"), (ADAMW_60M_ARGS,)),
    "levers_sweep": ((FAULTS_IDLE, "test_layout.py", "test_levers.py"), (LEVERS_ARGS,)),
}
_EARLY: dict = {}          # fixture name -> {"proc", "path", "tmp"} once started; "wanted": the names some test uses


def start_bench(args: list) -> subprocess.Popen:
    """`python -m bench ARGS` started in the background, for a test that reads its outcome later (`finished`)."""
    return subprocess.Popen([*bench_command(), *args], cwd=REPO, stdout=subprocess.PIPE,
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


def _start_early(name: str, folder: str) -> None:
    """Start EARLY_SWEEPS[name] into FOLDER/bench.sqlite with TMPDIR FOLDER/tmp: one sweep, or several one after
    another (a shell chain: each starts when the one before ended with status 0)."""
    path, tmp = os.path.join(folder, "bench.sqlite"), os.path.join(folder, "tmp")
    os.makedirs(tmp, exist_ok=True)
    sweeps = EARLY_SWEEPS[name][1]
    chain = " && ".join(shlex.join([*bench_command(), *args, "--store", path]) for args in sweeps)
    proc = subprocess.Popen(["bash", "-c", chain], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": tmp})
    _EARLY[name] = {"proc": proc, "path": path, "tmp": Path(tmp)}


def pytest_runtest_setup(item):
    module = Path(str(item.fspath)).name
    test = f"{module}::{item.name}"
    for name, (modules, _) in EARLY_SWEEPS.items():
        if name in _EARLY.get("wanted", ()) and name not in _EARLY and (module in modules or test in modules):
            _start_early(name, str(item.config._tmp_path_factory.mktemp(name)))


def pytest_sessionfinish(session, exitstatus):
    for name in EARLY_SWEEPS:
        proc = _EARLY.get(name, {}).get("proc")
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
    if _SESSION.get("server") is not None:
        _SESSION["server"].close()
    if _SESSION.get("host_noise"):
        shutil.rmtree(_SESSION["host_noise"], ignore_errors=True)


def early_sweep(name: str, tmp_path_factory) -> tuple:
    """(the completed process, its store path, its TMPDIR) of EARLY_SWEEPS[name], started here if no module did."""
    if name not in _EARLY:
        _start_early(name, str(tmp_path_factory.mktemp(name)))
    e = _EARLY[name]
    return _finish_early(name), e["path"], e["tmp"]


def _finish_early(name: str) -> subprocess.CompletedProcess:
    """EARLY_SWEEPS[name]'s outcome once it has ended, waited for (and its output read) on the first call."""
    e = _EARLY[name]
    if "done" not in e:
        e["done"] = finished(e["proc"], timeout=600)
    return e["done"]


@pytest.fixture(scope="session")
def quick_sweep(tmp_path_factory) -> tuple:
    """The shipped quick CPU sweep (sweeps/quick-cpu.toml: single, DataParallel x1, DDP x1 and x2 of the synthetic
    MLP and DeepLabV3 at 32 px, and the all-reduce with its interference at 2), run once per test session: (the
    completed process, its store path). Tests that need a real sweep's rows read this store instead of running their own."""
    return early_sweep("quick_sweep", tmp_path_factory)[:2]


@pytest.fixture(scope="session")
def sharded_sweep(tmp_path_factory) -> tuple:
    """(the completed process, its store path, the TMPDIR it ran with) of SHARDED_ARGS, run once per session."""
    return early_sweep("sharded_sweep", tmp_path_factory)


@pytest.fixture(scope="session")
def held_out_pair(tmp_path_factory) -> tuple:
    """(the completed chain, its store path): HELD_OUT_SWEEPS one after another into one store."""
    return early_sweep("held_out_pair", tmp_path_factory)[:2]


@pytest.fixture(scope="session")
def adamw_60m(tmp_path_factory) -> tuple:
    """(the completed process, its store path) of ADAMW_60M_ARGS."""
    return early_sweep("adamw_60m", tmp_path_factory)[:2]


def example_stores(folder: Path, names: tuple, tmp_path, monkeypatch):
    """A committed GPU example's stores copied to tmp_path (a reader never writes the committed files), its host-noise
    file in use; returns load(name, sweep_id) -> bench.analysis.results.Sweep, with load.path the copies' folder."""
    from bench.analysis import results
    from bench.store import store
    for name in names:
        shutil.copy(folder / name, tmp_path / name)
    monkeypatch.setenv("BENCH_HOST_NOISE", str(folder / "host-noise.json"))

    def load(name: str, sweep_id: int) -> results.Sweep:
        conn = store.connect(str(tmp_path / name), readonly=True)
        try:
            return results.load(conn, sweep_id)
        finally:
            conn.close()
    load.path = tmp_path
    return load


def read_sweep(path: str, sweep_id: int = 1):
    """The stored sweep as the report reads it (bench.analysis.results.Sweep), its store opened read-only and closed."""
    from bench.analysis import results
    from bench.store import store
    conn = store.connect(path, readonly=True)
    try:
        return results.load(conn, sweep_id)
    finally:
        conn.close()


def read_history(path: str):
    """A store's history (bench.analysis.history.History), its store opened read-only and closed."""
    from bench.analysis import history
    from bench.store import store
    conn = store.connect(path, readonly=True)
    try:
        return history.build(conn)
    finally:
        conn.close()


H100_2026_11_26 = Path(__file__).resolve().parents[1] / "examples" / "h100-2026-11-26"


@pytest.fixture
def h100_deeplabv3(tmp_path, monkeypatch) -> dict:
    """The committed H100 example's DeepLabV3 sweep (gpu.sqlite, sweep 1), its configurations by label."""
    sweep = example_stores(H100_2026_11_26, ("gpu.sqlite",), tmp_path, monkeypatch)("gpu.sqlite", 1)
    return {c.label: c for c in sweep.bench["deeplabv3"]}
