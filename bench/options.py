"""A sweep's flags, parsed, checked and resolved: shared by every command that runs configurations
(run, ab, tune, selfcheck), so that none of them imports the command line's dispatcher (bench.cli).

    cfg, given, machine = prepare(argv)   # ConfigError / StoreError (exit 2) before anything is spawned
A sweep file (--config FILE.toml, bench.sweepfile) fills the flags the command line leaves out.
"""
from __future__ import annotations

import argparse
import os
import sys

from bench import config, sweepfile
from bench.store import store

EPILOG = """examples:
  ./run_bench.sh                                   default sweep for this machine
  ./run_bench.sh --gpus 1,4,8                      every strategy and workload on 1, 4 and 8 GPUs
  ./run_bench.sh --workloads resnet50,vit_b_16 --precision fp32,bf16 --gpus 1,8
  ./run_bench.sh --workloads deeplabv3 --data voc --voc-root ~/data --epochs 20   the reference experiment
  ./run_bench.sh --strategies ddp --bucket-cap-mb 25,100 --comm-hook none,bf16    DDP settings as an axis
  ./run_bench.sh --nodes 1,2,4 --gpus-per-node 8   inside a SLURM allocation (see slurm/bench.sbatch)
  ./run_bench.sh --resume last                     finish an interrupted sweep
  ./run_bench.sh tune --workloads synthetic --gpus 2 --budget 600     find DDP's best settings
  ./run_bench.sh fit --workloads transformer --strategies ddp,fsdp --gpus 8   the largest batch each fits, and its speed
  ./run_bench.sh selfcheck                         check timing, memory and equivalence on this machine's GPUs
  ./run_bench.sh report                            re-render plots/ and results/report.{md,html}
  ./run_bench.sh compare --store old.sqlite --against new.sqlite
  ./run_bench.sh history --strategies ddp --since 2025-06-01     each configuration over the store's sweeps
  ./run_bench.sh export --format csv               the store's tables as files (Python: from bench import results)
  ./run_bench.sh report --store a100.sqlite --store h100.sqlite --price-per-device-hour prices.toml   side by side
  ./run_bench.sh ab --b-repo ../other-checkout         interleaved A/B of two checkouts (16 pairs: about 10%)
  ./run_bench.sh ab --strategies ddp --b-args "--bucket-cap-mb 100"    interleaved A/B of two settings
exit status: 0 all configurations ok or skipped; 1 a configuration failed; 2 bad input (nothing ran);
  3 internal error (traceback file named); 129/130/143 interrupted (SIGHUP/Ctrl-C/SIGTERM)"""


_NEGATIVE_WORDS = ("-inf", "-infinity", "-nan")


def join_negative_words(argv: list) -> list:
    """`--timeout -inf` as `--timeout=-inf`: argparse takes a value that starts with '-' for a flag unless it looks
    like a negative number, and -inf/-nan do not, so the user would be told the flag has no value instead of
    why the value is refused."""
    out: list = []
    for tok in argv:
        if out and tok.lower() in _NEGATIVE_WORDS and out[-1].startswith("--") and "=" not in out[-1]:
            out[-1] = f"{out[-1]}={tok}"
        else:
            out.append(tok)
    return out


class Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: same exit status 2, one clear line
        self.print_usage(sys.stderr)
        self.exit(2, f"error: {message}\n")


