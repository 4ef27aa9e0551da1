"""The first thing to run on new hardware: `./run_bench.sh selfcheck` proves the machine or says what is wrong.

In some minutes on this machine's GPUs it runs its sweeps into its own store (results/selfcheck.sqlite; what each
runs: bench.commands.selfcheck_sweeps): the synthetic model under single, DataParallel and DDP at 1 device and at all
of them (fp32, and bf16 where the GPUs have it) with the all-reduce microbenchmark; one step each of DDP, FSDP, fp16
with the gradient scaler, bf16, torch.compile and DeepLabV3 in channels_last at the largest count; the equivalence
gate at 2 devices. Then it checks what only real hardware can show:
    machine       no other process on the GPUs (NVML's list, before the sweeps); each rank of a run on a GPU of
                  its own; CUDA events agree with the host clock around known device work (after the sweeps)
    timing        window throughput and the per-step CUDA events agree within 10% (the main sweep)
    memory        every GPU has allocator, reserved and device-level figures, in that order (the main sweep)
    equivalence   each gate run ends with the single-process parameters (its max |diff| shown); the gate at 2
                  covers dp, ddp and fsdp on CUDA, ddp alone on CPU
    all-reduce    at every count measured, the peak busbw reaches 60% of the slowest link of its ring in the
                  recorded topology (NVLink by generation and links, PCIe by generation and width; 30% through a
                  CPU); a shortfall names the link and the NCCL settings that change the transport
    one step      each configuration above ran; a skip fails, except bf16 on GPUs without it (stated)
    noise         the spread between the main sweep's processes of single x1 at each precision it ran, kept for
                  this host, device and precision (bench.store.hostnoise): a report of any store on this host falls
                  back on it where a sweep ran a configuration at that precision in one process and measured no
                  spread of its own there
and prints PASS, FAIL or SKIP (nothing to check there: one device has no link and no gate) with the figures, then
the command that renders the main sweep's report (`report --store` alone renders the last, one-step, sweep);
exit 1 if anything failed, else 0. With no GPU it says so and exits 0 having checked nothing; GPUs the installed
torch cannot drive fail. `--device cpu` runs the checks on CPU/gloo for the suite's own tests: no link to compare,
fp16 skipped by design, torch.compile and DeepLabV3 left out for time.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from typing import Callable

from bench import stats
from bench.commands import machinecheck, selfcheck_sweeps
from bench.machine.cores import usable_cores
from bench.store import store

TIMING_AGREEMENT = 0.10
MARK = {True: "PASS", False: "FAIL", None: "SKIP"}   # None: nothing to check there, and the detail says why


def sweeps_of_last_selfcheck(conn) -> list:
    """The sweeps one self-check made: it runs them all in its own process, so they are the newest sweeps of the
    newest sweep's host and pid, back to the first sweep of another process."""
    rows = conn.execute("SELECT sweep_id, hostname, pid FROM sweeps ORDER BY sweep_id DESC").fetchall()
    out = []
    for r in rows:
        if out and (r["hostname"], r["pid"]) != (rows[0]["hostname"], rows[0]["pid"]):
            break
        out.append(r["sweep_id"])
    return sorted(out)


