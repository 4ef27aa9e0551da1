"""./run_bench.sh fit: for each strategy, count and recipe, the largest per-device batch that fits, then each one's
throughput at its own largest batch: the fair comparison when a strategy's point is a larger batch (fairscale #677,
"DDP OOM / FSDP fits"), as Lightning's scale_batch_size(mode="binsearch") and accelerate's find_executable_batch_size
search it for one process.

    ./run_bench.sh fit --workloads transformer --strategies ddp,fsdp --gpus 8               # CUDA: the GPU's memory
    ./run_bench.sh fit --device cpu --memory-budget-gib 2 --strategies ddp,fsdp --gpus 2    # CPU: a node's ranks' RSS

Each configuration of the sweep (one repeat) is tried at per-device batches 1, 2, 4, ... (from --per-device-batch if
given, at least what BatchNorm needs; the first line names the ones it will try) until one does not fit or --max-batch is reached, then bisected between the
largest that fit and the smallest that did not, to one sample. A trial is one configuration at one batch in fresh
processes, through the sweep's own launch (bench.sweep.launch.run_config): FIT_WARMUP steps and FIT_STEPS measured
ones, its peak measured (bench.analysis.fit.device_peak, the figure the report's fastest-within-the-budget table holds
to the budget: CUDA, the device level on the fullest GPU, the larger of the steady state's and the whole run's (the
allocator's peak reserved where none was recorded), and an out-of-memory error is a recorded answer, not a failure;
CPU, the peak RSS against --memory-budget-gib, nothing estimated). Every trial is
stored (mode 'fit', its verdict in details), then each configuration runs as a sweep measures it at its largest batch
(mode 'bench', --steps and --repeats as given, its verdict by the same rule in details 'fit'; on CUDA profiled as a
sweep profiles by default, a few traced steps after its window, so the answer's bound has its evidence, the GPU's busy
share: bench.sweep.profiling; the trials never are). A trial's two steps can
understate the longer run's peak (on the CPU the heap grows for several steps more): where the measured run passes the
budget, that batch does not fit, and the next smaller one is measured, until one fits or none does
(bench.analysis.fit.settle). The report says which fits what and which trains fastest there (bench.report.fit). Exit
status: 0, or 1 where a trial or a measured run failed for another reason than memory (its search stopped).
"""
from __future__ import annotations

import dataclasses
import math
import signal
from typing import Callable

from bench.analysis import fit as fitting, oom
from bench.config import ConfigError
from bench.shared.procs import Interrupted, interruptible, signals_deferred
from bench.shared.spec import RunSpec
from bench.store import store

FIT_WARMUP = 1      # the first step allocates the optimizer's state and the allocator's pools
FIT_STEPS = 1       # the measured step: the peak of a step as training runs it
MAX_BATCH = fitting.MAX_BATCH
MIN_BUDGET_GIB = 0.01  # 10 MiB: below any process's need (Python with torch alone takes several hundred MiB)
REFUSED = {"check_equivalence": "fit measures memory and speed; run the gate in a sweep",
           "epochs": "fit's trials take a few steps; whole epochs belong to a sweep",
           "resume": "a fit is not resumed; start it again",
           "profile": "fit never profiles its trials and, on CUDA, always traces a few steps of its measured runs (the "
                      "bound's evidence); profile a sweep for more",
           "noise_repeats": "fit measures each configuration in --repeats processes; the noise probe is a sweep's"}


def trial_spec(spec: RunSpec, batch: int) -> RunSpec:
    """One trial: the configuration at `batch` per device, a warm-up step and a measured one, nothing else (never
    traced: its memory and its verdict are all a trial is for)."""
    return dataclasses.replace(spec, mode="fit", per_device_batch=batch, global_batch=batch * spec.device_count,
                               micro_batch=0, warmup=FIT_WARMUP, steps=FIT_STEPS, min_window_s=0.0, repeat=0,
                               profile_steps=0, profile_max_mb=0.0, trace_prefix="")


def at_batch(spec: RunSpec, batch: int, repeat: int = 0, traced=None) -> RunSpec:
    """The configuration measured as a sweep measures it, at `batch` per device. traced: (cfg, sweep_id, index) where
    the run is one of fit's measured runs: on CUDA it is then profiled as a sweep profiles by default (--profile-steps
    traced steps after its window, one trace per rank next to the store: bench.sweep.profiling), so the recommended
    configuration's bound has evidence; an H200 fit's answer read 'not measured (fit's runs are not traced)'. Never a
    trial's (trial_spec), nor a key's (search_key)."""
    s = dataclasses.replace(spec, per_device_batch=batch, global_batch=batch * spec.device_count, micro_batch=0,
                            repeat=repeat)
    if traced is None or s.device_type != "cuda":
        return s
    from bench.sweep import profiling
    cfg, sweep_id, index = traced
    return profiling.attach(s, dataclasses.replace(cfg, profile=True), sweep_id, index)


