"""The report's environment section: what produced the measurements (bench.machine.env's rows in the store).

    blocks(sweep) -> report blocks: each distinct environment once, with the results it covers

A sweep records an environment row each time it starts or is resumed; identical ones are one column, and where
they differ (a resume on another commit, another driver) the rows that differ are marked.
"""
from __future__ import annotations

import json

from bench.report.pages import Em
from bench.analysis.results import Sweep
from bench.store import read

ENV_KEYS = ("hostname", "git_commit", "python", "torch", "torchvision", "cuda", "cudnn", "nccl", "gpu_names", "gpu_driver",
            "cpu_model", "cpu_cores")


def _environment_rows(sweep: Sweep, e: dict) -> tuple:
    """([name, value] rows, topology matrix or None) of one environment row, as the report shows it."""
    rows = [[k, str(e[k]) if e.get(k) not in (None, "") else "–"] for k in ENV_KEYS]
    if not e.get("gpu_names"):   # a CUDA build of torch on a machine without a GPU: 'cuda 13.0' read as a GPU found
        rows = [[k, v + " (torch's build; no GPU used)" if k in ("cuda", "cudnn", "nccl") and v != "–" else v]
                for k, v in rows]
    extra = json.loads(e.get("json") or "{}")
    rows.append(["CUDA_VISIBLE_DEVICES", str(extra.get("cuda_visible_devices") or "–")])
    settings = dict(extra.get("nccl_env") or {})
    image = extra.get("image_nccl_version") or settings.get("NCCL_VERSION")  # older stores kept it among the settings
    rows.append(["NCCL settings", ", ".join(f"{k}={v}" for k, v in settings.items() if k != "NCCL_VERSION") or "–"])
    if image:
        rows.append(["NCCL_VERSION (container image)", f"{image}: the image's label for the system NCCL it ships, not a "
                     f"setting; torch runs the NCCL it was built with ({e.get('nccl') or 'nccl above'})"])
    for g in extra.get("gpus") or []:
        rows.append([f"GPU {g.get('index')}", f"{g.get('name')} {g.get('uuid') or ''} bus {g.get('pci_bus_id') or '–'}, "
                     f"SM max {g.get('sm_clock_max_mhz') or '–'} MHz, power limit {g.get('power_limit_w') or '–'} W"])
    rows.append(["threads per process", ", ".join(str(t) if t else "torch default" for t in sweep.threads) or "–"])
    rows.append(["processes started", process_starts(sweep)])
    return rows, (extra.get("topology") or {}).get("matrix")


def process_starts(sweep: Sweep) -> str:
    """How the measured processes began: forked from the fork server, as fresh interpreters, or both, which the page
    must say: a fork server gone mid-sweep started the rest fresh, and one report then set DDP x2's 422 MiB peak RSS
    (forked) beside single x1's 674 MiB (fresh) as if the strategies made the difference."""
    got = getattr(sweep, "process_starts", None) or {}   # a stand-in sweep may carry none
    words = {"forked": "forked from a server that had imported torch", "fresh": "fresh interpreters"}
    if not got:
        return "–"
    if len(got) == 1:
        return words.get(next(iter(got)), next(iter(got)))
    return ("MIXED: " + ", ".join(f"{n} {words.get(k, k)}" for k, n in sorted(got.items()))
            + "; peak RSS and start-up differ between the two (a fresh interpreter holds more): compare memory only "
              "within one kind (details_json's process_start says which each result is)")


def blocks(sweep: Sweep) -> list:
    """Each distinct environment once (a resumed sweep records one per start, most of them identical), with the
    environment rows and results it covers; where several differ, one table with a column each, differences marked."""
    b: list = [("h", 2, "Environment")]
    if not sweep.envs:
        b.append(("p", "No environment was recorded."))
    groups: dict = {}   # what the report shows -> the environment rows that show it
    for e in sweep.envs:
        rows, matrix = _environment_rows(sweep, e)
        groups.setdefault(json.dumps([rows, matrix]), []).append(e)
    shown = [(json.loads(k), es) for k, es in groups.items()]
    covers = lambda es: sum(len(sweep.env_results.get(e["env_id"], [])) for e in es)  # noqa: E731
    heads = [f"environment {read.id_runs([e['env_id'] for e in es])} ({covers(es)} result(s))" for _, es in shown]
    if len(shown) == 1 and len(sweep.envs) > 1:
        b.append(("p", f"{len(sweep.envs)} environment rows belong to this sweep's results (one is recorded each time it "
                       f"starts or is resumed), all identical: shown once."))
    values = [dict(map(tuple, rows)) for (rows, _), _ in shown]
    names = list(dict.fromkeys(r[0] for (rows, _), _ in shown for r in rows))
    differ = [n for n in names if len({v.get(n, "–") for v in values}) > 1]
    if len(shown) > 1:
        b.append(("p", f"{len(sweep.envs)} environment rows belong to this sweep's results, {len(shown)} distinct"
                       + (f"; they differ in {', '.join(differ)} (marked)" if differ else "")
                       + ". Each column covers the results measured under it."))
    if shown:
        b.append(("table", ["", *heads], [[n, *(Em(v.get(n, "–")) if n in differ else v.get(n, "–") for v in values)]
                                          for n in names]))
    matrices: dict = {}   # each distinct GPU topology once, with the environments that share it
    for ((_, matrix), es) in shown:
        if matrix:
            matrices.setdefault(json.dumps(matrix), []).extend(e["env_id"] for e in es)
    for text, ids in matrices.items():
        matrix = json.loads(text)
        b.append(("table", [f"GPU (torch numbering), environment {read.id_runs(ids)}", *map(str, range(len(matrix)))],
                  [[str(i), *[str(x) for x in row]] for i, row in enumerate(matrix)]))
    for r, nodes in sweep.nodes:
        b.append(("p", f"{r['config_key']}: " + ", ".join(f"node {n['node_rank']} on {n['hostname']}" for n in nodes)))
    return b