def _timing_and_memory(conn, r: dict, which: str = "") -> list:
    """The timing and memory checks of one measured process; `which` tells apart the processes of one configuration
    (' (process 2 of 3)'): the three single x1 repeats had printed one label three times, and a FAIL could not be
    traced to its process."""
    rid = r["result_id"]
    w = [dict(x) for x in conn.execute("SELECT * FROM windows WHERE result_id = ? AND kind = 'measure'", (rid,))]
    s = [dict(x) for x in conn.execute("SELECT * FROM steps WHERE result_id = ? AND kind = 'measure'", (rid,))]
    mem = [dict(x) for x in conn.execute("SELECT * FROM memory WHERE result_id = ?", (rid,))]
    window_sps = stats.window_throughput(w)[0]
    # Each rank's steps partition its own window: the slowest rank's mean step is the window's step.
    per_rank = {}
    for row in s:
        per_rank.setdefault(row["rank"], []).append(row["step_ms"])
    mean_ms = max((sum(v) / len(v) for v in per_rank.values()), default=math.nan)
    event_sps = r["global_batch"] / (mean_ms / 1e3) if per_rank else math.nan
    agree = abs(window_sps / event_sps - 1) if event_sps > 0 else math.nan
    out = [(f"timing agrees: {r['config_key']}{which}", agree <= TIMING_AGREEMENT,
            f"window {window_sps:.1f} samples/s, per-step {r['timing_method']} {event_sps:.1f} ({agree:.1%} apart)")]
    if r["device_type"] == "cuda":
        gpus = [m for m in mem if str(m["device"]).startswith("cuda")]
        ok = bool(gpus) and all(m["peak_allocated_mib"] and m["peak_reserved_mib"] and m["device_used_mib"] and
                                m["device_used_mib"] >= m["peak_reserved_mib"] >= m["peak_allocated_mib"] > 0 for m in gpus)
        detail = ", ".join(f"{m['device']}: {m['peak_allocated_mib']:.0f} / {m['peak_reserved_mib']:.0f} / "
                           f"{m['device_used_mib'] or float('nan'):.0f} MiB ({m['method']})" for m in gpus)
    else:
        ok = bool(mem) and all((m["peak_rss_mib"] or 0) > 0 for m in mem)
        detail = ", ".join(f"rank {m['rank']}: RSS {m['peak_rss_mib']:.0f} MiB" for m in mem)
    return out + [(f"memory recorded: {r['config_key']}{which}", ok, detail)]


def _busbw(conn, r: dict) -> tuple:
    name = f"all-reduce busbw on {r['device_count']}"
    if r["status"] != "ok":
        return name, False, f"{r['status']}: {r['reason']}"
    rows = [dict(x) for x in conn.execute("SELECT * FROM comm WHERE result_id = ?", (r["result_id"],))]
    found = conn.execute("SELECT json FROM environments WHERE env_id = ?", (r["env_id"],)).fetchone()
    env = json.loads(found["json"]) if found else {}
    ranks = machinecheck.torch_indices(json.loads(r["details_json"] or "{}").get("rank_devices"), env.get("gpus"))
    return name, *machinecheck.allreduce_busbw(r["device_type"], int(r["device_count"]), int(r["nodes"] or 1), rows, env, ranks)


def _step(step, raw: list) -> tuple:
    found = [r for r in raw if step.matches(r)]
    if not found and step.by_design:  # no sweep of its own (selfcheck_sweeps.sweeps): nothing here can run it
        return step.label(), None, f"skipped by design: {step.by_design}"
    if not found:
        return step.label(), False, "no result in the self-check's store: it did not run"
    r = found[-1]
    if r["status"] == "ok" and not step.in_main:   # its own one-step run: it ran, at no speed worth a figure
        return step.label(), True, f"ok, {step.smoke_words(r['n_steps'] or selfcheck_sweeps.ONE_STEP)}"
    if r["status"] == "ok":
        sps = r["samples_per_s"]
        return step.label(), True, "ok" + (f", {sps:.1f} samples/s over {r['n_steps']} measured step(s)" if sps else "")
    if r["status"] == "skipped" and step.by_design:
        return step.label(), None, f"skipped by design: {r['reason'] or step.by_design}"
    return step.label(), False, f"{r['status']}: {r['reason']}"


# A sweep's result line, '[1/1] synthetic ddp cuda x1 [compiled]: ok, 22456.8 samples/s, step median ... [flags]'
# (bench.sweep.run._summary_line): in a one-step sweep the self-check prints it without the speed.
RESULT_LINE = re.compile(r"^(\[\d+/\d+\] .*?): ok, [\d.]+ samples/s")
FLAG = re.compile(r"  \[[^\]]*\]")


