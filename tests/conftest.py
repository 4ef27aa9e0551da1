"""Shared test helpers: run the suite's CLI as a user would, with small, fast settings."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/ helpers (voc_tree, report_fixtures)

# A synthetic model small enough that a DDP configuration with 2 gloo processes takes seconds.
FAST = ["--workloads", "synthetic", "--synthetic-width", "128", "--synthetic-depth", "2",
        "--per-device-batch", "8", "--steps", "3", "--warmup", "1", "--no-report"]


def run_bench(args: list, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m bench ARGS` in the repo root, as ./run_bench.sh runs it after its set-up."""
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture
def store_path(tmp_path) -> str:
    return str(tmp_path / "bench.sqlite")
