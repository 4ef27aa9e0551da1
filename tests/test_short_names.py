"""A user's model given by path is stored by its absolute path (what every process imports and part of each
configuration's key) but shown by its short name, `my_model:build`: trial B's report named it
`/work/main/examples/my_model.py:build` in every table and heading, its plot files `_work_main_examples_my_model.py_
build_overview.png`, and clipped the overview's title. The terminal's line names it alike and, for a language model,
gives tokens/s beside samples/s (tests/test_progress_line.py)."""
from __future__ import annotations

import os

from matplotlib.figure import Figure

from conftest import read_history
from bench.analysis import results
from bench.report import history as history_page
from bench.report import names as naming
from bench.report import plots, report, sidebyside
from bench.store import store
from bench.sweep import record
from report_fixtures import COMM_POINTS, measured, memory, spec

SHORT = "my_model:build"
JITTER = (1.00, 1.02, 0.98, 1.04, 0.96, 1.01, 0.99, 1.03, 0.97, 1.00)


def _model(tmp_path) -> str:
    return f"{tmp_path}/models/my_model.py:build"   # as models.resolve_workload_name stores it: absolute


def _store(path: str, workload: str, sweeps: int = 1, details: dict = None) -> str:
    conn = store.connect(path)
    env_id = store.insert_environment(conn, {"hostname": "h", "cpu_model": "Test CPU", "cpu_cores": 2})
    for _ in range(sweeps):
        sid = store.begin_sweep(conn, f"bench sweep --workloads {workload} --gpus 1,2", "{}", env_id)
        rec = lambda sp, *a, **kw: record.record_result(conn, sid, env_id, sp, *a, **kw)  # noqa: E731
        for strategy, count, ms in (("single", 1, 100.0), ("ddp", 1, 102.0), ("ddp", 2, 110.0)):
            rec(spec(workload, strategy, count), "ok", "", {**measured(count, [ms * j for j in JITTER], 64),
                                                            "memory": memory("cpu", strategy, count, 500.0),
                                                            "grad_bytes": 2**20, "workload_details": details or {}})
        rec(spec(workload, "dp", 2), "skipped", "DataParallel parallelises over GPUs only")
        rec(spec(workload, "ddp", 2, mode="equivalence"), "ok", "",
            {"max_abs_diff": 2.5e-7, "tolerance": 1e-5, "passed": True})
        rec(spec("comm", "ddp", 2, mode="comm"), "ok", "",
            {"comm": [{"size_bytes": s, "time_ms": t, "iters": 5, "ranks": 2} for s, t in COMM_POINTS]})
        store.end_sweep(conn, sid, "completed")
    conn.close()
    return path


def _saved_titles(monkeypatch) -> dict:
    """file name -> (suptitle, whether it lies inside the figure) of every figure saved."""
    saved, save = {}, Figure.savefig

    def recording(fig, path, *a, **kw):
        save(fig, path, *a, **kw)
        t = fig._suptitle
        box, page = t.get_window_extent(), fig.bbox
        saved[os.path.basename(path)] = (t.get_text(), box.x0 >= page.x0 and box.x1 <= page.x1)
    monkeypatch.setattr(Figure, "savefig", recording)
    return saved


def _outside_the_command(text: str, workload: str) -> list:
    """The lines naming the stored path, less the quoted command line (which gives it as the user typed it)."""
    return [line for line in text.splitlines() if workload.split(":")[0] in line and "Command:" not in line
            and "bench sweep --workloads" not in line]