def smoke_line(step, line: str) -> str:
    """A one-step sweep's result line with its speed replaced by what the run is ('ran 2 steps after 0 warm-up (a
    smoke test, not a speed)'); a flag that the loss was not finite stays, the unstable one goes (2 steps have no
    spread to speak of). Any other line as it is."""
    m = RESULT_LINE.match(line)
    if not m:
        return line
    flags = "".join(f for f in FLAG.findall(line[m.end():]) if "unstable" not in f)
    return f"{m.group(1)}: ok, {step.smoke_words()}{flags}"


def smoke_log(step, out: Callable[[str], None] = print) -> Callable[[str], None]:
    """The log a one-step sweep runs with (bench.sweep.run.run_sweep's log): its lines through smoke_line."""
    return lambda line: out(smoke_line(step, line))


def _trained(raw: list, last_losses: dict = None) -> tuple:
    """Every run that was timed also trained: no last loss NaN or infinite (bench.stats.loss_not_finite; a transient
    overflow that recovered, fp16's scaler at work, passes). last_losses: result_id -> its last measured loss, the
    figure a PASS gives (it had read a bare 'yes')."""
    bad = []
    for r in raw:
        lost = json.loads(r["details_json"] or "{}").get("loss_not_finite") if r["status"] == "ok" else None
        if lost and lost.get("last", True):
            bad.append(f"{r['config_key']}: {stats.loss_words(lost)}")
    return ("every timed run trained (its last loss finite)", not bad, "; ".join(bad) or _losses_words(last_losses))


def _losses_words(last_losses: dict = None) -> str:
    """'yes: last loss 2.21-2.33 over 8 runs' ('yes' where no loss was recorded)."""
    found = sorted(v for v in (last_losses or {}).values() if v is not None and math.isfinite(v))
    if not found:
        return "yes"
    low, high = f"{found[0]:#.3g}", f"{found[-1]:#.3g}"   # '2.20', not '2.2' beside '2.33'
    span = low if low == high else f"{low}-{high}"
    return f"yes: last loss {span} over {len(found)} run{'s' if len(found) > 1 else ''}"


def _last_losses(conn, raw: list) -> dict:
    """result_id -> the loss of its last measured step (rank 0 first), for the timed runs that recorded one."""
    out = {}
    for r in raw:
        if r["mode"] == "bench" and r["status"] == "ok":
            found = conn.execute("SELECT loss FROM steps WHERE result_id = ? AND kind = 'measure' AND loss IS NOT NULL "
                                 "ORDER BY step DESC, rank LIMIT 1", (r["result_id"],)).fetchone()
            if found:
                out[r["result_id"]] = found[0]
    return out


def _equivalence(r: dict) -> tuple:
    """(check, passed, detail) of one gate run, with its figures: the largest parameter difference from the single
    process, and the optimizer state's where compared (the line had read a bare 'parameters match')."""
    d = json.loads(r["details_json"] or "{}")
    figures = (f"max |diff| {d['max_abs_diff']:.3g}" if d.get("max_abs_diff") is not None else "") + (
        f" after {d['optimizer_steps']} optimizer steps" if d.get("optimizer_steps") else "") + (
        f", optimizer state max relative diff {d['state_max_rel_diff']:.3g} over {d['state_tensors']} tensors"
        if d.get("state_max_rel_diff") is not None and d.get("state_tensors") else "")
    ok = r["status"] == "ok"
    detail = (r["reason"] or "parameters match") if not ok else "parameters match" + (f": {figures}" if figures else "")
    return f"equivalence: {r['strategy']} x{r['device_count']} [{r['precision']}]", ok, detail


def _gate(strategies: tuple, raw: list) -> tuple:
    n = selfcheck_sweeps.GATE_COUNT
    at = {r["strategy"]: r for r in raw if r["mode"] == "equivalence" and int(r["device_count"]) == n
          and (r["precision"] or "fp32") == "fp32"}
    missing = [s for s in strategies if s not in at]
    bad = [f"{s}: {at[s]['status']}" for s in strategies if s in at and at[s]["status"] != "ok"]
    ok = not missing and not bad
    diffs = [json.loads(at[s]["details_json"] or "{}").get("max_abs_diff") for s in strategies if s in at]
    diffs = [v for v in diffs if v is not None]
    return (f"equivalence gate at {n}: {','.join(strategies)}", ok,
            "parameters match one process's" + (f" (max |diff| {max(diffs):.3g})" if diffs else "") if ok
            else "; ".join(bad + [f"{s}: not run" for s in missing]))