def run_parser() -> argparse.ArgumentParser:
    p = Parser(prog="./run_bench.sh", usage="%(prog)s [COMMAND] [FLAGS]  (commands and examples at the end)", description="Benchmark single-device, DataParallel, DistributedDataParallel "
                "and FSDP training and store every measurement.", epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    groups = config.add_arguments(p)
    groups["what to run"].add_argument("--config", default=None, metavar="FILE.toml",
                                       help="a sweep file: TOML whose keys are these flags' names (sweeps/ has examples); "
                                            "flags on the command line override it")
    return p


def prepare(argv: list, parser: argparse.ArgumentParser | None = None, machine=None, report: bool = False) -> tuple:
    """Parse, check and resolve a sweep's flags: (config, names given, machine). Raises ConfigError/StoreError.
    `machine`: one detected already in this process (ab's variant B), not detected again. report: the command renders
    a report (run, fit): its folders are checked too (`check_report_folders`)."""
    ns = (parser or run_parser()).parse_args(argv)
    from_file = _fill_from_file(ns)
    try:
        return _checked(ns, machine, report)
    except (config.ConfigError, store.StoreError) as e:   # a sweep file's value named by its key (store = "/proc/x")
        named = sweepfile.blame(ns.config, from_file, e) if from_file else e
        if named is e:
            raise
        raise named from None


def check_report_folders(cfg: config.SweepConfig, given: frozenset) -> None:
    """The folders a sweep's report is rendered into (run, fit), refused before anything runs where nothing could be
    written there: such a sweep once ran whole, then failed to render. A resume renders into its sweep's own folders
    unless others are named (bench.sweep.run.OUTPUT_CHOICES): those named are checked."""
    if cfg.report:
        for name in ("plots_dir", "report_dir"):
            if not cfg.resume or name in given:
                store.check_folder(config.flag(name), getattr(cfg, name))


def _fill_from_file(ns: argparse.Namespace) -> dict:
    """The sweep file's values for the flags the command line leaves out (it overrides the file):
    {field: the file's key} of those taken, so that a later error about one names the file and its key."""
    taken = {}
    if getattr(ns, "config", None) is not None:  # given, even empty: sweepfile refuses an empty name
        values, keys = sweepfile.load_with_keys(ns.config)
        for name, text in values.items():
            if getattr(ns, name) is None:
                setattr(ns, name, text)
                taken[name] = keys[name]
    return taken


def _checked(ns: argparse.Namespace, machine, report: bool = False) -> tuple:
    """The flags checked alone, then together, then against the machine and the store: (config, given, machine)."""
    cfg = config.from_args(ns)
    given = frozenset(config.given(ns))
    store.check_path(cfg.store)
    if report:
        check_report_folders(cfg, given)
    from bench.sweep import plan, resolve, slurm   # here, not at the top: --help and the reading commands need no torch
    slurm.refuse_task_copies()
    machine = plan.detect_machine() if machine is None else machine
    if cfg.resume:
        _check_resumed(cfg, store.check_resumable(cfg.store, cfg.resume), machine)
    else:
        cfg = resolve.resolve(cfg, machine)
        if any(s.launcher == "slurm" for s in plan.plan(cfg, machine) if isinstance(s, plan.RunSpec)):
            slurm.check_shared_folder(os.path.dirname(os.path.abspath(cfg.store)), max(cfg.gpus) // cfg.gpus_per_node)
    return cfg, given, machine


def _check_resumed(cfg: config.SweepConfig, row: dict, machine) -> None:
    """A resume's pre-flight checks on the sweep's stored configuration, as a fresh sweep's run on its flags (the
    login-node refusal, /dev/shm, the shared folder's visibility and locks): a resume in a new allocation, or in a
    fresh container with Docker's 64 MiB /dev/shm, went straight to NCCL's failures or a rendezvous hanging to its
    timeout. Left to bench.sweep.run: a fit (not resumed) and a sweep still running on another host, which it refuses.
    A 'running' sweep of this host is a dead one (store.check_resumable refused a live one): a SIGKILLed or
    out-of-memory sweep reads so until bench.sweep.run marks it died, and is checked like any other."""
    import socket
    from bench.sweep import resolve, slurm
    if row["command_line"].split()[1:2] == ["fit"] or (row["status"] == "running"
                                                       and row.get("hostname") != socket.gethostname()):
        return
    stored = config.SweepConfig.from_json(row["config_json"])
    try:
        left = resolve.check_resumed(stored, machine, store.done_keys(cfg.store, row["sweep_id"]))
        steps = [s.nodes for s in left if s.launcher == "slurm"]
        if steps:
            slurm.check_shared_folder(os.path.dirname(os.path.abspath(cfg.store)), max(steps))
    except config.ConfigError as e:
        raise config.ConfigError(f"--resume {cfg.resume}: sweep {row['sweep_id']}, run with its stored settings here: "
                                 f"{e}") from None
