"""Why a configuration failed, naming the rank (and node) that caused it, from what its processes left:
per-rank error files, heartbeats, and the launcher's log (torchrun's summary, srun's messages).

The order of evidence: a rank killed by a signal that reported nothing itself (the out-of-memory
killer's SIGKILL; the others' errors are only its echo); a rank that stopped making progress while the
others waited for it (they time out in a collective, or NCCL's watchdog aborts them with SIGABRT: not
their fault); the first rank's own error; torchrun's root cause; the launcher's exit status.
"""
from __future__ import annotations

import glob
import json
import os
import re
import signal
from dataclasses import dataclass, field
from typing import Optional

TIMEOUT_WORDS = re.compile(r"timed out|timeout|watchdog", re.I)
# A rank's error that only echoes a peer's death: gloo's socket read or write to a process that is gone, NCCL's word
# for the same. torchrun's "Root Cause" is whichever failure it observed first, and a peer's echo can come first: a
# DDP run whose rank 1 was SIGKILLed mid-all-reduce was stored as rank 0's "Connection reset by peer" (2026-11-28).
PEER_GONE_WORDS = re.compile(r"Connection reset by peer|Connection closed by (remote )?peer|Broken pipe|"
                             r"remote process exited", re.I)
# DDP's error when a parameter got no gradient in a step the plan's dry run did not see (a branch taken only later):
# the plan refuses what the dry run finds (bench.sweep.settings.unused_refusal); this names the flag for the rest.
DDP_UNUSED_WORDS = re.compile(r"Expected to have finished reduction in the prior iteration")
DDP_UNUSED_HINT = ("; a parameter got no gradient in a step (a branch the planning dry run did not take): run it with "
                   "--find-unused-parameters true")


@dataclass
class Outcome:
    status: str                     # ok | failed | interrupted
    reason: str = ""
    payload: dict = field(default_factory=dict)
    failed_rank: Optional[int] = None
    started_at: str = ""
    ended_at: str = ""
    wall_s: float = 0.0
    out_dir: str = ""


def read_errors(out_dir: str) -> list:
    errors = []
    for path in glob.glob(os.path.join(out_dir, "error-rank*.json")):
        try:
            with open(path) as f:
                errors.append(json.load(f))
        except (OSError, ValueError):
            continue
    return sorted(errors, key=lambda e: e["time"])


def signal_name(num: int) -> str:
    try:
        return f"signal {num} ({signal.Signals(num).name})"
    except ValueError:
        return f"signal {num}"


def killed_by(num: int) -> str:
    """'killed by signal 9 (SIGKILL) ...': a SIGKILL nobody in the suite sent (the supervisor's own kills give their
    own reason) is most often the kernel's out-of-memory killer. A 1.4b transformer on the 24 GiB CPU machine was
    stored as 'rank 0: killed by signal 9 (SIGKILL)' with no word of memory."""
    why = ("; a SIGKILL nobody asked for is most often the kernel's out-of-memory killer (`dmesg` or `journalctl -k` "
           "names the process it killed)") if num == signal.SIGKILL else ""
    return f"killed by {signal_name(num)}{why}"


def error_text(err: dict) -> str:
    host = f" on {err['host']}" if err.get("host") else ""
    return f"rank {err['rank']}{host}: {err['type']}: {err['message']}".strip()


TORCHRUN_PLACEHOLDER = "To enable traceback see"   # torchrun's traceback field where the rank recorded none


def _own_last_words(log: str) -> str:
    """The last line the suite's own process starter wrote ('[forkclient] the fork server went away before the process
    ended'), '' if none: where a rank exited without an error record, torchrun's summary says only 'To enable
    traceback see: https://pytorch.org/docs/stable/elastic/errors.html', which a sweep once stored as the reason."""
    said = re.findall(r"^\[forkclient\] ([^\n]+)$", log, re.M)
    return said[-1].strip() if said else ""