def search_key(spec: RunSpec) -> str:
    return at_batch(spec, 0).key


def describe(spec: RunSpec) -> str:
    extra = [x for x in (spec.precision if spec.precision != "fp32" else "", spec.optimizer if spec.optimizer != "sgd" else "",
                         f"ac={spec.activation_checkpointing}" if spec.activation_checkpointing != "none" else "")
             + tuple(f"{k}={v}" for k, v in spec.options) if x]
    return f"{spec.workload} {spec.strategy} x{spec.device_count}" + (f" [{', '.join(extra)}]" if extra else "")


def run_fit(cfg, machine, max_batch: int, command_line: str, log: Callable[[str], None] = print,
            run_config: Callable = None) -> int:
    """Search every configuration, store every trial and the measured runs down to the largest batch whose measured run
    fits; render the report. SIGTERM and SIGHUP end it as Ctrl-C does, 'interrupted' with what it ran kept (an H200
    fit under `timeout` had been left 'running', read back as 'died').
    run_config: bench.sweep.launch.run_config (a stand-in in tests). Returns the exit status."""
    with interruptible():
        return _run_fit(cfg, machine, max_batch, command_line, log, run_config)


def _run_fit(cfg, machine, max_batch: int, command_line: str, log: Callable[[str], None], run_config) -> int:
    from bench.machine import env as env_mod
    from bench.sweep import plan
    from bench.sweep.launch import Limits
    from bench.sweep.record import record_result as _record
    if run_config is None:
        from bench.sweep.launch import run_config

    flight: list = []   # [(spec, started_at)] of the run in flight, recorded 'interrupted' if a signal ends the fit

    def launch(spec, limits):
        flight[:] = [(spec, store.now())]
        return run_config(spec, limits)

    def record_result(*args, **kwargs) -> None:   # a result and its rows written whole, a signal held till then
        with signals_deferred():
            _record(*args, **kwargs)
            flight.clear()
    budget_mib = cfg.memory_budget_gib * 1024
    conn = store.connect(cfg.store)
    errors, status, failed_runs = 0, "interrupted", []  # failed_runs: a measured run's failure for another reason
    sweep_id = None
    try:
        with signals_deferred():   # the sweep row exists exactly when sweep_id is known
            env_id = store.insert_environment(conn, env_mod.capture())
            sweep_id = store.begin_sweep(conn, command_line, cfg.to_json(), env_id, label=cfg.label)
        items = plan.bench_specs(dataclasses.replace(cfg, repeats=1, noise_repeats=1), machine)  # one search each
        u = "GPU" if cfg.device == "cuda" else "node"
        figure = ("the device level, as the report's budget table; reserved where none is read" if cfg.device == "cuda"
                  else "the peak RSS of its processes, summed, as the report's budget table")
        starts = {s.workload: start_of(s, cfg) for s in items if not isinstance(s, plan.Skip)}
        log(f"fit {sweep_id} -> {cfg.store}: the largest per-device batch within {cfg.memory_budget_gib:g} GiB per {u} "
            f"({figure}), {len(items)} configuration(s), {ladder_words(starts, max_batch)}")
        for index, item in enumerate(items, 1):
            if isinstance(item, plan.Skip):
                record_result(conn, sweep_id, env_id, item.spec, "skipped", item.reason)
                log(f"{describe(item.spec)}: skipped: {item.reason}")
                continue
            spec = item
            info_min = min_batch(spec, cfg)
            limits = Limits.for_spec(spec, cfg.timeout)

            def try_batch(b: int, spec=spec, limits=limits) -> str:
                t = trial_spec(spec, b)
                out = launch(t, limits)
                peak = (fitting.peak_mib(out.payload.get("memory", []), t.device_type, per_node(t))
                        if out.status == "ok" else None)
                v = fitting.verdict(out.status, out.reason, peak, budget_mib)
                payload = dict(out.payload or {}, fit={"search": search_key(spec), "verdict": v, "peak_mib": peak,
                                                         "budget_mib": budget_mib, "bench_key": at_batch(spec, b).key})
                record_result(conn, sweep_id, env_id, t, out.status, out.reason, payload, out.started_at, out.ended_at,
                              out.wall_s, out.failed_rank)
                frag = oom.words(out.reason or "", hint=False)   # the page's words for a trial's error too
                where = (f"peak {peak:.0f} MiB of {mib(budget_mib)}" if peak is not None
                         else frag or ((out.reason or "").splitlines() or [""])[0][:160])
                log(f"  {describe(spec)} batch {b}: {v} ({where})")
                return v

            largest, smallest_not, tried = fitting.search(try_batch, start_of(spec, cfg), max_batch, smallest=info_min)
            if largest is None:
                errors += any(v == fitting.ERROR for v in tried.values())
                log(f"{describe(spec)}: nothing fits" + (f" (batch {min(tried)} does not)" if tried else ""))
                continue
            log(f"{describe(spec)}: {found_words(largest, smallest_not, tried, max_batch)}")

            def measure(b: int, spec=spec, limits=limits, index=index) -> str:
                """The measured runs at b, stored with details 'fit' (on CUDA with their traces); the first that does
                not fit ends them."""
                worst = fitting.FITS
                for r in range(cfg.repeats):
                    s = at_batch(spec, b, r, traced=(cfg, sweep_id, index))
                    out = launch(s, limits)
                    peak = (fitting.peak_mib((out.payload or {}).get("memory", []), s.device_type, per_node(s))
                            if out.status == "ok" else None)
                    v = fitting.verdict(out.status, out.reason, peak, budget_mib)
                    payload = dict(out.payload or {}, fit={"search": search_key(spec), "batch": b, "verdict": v,
                                                             "peak_mib": peak, "budget_mib": budget_mib})
                    record_result(conn, sweep_id, env_id, s, out.status, out.reason, payload, out.started_at, out.ended_at,
                                  out.wall_s, out.failed_rank)
                    failed_runs.append(out.status != "ok" and v == fitting.ERROR)
                    sps = fitting_throughput(out, s)
                    where = f", peak {peak:.0f} MiB of {mib(budget_mib)}" if peak is not None else ""
                    log(f"  {describe(spec)} at batch {b}: " + (f"{sps:.1f} samples/s{where}" if out.status == "ok"
                                                               else f"{out.status.upper()}: {out.reason}"))
                    if v in fitting.NOT_FITTING:
                        frag = oom.words(out.reason or "")
                        log(f"  {describe(spec)} at batch {b}: its trial fit, its measured run is {v}"
                            + (f" ({frag})" if frag else "") + f": {b} does not fit; stepping down")
                        return v
                    worst = fitting.ERROR if v == fitting.ERROR else worst
                return worst

            answer, measured = fitting.settle(measure, try_batch, largest, tried, smallest=info_min)
            errors += any(v == fitting.ERROR for v in tried.values())
            if answer != largest:
                log(f"{describe(spec)}: " + (f"largest batch whose measured run fits {answer}" if answer is not None
                                             else "no measured run fits")
                    + f" ({', '.join(str(b) for b, v in measured.items() if v in fitting.NOT_FITTING)}: its trial fit, "
                    "its measured run did not)")
        status = "completed"
    except (KeyboardInterrupt, Interrupted) as e:
        signum = e.signum if isinstance(e, Interrupted) else signal.SIGINT
        name = signal.Signals(signum).name
        for spec, started in list(flight):   # as a sweep records its configuration in flight: the store says what was cut
            record_result(conn, sweep_id, env_id, spec, "interrupted", f"fit interrupted by {name}",
                          started_at=started, ended_at=store.now())
        log(f"fit {sweep_id} interrupted by {name}: its trials and measured runs so far are kept "
            "in the store; run fit again to search anew")
        return 128 + int(signum)
    finally:
        if sweep_id is not None:
            with signals_deferred():
                store.end_sweep(conn, sweep_id, status)
        conn.close()
    errors += sum(failed_runs)
    log(f"fit {sweep_id} completed" + (f": {errors} run(s) failed for another reason than memory" if errors else ""))
    rc = 1 if errors else 0
    if cfg.report:
        from bench.sweep.run import render_report
        rc = render_report(cfg, sweep_id, log) or rc
    return rc


