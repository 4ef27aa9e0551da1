"""Review mends 3, 5 and 15 (git diff 5bf2ae3..HEAD): two models of one short name write their own plot files and
each section and '(plot: ...)' names its own; the overview's star and ring are the summary's pick among the summary's
candidates (a fit sweep's run over the budget is none); the side-by-side page relabels all its words."""
from __future__ import annotations

import os
import re
from types import SimpleNamespace

from matplotlib.figure import Figure

from bench.report import plots, report, sidebyside
from bench.store import store
from bench.sweep import record
from report_fixtures import COMM_POINTS, measured, memory, spec
from test_choice_round2 import _marks, _unstable
from test_recommend import build, payload
from test_recommend import spec as gpu_spec

JITTER = (1.00, 1.02, 0.98, 1.04, 0.96, 1.01, 0.99, 1.03, 0.97, 1.00)


def _two_models(tmp_path) -> tuple:
    """A stored sweep of /…/a/my_model.py:build and /…/b/my_model.py:build (one short name), the second 1.5x slower,
    and the all-reduce points a forecast needs."""
    a, b = f"{tmp_path}/a/my_model.py:build", f"{tmp_path}/b/my_model.py:build"
    path = str(tmp_path / "s.sqlite")
    conn = store.connect(path)
    env_id = store.insert_environment(conn, {"hostname": "h", "cpu_model": "Test CPU", "cpu_cores": 2})
    sid = store.begin_sweep(conn, f"bench sweep --workloads {a},{b} --gpus 1,2", "{}", env_id)
    for workload, k in ((a, 1.0), (b, 1.5)):
        for strategy, count, ms in (("single", 1, 100.0), ("ddp", 1, 102.0), ("ddp", 2, 110.0)):
            record.record_result(conn, sid, env_id, spec(workload, strategy, count), "ok", "",
                                 {**measured(count, [ms * k * j for j in JITTER], 64), "grad_bytes": 2**20,
                                  "memory": memory("cpu", strategy, count, 500.0 * k)})
    record.record_result(conn, sid, env_id, spec("comm", "ddp", 2, mode="comm"), "ok", "",   # the forecast's network
                         {"comm": [{"size_bytes": s, "time_ms": t, "iters": 5, "ranks": 2} for s, t in COMM_POINTS]})
    store.end_sweep(conn, sid, "completed")
    conn.close()
    return path, a, b


def _sections(md: str, workloads: list) -> dict:
    """workload -> its evidence section's text ('## <workload>: all configurations' to the next '## ')."""
    out = {}
    for w in workloads:
        start = md.index(f"## {w}: all configurations")
        nxt = md.find("\n## ", start + 1)
        out[w] = md[start:nxt if nxt >= 0 else len(md)]
    return out


def test_two_models_of_one_short_name_write_and_show_their_own_plots(tmp_path):
    path, a, b = _two_models(tmp_path)
    plots_dir = tmp_path / "plots"
    out = report.render(path, None, str(plots_dir), str(tmp_path / "rep"))
    saved = [os.path.basename(p) for p in out["plots"]]
    assert len(saved) == len(set(saved)), sorted(saved)   # no plot written twice: before, each of b's overwrote a's
    md = open(out["markdown"]).read()
    own = {w: plots.file_name(w, "", [a, b])[:-len("_.png")] for w in (a, b)}   # each model's file stem
    assert own[a] != own[b] and {"my_model_build"} & set(own.values()) == set(), own
    for w, other in ((a, b), (b, a)):
        files = [n for n in saved if n.startswith(own[w] + "_")]
        assert {f"{own[w]}_{q}.png" for q in ("overview", "throughput", "frontier", "forecast")} <= set(files), saved
        section = _sections(md, [a, b])[w]
        shown = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", section)
        assert shown and all(os.path.basename(p).startswith(own[w] + "_") for p in shown), shown
        assert not any(own[other] + "_" in p for p in shown), shown
    # every '(plot: ...)' and 'Plot: ...' the page cites is a file it saved
    cited = re.findall(r"[Pp]lot: ([^\s;)]+\.png)", md)
    assert cited and set(cited) <= set(saved), (sorted(set(cited) - set(saved)), saved)
    assert {n for n in cited if n.startswith(own[a])} and {n for n in cited if n.startswith(own[b])}, cited