def checks(path: str, sweep_ids: list | None = None, steps: tuple = (), gate: tuple = ()) -> list:
    """[(check, passed, detail)] from the self-check's store alone: its sweeps `sweep_ids` (default: those the last
    self-check made), the first being the main sweep; `steps` (selfcheck_sweeps.Step) each checked to have run; `gate`:
    the strategies whose equivalence at GATE_COUNT must hold. passed None: nothing to check there, stated."""
    conn = store.connect(path, readonly=True)
    try:
        ids = sweep_ids or sweeps_of_last_selfcheck(conn)
        if not ids:
            return [("every configuration ran", False, f"{path} holds no sweep of a self-check")]
        by_sweep = {i: [dict(r) for r in store.latest_results(conn, i)] for i in ids}
        raw = [r for i in ids for r in by_sweep[i]]
        failed = [r for r in raw if r["status"] in ("failed", "interrupted")]
        out = [("every configuration ran", not failed, "; ".join(f"{r['config_key']}: {r['reason']}" for r in failed) or
                f"{sum(r['status'] == 'ok' for r in raw)} ok, {sum(r['status'] == 'skipped' for r in raw)} skipped")]
        out.append(_trained(raw, _last_losses(conn, raw)))
        measured = [r for r in by_sweep[ids[0]] if r["mode"] == "bench" and r["status"] == "ok"]
        for r in measured:  # the main sweep's measurements; the one-step runs are too short to say more
            n = sum(x["config_key"] == r["config_key"] for x in measured)
            out += _timing_and_memory(conn, r, f" (process {r['repeat'] + 1} of {n})" if n > 1 else "")
        out += [_equivalence(r) for r in raw if r["mode"] == "equivalence"]
        if gate:
            out.append(_gate(gate, raw))
        for r in (r for r in raw if r["status"] == "ok" and r["device_type"] == "cuda" and r["details_json"]):
            ranks = json.loads(r["details_json"]).get("rank_devices")
            if ranks and len(ranks) > 1:
                out.append((f"each rank on its own GPU: {r['config_key']}", *machinecheck.own_devices(r["config_key"], ranks)))
        out += [_busbw(conn, r) for r in raw if r["mode"] == "comm"]
        out += [_step(s, raw) for s in steps]
        return out
    finally:
        conn.close()


def host_noise(path: str, sweep_id: int) -> tuple:
    """(check, passed, detail): per precision, the spread between the processes of the main sweep's configuration
    repeated at it, stored as this host, device and precision's process noise (bench.store.hostnoise: one precision's
    figure does not speak for another's); fails where a precision of the main sweep ran no configuration in two
    processes or more."""
    from bench.analysis import results
    from bench.store import hostnoise
    conn = store.connect(path, readonly=True)
    try:
        sweep = results.load(conn, sweep_id)
        rows = [dict(r) for r in store.latest_results(conn, sweep_id)]
    finally:
        conn.close()
    configs = [c for cs in sweep.bench.values() for c in cs]
    precisions = sorted({c.precision for c in configs})
    env = sweep.envs[0] if sweep.envs else {}
    kept, where = {}, None
    for p in precisions:
        repeated = [c for c in configs if c.precision == p and len(c.process_sps) >= 2]
        if repeated:
            c = max(repeated, key=lambda c: len(c.process_sps))
            entry = _noise_entry(c, env, sweep, path, sweep_id, _steadiness(c, rows))
            where = hostnoise.record(entry)
            kept[p] = stats.host_noise(entry).words()
    if not kept:
        return "process noise measured", False, "no configuration of the main sweep ran in two processes or more"
    missing = [p for p in precisions if p not in kept]
    detail = "; ".join(f"{p}: {words}" for p, words in kept.items()) + f"; kept for this host and device in {where}"
    if missing:
        detail += f"; no {' or '.join(missing)} configuration ran in two processes or more: no figure at that precision"
    return "process noise measured", not missing, detail


