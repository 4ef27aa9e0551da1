"""Interleaved A/B runs: two variants of each configuration run alternately, each in fresh processes,
and compared pair by pair. The processes start as a sweep's do (bench.sweep.plan: on CPU forked from the fork server,
a variant's environment applied to its child; --fresh-interpreters, the CUDA default, or another checkout (--b-repo)
starts each as a new interpreter): the same A/A and catch rates, measured both ways (docs/comparing.md).

Sweeps run one after another on a shared machine see it at different speeds: sweeps of identical code
here differed by 6% (sd of their means), twice what their processes' spread within a sweep predicts, so
two stored sweeps cannot resolve a 10% change. Run the variants back to back instead, alternately first
(AB BA AB ...): each pair sees the same machine and the paired ratio cancels the drift
(bench.stats.compare_pairs). A variant is a RunSpec with an environment and a working folder: other
settings (`--b-args`, bench.commands.tune), another checkout (`--b-repo`), or an injected fault (`--b-env
BENCH_FAULT=slow@0:10`). Both start with environments of one size (padded), so stack alignment is not
the difference measured.

    ./run_bench.sh ab --b-repo ../main-checkout --workloads synthetic --strategies ddp
    ./run_bench.sh ab --strategies ddp --gpus 8 --b-args "--bucket-cap-mb 100 --comm-hook bf16"   # check tune's winner
    ./run_bench.sh compare --store results/bench.sqlite      # the two sweeps it wrote, paired

`ab` writes the two variants as two sweeps of one store (labels a and b, paired with each other, repeat
= pair index) and ends with compare's verdict and exit status.
"""
from __future__ import annotations

import dataclasses
import os
import shlex
from dataclasses import dataclass, field
from typing import Callable, Optional

from bench import stats
from bench.config import ConfigError
from bench.shared.procs import signals_deferred
from bench.shared.spec import RunSpec
from bench.store import store
from bench.sweep import plan
from bench.sweep.diagnose import Outcome
from bench.sweep.launch import WORKER, Limits, run_config
from bench.sweep.record import record_result

DEFAULT_PAIRS = 16   # pairs of this shared 2-core machine differ by 12% (sd of the log ratio): 8 pairs caught an
                     # injected 10% slowdown in 5 of 8 runs, 16 pairs (runs two by two) in 3 of 3; no A/A regression


@dataclass(frozen=True)
class Variant:
    label: str
    spec: RunSpec
    env: dict = field(default_factory=dict)
    cwd: Optional[str] = None
    worker: str = WORKER


def throughput(outcome: Outcome, spec: RunSpec) -> float:
    """The process's window throughput (samples/s), nan when it failed."""
    if outcome.status != "ok":
        return float("nan")
    got = stats.result_summary(outcome.payload.get("steps", []), outcome.payload.get("windows", []), spec.global_batch)
    return got.get("samples_per_s", float("nan"))


PAD = "BENCH_AB_PAD"


def env_bytes(env: dict) -> int:
    return sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 2 for k, v in env.items())  # each "k=v\0" as execve copies it


def padded(a: dict, b: dict, base: Optional[dict] = None) -> tuple:
    """The variants' extra environments, padded so that both processes start with as many variables of as many
    bytes: the environment sits at the top of the stack, and its size alone shifts the alignment of everything
    below it, which can move a process's speed by several percent (Mytkowicz et al., "Producing wrong data
    without doing anything obviously wrong", ASPLOS 2009); A/A runs here, B with one extra variable, read B
    5% faster on average over 8 runs; padded, 6 runs averaged 0.99."""
    base = dict(os.environ if base is None else base)
    a, b = dict(a), dict(b)
    for mine, theirs in ((a, b), (b, a)):
        while len(dict(base, **mine)) < len(dict(base, **theirs)):
            mine[f"{PAD}{len(mine)}"] = ""
    gap = env_bytes(dict(base, **b)) - env_bytes(dict(base, **a))
    a[PAD], b[PAD] = "x" * max(gap, 0), "x" * max(-gap, 0)
    return a, b


