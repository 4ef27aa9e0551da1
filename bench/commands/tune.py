"""DDP tuning: which of DDP's settings make one workload fastest at one device count, within a time budget.

    ./run_bench.sh tune --workloads synthetic --gpus 8 --budget 900
    ./run_bench.sh tune --strategies zero --optimizer adamw --gpus 8     # DDP under ZeroRedundancyOptimizer

Under `--strategies zero` (DDP whose optimizer state ZeroRedundancyOptimizer shards) the same search runs, and
parameters_as_bucket_view is screened last; `--optimizer` (one) is the optimizer every trial trains with.

The search screens one setting at a time, each trial in fresh processes, keeping the best so far:
bucket size first (it decides how gradients meet the all-reduce), then gradient_as_bucket_view,
static_graph, the communication hooks (fp16, bf16 compression, PowerSGD rank 4), find_unused_parameters (what its
graph traversal costs) and, for models with buffers, per-forward buffer synchronisation. It is a greedy path, not the
full product. A model whose parameters get no gradient (--deeplabv3-aux unused, a user model
with an unused head) needs find_unused_parameters: every trial runs with it, and static_graph (which such a model
breaks) is not screened. Then it
re-measures the winner (where none beat the defaults, the screening's runner-up) against DDP's defaults in
interleaved pairs (bench.commands.abtest: A/B alternately, so the machine's drift cancels) and states the result with
its significance, or that the defaults are best. Each one's time a step (its windows', over all its pairs) is set
against the bounds: no overlap (compute under no_sync() plus an all-reduce of the gradients, from the microbenchmark)
and full overlap (the larger of the two). Every trial is stored: the screening as one sweep, the confirmation as two
paired sweeps; tune writes no report or plot (`report --store STORE --sweep ID` renders any of them).
"""
from __future__ import annotations

import dataclasses
import math
import shlex
import time
from typing import Optional

import numpy as np

from bench import stats
from bench.commands import abtest
from bench.config import ConfigError, finite
from bench.shared.spec import RunSpec
from bench.store import store
from bench.sweep import launch
from bench.sweep.diagnose import Outcome
from bench.sweep.launch import Limits, run_config
from bench.sweep.record import record_result

BUCKETS_MB = (1.0, 5.0, 25.0, 50.0, 100.0, 200.0)
HOOKS = ("bf16", "fp16", "powersgd:4")
SCREEN_SHARE = 0.6          # of the budget for screening; the rest confirms
MIN_PAIRS, MAX_PAIRS = 3, 10
KEEP_GAIN = 0.03            # a screened setting replaces the best only when 3% faster (one process each: noisy)


def stages(grad_mib: float, has_buffers: bool, zero: bool = False, needs_unused: bool = False) -> list:
    """The settings to screen, in order: [(name, [values])]; bucket sizes past twice the gradients are one bucket.
    needs_unused: find_unused_parameters is on in every trial, and static_graph, which fails with it, is not screened."""
    buckets = [b for b in BUCKETS_MB if b <= max(2 * grad_mib, 1.0)]
    out = [("bucket_cap_mb", [b for b in buckets if b != 25.0]), ("gradient_as_bucket_view", [True])]
    out += [] if needs_unused else [("static_graph", [True])]
    out.append(("comm_hook", list(HOOKS)))
    out += [] if needs_unused else [("find_unused_parameters", [True])]  # its traversal's cost, where nothing needs it
    if has_buffers:
        out.append(("sync_buffers", [False]))
    if zero:
        out.append(("parameters_as_bucket_view", [True]))
    return out


STRATEGY_NAMES = {"ddp": "DDP", "zero": "DDP+ZeRO"}
FLAGS = {"parameters_as_bucket_view": "zero-bucket-view"}  # settings whose flag is not their name


def with_options(spec: RunSpec, options: dict) -> RunSpec:
    defaults = {"bucket_cap_mb": None, "gradient_as_bucket_view": False, "static_graph": False, "sync_buffers": True,
                "comm_hook": "none", "parameters_as_bucket_view": False, "find_unused_parameters": False}
    return dataclasses.replace(spec, options=tuple(sorted((k, v) for k, v in options.items() if v != defaults.get(k))))