def diagnose(out_dir: str, log_path: str, rc: Optional[int], spec=None, watch=None) -> Outcome:
    """rc None: the supervisor ended it (stall or limit). watch: the heartbeats (bench.shared.heartbeat.Watch)."""
    with open(log_path, errors="replace") as f:
        log = f.read()
    tail = "\n".join(log.strip().splitlines()[-30:])
    errors = read_errors(out_dir)
    with_error = {e["rank"] for e in errors}
    exits = {int(r): int(c) for r, c in re.findall(r"rank\s*:\s*(\d+)[^\n]*\n\s*exitcode\s*:\s*(-?\d+)", log)}
    root = re.search(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+).*?traceback\s*:\s*([^\n]*)", log, re.S)
    details = {"log_tail": tail}
    if errors:
        details["traceback"] = errors[0].get("traceback", "")
        if any(e.get("no_measured_step") for e in errors):
            first = next(e for e in errors if e.get("no_measured_step"))
            return Outcome("failed", first["message"], {**details, "no_measured_step": True}, failed_rank=first["rank"])
    multi = spec is not None and spec.processes > 1
    aborted = {r for r, c in exits.items() if c == -signal.SIGABRT}

    # A rank that stopped while the others waited: its peers' timeouts or SIGABRTs are not their fault.
    if watch is not None and multi and rc is not None and (aborted or (errors and TIMEOUT_WORDS.search(errors[0]["message"]))):
        ranks, why = watch.culprits()
        if len(ranks) < spec.processes:
            return Outcome("failed", f"stalled: {why}; the other ranks timed out waiting for it (--pg-timeout)"
                           + (f" and were aborted by NCCL's watchdog ({signal_name(signal.SIGABRT)})" if aborted else ""),
                           details, failed_rank=ranks[0])
    if root and rc is not None:
        rank, code = int(root.group(1)), int(root.group(2))
        silent_signal = lambda r, c: c < 0 and c != -signal.SIGABRT and r not in with_error  # noqa: E731
        # SIGTERM left out: torchrun's own teardown of the ranks still running
        killed = sorted(r for r, c in exits.items() if silent_signal(r, c) and c != -signal.SIGTERM)
        echoes = bool(errors) and all(PEER_GONE_WORDS.search(e["message"]) for e in errors)
        if not silent_signal(rank, code) and killed and echoes:
            rank, code = killed[0], exits[killed[0]]   # the others' errors are only its echo
        if silent_signal(rank, code):
            return Outcome("failed", f"rank {rank}: {killed_by(-code)}"
                           + (f"; then {error_text(errors[0])}" if errors else ""), details, failed_rank=rank)
    if errors and TIMEOUT_WORDS.search(errors[0]["message"]):
        ranks = set(exits) | with_error | (set(range(spec.processes)) if multi else set())
        silent = sorted(ranks - with_error)
        if silent:
            who = ", ".join(map(str, silent))
            return Outcome("failed", f"rank {who}: stopped making progress (reported no error; the other rank(s) timed out "
                           f"waiting for it, --pg-timeout); first error: {error_text(errors[0])}", details,
                           failed_rank=silent[0])
    if errors:
        text = error_text(errors[0])
        return Outcome("failed", text + (DDP_UNUSED_HINT if DDP_UNUSED_WORDS.search(text) else ""), details,
                       failed_rank=errors[0]["rank"])
    if root:
        rank, code, why = int(root.group(1)), int(root.group(2)), root.group(3).strip()
        if "error_file" in why or TORCHRUN_PLACEHOLDER in why:  # torchrun's own words, not the rank's
            why = _own_last_words(log)
        return Outcome("failed", f"rank {rank}: exit code {code}" + (f" ({signal_name(-code)})" if code < 0 else "")
                       + (f": {why}" if why else ""), details, failed_rank=rank)
    srun = re.search(r"srun: error: (Node failure on \S+)|srun: error: (\S+): task (\d+): ([^\n]+)", log)
    if srun and spec is not None and spec.launcher == "slurm":  # SLURM's word: a node failed, or a task ended
        what = srun.group(1) or f"node {srun.group(2)} (its torchrun, task {srun.group(3)}): {srun.group(4).strip()}"
        return Outcome("failed", f"{what} (srun exit {rc})", details)
    if rc is None:
        return Outcome("failed", "no rank reported an error", details)
    if rc < 0:
        if multi or (spec is not None and spec.launcher == "slurm"):
            return Outcome("failed", f"{'srun' if spec.launcher == 'slurm' else 'torchrun'} (the launcher) was "
                                     f"{killed_by(-rc)}", details)
        return Outcome("failed", f"rank 0: {killed_by(-rc)}", details, failed_rank=0)
    last = tail.splitlines()[-1] if tail else "no output"
    return Outcome("failed", f"exit code {rc}: {last}", details)
