"""A profiler trace written to disk under a size limit: gzipped, and cut when it is too large, never loaded whole.

    record = write(prof, path, max_bytes)   # {path, trace_bytes, json_bytes, note}; prof: a torch.profiler.profile

The profiler's JSON is first written beside the trace (the traces folder, not /tmp) and gzipped from there;
no trace is written where the folder has less than ROOM_FACTOR x the limit free, so traces never fill the
disk. A gzipped trace above the limit is cut to its earliest events that fit, in time: the JSON is read
as a stream of events (bench.shared.chrometrace), once for each event's time and size, then to copy the
events before the cut. The cut trace says so: a `benchCut` key and an instant event at the cut, which
Perfetto and TensorBoard show.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
from array import array

from bench.shared.chrometrace import events

ROOM_FACTOR = 10        # the profiler's JSON runs ~10x its gzipped size; it is written before it is gzipped
CUT_TRIES = 4
CUT_MARK = "bench: trace cut here"   # the name of the instant event at the cut


def write(prof, path: str, max_bytes: float) -> dict:
    """Export the profiler's trace gzipped to `path`, cut to max_bytes; {path, trace_bytes, json_bytes, note}."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if free < ROOM_FACTOR * max_bytes:
        return {"note": f"no trace written: {folder} has {free / 1e6:.0f} MB free, under {ROOM_FACTOR} x "
                        f"--profile-max-mb {max_bytes / 1e6:g} (the profiler's JSON is written before it is gzipped)"}
    raw = f"{path}.tmp{os.getpid()}.json"
    try:
        prof.export_chrome_trace(raw)
        json_bytes = os.path.getsize(raw)
        with open(raw, "rb") as fin, gzip.open(path, "wb") as fout:
            shutil.copyfileobj(fin, fout)
        note = cut(raw, path, max_bytes) if os.path.getsize(path) > max_bytes else None
    finally:
        if os.path.exists(raw):
            os.remove(raw)
    kept = os.path.exists(path)
    return {"path": path if kept else None, "trace_bytes": os.path.getsize(path) if kept else None,
            "json_bytes": json_bytes, "note": note}


def cut(raw_json: str, path: str, max_bytes: float) -> str:
    """Rewrite `path` with the earliest events of `raw_json` that fit in max_bytes gzipped (metadata always kept),
    ending at the end of a whole traced step (ProfilerStep#) where at least one fits; the note says what was kept.
    Removes the trace when not even a small part fits."""
    size = os.path.getsize(path)
    times, sizes, steps = array("d"), array("q"), []
    for item in events(raw_json):
        if item[0] == "event":
            e = item[1]
            timed = e.get("ph") != "M" and isinstance(e.get("ts"), (int, float))
            times.append(float(e["ts"]) if timed else float("-inf"))  # metadata first: always kept
            sizes.append(len(item[2]))
            if timed and e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"):
                steps.append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))))
    order = sorted(range(len(times)), key=times.__getitem__)
    ratio = size / max(1, sum(sizes))  # gzipped bytes per character of events
    n_timed = sum(1 for t in times if t != float("-inf"))
    budget = 0.9 * max_bytes / ratio
    for _ in range(CUT_TRIES):
        used, cutoff = 0, None
        for k in order:
            used += sizes[k]
            if used > budget:
                break
            cutoff = times[k]
        whole = [end for _, end in steps if cutoff is not None and end <= cutoff]
        if whole:  # end with a whole step: the figures then cover whole steps only
            cutoff = max(whole) - 1e-3
        kept = sum(1 for t in times if t != float("-inf") and cutoff is not None and t <= cutoff)
        if not kept:
            break
        what = (f"its first {len(whole)} of {len(steps)} traced steps ({kept} of {n_timed} events)" if whole else
                f"its earliest {kept} of {n_timed} events (less than one traced step)")
        note = f"cut: the trace was {size / 1e6:.1f} MB gzipped, above --profile-max-mb {max_bytes / 1e6:g}; kept {what}"
        _write_cut(raw_json, path, cutoff, note)
        if os.path.getsize(path) <= max_bytes:
            return note
        budget /= 2
    os.remove(path)
    return (f"no trace kept: the trace was {size / 1e6:.1f} MB gzipped and not even a small part fits "
            f"--profile-max-mb {max_bytes / 1e6:g}")


def _write_cut(raw_json: str, path: str, cutoff: float, note: str) -> None:
    last = {}
    with gzip.open(path, "wt", encoding="utf-8") as out:
        first = True
        for item in events(raw_json):
            if item[0] == "head":
                out.write(item[1])
            elif item[0] == "event":
                e = item[1]
                if e.get("ph") == "M" or not isinstance(e.get("ts"), (int, float)) or float(e["ts"]) <= cutoff:
                    out.write(("" if first else ",\n") + item[2])
                    first = False
                    if e.get("ph") != "M" and isinstance(e.get("ts"), (int, float)):
                        last = e
            else:
                mark = {"name": CUT_MARK, "ph": "i", "s": "g", "ts": cutoff,  # bench.analysis.traces stops here
                        "pid": last.get("pid", 0), "tid": last.get("tid", 0), "args": {"note": note}}
                tail = item[1].rstrip()  # the trace's other keys, after the array: ',"traceName": ...}' or '}'
                tail = tail[:-1].rstrip() if tail.endswith("}") else tail
                out.write(("" if first else ",\n") + json.dumps(mark) + "]" + tail + f', "benchCut": {json.dumps(note)}}}')
