"""docs/transformer.md and sweeps/transformer.toml say the 1.4b sweep file is meant for GPUs and give a CPU line
that runs in minutes (trial B ran the file on a 2-core CPU: days of steps); that line is held to the plan's guess."""
from __future__ import annotations

import os
import shlex

from bench import options
from bench.shared.spec import RunSpec
from bench.sweep import describe, plan
from bench.sweep.plan import Machine

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPU2 = Machine(cuda_devices=0, cpu_cores=2, host_memory_bytes=23 * 2**30)


def cpu_line(path: str) -> list:
    """The arguments of the file's run_bench.sh line that names --device cpu for the transformer."""
    for line in open(os.path.join(ROOT, path)):
        text = line.lstrip("# ").split("  #")[0].strip()
        if text.startswith("./run_bench.sh --workloads transformer") and "--device cpu" in text:
            return shlex.split(text)[1:]
    raise AssertionError(f"{path} gives no CPU line for the transformer")


def test_the_docs_and_the_sweep_file_say_gpus_and_give_a_cpu_line_guessed_at_minutes(tmp_path):
    for path in ("docs/transformer.md", "sweeps/transformer.toml"):
        assert "meant for gpus" in " ".join(open(os.path.join(ROOT, path)).read().lower().split()), path
        argv = cpu_line(path)
        assert "--transformer-preset" not in argv or "tiny" in argv, argv
        cfg, _, machine = options.prepare(argv + ["--store", str(tmp_path / "b.sqlite")], machine=CPU2)
        items = plan.plan(cfg, machine)
        guess_s = describe.estimate_s([i for i in items if isinstance(i, RunSpec)], cfg, machine)
        assert guess_s < 10 * 60 and describe.plan_warnings(items, cfg, machine) == [], (path, guess_s)
