"""A sweep: every configuration of the plan in turn, each launched in fresh processes (bench.sweep.launch),
each result written to the store by this process alone; then the report.

Ctrl-C, SIGTERM and SIGHUP, and standard output closed by its reader (`| head`: SIGPIPE's exit status), stop the
running configuration (all its processes), record it 'interrupted', keep every finished result, mark the sweep
'interrupted' and return 128 + signal.
Anything that goes wrong inside the sweep process itself (a bug of the suite, a full disk) is recorded:
the configuration fails with the reason, the sweep is marked 'failed', one line says where the full
traceback was written, and the exit status is 3. Exit statuses: see EXIT_STATUS.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import time
import traceback
from types import SimpleNamespace
from typing import Callable, Optional

from bench import stats
from bench.analysis import results
from bench.config import ConfigError, SweepConfig
from bench.shared import faults
from bench.shared.procs import Interrupted, interruptible, raise_interrupted, signals_deferred, stdout_closed
from bench.store import store
from bench.sweep import describe, equivalence, plan, profiling, record
from bench.sweep.describe import plan_summary
from bench.sweep.diagnose import Outcome
from bench.sweep.launch import Limits, run_config
from bench.sweep.plan import RunSpec, Skip
from bench.workloads.usermodel import display_name

EXIT_STATUS = {0: "every configuration ok or skipped", 1: "a configuration failed (recorded with its reason; the sweep went on)",
               2: "bad input, refused before anything ran", 3: "internal error of the suite (traceback file named on stderr)",
               129: "SIGHUP", 130: "Ctrl-C (SIGINT)", 141: "SIGPIPE: standard output closed (`| head`, a pager quit)",
               143: "SIGTERM"}
PROGRESS_EVERY_S = 30.0


def _describe(spec: RunSpec, among: tuple = ()) -> str:
    """'[3/12] my_model:build ddp cpu x2': a model given by path by its short name (usermodel.display_name, among the
    sweep's workloads), as the report names it; trial B's lines carried the absolute path the store keeps."""
    what = {"bench": "", "equivalence": "equivalence check: ", "comm": "collectives: ", "loader": "data loader alone: "}[spec.mode]
    name = "" if spec.mode in ("comm", "loader") else f"{display_name(spec.workload, among)} {spec.strategy} "
    axes = [spec.precision] if spec.precision != "fp32" else []
    axes += (["channels_last"] if spec.channels_last else []) + (["compiled"] if spec.compile else [])
    axes += [f"{k}={v}" for k, v in spec.options] + ([spec.optimizer] if spec.optimizer != "sgd" else [])
    axes += ([f"ac={spec.activation_checkpointing}"] if spec.activation_checkpointing != "none" else [])
    axes += [f"aux={spec.deeplabv3_aux}"] if spec.deeplabv3_aux != "false" else []
    nodes = f" on {spec.nodes} nodes" if spec.nodes > 1 else ""
    rep = f" (repeat {spec.repeat + 1})" if spec.repeat else ""
    return f"{what}{name}{spec.device_type} x{spec.device_count}{nodes}" + (f" [{', '.join(axes)}]" if axes else "") + rep


def peak_busbw(rows: list) -> str:
    """', peak busbw: all_reduce 1.20 GB/s, all_gather ...' over a comm run's rows, per collective in the order run."""
    best: dict = {}
    for r in rows:
        op = r.get("op", "all_reduce")
        best[op] = max(best.get(op, 0.0), r["busbw_gbps"] or 0.0)
    return (", peak busbw: " + ", ".join(f"{op} {bw:.2f} GB/s" for op, bw in best.items())) if best else ""


def _summary_line(conn, rid: int, outcome: Outcome) -> str:
    if outcome.status != "ok":
        return f"{outcome.status.upper()}: {outcome.reason}"
    r = conn.execute("SELECT * FROM results WHERE result_id = ?", (rid,)).fetchone()
    if r["mode"] == "equivalence":
        v = outcome.payload
        state = (f"; optimizer state matches too ({v['state_tensors']} tensors, max |diff| {v['state_max_rel_diff']:.2g} of "
                 f"each tensor's largest element)") if v.get("state_tensors") else ""
        return f"ok, parameters match (max |diff| {v['max_abs_diff']:.2g}, {v['tolerance']}){state}"
    if r["mode"] == "comm":
        failed = outcome.payload.get("interference_error")
        return "ok" + peak_busbw(outcome.payload.get("comm", [])) + (
            f"; the interference stage FAILED ({failed[:300]}): its rows are missing, the bandwidth rows are kept" if failed else "")
    if r["mode"] == "loader":
        return f"ok, the loader alone delivers {r['samples_per_s']:.1f} samples/s"
    flag = "  [unstable: IQR > 10% of median]" if r["unstable"] else ""
    bad = json.loads(r["details_json"] or "{}").get("loss_not_finite")
    flag += f"  [{stats.loss_words(bad)}]" if bad else ""
    steps = (f", step median {r['step_ms_median']:.1f} ms (p10 {r['step_ms_p10']:.1f}, p90 {r['step_ms_p90']:.1f})"
             if r["step_ms_median"] is not None else "")
    return f"ok, {r['samples_per_s']:.1f} samples/s{_tokens(r)}{steps}{flag}"


class _Run(SimpleNamespace):
    """One run's results row as recommend.tokens_clause reads a Config: its tokens/s by Config's own properties."""
    tokens_per_s = results.Config.tokens_per_s
    tokens_per_s_per_device = results.Config.tokens_per_s_per_device


def _tokens(r) -> str:
    """' (1677 tokens/s, 838 per process)' after a language model's samples/s, as the report's first screen gives it
    (trial B: the terminal said samples/s alone for sequences of 32 tokens); '' for any other workload."""
    per_sample = (json.loads(r["details_json"] or "{}").get("workload_details") or {}).get("tokens_per_sample")
    if not per_sample:
        return ""
    from bench.report.recommend import tokens_clause   # the report's words (and matplotlib) only for a language model
    return tokens_clause(_Run(samples_per_s=r["samples_per_s"], tokens_per_sample=per_sample,
                              device_count=int(r["device_count"]), device_type=r["device_type"]))


def _progress(log: Callable, head: str) -> Callable:
    """A heartbeat reader that says, at most every PROGRESS_EVERY_S, how far a long configuration is."""
    last = [time.monotonic()]

    def show(watch) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_S and watch.total() > 0 and watch.steps_done() >= 0:
            last[0] = now
            log(f"{head}: ... step {watch.steps_done() + 1}/{watch.total()} ({now - watch.started:.0f} s"
                f"{pace(watch)})")
    return show


def pace(watch) -> str:
    """'; about 41 s a step, about 6.2 min to step 14': the pace measured so far (the steps after the first, which
    holds compilation), so that a plan's guess far off (a 1.4b transformer step guessed at 0.2 s that took about 11
    minutes on CPU) shows while the configuration runs, not after it."""
    step_s = Limits.step_s(watch)
    if step_s is None:
        return ""
    more_s = max(0, watch.total() - watch.steps_done()) * step_s
    short = lambda s: f"{s * 1000:.0f} ms" if s < 0.9995 else describe.duration(s)  # noqa: E731 (an H200's 111 ms: '0 s')
    left = f", about {short(more_s)} to step {watch.total()}" if more_s > 0 else ""
    return f"; about {short(step_s)} a step{left}"





def _started_fresh_instead(spec: RunSpec, outcome: Outcome) -> bool:
    """Whether a run planned through the fork server started its processes as fresh interpreters (its client found
    no server and said so only in the rank's log)."""
    return (spec.process_start == "forked" and outcome.status == "ok"
            and (outcome.payload or {}).get("process_start") == "fresh")


def run_sweep(cfg: SweepConfig, command_line: str, log: Callable[[str], None] = print, given: frozenset = frozenset(),
              machine: Optional[plan.Machine] = None) -> int:
    """Run a resolved, validated config (or resume one). Returns the process exit status (EXIT_STATUS)."""
    with interruptible(raise_interrupted):   # SIGTERM and SIGHUP end it 'interrupted', as Ctrl-C does
        return _run_sweep(cfg, command_line, log, given, machine)


def _run_sweep(cfg: SweepConfig, command_line: str, log: Callable[[str], None], given: frozenset,
               machine: Optional[plan.Machine]) -> int:
    try:  # tests' fault injection: a malformed BENCH_FAULT is an input error, before anything runs
        faults.parse(os.environ.get("BENCH_FAULT", ""))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    conn = sweep_id = env_id = current = refs = None
    started, failures = "", 0
    try:
        from bench.workloads import voc
        voc.download_before_runs(cfg, log)  # before any rank starts
        conn = store.connect(cfg.store)
        resumed = bool(cfg.resume)
        if resumed:
            row = store.find_sweep(conn, cfg.resume)
            if row["command_line"].split()[1:2] == ["fit"]:  # its trials are a search, not a plan to finish
                raise store.StoreError(f"sweep {row['sweep_id']} is a ./run_bench.sh fit, which is not resumed; run it again")
            if row["status"] == "running":
                raise store.StoreError(f"sweep {row['sweep_id']} is still running (pid {row['pid']} on {row['hostname']})")
            original = SweepConfig.from_json(row["config_json"])
            # Its output choices too (--no-report, --report-dir, --plots-dir), unless this command names new ones: a sweep
            # started with --no-report must not render over results/ of the folder it is resumed from.
            outputs = {n: getattr(cfg if n in given else original, n) for n in OUTPUT_CHOICES}
            kept = {"store": cfg.store, "resume": None, **outputs}
            ignored = sorted(n for n in given if n not in kept and n != "resume" and getattr(cfg, n) != getattr(original, n))
            if ignored:
                log("note: a resumed sweep keeps its original settings; ignoring --" + ", --".join(n.replace("_", "-") for n in ignored))
            own = [_output_flag(n, outputs[n]) for n in OUTPUT_CHOICES if n not in given and outputs[n] != getattr(cfg, n)]
            if own:
                log("note: the resumed sweep keeps its own output choices: " + " ".join(own))
            cfg = dataclasses.replace(original, **kept)
            machine = machine or plan.detect_machine()
            if row["status"] == "completed" and not _left(plan.plan(cfg, machine), store.ok_keys(conn, row["sweep_id"])):
                # `--resume last` on a finished sweep read 'plan: 0 benchmark configuration(s) (left of 12)' and counted a
                # resume that ran nothing; it is left as it was, and only its report is rendered again
                log(f"sweep {row['sweep_id']} is already complete: nothing left to run"
                    + ("; re-rendering its report" if cfg.report else " (and --no-report: nothing to render)"))
                return render_report(cfg, row["sweep_id"], log) if cfg.report else 0
        from bench.machine import env as env_mod
        env_id = store.insert_environment(conn, env_mod.capture())
        with signals_deferred():  # the sweep row exists exactly when sweep_id is known here
            if resumed:
                sweep_id = row["sweep_id"]
                store.reopen_sweep(conn, sweep_id)
            else:
                sweep_id = store.begin_sweep(conn, command_line, cfg.to_json(), env_id, label=cfg.label)
        machine = machine or plan.detect_machine()
        items = plan.plan(cfg, machine)
        done = store.ok_keys(conn, sweep_id) if resumed else set()
        if resumed:
            log(f"resuming sweep {sweep_id} in {cfg.store}: {len(done)} configuration(s) already done")
        else:
            log(f"sweep {sweep_id} -> {cfg.store} ({cfg.device}, counts {','.join(map(str, cfg.gpus))}, {cfg.scaling} scaling, "
                + (f"{cfg.epochs} epoch(s) of {cfg.data}" if cfg.epochs else f"{cfg.steps} steps" + (f" or more, to fill {cfg.min_window_s:g} s," if cfg.min_window_s else "")
                   + f" after {cfg.warmup} warm-up")
                + f", {cfg.threads_per_process} torch thread(s) per process)")
            for line in describe.describe_resolved(cfg, given):
                log(line)
            crowded = describe.oversubscribed(cfg, machine)
            if crowded:
                log(crowded)
        left = _left(items, done)   # a resume plans what is left, not the whole sweep again
        log(plan_summary(left, cfg, machine) + (f" (left of {len(items)})" if resumed else ""))
        for line in describe.plan_warnings(left, cfg, machine):
            log(line)
        shared = os.path.join(os.path.dirname(os.path.abspath(cfg.store)), ".bench-runs")
        refs = equivalence.References(items)  # the gate's references, one per count (and recipe) for every strategy
        failed_before: dict = {}  # config key -> why its first failed repeat failed, for the later rounds
        warned_fresh = False      # said once: the fork server gone, processes start fresh (bench.shared.forkclient)
        for i, item in enumerate(items, 1):
            spec = item.spec if isinstance(item, Skip) else item
            if (spec.key, spec.repeat) in done:
                continue
            head = f"[{i}/{len(items)}] {_describe(spec, cfg.workloads)}"
            if not isinstance(item, Skip) and spec.key in failed_before:
                item = Skip(spec, failed_before[spec.key])
            if isinstance(item, Skip):
                record.record_result(conn, sweep_id, env_id, spec, "skipped", item.reason)
                log(f"{head}: skipped: {item.reason}")
                continue
            spec = profiling.attach(spec, cfg, sweep_id, i)  # --profile: where its traces go
            current, started = spec, store.now()
            limits = Limits.for_spec(spec, cfg.timeout)
            outcome = (equivalence.run(spec, limits, shared, refs) if spec.mode == "equivalence"
                       else run_config(spec, limits, shared, _progress(log, head)))
            with signals_deferred():  # a finished configuration is recorded, not lost to a late Ctrl-C
                rid = record.record_result(conn, sweep_id, env_id, spec, outcome.status, outcome.reason, outcome.payload,
                                          outcome.started_at, outcome.ended_at, outcome.wall_s, outcome.failed_rank)
                current = None
            failures += outcome.status != "ok"
            if outcome.status == "failed" and spec.key not in failed_before:
                # A failure is rarely luck, and each later repeat would cost its whole limit again (a hang: the limit
                # per repeat); the first is what to fix, and --resume runs every repeat of it again once fixed.
                failed_before[spec.key] = (f"not run again: repeat {spec.repeat + 1} of this configuration failed "
                                           f"in this sweep ({(outcome.reason or '').splitlines()[0][:200]})")
            log(f"{head}: {_summary_line(conn, rid, outcome)}{profiling.result_note(conn, rid)}")
            if _started_fresh_instead(spec, outcome) and not warned_fresh:
                warned_fresh = True
                log("note: the fork server did not answer: this configuration's processes started as fresh "
                    "interpreters, as later ones may; the report's environment says how many of each ran (their peak "
                    "RSS and start-up differ)")
        for line in profiling.cost_lines(conn, sweep_id, cfg.store):
            log(line)
        with signals_deferred():
            store.end_sweep(conn, sweep_id, "completed")
    except (KeyboardInterrupt, Interrupted, BrokenPipeError) as e:
        if isinstance(e, BrokenPipeError):  # stdout's reader went away (`| head`, a pager quit): stop as SIGPIPE would
            signum, log = signal.SIGPIPE, stdout_closed()
        else:
            signum = e.signum if isinstance(e, Interrupted) else signal.SIGINT
        name = {signal.SIGINT: "SIGINT (Ctrl-C)", signal.SIGPIPE: "SIGPIPE (its standard output was closed)"}.get(
            signum, signal.Signals(signum).name)
        with signals_deferred():
            if sweep_id is not None:
                if current is not None:
                    record.record_result(conn, sweep_id, env_id, current, "interrupted", f"sweep interrupted by {name}",
                                        started_at=started, ended_at=store.now())
                store.end_sweep(conn, sweep_id, "interrupted")
        log(f"interrupted by {name}: finished results are kept"
            + (f"; resume with {resume_command(sweep_id, cfg.store)}" if sweep_id is not None else ""))
        return 128 + int(signum)
    except (ConfigError, store.StoreError):
        if sweep_id is not None and conn is not None:
            with signals_deferred():
                store.end_sweep(conn, sweep_id, "failed")
        raise
    except Exception as e:
        return internal_error(e, cfg, conn, sweep_id, env_id, current, started, log)
    finally:
        if refs is not None:
            refs.close()
        if conn is not None:
            conn.close()
    noise_line = _noise_line(cfg.store, sweep_id)
    if noise_line:
        log(noise_line)
    log(f"sweep {sweep_id} completed: {failures} configuration(s) failed" if failures else f"sweep {sweep_id} completed")
    status = 1 if failures else 0
    if cfg.report:
        status = render_report(cfg, sweep_id, log) or status
    return status


def _noise_line(store_path: str, sweep_id: int) -> str:
    """The process noise the sweep measured, in one line (noise_source.sweep_line), '' where it measured none: a sweep
    run to measure it (--noise-repeats 3) ended with no figure. A store that cannot be read back says so in the line."""
    from bench.analysis import noise_source
    try:
        conn = store.connect(store_path, readonly=True)
        try:
            return noise_source.sweep_line(results.load(conn, sweep_id))
        finally:
            conn.close()
    except Exception as e:  # the sweep's results are stored: a read-back problem must not hide that
        return f"process noise: could not be read back ({type(e).__name__}: {e})"


def _left(items: list, done: set) -> list:
    """The plan's items a resume still has to run: those whose (config key, repeat) has no result it keeps."""
    return [i for i in items if ((i.spec if isinstance(i, Skip) else i).key, (i.spec if isinstance(i, Skip) else i).repeat)
            not in done]


def resume_command(sweep_id: int, store_path: str) -> str:
    """The resume line as the user can type it where they are: './run_bench.sh' was printed to a user who had run
    /work/main/run_bench.sh from another folder, where no ./run_bench.sh exists. run_bench.sh passes the path it was
    invoked by (BENCH_INVOKED_AS); without it (python -m bench), this suite's run_bench.sh by its absolute path."""
    script = os.environ.get("BENCH_INVOKED_AS") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "run_bench.sh")
    script = script if "/" in script else "./" + script   # `bash run_bench.sh`: $0 has no folder, PATH would not find it
    return " ".join(shlex.quote(a) for a in (script, "--resume", str(sweep_id), "--store", store_path))