def test_one_model_of_its_short_name_keeps_the_short_file_name_within_a_page_or_without():
    stored = "/work/main/examples/my_model.py:build"
    assert plots.file_name(stored, "overview", [stored, "resnet18"]) == "my_model_build_overview.png"
    with plots.page([stored, "/other/my_model.py:build"]):
        assert plots.file_name(stored, "overview") == "_work_main_examples_my_model.py_build_overview.png"
        assert plots.where(stored, "phases").endswith("plot: _work_main_examples_my_model.py_build_phases.png)")
    assert plots.file_name(stored, "overview") == "my_model_build_overview.png"   # the page's names left with it


# Finding 5 ----------------------------------------------------------------------------------------------------------

def _fit_like(tmp_path):
    """DataParallel x1 fastest of the runs that fit, DDP x1 slower and unstable (the summary: 'not resolved: --repeats
    3'), and DDP x2 fastest of all but over a fit's budget (a stand-in for the fit search that measured it)."""
    sweep = build(str(tmp_path / "f.sqlite"), [(gpu_spec("dp", 1), payload(1, 50.0)), (gpu_spec("ddp", 1), _unstable(1, 60.0)),
                                               (gpu_spec("ddp", 2), payload(2, 30.0))])
    over = next(c for c in sweep.bench["synthetic"] if c.label == "DDP x2")
    sweep.fit = [SimpleNamespace(measured={32: ("fits", 2000.0)}, budget_mib=1000.0, bench_keys={32: over.key})]
    return sweep


def test_the_overview_marks_the_summary_s_pick_where_a_run_over_the_budget_is_fastest(tmp_path, monkeypatch):
    from bench.report import recommend
    sweep = _fit_like(tmp_path)
    configs = sweep.bench["synthetic"]
    by = {c.label: c for c in configs}
    assert max(configs, key=lambda c: c.samples_per_s) is by["DDP x2"]
    assert recommend.answer(sweep, "synthetic", configs, "fp32")[0][2].startswith("not resolved: --repeats 3"), \
        recommend.answer(sweep, "synthetic", configs, "fp32")[0]
    drawn = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, p, *a, **kw: (drawn.append(fig), save(fig, p, *a, **kw)))
    report.first_screen_figure(sweep, "synthetic", configs, str(tmp_path))
    marks = _marks(drawn[-1])
    assert "recommended" not in marks, marks   # before: DDP x1 starred, beside a cell reading 'not resolved'
    assert sorted(y for y, _ in marks[plots.OPEN_LABEL]) == sorted(
        round(by[k].samples_per_s) for k in ("DDP x1", "DataParallel x1")), marks


# Finding 15 ---------------------------------------------------------------------------------------------------------

def test_the_side_by_side_page_relabels_every_word_naming_a_model_by_path(tmp_path):
    w = f"{tmp_path}/models/my_model.py:build"
    path = str(tmp_path / "s.sqlite")
    conn = store.connect(path)
    env_id = store.insert_environment(conn, {"hostname": "h", "cpu_model": "Test CPU", "cpu_cores": 2})
    for n in range(2):
        sid = store.begin_sweep(conn, "bench sweep", "{}", env_id)
        for strategy, count, ms in (("single", 1, 100.0), ("ddp", 2, 110.0)):
            record.record_result(conn, sid, env_id, spec(w, strategy, count), "ok", "",
                                 {**measured(count, [ms * j for j in JITTER], 64), "grad_bytes": 2**20,
                                  "memory": memory("cpu", strategy, count, 500.0)})
        if n:   # the second sweep's DDP x1 failed, its reason naming the model as stored
            record.record_result(conn, sid, env_id, spec(w, "ddp", 1), "failed", f"{w} raised ValueError in build()")
        store.end_sweep(conn, sid, "completed")
    conn.close()
    cols = sidebyside.load_targets(sidebyside.targets([path], "1,2"))
    out = sidebyside.render(cols, str(tmp_path / "sp"), str(tmp_path / "sr"))
    md = open(out["markdown"]).read()
    assert "failed: my_model:build raised ValueError in build()" in md, md
    assert w not in md.replace(str(tmp_path / "sp"), ""), [line for line in md.splitlines() if w in line]


def test_the_history_page_of_two_models_of_one_short_name_writes_two_plots(tmp_path):
    # history.render named its plots without the page's other workloads: both wrote my_model_build_history.png
    from conftest import read_history
    from bench.report import history as history_page
    path, a, b = _two_models(tmp_path)
    _two_models(tmp_path)   # a second sweep into the same store: a history needs two
    out = history_page.render(read_history(path), path, str(tmp_path / "hp"), str(tmp_path / "hr"))
    saved = [os.path.basename(p) for p in out["plots"]]
    assert len(saved) == 2 and len(set(saved)) == 2, saved
