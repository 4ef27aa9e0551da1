"""Figures that say what the text says (issue 38): the phases plot draws exposed communication only where the report's
text resolves it, the forecast shows no one-device wrapper as scaling, its legend fits its figure and it marks every
network it assumed. Stand-in configurations (bench.analysis.results.Config's fields the plots read), no sweep."""
from __future__ import annotations

import math
from types import SimpleNamespace

from bench.report import comm as comm_report
from bench.report import plots
from bench.report import phasesplot
from bench.report import training_state


def config(count: int, probe_ms: float, median_ms: float = 100.0, p10_ms: float = 99.0, p90_ms: float = 101.0,
           label: str = "") -> SimpleNamespace:
    """A configuration whose median step is median_ms (phases: data 5, forward 30, backward 50, optimizer 10 ms) and
    whose DDP probe (synchronised minus no_sync() medians) is probe_ms, its steps spread p10_ms-p90_ms."""
    return SimpleNamespace(device_count=count, strategy="ddp", exposed_comm_ms=probe_ms, label=label or f"DDP x{count}",
                           phases_ms={"data_ms": 5.0, "h2d_ms": math.nan, "forward_ms": 30.0, "backward_ms": 50.0,
                                      "optimizer_ms": 10.0},
                           summary=SimpleNamespace(median_ms=median_ms, p10_ms=p10_ms, p90_ms=p90_ms))


def _bars(fig) -> dict:
    return {c.get_label(): [b.get_height() for b in c] for c in fig.axes[0].containers}


def test_the_phases_plot_draws_exposed_communication_only_where_the_text_resolves_it():
    told = config(2, 12.0)                      # 12 ms beyond a 2 ms spread: resolved, as the text says
    inside = config(2, 11.0, p10_ms=90.0, p90_ms=105.0, label="DDP x2 [bf16]")   # inside 15 ms: "not resolved"
    negative = config(2, -0.42, label="DDP x2 [fp16]")   # a negative difference of medians: never a negative segment
    one_rank = config(1, 11.0)                  # one rank communicates nothing: DDP's own work, in backward
    assert comm_report.resolved(told) == 12.0 and comm_report.resolved(inside) is None
    assert "not resolved" in comm_report.probe_words(inside) and "no communication" in comm_report.probe_words(one_rank)
    seg = phasesplot.phase_segments_ms(told)
    assert seg["exposed communication"] == 12.0 and seg["backward (compute)"] == 50.0 - 12.0
    for c in (inside, negative, one_rank):
        seg = phasesplot.phase_segments_ms(c)
        assert seg["exposed communication"] == 0.0, c
        assert seg["backward (compute)"] == 50.0, c                 # the probe stays in backward, unsplit
        assert all(v >= 0 for v in seg.values()) and sum(seg.values()) == c.summary.median_ms
    fig = phasesplot.phases_figure([told, inside, negative, one_rank], "synthetic", "cpu")
    bars = _bars(fig)
    assert bars[phasesplot.INFERRED] == [12.0, 0.0, 0.0, 0.0]
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ["not resolved" in t for t in labels] == [False, True, True, False]   # one rank: nothing to resolve


def test_the_phases_plot_says_its_split_of_backward_is_inferred_and_outlines_the_measured_backward():
    # DDP x2's 'backward (compute)' drew 11.9 ms beside single device's 14.1: its measured 35.34 ms less the probe's
    # 23.48 ms, measured in blocks of their own, read as DDP computing faster than one device
    told, inside = config(2, 12.0), config(2, 11.0, p10_ms=90.0, p90_ms=105.0, label="DDP x2 [bf16]")
    fig = phasesplot.phases_figure([told, inside], "synthetic", "cpu")
    bars = {c.get_label(): c for c in fig.axes[0].containers}
    assert all(p.get_hatch() == "//" for p in bars[phasesplot.INFERRED])             # the probe's share, hatched
    outline = bars[phasesplot.MEASURED_BACKWARD]                                        # the backward as measured, whole
    assert [(p.get_x() + p.get_width() / 2, p.get_y(), p.get_height()) for p in outline] == [(0.0, 35.0, 50.0)]
    assert not outline[0].get_fill()
    caption = fig.get_supxlabel().replace("\n", " ")
    assert "inferred" in caption and "DDP x2: 50.00 ms measured = 38.00 + 12.00 ms." in caption, caption
    plain = phasesplot.phases_figure([inside], "synthetic", "cpu")                    # nothing split: no outline, no caption
    assert phasesplot.MEASURED_BACKWARD not in {c.get_label() for c in plain.axes[0].containers} and not plain.get_supxlabel()


