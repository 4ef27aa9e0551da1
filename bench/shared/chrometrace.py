"""A Chrome trace's JSON (torch.profiler's, gzipped or not) read as a stream of events, never whole.

A large model's trace holds gigabytes of JSON; parsed whole it takes many times that in memory. `events`
walks the traceEvents array with json's raw_decode over a window of the file (CHUNK_CHARS), so memory
holds one window and one event at a time. Used where a rank cuts its trace to a size
(bench.rank.tracefile) and where the figures are read from it (bench.analysis.traces).

    for kind, *rest in events(path):   # ('head', text), then ('event', dict, text) per event, then ('tail', text)
"""
from __future__ import annotations

import gzip
import json
from typing import Iterator

CHUNK_CHARS = 1 << 22   # the window of the JSON held in memory


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
