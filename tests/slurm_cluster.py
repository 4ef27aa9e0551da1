"""A real SLURM cluster for tests (a helper, not a test file).

The session-scoped fixture `slurm_cluster` brings up, with scripts/slurm_cluster.sh, one slurmctld and
one `slurmd -N NAME` per node on this machine (loopback only, own munged, own state folder and ports),
yields a `SlurmCluster` and takes the cluster down at the end. If BENCH_SLURM_DIR names a cluster that
is already up (`scripts/slurm_cluster.sh up` by hand), that one is used and left running.
Where no cluster can be had (not root, slurm/munge missing and not installable, a daemon fails) the
tests that use it are skipped with the reason in one line; BENCH_REQUIRE_SLURM=1 makes that a failure.

Use it with `from slurm_cluster import slurm_cluster` in a test module (or list it in conftest's
pytest_plugins).
"""
from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "slurm_cluster.sh"
NODES = ("n1", "n2")


@dataclass(frozen=True)
class SlurmCluster:
    state_dir: Path
    conf: Path
    nodes: tuple
    env: dict   # this process's environment without any SLURM_* of an outer cluster, plus SLURM_CONF

    def run(self, args: list, timeout: float = 120, cwd=None, env: dict | None = None,
            check: bool = False) -> subprocess.CompletedProcess:
        """Run a command (srun, sbatch, scontrol, ...) against this cluster; output captured as text."""
        return subprocess.run([str(a) for a in args], env={**self.env, **(env or {})}, cwd=cwd,
                              capture_output=True, text=True, timeout=timeout, check=check)

    def node_addr(self, node: str) -> str:
        """The address SLURM gives NODE (its NodeAddr): what rendezvous must bind to and connect to."""
        out = self.run(["scontrol", "show", "node", node], timeout=30, check=True).stdout
        return out.split("NodeAddr=", 1)[1].split()[0]


def _clean_env(conf: Path) -> dict:
    # SLURM_JOB_ID etc. of an outer allocation (tests run inside a real job) would send srun there.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_"))}
    env["SLURM_CONF"] = str(conf)
    return env


def _script(cmd: str, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), cmd], env=env, capture_output=True, text=True, timeout=timeout)


def _free_port_base(count: int) -> int:
    """A port P with P..P+count-1 all free on 127.0.0.1 (slurmctld, then one per node)."""
    for _ in range(50):
        base = random.randrange(20000, 30000)
        try:
            for port in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free port range found")


def _unavailable(reason: str):
    if os.environ.get("BENCH_REQUIRE_SLURM") == "1":
        pytest.fail(f"SLURM cluster required (BENCH_REQUIRE_SLURM=1): {reason}", pytrace=False)
    pytest.skip(f"no SLURM test cluster: {reason}")


@pytest.fixture(scope="session")
def slurm_cluster():
    if shutil.which("bash") is None or not Path("/proc").is_dir():
        _unavailable("needs Linux and bash")
    given = os.environ.get("BENCH_SLURM_DIR")
    if given:  # reuse one brought up by hand, leave it running
        env = {**_clean_env(Path(given) / "slurm.conf"), "BENCH_SLURM_DIR": given}
        if _script("status", env, timeout=60).returncode == 0:
            yield SlurmCluster(Path(given), Path(given) / "slurm.conf",
                               tuple(os.environ.get("BENCH_SLURM_NODES", " ".join(NODES)).split()), env)
            return
    if os.geteuid() != 0:
        _unavailable("needs root to run slurmd (or BENCH_SLURM_DIR naming a cluster already up)")
    # A private cluster: own folder and ports, so concurrent test sessions never share or kill one.
    state = Path(tempfile.mkdtemp(prefix="bench-slurm-", dir="/tmp"))  # short: unix socket paths live here
    conf = state / "slurm.conf"
    env = {**_clean_env(conf), "BENCH_SLURM_DIR": str(state), "BENCH_SLURM_NODES": " ".join(NODES),
           "BENCH_SLURM_PORT": str(_free_port_base(len(NODES) + 1))}
    up = _script("up", env)
    if up.returncode != 0:
        _script("down", env, timeout=120)
        said = [ln.removeprefix("[slurm-cluster] ") for ln in up.stderr.splitlines() if ln.startswith("[slurm-cluster]")]
        _unavailable(said[-1] if said else f"scripts/slurm_cluster.sh up exited {up.returncode}")
    try:
        yield SlurmCluster(state, conf, NODES, env)
    finally:
        down = _script("down", env, timeout=120)
        if down.returncode != 0:
            pytest.fail(f"scripts/slurm_cluster.sh down failed: {down.stderr.strip()}", pytrace=False)
