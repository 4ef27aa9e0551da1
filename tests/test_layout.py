"""The package's shape, read from its source with ast (nothing is imported or run): no import circle
anywhere in bench/, and imports that follow the layers (what runs inside a rank never reaches back into
the sweep, the commands or the report; the store, the analysis and the machine capture never into the
sweep or a rank; the store reads and writes rows and never imports the analysis that derives from them; the statistics
sit under everything that derives; the forecast is pure, imported by the analysis and the report, never importing
them or the store back; those pure layers reach none of that through a top-level module either: bench.results, bench.cli
and bench.options import the analysis, the report or the sweep), and no module over MAX_LINES lines."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "bench"

# folder -> folders it must never import (every import counts, at the top or inside a function)
FORBIDDEN = {
    "rank": ("sweep", "commands", "report", "analysis", "store", "forecast", "stats"),
    "shared": ("sweep", "rank", "commands", "report", "analysis", "store", "workloads", "machine"),
    "workloads": ("sweep", "rank", "commands", "report", "analysis", "store"),
    "machine": ("sweep", "rank", "commands", "report", "analysis", "store", "workloads"),
    "store": ("sweep", "rank", "commands", "report", "workloads", "analysis", "forecast", "stats"),
    "stats": ("sweep", "rank", "commands", "report", "workloads", "analysis", "forecast", "store", "machine"),
    "forecast": ("sweep", "rank", "commands", "report", "workloads", "analysis", "store"),
    "analysis": ("sweep", "rank", "commands", "report", "workloads"),
    "report": ("sweep", "rank", "commands"),
    "sweep": ("commands",),
}
# Known exceptions, each with the reason it is allowed for now (an entry here is a debt, not a design).
ALLOWED: dict = {}   # (module, layer) -> why it may still import up the layers; none today
# The layers that import nothing above them, held through the top-level modules too: folder() calls bench.results,
# bench.cli, bench.config "" and no rule names "", so forecast -> bench.results -> bench.analysis passed the walk (only
# the circle test caught it, because report.tables happened to import the forecast back). Their imports are followed
# through top-level modules, and these three, which import the analysis, the report or the sweep, are never reached.
PURE = ("forecast", "stats", "store", "rank")
TOP_FORBIDDEN = ("bench.results", "bench.cli", "bench.options")
MAX_LINES = 420   # no module over ~400 lines (issue 44): past this one splits


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(path: Path, known: set) -> set:
    """The bench modules a file imports: `from bench.x import y` counts bench.x, and bench.x.y when that is a module."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.split(".")[0] == "bench":
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "bench"}
    return {m for m in out if m in known}


def graph() -> dict:
    mods = modules()
    known = set(mods)
    return {m: imports_of(p, known) - {m} for m, p in mods.items()}


def cycles(edges: dict) -> list:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()) else ""


def through_top(edges: dict, m: str) -> list:
    """[(the chain of top-level modules, what its last imports)]: every module m reaches through top-level modules alone
    (folder ''), and each top-level module on the way (its chain ending before it)."""
    out, seen = [], set()
    todo = [((), t) for t in sorted(edges.get(m, ())) if folder(t) == ""]
    while todo:
        chain, t = todo.pop()
        out.append((chain, t))
        if t in seen:
            continue
        seen.add(t)
        for u in sorted(edges.get(t, ())):
            if folder(u) == "":
                todo.append(((*chain, t), u))
            else:
                out.append(((*chain, t), u))
    return out


def layer_violations(edges: dict) -> list:
    """Each import against the layers, in words: a module's own (FORBIDDEN, less ALLOWED), and for the PURE layers
    every module or folder they reach through top-level modules (TOP_FORBIDDEN, or a folder FORBIDDEN to them)."""
    bad = [f"{m} imports {t}" for m, targets in edges.items() for t in sorted(targets)
           if folder(t) in FORBIDDEN.get(folder(m), ()) and (m, folder(t)) not in ALLOWED]
    for m in sorted(edges):
        if folder(m) in PURE:
            bad += [f"{m} reaches {t} through {' -> '.join(chain)}" for chain, t in through_top(edges, m) if chain
                    and (t in TOP_FORBIDDEN or folder(t) in FORBIDDEN[folder(m)])]
            bad += [f"{m} imports {t}" for chain, t in through_top(edges, m) if not chain and t in TOP_FORBIDDEN]
    return sorted(set(bad))


def test_no_import_circle_anywhere_in_bench():
    found = cycles(graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_imports_follow_the_layers():
    g = graph()
    bad = layer_violations(g)
    assert not bad, "imports against the layers:\n" + "\n".join(bad)
    paid = [f"{m} -> {f}" for m, f in ALLOWED if not any(folder(t) == f for t in g.get(m, ()))]
    assert not paid, "exceptions no longer needed (remove them from ALLOWED): " + ", ".join(paid)


def test_the_walk_finds_a_circle_and_a_wrong_direction(tmp_path):
    """The checks themselves: a made-up circle and a rank module importing the sweep are caught."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from bench.sweep import plan\nimport bench.store.store\n")
    assert imports_of(f, {"bench.sweep", "bench.sweep.plan", "bench.store.store"}) == \
        {"bench.sweep", "bench.sweep.plan", "bench.store.store"}
    assert folder("bench.rank.worker") == "rank" and folder("bench.cli") == "" and folder("bench.sweep") == "sweep"
    assert "sweep" in FORBIDDEN[folder("bench.rank.worker")]


def test_the_walk_follows_a_pure_layer_through_the_top_level_modules():
    """forecast -> bench.results (which imports the analysis) passed: bench.results is in no folder. It is caught, as is
    a chain of top-level modules ending in a forbidden folder; a top-level module that stays below the layer is not."""
    direct = {"bench.forecast.x": {"bench.results"}, "bench.results": {"bench.analysis.results"}}
    assert layer_violations(direct) == ["bench.forecast.x imports bench.results",
                                        "bench.forecast.x reaches bench.analysis.results through bench.results"]
    chain = {"bench.store.x": {"bench.config"}, "bench.config": {"bench.sweepfile"}, "bench.sweepfile": {"bench.options"},
             "bench.options": {"bench.sweep.plan"}}
    assert layer_violations(chain) == [
        "bench.store.x reaches bench.options through bench.config -> bench.sweepfile",
        "bench.store.x reaches bench.sweep.plan through bench.config -> bench.sweepfile -> bench.options"]
    circle = {"bench.stats.x": {"bench.config"}, "bench.config": {"bench.cli"}, "bench.cli": {"bench.config"}}
    assert layer_violations(circle) == ["bench.stats.x reaches bench.cli through bench.config"]
    assert layer_violations({"bench.forecast.x": {"bench.config"}, "bench.config": {"bench.machine.peaks"},
                             "bench.report.y": {"bench.results"}}) == []


def test_no_module_passes_the_line_limit():
    long = {m: n for m, p in sorted(modules().items()) if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them): {long}"


@pytest.mark.parametrize("name", ["commands", "sweep", "rank", "shared", "workloads", "machine", "store", "stats", "forecast", "analysis", "report"])
def test_every_folder_says_what_lives_there(name):
    init = PACKAGE / name / "__init__.py"
    assert init.is_file() and len(ast.get_docstring(ast.parse(init.read_text())) or "") > 40
