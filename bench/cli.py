"""Command line: `python -m bench [run] FLAGS`, `python -m bench report`, `python -m bench compare`.

./run_bench.sh passes its arguments here. Bad input exits with status 2 and a message naming the
value, before any process is spawned and before the store is touched.
"""
from __future__ import annotations

import argparse
import sys

from bench import config, store

EPILOG = """examples:
  ./run_bench.sh                                   default sweep for this machine
  ./run_bench.sh --gpus 1,4,8                      every strategy and workload on 1, 4 and 8 GPUs
  ./run_bench.sh --workloads deeplabv3 --data voc --voc-root ~/data --epochs 20   the reference experiment
  ./run_bench.sh --resume last                     finish an interrupted sweep
  ./run_bench.sh report                            re-render plots/ and results/report.{md,html}
  ./run_bench.sh compare --store old.sqlite --against new.sqlite --threshold 0.05
exit status: 0 all configurations ok or skipped; 1 a configuration failed; 2 bad input; 130/143 interrupted"""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: same exit status 2, one clear line
        self.print_usage(sys.stderr)
        self.exit(2, f"error: {message}\n")


def run_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="./run_bench.sh", description="Benchmark single-device, DataParallel and "
                                "DistributedDataParallel training and store every measurement.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    config.add_arguments(p)
    return p


def main(argv: list | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = argv[0] if argv and not argv[0].startswith("-") else "run"
    rest = argv[1:] if argv and argv[0] == cmd else argv
    if cmd == "report":
        from bench import report
        return report.main(rest)
    if cmd == "compare":
        from bench import compare
        return compare.main(rest)
    if cmd != "run":
        print(f"error: unknown command {cmd!r}; expected run, report or compare (see ./run_bench.sh --help)", file=sys.stderr)
        return 2
    ns = run_parser().parse_args(rest)
    try:
        cfg = config.from_args(ns)
        if not cfg.resume:
            cfg = config.resolve(cfg, config.detect_machine())
        from bench import sweep
        return sweep.run_sweep(cfg, sweep.command_line(argv))
    except (config.ConfigError, store.StoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
