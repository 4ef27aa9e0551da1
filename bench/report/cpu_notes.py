"""What a CPU sweep's first screen says of itself: that DataParallel was left out by the CPU default (`DP_LEFT_OUT`,
`dp_left_out`, `strategies_by_default`), and what a device is there (`device_note`: a process with its torch threads).
"""
from __future__ import annotations

import json
import shlex

from bench import sweepfile
from bench.analysis.results import Sweep
from bench.config import DEFAULT_STRATEGIES, ConfigError


DP_LEFT_OUT = ("DataParallel is not in this CPU sweep: without a GPU nn.DataParallel has no device to replicate to "
               "and its forward calls the model itself, so it would time single device again (--strategies "
               "single,dp,ddp runs it anyway).")


def dp_left_out(sweep: Sweep) -> bool:
    """A CPU sweep in which no DataParallel configuration ran or was skipped because the CPU default left it out: no
    strategies on its command line nor in its sweep file (`strategies_by_default`). Where the user or the sweep file
    chose them (ddp-settings.toml, transformer.toml), DataParallel is simply not in this sweep: both reports had read
    'DataParallel is not in this CPU sweep ... left out on CPU', as if the default had removed it."""
    configs = [c for cs in sweep.bench.values() for c in cs]
    return (bool(configs) and all(c.device_type == "cpu" for c in configs)
            and not any(c.strategy == "dp" for c in configs)
            and not any(r["strategy"] == "dp" for r in sweep.problems) and strategies_by_default(sweep.sweep))


def strategies_by_default(row: dict) -> bool:
    """Did the CPU default choose the strategies of this sweep (its stored row: command line, resolved config)? Only
    where its config holds the CPU default, its command line gives no --strategies and no sweep file it names sets
    them; a file that cannot be read now, or a config without strategies (a stand-in's), is not taken for the default."""
    try:
        strategies = json.loads(row.get("config_json") or "{}").get("strategies")
        argv = shlex.split(row.get("command_line") or "")
    except ValueError:
        return False
    if tuple(strategies or ()) != DEFAULT_STRATEGIES["cpu"] or any(a.split("=")[0] == "--strategies" for a in argv):
        return False
    files = [a.split("=", 1)[1] for a in argv if a.startswith("--config=")]
    files += [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--config"]
    for f in files:
        try:
            if "strategies" in sweepfile.load(f):
                return False
        except (OSError, ConfigError):
            return False
    return True


def device_note(sweep: Sweep) -> str:
    """On CPU, what a 'device' is: a process with its torch threads. A new user's default sweep held DDP x2 (two
    processes, two cores) against single x1 (one process, one thread) and read the 1.44x as scaling, where one process
    using both cores was never measured."""
    if not any(c.device_type == "cpu" for cs in sweep.bench.values() for c in cs) or sweep.threads != [1]:
        return ""
    return (" On CPU a device is one process with 1 torch thread: x2 uses two cores where single device x1 uses one, "
            "so its speed-up is against one core; one process using every core was not measured "
            "(--threads-per-process sets the threads).")
