"""Progress of every rank, written by the worker and read by the sweep: how a stall gets a name.

Worker side: `Heartbeat(path, rank)` starts a daemon thread that rewrites a small JSON file every
INTERVAL_S with the rank's progress (step, phase) and a counter `seq`. `beat(step, phase)` only
assigns two attributes, so it costs nothing inside a measured window.

Sweep side: `Watch` reads every rank's file on each poll and notes, on the sweep's own clock (no
clock comparison across hosts), when each rank's `seq` and progress last changed:
    - seq still moving, progress not: the process runs but waits (in a collective, a loader, a loop);
    - seq stopped: the process itself is frozen (SIGSTOP, a deadlock holding the GIL) or gone.
`Watch.stall(stall_s)` says whether the configuration stalled (no rank progressed for stall_s, none
in a phase allowed to be long) and names the culprit: a frozen rank, one that never started, the
rank furthest behind, or the one not waiting in a collective. `Watch.at_limit(now, still_s)` says
who, if anyone, held a configuration back when its wall-clock limit came: only a rank that was silent,
or made no progress for still_s while another rank went on; ranks a phase apart at that instant are
not a culprit (ranks are always a little apart), and when every rank was progressing it says so.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

INTERVAL_S = 0.5
FROZEN_S = 10.0                       # no heartbeat write for this long: the process is not running
LONG_PHASES = ("setup", "download", "compile", "trace export")   # may take minutes without a step; bounded by the wall-clock limit
EXTENDED_PHASES = ("download", "compile")          # ... and they extend the start-up allowance
COLLECTIVE_PHASES = ("forward", "backward", "barrier", "gather")  # where a rank waits for its peers
STEP_PHASES = ("start", "data", "h2d", "forward", "backward", "optimizer", "end")
WAITING_PHASES = ("barrier", "gather")  # a rank here waits for the others by design
STILL_MIN_S = 10.0                      # at the limit, a rank is "stuck" only after this long without progress
STILL_STEPS = 3.0                       # ... and after this many steps' worth of time


def path_for(out_dir: str, rank: int) -> str:
    return os.path.join(out_dir, f"heartbeat-rank{rank}.json")


class Heartbeat:
    """A rank's progress, published by a background thread. `total` is the step count planned, for the limit."""

    def __init__(self, path: str, rank: int, total: int = 0, interval_s: float = INTERVAL_S):
        self.path, self.rank, self.total = path, rank, total
        self.step, self.phase = -1, "setup"
        self._seq = 0
        self._stop = threading.Event()
        self._host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
        self._write()
        self._thread = threading.Thread(target=self._run, args=(interval_s,), name="bench-heartbeat", daemon=True)
        self._thread.start()

    def beat(self, step: int, phase: str) -> None:
        self.step, self.phase = step, phase

    def _write(self) -> None:
        self._seq += 1
        body = {"rank": self.rank, "pid": os.getpid(), "host": self._host, "seq": self._seq,
                "step": self.step, "phase": self.phase, "total": self.total}
        tmp = f"{self.path}.tmp{os.getpid()}"
        try:
            with open(tmp, "w") as f:
                json.dump(body, f)
            os.replace(tmp, self.path)
        except OSError:
            pass  # a full or vanished folder must not kill the rank; the sweep will see no beat

    def _run(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self._write()

    def close(self) -> None:
        self._stop.set()
        self._write()


def progress_key(step: int, phase: str) -> tuple:
    return step, STEP_PHASES.index(phase) if phase in STEP_PHASES else -1


@dataclass
class RankState:
    body: dict
    seq_changed: float          # sweep clock (time.monotonic) of the last change of seq
    progress_changed: float     # ... of (step, phase)


@dataclass
class Watch:
    """The sweep's view of a configuration's ranks; call `poll()` regularly."""
    out_dir: str
    ranks: int
    started: float = field(default_factory=time.monotonic)
    states: dict = field(default_factory=dict)
    advanced: Optional[float] = None    # sweep clock when steps_done() last grew: a pace that excludes a stall
    first_step: Optional[tuple] = None  # (sweep clock, steps_done()) when a step past the first was first seen
    _done: int = -1

    def poll(self, now: Optional[float] = None) -> None:
        now = time.monotonic() if now is None else now
        self._read(now)
        done = self.steps_done()
        if done != self._done:
            self._done, self.advanced = done, now
            if self.first_step is None and done >= 1:  # the count too: a compiled first step is followed by fast
                self.first_step = (now, done)           # ones, several of which one poll can find done at once

    def _read(self, now: float) -> None:
        for r in range(self.ranks):
            try:
                with open(path_for(self.out_dir, r)) as f:
                    body = json.load(f)
            except (OSError, ValueError):
                continue
            old = self.states.get(r)
            if old is None:
                self.states[r] = RankState(body, now, now)
                continue
            if body.get("seq") != old.body.get("seq"):
                old.seq_changed = now
            if (body.get("step"), body.get("phase")) != (old.body.get("step"), old.body.get("phase")):
                old.progress_changed = now
            old.body = body

    def last_progress(self) -> float:
        return max([s.progress_changed for s in self.states.values()], default=self.started)

    def steps_done(self) -> int:
        """Steps the slowest rank has begun (-1 before any); the limit's progress measure."""
        return min([int(s.body.get("step", -1)) for s in self.states.values()], default=-1) if len(self.states) == self.ranks else -1

    def total(self) -> int:
        return max([int(s.body.get("total") or 0) for s in self.states.values()], default=0)

    def in_phase(self, now: float, phases: tuple) -> bool:
        """Whether a live rank is in one of `phases`."""
        return any(s.body.get("phase") in phases and now - s.seq_changed < FROZEN_S for s in self.states.values())

    def in_long_phase(self, now: float) -> bool:
        return self.in_phase(now, LONG_PHASES)

    def stall(self, stall_s: float, now: Optional[float] = None) -> Optional[tuple]:
        """(culprit ranks, sentence) when no rank has progressed for stall_s; None otherwise."""
        now = time.monotonic() if now is None else now
        if len(self.states) < self.ranks:  # still starting: the start-up allowance bounds that, not this
            return None
        if now - self.last_progress() < stall_s or self.in_long_phase(now):
            return None
        return self.culprits(now)

    def at_limit(self, now: float, still_s: float) -> Optional[tuple]:
        """(culprit ranks, sentence) when the heartbeats show one at the wall-clock limit, else None (every rank
        was progressing, or waiting for one that was). A culprit never reported, stopped running, or made no
        progress for still_s (measured on the sweep's clock) outside a waiting phase while another rank went on;
        when no rank progressed for still_s, the stall's own rule names it (bench.shared.heartbeat.culprits)."""
        missing = [r for r in range(self.ranks) if r not in self.states]
        frozen = [r for r, s in self.states.items() if now - s.seq_changed >= FROZEN_S]
        if missing or (frozen and len(frozen) < len(self.states)):
            return self.culprits(now)
        still = sorted(r for r, s in self.states.items() if now - s.progress_changed >= still_s)
        if not still:
            return None
        if len(still) == len(self.states):
            if all(s.body.get("phase") in LONG_PHASES for s in self.states.values()):
                return None  # every rank still setting up or compiling: the start-up allowance's business
            return self.culprits(now)
        stuck = [r for r in still if self.states[r].body.get("phase") not in WAITING_PHASES]
        if not stuck:
            return None  # done and waiting for slower ranks that still progress
        quiet = now - self.states[stuck[0]].progress_changed
        return stuck, f"{_ranks(stuck)} made no progress for {quiet:.0f} s {_where(self.states, stuck)} while the others went on"

    def culprits(self, now: Optional[float] = None) -> tuple:
        """Who stopped the configuration, from the last state of every rank."""
        now = time.monotonic() if now is None else now
        missing = [r for r in range(self.ranks) if r not in self.states]
        if missing:
            return missing, f"{_ranks(missing)} never reported progress (did not start, or died at once)"
        frozen = sorted(r for r, s in self.states.items() if now - s.seq_changed >= FROZEN_S)
        alive = [r for r in self.states if r not in frozen]
        if frozen and alive:
            return frozen, (f"{_ranks(frozen)} stopped running (no heartbeat for {now - self.states[frozen[0]].seq_changed:.0f} s: "
                            f"stopped, or deadlocked holding the interpreter); its last heartbeat: {_where(self.states, frozen)}")
        keys = {r: progress_key(int(s.body.get("step", -1)), str(s.body.get("phase"))) for r, s in self.states.items()}
        lowest = min(keys.values())
        behind = sorted(r for r, k in keys.items() if k == lowest)
        if len(behind) < len(keys):
            return behind, f"{_ranks(behind)} made no progress {_where(self.states, behind)} while the others went further"
        not_waiting = sorted(r for r, s in self.states.items() if s.body.get("phase") not in COLLECTIVE_PHASES)
        if not_waiting and len(not_waiting) < len(keys):
            return not_waiting, f"{_ranks(not_waiting)} made no progress {_where(self.states, not_waiting)} while the others waited in a collective"
        if frozen:
            return frozen, f"{_ranks(frozen)} stopped running {_where(self.states, frozen)}"
        everyone = sorted(keys)
        return everyone, f"no rank made progress {_where(self.states, everyone)}: every rank waits"


def still_interval_s(step_s: Optional[float]) -> float:
    """How long a rank must make no progress before it is called stuck at the limit: STILL_MIN_S, or STILL_STEPS
    steps where steps are long (a DeepLabV3 backward on a CPU holds one phase for seconds)."""
    return max(STILL_MIN_S, STILL_STEPS * step_s) if step_s else STILL_MIN_S


def _ranks(ranks: list) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _where(states: dict, ranks: list) -> str:
    s = states[ranks[0]].body
    host = f" on {s['host']}" if s.get("host") else ""
    step = int(s.get("step", -1))
    at = "before its first step" if step < 0 else f"after step {step} ({s.get('phase')})"
    return f"{at}{host}"
