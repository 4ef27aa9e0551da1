"""Command line: `./run_bench.sh [run] FLAGS`, and the commands report, compare, tune, fit, selfcheck, migrate, forecast,
history, export.

Bad input exits with status 2 and a message naming the value, before any process is spawned and
before the store is touched. No command ends in a Python traceback: an internal error prints one
line naming the file the traceback went to, and exits 3.
"""
from __future__ import annotations

import os
import signal
import sys
import traceback

from bench import config, options
from bench.store import store
from bench.shared.procs import Interrupted

COMMANDS = ("run", "report", "compare", "ab", "tune", "fit", "selfcheck", "migrate", "forecast", "history", "export")


def run(argv: list) -> int:
    cfg, given, machine = options.prepare(argv, report=True)
    from bench.sweep import run as sweep_run
    return sweep_run.run_sweep(cfg, sweep_run.command_line(argv), given=given, machine=machine)


def migrate(argv: list) -> int:
    p = options.Parser(prog="./run_bench.sh migrate", description="Upgrade a results store to this suite's schema, in place.")
    p.add_argument("--store", default="results/bench.sqlite")
    ns = p.parse_args(argv)
    store.check_path(ns.store)
    if not os.path.isfile(ns.store):
        raise store.StoreError(store.missing(ns.store, "--store"))
    store.connect(ns.store).close()
    print(f"{ns.store}: schema version {store.SCHEMA_VERSION}")
    return 0


def main(argv: list | None = None) -> int:
    argv = options.join_negative_words(list(sys.argv[1:] if argv is None else argv))
    cmd = argv[0] if argv and not argv[0].startswith("-") else "run"
    rest = argv[1:] if argv and argv[0] == cmd else argv
    if cmd not in COMMANDS:
        print(f"error: unknown command {cmd!r}; expected one of {', '.join(COMMANDS)} (see ./run_bench.sh --help)", file=sys.stderr)
        return 2
    try:
        if cmd == "report":
            from bench.report import report
            return report.main(rest)
        if cmd == "compare":
            from bench.commands import compare
            return compare.main(rest)
        if cmd == "ab":
            from bench.commands import abtest
            return abtest.main(rest)
        if cmd == "tune":
            from bench.commands import tune
            return tune.main(rest)
        if cmd == "fit":
            from bench.commands import fit
            return fit.main(rest)
        if cmd == "selfcheck":
            from bench.commands import selfcheck
            return selfcheck.main(rest)
        if cmd == "migrate":
            return migrate(rest)
        if cmd == "forecast":
            from bench.commands import forecast
            return forecast.main(rest)
        if cmd == "history":
            from bench.commands import history
            return history.main(rest)
        if cmd == "export":
            from bench.commands import export
            return export.main(rest)
        return run(rest)
    except (config.ConfigError, store.StoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted by SIGINT (Ctrl-C)", file=sys.stderr)
        return 130
    except Interrupted as e:   # SIGTERM or SIGHUP past a command's own handling (a second one while it ended)
        print(f"interrupted by {signal.Signals(e.signum).name}", file=sys.stderr)
        return 128 + e.signum
    except BrokenPipeError:  # standard output's reader went away (`| head`): stop quietly, as SIGPIPE would
        from bench.shared.procs import stdout_closed
        stdout_closed()
        return 128 + signal.SIGPIPE
    except Exception as e:  # never a traceback on the terminal: one line, the traceback in a file
        path = os.path.join("/tmp", f"bench-traceback-{os.getpid()}.txt")
        try:
            with open(path, "w") as f:
                f.write(traceback.format_exc())
        except OSError:
            path = "(could not be written)"
        print(f"internal error: {type(e).__name__}: {e}; full traceback in {path}", file=sys.stderr)
        return 3