def describe(options: dict, name: str = "DDP") -> str:
    """The settings, or "<strategy>'s defaults" (under zero, DDP+ZeRO's: its baseline is not plain DDP's)."""
    return " + ".join(f"{k}={v}" for k, v in sorted(options.items())) or f"{name}'s defaults"


def step_ms(outcome: Outcome, spec: RunSpec) -> tuple:
    """(time a step in its measured window, median step under no_sync()) of one process, ms; nan where it has none.
    The window's time a step is the verdict's own measure (its throughput); the median step is not: on a loaded
    machine, with a long tail of slow steps, pooled median steps read 2.79 against 2.32 ms (1.20x) beside a 1.03x verdict
    whose windows read 2.90 against 2.85 ms a step."""
    sps = abtest.throughput(outcome, spec)
    nosync = stats.step_times_ms([s for s in outcome.payload.get("steps", []) if s.get("kind") == "probe_no_sync"])
    return (spec.global_batch / sps * 1e3 if sps > 0 else math.nan,
            stats.summarize(nosync).median_ms if nosync else math.nan)


def bounds(outcomes: list, spec: RunSpec, allreduce_ms: float) -> Optional[dict]:
    """The time a step of these processes (the median over them, so every pair speaks, as in the verdict) against
    the no-overlap and full-overlap bounds (ms); None where none succeeded. A user read the last pair's process alone:
    3.82 against 2.53 ms (1.51x) beside a 1.09x verdict whose 5 pairs' medians were 3.47 and 3.12 ms."""
    got = [step_ms(o, spec) for o in outcomes if o.status == "ok"]
    if not got:
        return None
    def pooled(i: int) -> float:
        values = [g[i] for g in got if not math.isnan(g[i])]
        return float(np.median(values)) if values else math.nan
    step, compute = pooled(0), pooled(1)
    return {"step_ms": step, "compute_ms": compute, "allreduce_ms": allreduce_ms, "processes": len(got),
            "no_overlap_ms": compute + allreduce_ms, "full_overlap_ms": max(compute, allreduce_ms)}


def bounds_line(label: str, bd: dict) -> str:
    return (f"  {label}: {bd['step_ms']:.2f} ms a step in its measured windows (the verdict's measure; the median over "
            f"its {bd['processes']} processes, one a pair); no-overlap bound {bd['no_overlap_ms']:.2f} ms "
            f"(compute {bd['compute_ms']:.2f} + all-reduce {bd['allreduce_ms']:.2f}); full-overlap bound "
            f"{bd['full_overlap_ms']:.2f} ms: {max(0.0, bd['step_ms'] - bd['full_overlap_ms']):.2f} ms left to gain")


def as_flags(options: dict) -> str:
    """The sweep flags that set these DDP settings (for `ab --b-args`)."""
    text = lambda v: str(v).lower() if isinstance(v, bool) else f"{v:g}" if isinstance(v, float) else str(v)  # noqa: E731
    return " ".join(f"--{FLAGS.get(k, k.replace('_', '-'))} {text(v)}" for k, v in sorted(options.items()))


def check_command(argv: list, base: RunSpec, options: dict) -> str:
    """`./run_bench.sh ab` that re-measures these settings against DDP's defaults in the user's own A/B run: tune's own
    flags, its --store kept (the A/B lands beside tune's sweeps, not in ./results/bench.sqlite), less what ab refuses
    (--report-dir, --plots-dir: a user's copy exited 2) or has no use for (--report/--no-report, --budget)."""
    pinned = ["--workloads", base.workload, "--strategies", base.strategy, "--gpus", str(base.device_count), "--precision",
              base.precision] + (["--optimizer", base.optimizer] if base.optimizer != "sgd" else []) \
        + (["--find-unused-parameters", "true"] if base.option("find_unused_parameters") else [])
    dropped = ("--budget", "--workloads", "--strategies", "--gpus", "--precision", "--optimizer", "--report-dir",
               "--plots-dir")
    kept = [a for a in abtest._without(argv, dropped) if a not in ("--report", "--no-report")]  # flags without a value
    return " ".join(["./run_bench.sh", "ab", shlex.join(kept + pinned),
                     "--b-args", shlex.quote(as_flags(options))])