def run_pairs(a: Variant, b: Variant, pairs: int, limits: Limits,
              on_run: Optional[Callable[[Variant, RunSpec, Outcome], None]] = None) -> list:
    """[(outcome a, outcome b)] for `pairs` pairs, alternately A first and B first; repeat = pair index;
    both variants' environments of one size (padded)."""
    env_a, env_b = padded(a.env, b.env)
    a, b = dataclasses.replace(a, env=env_a), dataclasses.replace(b, env=env_b)
    if any(v.cwd or v.worker != WORKER for v in (a, b)):  # another checkout's worker starts fresh: then so do both
        a, b = (dataclasses.replace(v, spec=dataclasses.replace(v.spec, process_start="fresh")) for v in (a, b))
    out = []
    for r in range(pairs):
        got = {}
        for v in ((a, b) if r % 2 == 0 else (b, a)):
            spec = dataclasses.replace(v.spec, repeat=r)
            got[v.label] = run_config(spec, limits, extra_env=v.env, cwd=v.cwd, worker=v.worker)
            if on_run:
                on_run(v, spec, got[v.label])
        out.append((got[a.label], got[b.label]))
    return out


def paired(outcomes: list, a: RunSpec, b: RunSpec) -> stats.ProcessComparison:
    """The paired comparison of the pairs where both runs succeeded."""
    ok = [(throughput(x, a), throughput(y, b)) for x, y in outcomes if x.status == y.status == "ok"]
    return stats.compare_pairs([p[0] for p in ok], [p[1] for p in ok])


# ---------------------------------------------------------------- the `ab` command

def worker_module(root: str) -> Optional[str]:
    """The worker module of the checkout at root: bench.rank.worker, or bench.worker in the flat layout of
    checkouts before bench/ had folders (so `ab --b-repo` can measure a change across the move); None if neither."""
    for module in (WORKER, "bench.worker"):
        if os.path.isfile(os.path.join(root, *module.split(".")) + ".py"):
            return module
    return None


def _env_items(items: list) -> dict:
    env = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--b-env {item!r}: expected NAME=VALUE")
        env[key] = value
    return env