def min_batch(spec: RunSpec, cfg) -> int:
    """The smallest per-device batch the workload trains on (BatchNorm needs 2 samples a replica)."""
    from bench.workloads import registry
    return max(1, registry.info(spec.workload, cfg).min_replica_batch)


def per_node(spec) -> int:
    """Ranks per node of a multi-node run, 0 on one node: how the report splits a CPU run's ranks into the nodes whose
    RAM they share (bench.analysis.fit.peak_mib), so a trial's stored verdict and the page's peak are one rule."""
    return spec.device_count // spec.nodes if (spec.nodes or 1) > 1 else 0


def start_of(spec: RunSpec, cfg) -> int:
    """Where the search starts: --per-device-batch where given, at least the workload's smallest batch."""
    return max(min_batch(spec, cfg), cfg.per_device_batch or 1)


def ladder(start: int, max_batch: int) -> list:
    """The batches the search doubles through from `start` (bench.analysis.fit.search), the last at most max_batch."""
    out = [start]
    while out[-1] < max_batch:
        out.append(min(2 * out[-1], max_batch))
    return out


def ladder_words(starts: dict, max_batch: int) -> str:
    """'batches 64, 128 until one does not fit (at most --max-batch 128), then bisection', from where the search
    starts: it once printed 'batches 1, 2, 4, ...' for a search from --per-device-batch 64 that ran 64 and 128.
    starts: workload -> its start (several where workloads start apart)."""
    def seq(start: int) -> str:
        b = ladder(start, max_batch)
        return ", ".join(map(str, b if len(b) <= 4 else b[:3] + ["...", b[-1]]))
    if len(set(starts.values())) > 1:
        tried = "; ".join(f"{w}: {seq(b)}" for w, b in starts.items())
        return f"batches ({tried}) until one does not fit (at most --max-batch {max_batch}), then bisection"
    return (f"batches {seq(next(iter(starts.values()), 1))} until one does not fit (at most --max-batch {max_batch}), "
            "then bisection")