OUTPUT_CHOICES = ("report", "report_dir", "plots_dir")   # what a resume keeps from its sweep unless it names new ones


def _output_flag(name: str, value) -> str:
    if name == "report":
        return "--report" if value else "--no-report"
    return f"--{name.replace('_', '-')} {shlex.quote(str(value))}"


def traceback_path(cfg_store: str, sweep_id: Optional[int]) -> str:
    folder = os.path.dirname(os.path.abspath(cfg_store))
    name = f"sweep-{sweep_id}-traceback.txt" if sweep_id is not None else f"bench-traceback-{os.getpid()}.txt"
    return os.path.join(folder if os.access(folder, os.W_OK) else "/tmp", name)


def internal_error(e: Exception, cfg: SweepConfig, conn, sweep_id, env_id, current, started, log) -> int:
    """Record what went wrong inside the sweep process, write the traceback to a file, say so in one line."""
    path = traceback_path(cfg.store, sweep_id)
    try:
        with open(path, "w") as f:
            f.write(traceback.format_exc())
    except OSError:
        path = "(could not be written)"
    what = f"{type(e).__name__}: {e}"
    try:
        with signals_deferred():
            if sweep_id is not None and conn is not None:
                if current is not None:
                    record.record_result(conn, sweep_id, env_id, current, "failed",
                                        f"internal error of the sweep: {what} (traceback: {path})", started_at=started,
                                        ended_at=store.now())
                store.end_sweep(conn, sweep_id, "failed", path)
    except Exception as again:  # the store itself is the problem: the line below still says what happened
        what += f"; recording it failed too: {type(again).__name__}: {again}"
    log(f"internal error: {what}; sweep {sweep_id if sweep_id is not None else '(not started)'} marked failed; "
        f"full traceback in {path}; finished results are kept")
    return 3


def render_report(cfg: SweepConfig, sweep_id: int, log: Callable[[str], None]) -> int:
    try:
        from bench.report import report
        out = report.render(cfg.store, sweep_id, cfg.plots_dir, cfg.report_dir)
    except Exception as e:  # a rendering problem must not hide that the measurements are stored
        path = traceback_path(cfg.store, sweep_id).replace("traceback", "report-traceback")
        try:
            with open(path, "w") as f:
                f.write(traceback.format_exc())
        except OSError:
            path = "(could not be written)"
        log(f"report: could not render ({type(e).__name__}: {e}; traceback in {path}); results are in {cfg.store}")
        return 1
    log(f"report: {out['markdown']}, {out['html']}; {len(out['plots'])} plot(s) in {cfg.plots_dir}/"
        + (f"; they replace the report of {out['replaced']} that was there" if out["replaced"] else ""))
    return 0


def command_line(argv: list) -> str:
    return " ".join(shlex.quote(a) for a in ["./run_bench.sh", *argv])