def _steadiness(c, rows: list) -> list:
    """Per process of configuration c (its results rows, by repeat): its measured steps' IQR over their median, and
    whether that passed the unstable mark (bench.stats.steps.UNSTABLE_IQR_FRACTION)."""
    mine = sorted((r for r in rows if r["config_key"] == c.key and r["status"] == "ok"), key=lambda r: r["repeat"])
    return [{"iqr_fraction": (r["step_ms_iqr"] / r["step_ms_median"] if r["step_ms_iqr"] is not None
                              and r["step_ms_median"] else None), "unstable": bool(r["unstable"])} for r in mine]


def unsteady_words(steadiness: list) -> str:
    """'all 3 unstable: their steps' IQR 19%, 19% and 29% of their median, above 10%' ('' where none was unstable):
    a noise figure from unstable processes is still a figure, but it says so. On a 2-core CPU the self-check's three
    single x1 processes were all unstable and its 12% was kept and read as 'measured on steady processes'."""
    shaky = [s for s in steadiness if s["unstable"]]
    if not shaky:
        return ""
    spreads = [f"{s['iqr_fraction']:.0%}" for s in shaky if s["iqr_fraction"] is not None]
    which = f"all {len(shaky)}" if len(shaky) == len(steadiness) else f"{len(shaky)} of {len(steadiness)}"
    listed = (", ".join(spreads[:-1]) + " and " + spreads[-1]) if len(spreads) > 1 else "".join(spreads)
    return (f"{which} unstable" + (f": their steps' IQR {listed} of their median" if listed else "")
            + f", above {stats.UNSTABLE_IQR_FRACTION:.0%}")


def _noise_entry(c, env: dict, sweep, path: str, sweep_id: int, steadiness: list = ()) -> dict:
    """The hostnoise entry of configuration c's processes (bench.store.hostnoise), under its precision and workload, with
    each process's steadiness (`_steadiness`). Where some were unstable the configuration's words say so too: they are
    what bench.stats.host_noise names in selfcheck's line and in every report that falls back on the figure. The
    workload is written, not left to hostnoise's default (the synthetic MLP): the configuration repeated most is taken
    whatever its workload, and a DeepLabV3 one kept without it read back as the MLP's."""
    shaky = unsteady_words(list(steadiness))
    return {"hostname": env.get("hostname"), "device_type": c.device_type,
            "device_name": (str(env.get("gpu_names") or "").split(",")[0].strip() if c.device_type == "cuda"
                            else env.get("cpu_model")) or None, "precision": c.precision,
            "measured_at": sweep.sweep.get("started_at"), "workload": c.workload,
            "configuration": c.label + (f" ({shaky})" if shaky else ""),
            "process_sps": list(c.process_sps), "processes": list(steadiness),
            "store": os.path.abspath(path), "sweep_id": sweep_id}


def _last_sweep_id(path: str) -> int:
    conn = store.connect(path)  # creates or migrates the store, as the first sweep would
    try:
        return conn.execute("SELECT COALESCE(MAX(sweep_id), 0) FROM sweeps").fetchone()[0]
    finally:
        conn.close()