def trial_throughput(out: Outcome, spec: RunSpec) -> tuple:
    """(samples/s, why it does not count or ''): nan for a trial that failed, and for one whose last loss was not finite
    (timed, but not training: never the setting tune keeps, however fast; stats.loss_not_finite)."""
    sps = abtest.throughput(out, spec)
    if out.status != "ok":
        return math.nan, f"{out.status.upper()}: {out.reason}"
    lost = stats.loss_not_finite((out.payload or {}).get("steps", []))
    if lost and lost["last"]:
        return math.nan, f"{sps:.1f} samples/s, but {stats.loss_words(lost)}: not eligible"
    return sps, ""


def least_search_s(per_trial_s: float, startup_s: float = 0.0) -> float:
    """The shortest budget that screens one setting: the defaults, that setting, MIN_PAIRS confirming pairs
    and the all-reduce run, each about one trial long, after the fork server's one-off start (startup_s)."""
    return startup_s + (2 * MIN_PAIRS + 3) * per_trial_s


def may_screen(elapsed_s: float, per_trial_s: float, budget_s: float) -> bool:
    """Another screening trial fits: within SCREEN_SHARE of the budget, and leaving room in it for the least
    confirmation (MIN_PAIRS pairs) and the all-reduce run, each about one trial long."""
    reserve_s = (2 * MIN_PAIRS + 1) * per_trial_s
    return elapsed_s + per_trial_s <= min(SCREEN_SHARE * budget_s, budget_s - reserve_s)


def confirm_pairs(elapsed_s: float, per_trial_s: float, budget_s: float) -> int:
    """Confirming pairs that fit in what is left of the budget after the all-reduce run, MIN_PAIRS to MAX_PAIRS."""
    left_s = budget_s - elapsed_s - per_trial_s
    return max(MIN_PAIRS, min(MAX_PAIRS, int(left_s / max(1.0, 2 * per_trial_s))))


def fork_server_start_s(spec: RunSpec) -> float:
    """Seconds spent starting the fork server that CPU trials fork from (bench.sweep.launch), once, before the first
    trial: counted in the budget but not in the per-trial estimate. Inside the first trial it had made that trial 6 s
    against 2-3 s for the later ones, and `--budget 45` was refused as needing about 52 s."""
    if spec.process_start != "forked" or spec.launcher != "local":
        return 0.0
    t = time.monotonic()
    launch.fork_server()
    return time.monotonic() - t


def challenger(best_opts: dict, tried: dict) -> dict:
    """The settings to confirm: the best kept, else (the defaults led) the fastest other setting screened; {} if none."""
    others = [(k, v) for k, v in tried.items() if k and not math.isnan(v)]
    return best_opts or (dict(max(others, key=lambda kv: kv[1])[0]) if others else {})


def ranking(best_opts: dict, chosen: dict, tried: dict, name: str) -> str:
    """How the screening (one process each) ranked the setting that the pairs confirm. A user saw static_graph
    confirmed 1.09x faster with nothing saying it had run 4.5% slower than the defaults in the screening."""
    if best_opts:
        return f"the screening's fastest, ahead of {name}'s defaults by more than {KEEP_GAIN:.0%}"
    gap = tried[tuple(sorted(chosen.items()))] / tried[()] - 1
    if gap < 0:
        return f"the screening's runner-up, {-gap:.1%} slower than {name}'s defaults in one process each"
    return f"the screening's fastest, by {gap:.1%}: under the {KEEP_GAIN:.0%} it keeps a setting for"


def too_small(per_trial_s: float, startup_s: float, name: str) -> str:
    start = f" (after the fork server's one-off start, {startup_s:.0f} s)" if startup_s >= 0.5 else ""
    return (f"Only {name}'s defaults could be measured within the budget: one trial took {per_trial_s:.0f} s{start} and "
            f"the least search (one setting, {MIN_PAIRS} confirming pairs) needs about "
            f"{least_search_s(per_trial_s, startup_s):.0f} s; raise --budget.")


