"""A profiler trace written to disk under a size limit: gzipped, and cut when it is too large, never loaded whole.

    record = write(prof, path, max_bytes, writers)   # {path, trace_bytes, json_bytes, note}; prof: a torch.profiler.profile

The profiler's JSON is written whole, beside the trace (the traces folder, not /tmp), and gzipped from there; so
before it is written the folder must hold the JSON the profiler is expected to write (its events x BYTES_PER_EVENT)
and its gzipped copy, for every rank writing at the same time (`writers`), or no trace is written: traces never
fill the disk. A gzipped trace above the limit is cut to its earliest events that fit, in time: the JSON is read
as a stream of events (bench.shared.chrometrace), once for each event's time and size, then to copy the
events before the cut. The cut ends with the last whole traced step that fits, whole including its GPU work
(on CUDA a step's kernels run on after the host's annotation ends). The cut trace says so: a `benchCut` key
and an instant event at the cut, which Perfetto and TensorBoard show.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
from array import array
from typing import Optional

from bench.shared.chrometrace import events, note_step, step_spans

# JSON per profiler event, generous: CPU operations take 250-280 bytes (measured here, torch 2.15); a CUDA kernel,
# with its launch and the arrows between them, takes more
BYTES_PER_EVENT = 1000
GZIP_SHARE = 0.15       # the gzipped copy, on disk beside the JSON for a while, runs ~1/13 of it (measured)
ROOM_FACTOR = 10        # where the profiler cannot count its events: room for 10x the limit, as the JSON runs ~13x
CUT_TRIES = 4
CUT_MARK = "bench: trace cut here"   # the name of the instant event at the cut


def expected_events(prof) -> Optional[int]:
    """How many events the profiler holds (its JSON runs about this many objects), or None where it cannot say."""
    try:
        return len(prof.profiler.kineto_results.events())
    except (AttributeError, RuntimeError, TypeError):
        return None


def room_note(folder: str, free: int, events: Optional[int], max_bytes: float, writers: int) -> Optional[str]:
    """Why no trace is written in `folder` (None: there is room): the JSON the profiler is expected to write, and its
    gzipped copy, for each of the `writers` ranks writing theirs at the same time."""
    at_once = f", for each of the {writers} ranks writing theirs at once" if writers > 1 else ""
    if events is None:
        need = ROOM_FACTOR * max_bytes * writers
        what = f"{ROOM_FACTOR} x --profile-max-mb {max_bytes / 1e6:g}{at_once} (the profiler did not say how many events it holds)"
    else:
        json_bytes = events * BYTES_PER_EVENT
        need = json_bytes * (1 + GZIP_SHARE) * writers
        what = (f"the {json_bytes / 1e6:.0f} MB of JSON expected of its {events} events (at most {BYTES_PER_EVENT} "
                f"bytes each) and its gzipped copy{at_once}")
    if free >= need:
        return None
    return (f"no trace written: {folder} has {free / 1e6:.0f} MB free, under the {need / 1e6:.0f} MB needed for "
            f"{what}; the profiler writes its JSON whole before it is gzipped and cut")


def write(prof, path: str, max_bytes: float, writers: int = 1) -> dict:
    """Export the profiler's trace gzipped to `path`, cut to max_bytes; {path, trace_bytes, json_bytes, note}.
    writers: the ranks writing their traces into the same folder at the same time."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    note = room_note(folder, shutil.disk_usage(folder).free, expected_events(prof), max_bytes, max(1, writers))
    if note:
        return {"note": note}
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
    ending at the end of a whole traced step (ProfilerStep#, its GPU work included) where at least one fits; the
    note says what was kept. Removes the trace when not even a small part fits."""
    size = os.path.getsize(path)
    times, sizes, by_name = array("d"), array("q"), {}
    for item in events(raw_json):
        if item[0] == "event":
            e = item[1]
            timed = e.get("ph") != "M" and isinstance(e.get("ts"), (int, float))
            times.append(float(e["ts"]) if timed else float("-inf"))  # metadata first: always kept
            sizes.append(len(item[2]))
            note_step(by_name, e)
    steps = [(start, end) for start, _, end in step_spans(by_name)]  # the host's steps, to the end of their GPU work
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
        mark = cutoff
        if whole:  # end with a whole step: the figures then cover whole steps only (bench.analysis.traces)
            mark = max(whole)
            cutoff = mark - 1e-3  # the events that start before it ends
        kept = sum(1 for t in times if t != float("-inf") and cutoff is not None and t <= cutoff)
        if not kept:
            break
        what = (f"its first {len(whole)} of {len(steps)} traced steps ({kept} of {n_timed} events)" if whole else
                f"its earliest {kept} of {n_timed} events (less than one traced step)")
        note = f"cut: the trace was {size / 1e6:.1f} MB gzipped, above --profile-max-mb {max_bytes / 1e6:g}; kept {what}"
        _write_cut(raw_json, path, cutoff, mark, note)
        if os.path.getsize(path) <= max_bytes:
            return note
        budget /= 2
    os.remove(path)
    return (f"no trace kept: the trace was {size / 1e6:.1f} MB gzipped and not even a small part fits "
            f"--profile-max-mb {max_bytes / 1e6:g}")


def _write_cut(raw_json: str, path: str, cutoff: float, mark_ts: float, note: str) -> None:
    """The events that start by `cutoff` (and the metadata), then the cut's instant event at mark_ts: the end of the
    last whole step kept, or the cutoff where none is whole."""
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
                mark = {"name": CUT_MARK, "ph": "i", "s": "g", "ts": mark_ts,  # bench.analysis.traces stops here
                        "pid": last.get("pid", 0), "tid": last.get("tid", 0), "args": {"note": note}}
                tail = item[1].rstrip()  # the trace's other keys, after the array: ',"traceName": ...}' or '}'
                tail = tail[:-1].rstrip() if tail.endswith("}") else tail
                out.write(("" if first else ",\n") + json.dumps(mark) + "]" + tail + f', "benchCut": {json.dumps(note)}}}')