def main(argv: list) -> int:
    p = argparse.ArgumentParser(prog="./run_bench.sh selfcheck", description=__doc__.splitlines()[0],
                                epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cuda (default) or cpu (the CPU/gloo path)")
    p.add_argument("--store", default="results/selfcheck.sqlite", help="the self-check's own store")
    ns = p.parse_args(argv)
    from bench.sweep import plan
    if ns.device == "cuda":
        machine = plan.detect_machine()
        n = machine.cuda_devices
        if machine.gpus_unusable:  # GPUs present but unusable: the machine cannot give a number
            print(f"selfcheck: FAIL: the driver shows NVIDIA GPU(s), but {machine.gpus_unusable}", file=sys.stderr)
            return 1
        if n == 0:
            print("selfcheck: no CUDA GPU visible (torch.cuda.device_count() == 0): nothing was checked. "
                  "Run it on a GPU machine (or `selfcheck --device cpu` to check the CPU/gloo path).")
            return 0
        # bf16 in hardware (Ampere and later), never emulation, and no tensor made on a GPU in this process
        bf16 = min(machine.gpu_capabilities) >= (8, 0)
    else:
        machine, n, bf16 = None, min(2, usable_cores()), False   # a container's CPU quota counts (bench.machine.cores)
    from bench import options
    from bench.sweep import run as sweep_run
    path = os.path.abspath(ns.store)
    store.check_path(path)
    planned = selfcheck_sweeps.sweeps(ns.device, n, bf16, path)
    print(f"selfcheck: {n} {'GPU(s)' if ns.device == 'cuda' else 'CPU process(es)'}, {len(planned)} sweep(s) into {ns.store}"
          + ("" if ns.device == "cuda" else f"; {selfcheck_sweeps.CPU_LEFT_OUT}"))
    before = []
    if ns.device == "cuda":  # NVML only: no CUDA context in this, the sweeps', process before the sweeps
        from bench.machine import gpuinfo
        before.append(("no other process on the GPUs", *machinecheck.other_gpu_processes(
            gpuinfo.load_nvml(), (os.getpid(),), gpuinfo.torch_devices())))  # torch is initialised (detect_machine)
    first = _last_sweep_id(path) + 1
    smoke = {s.title(): s for s in selfcheck_sweeps.steps(ns.device, n, bf16)}
    for title, args in planned:
        print(f"\nselfcheck, {title}: ./run_bench.sh " + " ".join(args))
        cfg, given, machine = options.prepare(args, machine=machine)
        log = smoke_log(smoke[title]) if title in smoke else print
        sweep_run.run_sweep(cfg, sweep_run.command_line(args), log=log, given=given, machine=machine)
    conn = store.connect(path, readonly=True)
    ids = [r[0] for r in conn.execute("SELECT sweep_id FROM sweeps WHERE sweep_id >= ? ORDER BY sweep_id", (first,))]
    conn.close()
    gate = selfcheck_sweeps.gate_strategies(ns.device) if n >= selfcheck_sweeps.GATE_COUNT else ()
    rows = before + checks(path, ids, tuple(selfcheck_sweeps.steps(ns.device, n, bf16)), gate)
    if ids:
        rows.append(host_noise(path, ids[0]))
    if n < selfcheck_sweeps.GATE_COUNT:
        rows += [(f"equivalence gate at {selfcheck_sweeps.GATE_COUNT}", None,
                  f"not run: it compares {selfcheck_sweeps.GATE_COUNT} replicas with one process, and there is {n} device"),
                 ("all-reduce busbw", *machinecheck.allreduce_busbw(ns.device, n, 1, [], {}))]
    if ns.device == "cuda":  # the sweeps are over: a context here disturbs nothing
        rows += [(f"event timing vs host clock: GPU {i}", *machinecheck.clock_agreement(machinecheck.CudaClockAPI(i)))
                 for i in range(n)]
    width = max(len(c) for c, _, _ in rows)
    print("\nselfcheck results:")
    for check, ok, detail in rows:
        print(f"  {MARK[ok]}  {check:<{width}}  {detail}")
    bad, skipped = sum(ok is False for _, ok, _ in rows), sum(ok is None for _, ok, _ in rows)
    print(f"selfcheck: {len(rows) - bad - skipped} passed, {bad} failed, {skipped} not applicable (said why above)")
    if ids:   # a plain `report --store` renders the store's LAST sweep: the self-check's last one-step run
        print(f"the main sweep's report: ./run_bench.sh report --store {ns.store} --sweep {ids[0]}")
    return 1 if bad else 0