def tune(cfg, machine, budget_s: float, log=print, argv: Optional[list] = None) -> dict:
    from bench.sweep import plan, settings
    from bench.workloads import registry
    counts = [n for n in cfg.gpus if n > 1]
    if not counts:
        raise ConfigError(f"tune: --gpus {','.join(map(str, cfg.gpus))} has no count above 1; DDP's settings matter across devices")
    strategy = "zero" if tuple(cfg.strategies) == ("zero",) else "ddp"
    name = STRATEGY_NAMES[strategy]
    needs_unused = bool(settings.unused_parameters(cfg, cfg.workloads[0], cfg.deeplabv3_aux[0]))
    pinned = {"find_unused_parameters": True} if needs_unused else {}
    ddp = [s for s in plan.bench_specs(dataclasses.replace(cfg, strategies=(strategy,), repeats=1, zero_bucket_view=(False,),
                                                           find_unused_parameters=(needs_unused,)), machine)
           if isinstance(s, RunSpec) and s.device_count == max(counts) and s.precision == cfg.precision[0]
           and s.optimizer == cfg.optimizer[0] and s.workload == cfg.workloads[0] and not s.channels_last and not s.compile]
    if not ddp:
        raise ConfigError(f"tune: {name} cannot run {cfg.workloads[0]} on {max(counts)} devices here (see ./run_bench.sh --help)")
    base = with_options(ddp[0], pinned)
    grad_mib = registry.gradient_bytes(base) / 2**20
    limits = Limits.for_spec(base, cfg.timeout)
    conn = store.connect(cfg.store)
    from bench.machine import env as env_mod
    env_id = store.insert_environment(conn, env_mod.capture())
    line = f"./run_bench.sh tune --workloads {base.workload} --gpus {base.device_count} --budget {budget_s:g}"
    screen_id = store.begin_sweep(conn, line, cfg.to_json(), env_id, label="tune: screening")
    t0 = time.monotonic()
    log(f"tune: {base.workload} {name}" + (f" ({base.optimizer})" if base.optimizer != "sgd" else "") + f" on {base.device_count} {'GPUs' if base.device_type == 'cuda' else 'processes'}, "
        f"{grad_mib:.1f} MiB of gradients, budget {budget_s:g} s -> {cfg.store} (screening: sweep {screen_id})")
    if needs_unused:
        log("  parameters of this model get no gradient: every trial runs with find_unused_parameters=True "
            "(static_graph, which fails with them, is not screened)")

    took_s = []   # each trial's seconds, for the per-trial estimate (per_trial), kept up to date as the screening goes

    def trial(options: dict) -> tuple:
        spec = with_options(base, {**pinned, **options})
        started = time.monotonic()
        out = run_config(spec, limits)
        took_s.append(time.monotonic() - started)
        record_result(conn, screen_id, env_id, spec, out.status, out.reason, out.payload, out.started_at,
                            out.ended_at, out.wall_s, out.failed_rank)
        sps, why = trial_throughput(out, spec)
        log(f"  {describe(options, name)}: " + (why or f"{sps:.1f} samples/s"))
        return sps, out

    startup_s = fork_server_start_s(base)
    best_opts, (best_sps, default_out) = {}, trial({})
    if math.isnan(best_sps):
        raise ConfigError(f"tune: {name} with its defaults failed: {default_out.reason}")
    # The first trial is a poor guide either way (with the fork server's start in it 6 s against 2-3 s; after it, 1.3 s
    # against 2-2.5 s, and 9 pairs ran 45 s into 58): the estimate is the mean of the later trials, once there are any.
    per_trial = lambda: sum(took_s[1:] or took_s) / len(took_s[1:] or took_s)  # noqa: E731
    has_buffers = bool(default_out.payload.get("strategy_settings", {}).get("buffers"))
    tried = {(): best_sps}
    for setting, values in stages(grad_mib, has_buffers, zero=strategy == "zero", needs_unused=needs_unused):
        for v in values:
            if not may_screen(time.monotonic() - t0, per_trial(), budget_s):
                break
            opts = {**best_opts, setting: v}
            sps, _ = trial(opts)
            tried[tuple(sorted(opts.items()))] = sps
            if not math.isnan(sps) and sps > best_sps * (1 + KEEP_GAIN):
                best_opts, best_sps = opts, sps
    store.end_sweep(conn, screen_id, "completed")
    chosen = challenger(best_opts, tried)
    pairs = confirm_pairs(time.monotonic() - t0, per_trial(), budget_s)
    out = {"defaults": {}, "best": best_opts, "challenger": chosen, "screened": len(tried), "pairs": pairs}
    if not chosen:
        out["sentence"] = too_small(per_trial(), startup_s, name)
        log(out["sentence"])
        conn.close()
        return out
    out["ranking"] = ranking(best_opts, chosen, tried, name)
    sid_a = store.begin_sweep(conn, line, cfg.to_json(), env_id, label="tune: defaults")
    sid_b = store.begin_sweep(conn, line, cfg.to_json(), env_id, label=f"tune: {describe(chosen, name)}")
    log(f"  confirming {describe(chosen, name)} ({out['ranking']}) against {name}'s defaults: {pairs} interleaved pairs "
        f"(sweeps {sid_a} and {sid_b})")
    store.pair_sweeps(conn, sid_a, sid_b)
    a, b = abtest.Variant("a", base), abtest.Variant("b", with_options(base, {**pinned, **chosen}))

    def record(v, spec, o):
        record_result(conn, sid_a if v.label == "a" else sid_b, env_id, spec, o.status, o.reason, o.payload,
                            o.started_at, o.ended_at, o.wall_s, o.failed_rank)
    results = abtest.run_pairs(a, b, pairs, limits, record)
    for sid in (sid_a, sid_b):
        store.end_sweep(conn, sid, "completed")
    pc = abtest.paired(results, a.spec, b.spec)
    out["comparison"] = pc
    allreduce = _allreduce_ms(base, grad_mib, limits)
    for label, idx, spec in (("defaults", 0, a.spec), ("best", 1, b.spec)):
        bd = bounds([r[idx] for r in results], spec, allreduce)
        if bd is not None:
            out[f"bounds_{label}"] = bd
    out["sentence"] = sentence(chosen, pc, base, out["ranking"] if not best_opts else "")
    log(out["sentence"])
    out["check"] = check_command(argv or [], base, chosen)
    log(f"  to check it in your own interleaved A/B run: {out['check']}")
    for label, key in ((f"{name}'s defaults", "bounds_defaults"), (describe(chosen, name), "bounds_best")):
        if out.get(key):
            log(bounds_line(label, out[key]))
    out["took_s"] = time.monotonic() - t0
    log(f"  tune took {out['took_s']:.0f} s of its {budget_s:g} s budget ({len(tried)} screened, {pairs} pairs)")
    conn.close()
    return out