# ---------------------------------------------------------------- the forecast's plot

def _forecast_lines(tmp_path, machine=None, variants=("fp32",)) -> tuple:
    """The report's forecast plot's lines for test_forecast's hand store (single and DDP x1 30 ms, DDP x2 60 ms, the
    machine at 2), each DDP variant a setting of its own, on `machine` (default: what the sweep measured)."""
    from test_forecast import build_store
    from bench.analysis import forecastable
    from bench.forecast import check as fk
    from bench.forecast import outlook as fo
    from bench.forecast import settings as fs
    from bench.report import forecastplots as fp
    from bench.store import store
    path = str(tmp_path / "hand.sqlite")
    build_store(path)
    conn = store.connect(path, readonly=True)
    f = forecastable.load(conn, None)
    conn.close()
    m = machine or fo.machine(f.sweep, f.runs)
    s = next(s for s in f.sets if s.strategy == "ddp")
    lines = []
    for v in variants:
        sv = fs.Setting(s.workload, "ddp", v, s.configs, s.raws, s.single)
        check = fk.validate(sv, f.runs, None, {}, "")
        lines.append((sv, fo.what_ifs(sv, fs.inputs(sv, m), m, fo.DOUBLING), check,
                      (fp.assumed_words(m), fk.band(check))))
    return s, m, lines


def test_the_forecast_plot_shows_no_one_device_wrapper_as_scaling_efficiency(tmp_path):
    from bench.report import forecastplots as fp
    s, _, lines = _forecast_lines(tmp_path)
    assert not math.isnan(s.configs[1].efficiency)          # DDP x1 against single: its overhead, measured
    ax = fp.figure("synthetic", "cpu", lines).axes[0]
    measured = [ln for ln in ax.get_lines() if ln.get_marker() == "o" and ln.get_linestyle() == "None"
                and str(ln.get_markerfacecolor()) != "none" and len(ln.get_xdata())]   # filled: measured, no line
    assert measured and all(1 not in list(ln.get_xdata()) for ln in measured)
    assert [list(ln.get_xdata()) for ln in measured] == [[2]]   # the count that scaled stays


def test_the_forecast_plot_marks_the_network_inside_a_node_assumed_where_a_preset_gave_it(tmp_path):
    from bench.forecast import interference as itf
    from bench.forecast import network as nw
    from bench.forecast import settings as fs
    from bench.report import forecastplots as fp
    _, measured_x2, _ = _forecast_lines(tmp_path)     # the sweep measured the all-reduce and interference at x2
    assert measured_x2.net.node.measured and not measured_x2.net.net.measured
    assert fp.assumed_words(measured_x2) == "network between nodes"
    # a one-GPU sweep on an H100: both levels of its network are the preset's, and interference is not measured
    one_gpu = fs.Machine(nw.network_for({}, nw.PRESETS["h100"], {}, 8, "nccl"), itf.assumed("cuda"))
    said = fp.assumed_words(one_gpu)
    assert said == "interference and network inside a node and network between nodes"
    _, _, lines = _forecast_lines(tmp_path / "one", machine=one_gpu)
    labels = [" ".join(t.get_text().split()) for t in fp.figure("synthetic", "cuda", lines).legends[0].get_texts()]
    assert any("network inside a node" in t and "assumed" in t for t in labels), labels


