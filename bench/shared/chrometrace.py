"""A Chrome trace's JSON (torch.profiler's, gzipped or not) read as a stream of events, never whole.

A large model's trace holds gigabytes of JSON; parsed whole it takes many times that in memory. `events`
walks the traceEvents array with json's raw_decode over a window of the file (CHUNK_CHARS), so memory
holds one window and one event at a time. Used where a rank cuts its trace to a size
(bench.rank.tracefile) and where the figures are read from it (bench.analysis.traces).

    for kind, *rest in events(path):   # ('head', text), then ('event', dict, text) per event, then ('tail', text)
    step_annotation(event)             # 'host', 'device' or None: which copy of a ProfilerStep#N it is
    note_step(steps, event); step_spans(steps)   # the traced steps: [(start, host end, end of its GPU work too)]
    step_spans(steps, gpu=True)                  # the same with where each step's GPU work began: [(..., gpu start)]

Kineto writes each traced step's `ProfilerStep#N` once on the host (category user_annotation) and, on CUDA, again
on every GPU stream the step's kernels ran on (category gpu_user_annotation, from the step's first kernel to its
last): the host's marks the steps, the device's copies say when each step's GPU work began and ended. The GPU runs
behind the host, so where a step's GPU work begins the previous step's kernels may still have run up to then: the
device's start, not the host's, is where the step begins on the GPU (bench.analysis.traces).
"""
from __future__ import annotations

import gzip
import json
from typing import Iterator, Optional

CHUNK_CHARS = 1 << 22   # the window of the JSON held in memory
STEP_PREFIX = "ProfilerStep#"
DEVICE_ANNOTATION = "gpu_user_annotation"   # Kineto's copy of a host annotation on a GPU stream


def step_annotation(event: dict) -> Optional[str]:
    """'host' for a traced step's ProfilerStep#N annotation, 'device' for Kineto's copy of it on a GPU stream (one per
    stream the step's kernels ran on), None for any other event. Complete ('X') events with times only."""
    if event.get("ph") != "X" or not str(event.get("name", "")).startswith(STEP_PREFIX):
        return None
    if not isinstance(event.get("ts"), (int, float)) or not isinstance(event.get("dur"), (int, float)):
        return None
    return "device" if str(event.get("cat", "")).lower() == DEVICE_ANNOTATION else "host"


def note_step(steps: dict, event: dict) -> None:
    """Gather a ProfilerStep#N annotation into `steps`: name -> [host start, host end, end of all the step's work,
    start of its GPU work (the earliest of the device's copies; None where there is none)]."""
    kind = step_annotation(event)
    if kind is None:
        return
    a = float(event["ts"])
    b = a + float(event["dur"])
    s = steps.setdefault(event["name"], [None, None, b, None])
    if kind == "host":
        s[0], s[1] = a, b
    else:
        s[3] = a if s[3] is None else min(s[3], a)
    s[2] = max(s[2], b)


def step_spans(steps: dict, gpu: bool = False) -> list:
    """[(start, host end, end)] of the steps the host annotated, in time order; end is where the step's GPU work
    ended when it ran past the host's annotation (the device's copies), else the host's end. gpu: each with a fourth
    field, where the step's GPU work began (the device's copies), None where Kineto copied none."""
    return sorted((tuple(v if gpu else v[:3]) for v in steps.values() if v[0] is not None), key=lambda t: t[:3])


def events(path: str) -> Iterator[tuple]:
    """('head', text) once: the JSON up to and with the traceEvents array's '['; then ('event', dict, text) per event;
    then ('tail', text): the rest after the array's ']'. ValueError if the file is not a Chrome trace."""
    decoder = json.JSONDecoder()
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        buf = f.read(CHUNK_CHARS)
        while True:  # the head: small, before the events
            key = buf.find('"traceEvents"')
            start = buf.find("[", key) if key >= 0 else -1
            if start >= 0:
                break
            more = f.read(CHUNK_CHARS)
            if not more:
                raise ValueError(f"{path}: no traceEvents array")
            buf += more
        yield ("head", buf[:start + 1])
        i = start + 1
        while True:
            while True:  # to the next event, or the array's end
                while i < len(buf) and buf[i] in " \t\r\n,":
                    i += 1
                if i < len(buf):
                    break
                buf, i = f.read(CHUNK_CHARS), 0
                if not buf:
                    raise ValueError(f"{path}: the traceEvents array does not end")
            if buf[i] == "]":
                yield ("tail", buf[i + 1:] + f.read())
                return
            try:
                obj, end = decoder.raw_decode(buf, i)
            except json.JSONDecodeError:  # the event runs past the window: read on
                more = f.read(CHUNK_CHARS)
                if not more:
                    raise ValueError(f"{path}: the traceEvents array does not end") from None
                buf, i = buf[i:] + more, 0
                continue
            yield ("event", obj, buf[i:end])
            i = end
            if i > CHUNK_CHARS:  # drop what has been read
                buf, i = buf[i:], 0