def sentence(options: dict, pc: stats.ProcessComparison, base: RunSpec, ranked: str = "") -> str:
    """The verdict; `ranked`: how the screening ranked a setting it did not keep, said where the pairs find it faster."""
    where = f"{base.device_count} {'GPUs' if base.device_type == 'cuda' else 'processes'}"
    name = STRATEGY_NAMES[base.strategy]
    if not pc.decidable:
        return f"Too few pairs succeeded to decide between {describe(options, name)} and {name}'s defaults on {where}."
    stat = f"p={pc.p_two_sided:.2g}, 95% CI of the ratio {pc.ci95[0]:.2f}-{pc.ci95[1]:.2f}, {pc.n_a} interleaved pairs"
    if pc.ratio > 1 and pc.p_two_sided < 0.05:
        return (f"{describe(options, name)}: {pc.ratio:.2f}x faster than default {name} on {where} ({stat})"
                + (f"; {ranked}, confirmed in pairs." if ranked else "."))
    return (f"{name}'s defaults are already best on {where}: the best other settings found, {describe(options, name)}, "
            f"reach {pc.ratio:.2f}x ({stat}).")


def _allreduce_ms(base: RunSpec, grad_mib: float, limits: Limits) -> float:
    """All-reduce time of the gradients at this count, from one microbenchmark run."""
    spec = dataclasses.replace(base, workload="allreduce", strategy="comm", mode="comm", per_device_batch=0,
                               global_batch=0, image_size=0, steps=0, warmup=0, options=(),
                               comm_max_bytes=int(grad_mib * 2**20))
    out = run_config(spec, limits)
    rows = [r for r in out.payload.get("comm", []) if r.get("scope", "world") == "world"]
    return stats.allreduce_ms_at(grad_mib * 2**20, [r["size_bytes"] for r in rows], [r["time_ms"] for r in rows])


SEARCHED = ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph", "sync_buffers", "comm_hook", "zero_bucket_view",
            "find_unused_parameters")
