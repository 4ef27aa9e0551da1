"""Command line: `./run_bench.sh [run] FLAGS`, and the commands report, compare, tune, selfcheck, migrate.

Bad input exits with status 2 and a message naming the value, before any process is spawned and
before the store is touched. No command ends in a Python traceback: an internal error prints one
line naming the file the traceback went to, and exits 3.
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback

from bench import config, plan, store

EPILOG = """examples:
  ./run_bench.sh                                   default sweep for this machine
  ./run_bench.sh --gpus 1,4,8                      every strategy and workload on 1, 4 and 8 GPUs
  ./run_bench.sh --workloads resnet50,vit_b_16 --precision fp32,bf16 --gpus 1,8
  ./run_bench.sh --workloads deeplabv3 --data voc --voc-root ~/data --epochs 20   the reference experiment
  ./run_bench.sh --strategies ddp --bucket-cap-mb 25,100 --comm-hook none,bf16    DDP settings as an axis
  ./run_bench.sh --nodes 1,2,4 --gpus-per-node 8   inside a SLURM allocation (see slurm/bench.sbatch)
  ./run_bench.sh --resume last                     finish an interrupted sweep
  ./run_bench.sh tune --workloads synthetic --gpus 2 --budget 600     find DDP's best settings
  ./run_bench.sh selfcheck                         check timing, memory and equivalence on this machine's GPUs
  ./run_bench.sh report                            re-render plots/ and results/report.{md,html}
  ./run_bench.sh compare --store old.sqlite --against new.sqlite
  ./run_bench.sh ab --b-repo ../other-checkout         interleaved A/B of two checkouts (16 pairs: about 10%)
  ./run_bench.sh ab --strategies ddp --b-args "--bucket-cap-mb 100"    interleaved A/B of two settings
exit status: 0 all configurations ok or skipped; 1 a configuration failed; 2 bad input (nothing ran);
  3 internal error (traceback file named); 129/130/143 interrupted (SIGHUP/Ctrl-C/SIGTERM)"""

COMMANDS = ("run", "report", "compare", "ab", "tune", "selfcheck", "migrate")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: same exit status 2, one clear line
        self.print_usage(sys.stderr)
        self.exit(2, f"error: {message}\n")


def run_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="./run_bench.sh", description="Benchmark single-device, DataParallel, DistributedDataParallel "
                "and FSDP training and store every measurement.", epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    config.add_arguments(p)
    return p


def prepare(argv: list, parser: argparse.ArgumentParser | None = None, machine=None) -> tuple:
    """Parse, check and resolve a sweep's flags: (config, names given, machine). Raises ConfigError/StoreError.
    `machine`: one detected already in this process (ab's variant B), not detected again."""
    ns = (parser or run_parser()).parse_args(argv)
    cfg = config.from_args(ns)
    given = frozenset(config.given(ns))
    store.check_path(cfg.store)
    from bench import slurm
    slurm.refuse_task_copies()
    machine = plan.detect_machine() if machine is None else machine
    if not cfg.resume:
        cfg = plan.resolve(cfg, machine)
        if any(s.launcher == "slurm" for s in plan.plan(cfg, machine) if isinstance(s, plan.RunSpec)):
            slurm.check_shared_folder(os.path.dirname(os.path.abspath(cfg.store)), max(cfg.gpus) // cfg.gpus_per_node)
    return cfg, given, machine


def run(argv: list) -> int:
    cfg, given, machine = prepare(argv)
    from bench import sweep
    return sweep.run_sweep(cfg, sweep.command_line(argv), given=given, machine=machine)


def migrate(argv: list) -> int:
    p = _Parser(prog="./run_bench.sh migrate", description="Upgrade a results store to this suite's schema, in place.")
    p.add_argument("--store", default="results/bench.sqlite")
    ns = p.parse_args(argv)
    store.check_path(ns.store)
    if not os.path.isfile(ns.store):
        raise store.StoreError(f"--store {ns.store!r} does not exist")
    store.connect(ns.store).close()
    print(f"{ns.store}: schema version {store.SCHEMA_VERSION}")
    return 0


def main(argv: list | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = argv[0] if argv and not argv[0].startswith("-") else "run"
    rest = argv[1:] if argv and argv[0] == cmd else argv
    if cmd not in COMMANDS:
        print(f"error: unknown command {cmd!r}; expected one of {', '.join(COMMANDS)} (see ./run_bench.sh --help)", file=sys.stderr)
        return 2
    try:
        if cmd == "report":
            from bench import report
            return report.main(rest)
        if cmd == "compare":
            from bench import compare
            return compare.main(rest)
        if cmd == "ab":
            from bench import abtest
            return abtest.main(rest)
        if cmd == "tune":
            from bench import tune
            return tune.main(rest)
        if cmd == "selfcheck":
            from bench import selfcheck
            return selfcheck.main(rest)
        if cmd == "migrate":
            return migrate(rest)
        return run(rest)
    except (config.ConfigError, store.StoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted by SIGINT (Ctrl-C)", file=sys.stderr)
        return 130
    except Exception as e:  # never a traceback on the terminal: one line, the traceback in a file
        path = os.path.join("/tmp", f"bench-traceback-{os.getpid()}.txt")
        try:
            with open(path, "w") as f:
                f.write(traceback.format_exc())
        except OSError:
            path = "(could not be written)"
        print(f"internal error: {type(e).__name__}: {e}; full traceback in {path}", file=sys.stderr)
        return 3
