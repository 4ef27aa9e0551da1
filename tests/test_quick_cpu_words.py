"""sweeps/quick-cpu.toml's comment and docs/running.md say exactly what the file runs: both called it 'every strategy'
(the CPU can run) 'on both built-in workloads', while ZeRO, FSDP and HSDP run on CPU and the transformer is built in."""
from __future__ import annotations

import os
import re
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = {"single": "single", "dp": "DataParallel", "ddp": "DDP", "zero": "ZeRO", "fsdp": "FSDP", "hsdp": "HSDP",
         "synthetic": "synthetic", "deeplabv3": "DeepLabV3", "transformer": "transformer"}


def test_quick_cpus_comment_and_the_docs_name_what_it_runs_and_what_it_leaves_out():
    path = os.path.join(ROOT, "sweeps", "quick-cpu.toml")
    with open(path, "rb") as f:
        sweep = tomllib.load(f)
    with open(path, encoding="utf-8") as f:
        comment = " ".join(ln.lstrip("# ").strip() for ln in f if ln.startswith("#"))
    with open(os.path.join(ROOT, "docs", "running.md"), encoding="utf-8") as f:
        docs = " ".join(f.read().split())
    said = re.search(r"`quick-cpu\.toml` \(([^`]*?)\), `ddp-settings", docs).group(1)
    for text in (comment, said):
        assert "every strategy" not in text and "both built-in" not in text, text
        ran = text.split("ithout")[0]   # what it runs, before what it leaves out
        for name in sweep["strategies"] + sweep["workloads"]:
            assert WORDS[name] in ran, (name, text)
        for name in set(WORDS) - set(sweep["strategies"]) - set(sweep["workloads"]) - {"single"}:
            assert WORDS[name] in text and WORDS[name] not in ran, (name, text)  # named as left out, never as run