NOT_TUNED = {"repeats": "tune runs its own interleaved pairs", "fsdp_reshard": "tune measures DDP only",
             "fsdp_mixed_precision": "tune measures DDP only", "fsdp_offload": "tune measures DDP only",
             "check_equivalence": "tune measures speed only",
             "hsdp_shard_size": "tune measures DDP only (ddp or zero)", "memory_budget_gib": "tune measures speed only",
             "comm_counts": "tune measures DDP's settings at its own counts", "resume": "a tune is not resumed; start it again",
             "label": "tune labels its sweeps itself"}


def refuse_outputs(cfg, given: frozenset) -> None:
    """tune writes no report and no plot (its output is its verdict and its sweeps in --store), so a report or plots folder
    is refused, as ab refuses it, not taken and left empty as it once was; a report of its sweeps is report's to write."""
    for name in ("report_dir", "plots_dir"):
        if name in given:
            flag, value = "--" + name.replace("_", "-"), getattr(cfg, name)
            raise ConfigError(f"tune: {flag} {value!r}: tune writes no report or plot, only its sweeps (to --store) and "
                              f"its verdict; drop the flag, and for a report of any of them afterwards run "
                              f"./run_bench.sh report --store STORE --sweep ID {flag} {value} (tune prints the sweep ids)")


def refuse_what_tune_decides(cfg, given: frozenset) -> None:
    """A flag that tune would not honour is an error, not a value silently dropped."""
    flag = lambda name: "--" + name.replace("_", "-")  # noqa: E731
    refuse_outputs(cfg, given)
    if "strategies" in given and tuple(cfg.strategies) not in (("ddp",), ("zero",)):
        raise ConfigError(f"tune: --strategies {','.join(cfg.strategies)}: tune searches DDP's settings under ddp or zero, "
                          "one at a time; expected --strategies ddp or --strategies zero")
    for name in ("workloads", "precision", "optimizer", "activation_checkpointing", "deeplabv3_aux"):
        if name in given and len(getattr(cfg, name)) > 1:
            raise ConfigError(f"tune: {flag(name)} {','.join(getattr(cfg, name))}: tune takes one at a time; run it once for each")
    for name in SEARCHED:
        if name in given:
            raise ConfigError(f"tune: {flag(name)}: tune searches DDP's settings itself; drop the flag (to measure given "
                              "settings: a sweep with them, or ./run_bench.sh ab --b-args)")
    for name in ("channels_last", "compile"):
        if name in given and any(getattr(cfg, name)):
            raise ConfigError(f"tune: {flag(name)}: tune runs without it; drop the flag")
    for name, why in NOT_TUNED.items():
        if name in given:
            raise ConfigError(f"tune: {flag(name)}: {why}; drop the flag")


HELP = """Find which of DDP's settings (bucket size, gradient_as_bucket_view, static_graph, communication hooks, ...)
make one workload fastest at one device count within --budget seconds: screen them one at a time, confirm the best
against DDP's defaults in interleaved pairs, and state the result with its significance. The sweep flags below pick
the workload, count, precision and optimizer; the settings tune searches itself are refused as flags."""
EXAMPLES = """examples:
  ./run_bench.sh tune --workloads synthetic --gpus 2 --budget 600
  ./run_bench.sh tune --workloads resnet50 --gpus 8 --budget 900
  ./run_bench.sh tune --strategies zero --optimizer adamw --gpus 8     DDP under ZeroRedundancyOptimizer
more: docs/tuning.md"""


def main(argv: list) -> int:
    from bench import options
    parser = options.run_parser()
    parser.prog, parser.usage, parser.description, parser.epilog = "./run_bench.sh tune", "%(prog)s [FLAGS]", HELP, EXAMPLES
    parser.add_argument("--budget", default="900", help="seconds for the whole search and its confirmation (default 900)")
    ns, rest = parser.parse_known_args(argv)
    if rest:
        raise ConfigError(f"unrecognised arguments: {' '.join(rest)}")
    ns.budget = finite(ns.budget, "--budget")
    if not ns.budget > 0:
        raise ConfigError(f"--budget: {ns.budget:g} is not allowed; expected seconds > 0")
    cfg, given, machine = options.prepare(abtest._without(argv, ("--budget",)))
    refuse_what_tune_decides(cfg, given)
    from bench.workloads import voc
    voc.download_before_runs(cfg)  # before any rank starts
    tune(cfg, machine, ns.budget, argv=argv)
    return 0