def main(argv: list) -> int:
    from bench import options
    from bench.analysis import compare
    parser = options.run_parser()
    parser.prog = "./run_bench.sh ab"
    parser.add_argument("--b-repo", default=None, help="variant B runs this other checkout of the suite (its bench/ package)")
    parser.add_argument("--b-env", action="append", default=None, metavar="NAME=VALUE",
                        help="variant B runs with this environment variable set (repeatable)")
    parser.add_argument("--b-args", default=None, metavar="'FLAGS'",
                        help="variant B runs with these sweep flags added, e.g. '--bucket-cap-mb 100 --comm-hook bf16' "
                             "(settings of the same configurations: same workloads, strategies and counts)")
    parser.add_argument("--pairs", type=int, default=DEFAULT_PAIRS, help=f"A/B pairs per configuration (default {DEFAULT_PAIRS})")
    argv = _glued(argv, "--b-args")
    ns, rest = parser.parse_known_args(argv)
    if rest:
        raise ConfigError(f"unrecognised arguments: {' '.join(rest)}")
    _refuse_outputs(ns)
    if ns.pairs < 2:
        raise ConfigError(f"--pairs: {ns.pairs} is not allowed; expected a whole number >= 2 (pairs are the samples)")
    b_env = _env_items(ns.b_env)
    b_repo = os.path.abspath(ns.b_repo) if ns.b_repo else None
    b_worker = worker_module(b_repo) if b_repo else WORKER
    if b_worker is None:
        raise ConfigError(f"--b-repo {ns.b_repo!r} holds no bench/rank/worker.py (nor bench/worker.py, the layout before "
                          "folders); expected another checkout of this suite")
    if not b_env and not b_repo and not ns.b_args:
        raise ConfigError("ab needs a variant B: --b-repo PATH (another checkout), --b-env NAME=VALUE and/or --b-args 'FLAGS'")
    a_argv = _without(argv, ("--b-repo", "--b-env", "--pairs", "--b-args"))
    sweep_parser = options.run_parser()  # the sweep's flags alone: B's are checked against these
    cfg, given, machine = options.prepare(a_argv, parser=sweep_parser)
    if cfg.label is not None:
        raise ConfigError(f"ab: --label {cfg.label!r}: ab labels its two sweeps a and b itself; drop the flag")
    from bench.workloads import voc
    voc.download_before_runs(cfg)  # before any rank starts
    specs = [s for s in plan.bench_specs(cfg, machine) if isinstance(s, RunSpec) and s.repeat == 0]
    b_flags = shlex.split(ns.b_args or "")
    specs_b = specs
    if b_flags:
        unknown = sweep_parser.parse_known_args(b_flags)[1]
        if unknown:
            raise ConfigError(f"--b-args {ns.b_args!r}: unrecognised {' '.join(unknown)}; expected sweep flags "
                              "(./run_bench.sh --help)")
        try:
            cfg_b = options.prepare(a_argv + b_flags, parser=sweep_parser, machine=machine)[0]
        except ConfigError as e:
            raise ConfigError(f"--b-args {ns.b_args!r}: {e}") from None
        specs_b = [s for s in plan.bench_specs(cfg_b, machine) if isinstance(s, RunSpec) and s.repeat == 0]
        shape = lambda s: (s.workload, s.strategy, s.device_count)  # noqa: E731
        if [shape(s) for s in specs] != [shape(s) for s in specs_b]:
            raise ConfigError(f"--b-args {ns.b_args!r} changes which configurations run ({len(specs)} -> {len(specs_b)}, or "
                              "other workloads, strategies or counts); expected other settings of the same configurations "
                              "(one value per axis on each side)")
    if b_repo:
        b_env = {**b_env, "PYTHONPATH": b_repo + os.pathsep + os.environ.get("PYTHONPATH", "")}
    conn = store.connect(cfg.store)
    from bench.machine import env as env_mod
    env_id = store.insert_environment(conn, env_mod.capture())
    line = " ".join(["./run_bench.sh", "ab", *argv])
    sid_a = store.begin_sweep(conn, line, cfg.to_json(), env_id, label="a")
    sid_b = store.begin_sweep(conn, line, (cfg_b if b_flags else cfg).to_json(), env_id, label="b: " + " ".join(
        [f"repo {b_repo}"] * bool(b_repo) + [f"{k}={v}" for k, v in b_env.items() if k != "PYTHONPATH"] + b_flags))
    store.pair_sweeps(conn, sid_a, sid_b)
    print(f"A/B: sweep {sid_a} (this checkout) and sweep {sid_b} (variant B), {ns.pairs} interleaved pairs per configuration "
          f"-> {cfg.store}")
    status = "completed"
    try:
        for spec, spec_b in zip(specs, specs_b):
            def record(v: Variant, s: RunSpec, o: Outcome) -> None:
                with signals_deferred():
                    record_result(conn, sid_a if v.label == "a" else sid_b, env_id, s, o.status, o.reason, o.payload,
                                        o.started_at, o.ended_at, o.wall_s, o.failed_rank)
                print(f"  {v.label} {s.key} pair {s.repeat + 1}: " + (f"{throughput(o, s):.1f} samples/s" if o.status == "ok"
                                                                          else f"{o.status.upper()}: {o.reason}"), flush=True)
            run_pairs(Variant("a", spec), Variant("b", spec_b, b_env, b_repo, b_worker), ns.pairs, Limits.for_spec(spec, cfg.timeout), record)
    except KeyboardInterrupt:
        status = "interrupted"
        return 130
    finally:
        with signals_deferred():
            for sid in (sid_a, sid_b):
                store.end_sweep(conn, sid, status)
            conn.close()
    text, code = compare.compare(cfg.store, None, sid_a, sid_b)
    print(text, end="")
    return code


def _refuse_outputs(ns) -> None:
    """ab writes no report and no plot (its output is compare's verdict and the two sweeps in --store), so a report or
    plots folder is refused, not silently ignored as it once was; a report of either side is report's to write."""
    for flag, value in (("--report-dir", ns.report_dir), ("--plots-dir", ns.plots_dir)):
        if value is not None:
            raise ConfigError(f"ab: {flag} {value!r}: ab writes no report or plot, only the two sweeps (to --store) and "
                              f"compare's verdict; drop the flag, and for either side's report afterwards run "
                              f"./run_bench.sh report --store STORE --sweep ID {flag} {value} (ab prints both sweep ids)")


def _glued(argv: list, flag: str) -> list:
    """`FLAG VALUE` as `FLAG=VALUE`: argparse takes a lone value that starts with '-' (`--b-args --compile`) for a flag."""
    out, it = [], iter(argv)
    for a in it:
        out.append(f"{flag}={next(it, '')}" if a == flag else a)
    return out


def _without(argv: list, flags: tuple) -> list:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in flags:
            skip = True
            continue
        if any(a.startswith(f + "=") for f in flags):
            continue
        out.append(a)
    return out