def test_the_report_names_a_model_given_by_path_by_its_short_name(tmp_path, monkeypatch):
    workload = _model(tmp_path)
    path = _store(str(tmp_path / "s.sqlite"), workload)
    saved = _saved_titles(monkeypatch)
    out = report.render(path, None, str(tmp_path / "plots"), str(tmp_path / "rep"))
    md = open(out["markdown"]).read()
    assert f"## {SHORT}: all configurations" in md
    assert not _outside_the_command(md, workload), _outside_the_command(md, workload)
    assert not _outside_the_command(open(out["html"]).read(), workload)
    assert f"Command: bench sweep --workloads {workload} --gpus 1,2" in md   # quoted as given
    names = {os.path.basename(p) for p in out["plots"]}
    assert {f"my_model_build_{q}.png" for q in ("overview", "throughput", "frontier", "forecast")} <= names, names
    assert all(n.startswith("my_model_build_") or n.startswith("comm") for n in names), names
    titles = {n: saved[n] for n in names if n in saved}
    assert titles and all(SHORT in t and workload not in t for t, _ in titles.values()), titles
    text, fits = saved["my_model_build_overview.png"]
    assert text.startswith(f"{SHORT}: throughput against device count") and fits   # trial B's was clipped both sides
    # only what is shown changes: the store, the configurations and their keys keep the path the processes import
    conn = store.connect(path, readonly=True)
    try:
        sweep = results.load(conn, 1)
    finally:
        conn.close()
    assert list(sweep.bench) == [workload] and all(f"/{workload}/" in c.key for c in sweep.bench[workload])


def test_two_models_of_one_short_name_keep_their_paths_on_the_page():
    a, b = "/x/my_model.py:build", "/y/my_model.py:build"
    assert naming.shown_names([a, b, "resnet18"]) == {}
    assert naming.shown_names([a, "resnet18"]) == {a: SHORT}
    blocks = [("h", 2, f"{a}: all configurations"), ("table", ["workload"], [[f"{a}/ddp/cpu/2"], [f"{a}x"]]),
              ("img", f"plots/{a}.png", f"{a} throughput")]
    assert naming.relabel(blocks, {a: SHORT}) == [
        ("h", 2, f"{SHORT}: all configurations"), ("table", ["workload"], [[f"{SHORT}/ddp/cpu/2"], [f"{a}x"]]),
        ("img", f"plots/{a}.png", f"{SHORT} throughput")]   # another function's name (buildx) is not this one


def test_history_and_side_by_side_name_it_short_too(tmp_path):
    workload = _model(tmp_path)
    path = _store(str(tmp_path / "s.sqlite"), workload, sweeps=2)
    out = history_page.render(read_history(path), path, str(tmp_path / "hp"), str(tmp_path / "hr"))
    md = open(out["markdown"]).read()
    assert f"## {SHORT}: history" in md and not _outside_the_command(md, workload), _outside_the_command(md, workload)
    assert [os.path.basename(p) for p in out["plots"]] == ["my_model_build_history.png"]
    cols = sidebyside.load_targets(sidebyside.targets([path], "1,2"))
    out = sidebyside.render(cols, str(tmp_path / "sp"), str(tmp_path / "sr"))
    md = open(out["markdown"]).read()
    assert f"| {SHORT} |" in md and not _outside_the_command(md, workload), _outside_the_command(md, workload)
    assert [os.path.basename(p) for p in out["plots"]] == ["my_model_build_sidebyside.png"]
    assert sidebyside.figure(cols, workload, SHORT)._suptitle.get_text().endswith(f"\n{SHORT}")


def test_the_plot_file_name_is_the_same_from_the_stored_or_the_shown_name():
    assert plots.file_name("/work/main/examples/my_model.py:build", "overview") == "my_model_build_overview.png"
    assert plots.file_name(SHORT, "overview") == "my_model_build_overview.png"
    assert plots.file_name("resnet18", "overview") == "resnet18_overview.png"


def test_the_docs_say_the_short_name_reports_show_and_the_full_path_the_store_keeps():
    """docs/workloads.md's example, held to the code: the stored path, the name shown, the plot file's name."""
    import re
    from pathlib import Path

    from bench.workloads.usermodel import display_name
    text = (Path(__file__).resolve().parents[1] / "docs" / "workloads.md").read_text()
    said = " ".join(text.split("## Your own model")[1].split("\n## ")[0].split())
    stored = re.search(r"stored by its absolute path \(`([^`]+)`\)", said).group(1)
    shown = re.search(r"by its short name, file stem and function: `([^`]+)`", said).group(1)
    assert os.path.isabs(stored.split(":")[0]) and display_name(stored) == shown == SHORT
    assert f"plot file names: `{plots.file_name(stored, 'overview')}`" in said
    assert "`--resume` and re-rendering find it by it" in said
