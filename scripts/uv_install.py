"""Install the project into a new venv with uv, under pip's own configuration: the fast path of scripts/ensure_venv.sh.

pip unpacks torch's CUDA build (about 5 GB) on one thread: 71 s of a fresh clone's set-up here; uv took 23 s for the
same wheels, cold cache, plus about 9 s to install uv itself (2026-11-27, 2 cores). uv reads no pip configuration, so
the indexes, local wheel folders, constraints and certificate that pip would use (`pip config list`: files and PIP_*
variables) are handed to it as its own flags. uv ignores a venv's system site-packages, so ensure_venv.sh takes this
path only where no torch is installed outside the venv (a machine's own CUDA build is kept: pip does that).

    python scripts/uv_install.py VENV_PYTHON REQUIREMENT...     # exit status: uv's, or 3 when uv is not there

Stdlib only: it runs before anything is installed.
"""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys

# pip's option -> uv's flag; a value that pip splits on whitespace gives one flag each
FLAGS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
         "constraint": "--constraint", "trusted-host": "--allow-insecure-host"}
SPLIT = {"extra-index-url", "find-links", "constraint", "trusted-host"}
TRUE = {"1", "true", "yes", "on"}
ORDER = (":env:", "install", "global")      # which section wins where several set one option (pip's order)


def pip_config(listing: str) -> dict:
    """{option: value} from `pip config list`'s lines (`section.option='value'`), a section earlier in ORDER winning."""
    found: dict = {}
    for line in listing.splitlines():
        name, sep, raw = line.partition("=")
        section, dot, option = name.rpartition(".")
        if not sep or not dot or section not in ORDER:
            continue
        try:
            value = str(ast.literal_eval(raw.strip()))
        except (ValueError, SyntaxError):
            value = raw.strip().strip("'\"")
        rank = ORDER.index(section)
        if option not in found or rank < found[option][0]:
            found[option] = (rank, value)
    return {k: v for k, (_, v) in found.items()}


def uv_args(config: dict) -> tuple:
    """(uv's flags, environment additions) for pip's configuration."""
    args: list = []
    for option, flag in FLAGS.items():
        value = config.get(option)
        if value:
            for item in (value.split() if option in SPLIT else [value]):
                args += [flag, item]
    if config.get("no-index", "").lower() in TRUE:
        args.append("--no-index")
    env = {"SSL_CERT_FILE": config["cert"]} if config.get("cert") else {}
    return args, env


def main(argv: list) -> int:
    if len(argv) < 2:
        print("usage: uv_install.py VENV_PYTHON REQUIREMENT...", file=sys.stderr)
        return 2
    python, reqs = argv[0], argv[1:]
    uv = os.path.join(os.path.dirname(python), "uv")
    uv = uv if os.access(uv, os.X_OK) else shutil.which("uv")
    if not uv:
        return 3
    listing = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    args, env = uv_args(pip_config(listing))
    # pip's choice: the newest release on any index or folder (uv's own default takes the first index that has one);
    # bytecode compiled as pip compiles it: without it, where PYTHONDONTWRITEBYTECODE is set (this project's machines
    # and CI), every new interpreter compiled torch again (the test command 10m35s against 8m52s)
    return subprocess.run([uv, "pip", "install", "--quiet", "--index-strategy", "unsafe-best-match", "--compile-bytecode",
                           "--python", python, *args, *reqs],
                          env={**os.environ, **env}).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