def _inside(fig) -> None:
    """Every legend of fig lies inside the figure's own extent once drawn (a clipped legend hides its labels' ends)."""
    fig.canvas.draw()
    page = fig.bbox
    for legend in fig.legends:
        box = legend.get_window_extent()
        assert (box.x0 >= page.x0 and box.x1 <= page.x1 and box.y0 >= page.y0 and box.y1 <= page.y1), (box, page)


def test_the_forecast_plots_legends_fit_inside_their_figures(tmp_path):
    from bench.forecast import interference as itf
    from bench.forecast import network as nw
    from bench.forecast import settings as fs
    from bench.report import forecastplots as fp
    one_gpu = fs.Machine(nw.network_for({}, nw.PRESETS["h100"], {}, 8, "nccl"), itf.assumed("cuda"))
    # the committed H100 examples' longest labels: every assumption named, two and four settings of DDP
    for variants in (("fp32", "bf16"), ("fp32", "bf16", "fp32, compiled", "bf16, compiled")):
        _, _, lines = _forecast_lines(tmp_path / str(len(variants)), machine=one_gpu, variants=variants)
        fig = fp.figure("deeplabv3", "cuda, NVIDIA H100 80GB HBM3", lines)
        texts = [t.get_text() for t in fig.legends[0].get_texts()]   # one entry per setting, the marks' meaning once
        assert sum(t.startswith("DDP [") for t in texts) == len(variants) and len(texts) <= len(variants) + 6, texts
        _inside(fig)
        _inside(fp.memory_figure("deeplabv3", "cuda, NVIDIA H100 80GB HBM3",
                                 [(s, ws[0][1]) for s, ws, _, _ in lines], 80 * 1024))


# ---------------------------------------------------------------- category axes of many long names

LONG = [f"{s} x{n} [bf16, shard_size={n}, adamw{ac}]" for s in ("DDP", "FSDP", "HSDP") for ac in ("", ", ac=full")
        for n in (1, 2)]   # a CPU transformer sweep's twelve configurations, as its report named them


def _ticks_apart(fig) -> None:
    """Once drawn (savefig, as the report writes it): no two tick labels of the x axis overlap, and each lies inside
    the figure (twelve long names at 20 degrees overprinted each other and ran off its bottom)."""
    import io
    fig.savefig(io.BytesIO(), format="png", dpi=100)
    boxes = [t.get_window_extent() for t in fig.axes[0].get_xticklabels() if t.get_text()]
    assert len(boxes) == len(LONG)
    for i, a in enumerate(boxes):
        assert all(not a.overlaps(b) for b in boxes[i + 1:]), i
        assert a.x0 >= fig.bbox.x0 and a.x1 <= fig.bbox.x1 and a.y0 >= fig.bbox.y0 and a.y1 <= fig.bbox.y1, (a, fig.bbox)
    assert fig.axes[0].get_window_extent().height >= 2.5 * fig.dpi   # the bars keep their height beside the labels


def test_the_phases_memory_and_step_time_plots_keep_twelve_long_names_apart():
    cs = [config(2 if "x2" in name else 1, 11.0, p10_ms=90.0, p90_ms=105.0, label=name) for name in LONG]
    for c in cs:
        c.device_type, c.memory_mib, c.step_ms = "cpu", {"rank 0": 400.0, "rank 1": 410.0}, [99.0, 100.0, 101.0]
        c.state_mib = {0: {"params_mib": 1.0, "grads_mib": 1.0, "optimizer_mib": 2.0, "baseline_rss_mib": 350.0}}
    phases = phasesplot.phases_figure(cs, "transformer", "cpu")
    assert sum("not resolved" in t.get_text() for t in phases.axes[0].get_xticklabels()) == 6   # said on its label
    for fig in (phases, plots.memory_figure(cs, "transformer", "cpu"), plots.step_times_figure(cs, "transformer", "cpu"),
                training_state.state_figure(cs, "transformer", "cpu")):
        _ticks_apart(fig)