def found_words(largest: int, smallest_not, tried: dict, max_batch: int) -> str:
    """The search's answer and how many trials gave it, before its measured run. 'measuring it (2 trial(s))' read as a
    batch measured in 2 trials, and a search that reached --max-batch with every batch fitting (an H200's 128 of its
    140 GiB) did not say that the limit lies above it."""
    n = f"{len(tried)} trial{'s' if len(tried) != 1 else ''}"
    if smallest_not is not None:
        return f"largest batch that fits {largest}; {smallest_not} does not; from {n}; measuring it"
    stopped = [b for b, v in tried.items() if v == fitting.ERROR]
    if stopped:   # an error ended the search where it stood: neither the cap nor a batch that does not fit
        return f"largest batch that fits {largest}; the search stopped at an error at batch {stopped[0]}; from {n}; measuring it"
    return (f"largest batch that fits {largest} (the cap, --max-batch {max_batch}) from {n}; every batch tried fit: the "
            "limit is above the cap; raise --max-batch to find it; measuring it")


def mib(value: float) -> str:
    """MiB to the precision that tells a budget apart (1536, 15.4), where a whole number would round 10.2 to 10."""
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def fitting_throughput(out, spec: RunSpec) -> float:
    from bench import stats
    if out.status != "ok":
        return math.nan
    got = stats.result_summary(out.payload.get("steps", []), out.payload.get("windows", []), spec.global_batch)
    return got.get("samples_per_s") or math.nan


def refuse(cfg, given: frozenset) -> None:
    """What fit cannot honour is an error, before anything runs."""
    flag = lambda name: "--" + name.replace("_", "-")  # noqa: E731
    for name, why in REFUSED.items():
        if name in given:
            raise ConfigError(f"fit: {flag(name)}: {why}; drop the flag")
    if cfg.scaling != "weak":
        raise ConfigError("fit: --scaling strong fixes the global batch; fit searches the per-device batch (weak scaling)")
    if cfg.memory_budget_gib is None:
        raise ConfigError("fit on CPU needs --memory-budget-gib G: each trial's node total, the peak RSS of its processes "
                          "summed, is held against it (on CUDA the GPU's memory is the default)")
    if cfg.memory_budget_gib < MIN_BUDGET_GIB:
        raise ConfigError(f"fit: --memory-budget-gib {cfg.memory_budget_gib:g} ({cfg.memory_budget_gib * 1024:.3g} MiB) is "
                          f"below the floor of {MIN_BUDGET_GIB:g} GiB ({MIN_BUDGET_GIB * 1024:.3g} MiB): no process fits "
                          "in it (Python with torch alone takes several hundred MiB); expected a budget in GiB such as 2")


def main(argv: list) -> int:
    from bench import options
    from bench.commands import abtest
    from bench.sweep.run import command_line
    parser = options.run_parser()
    parser.prog = "./run_bench.sh fit"
    parser.add_argument("--max-batch", default=str(MAX_BATCH),
                        help=f"largest per-device batch tried (default {MAX_BATCH}): the search stops there")
    ns, rest = parser.parse_known_args(argv)
    if rest:
        raise ConfigError(f"unrecognised arguments: {' '.join(rest)}")
    try:
        max_batch = int(ns.max_batch)
    except ValueError:
        max_batch = 0
    if max_batch < 1:
        raise ConfigError(f"--max-batch: {ns.max_batch!r} is not allowed; expected a whole number >= 1")
    cfg, given, machine = options.prepare(abtest._without(argv, ("--max-batch",)), report=True)
    refuse(cfg, given)
    if cfg.per_device_batch and cfg.per_device_batch > max_batch:
        raise ConfigError(f"fit: --per-device-batch {cfg.per_device_batch} (where the search starts) is above "
                          f"--max-batch {max_batch}")
    return run_fit(cfg, machine, max_batch, command_line(["fit", *argv]))
