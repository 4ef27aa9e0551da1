"""The report's scaling sentences (bench.report.report.verdicts): each speaks for one variant and says which."""
from __future__ import annotations

from test_recommend import build, payload, spec


def test_each_variants_scaling_sentence_names_its_variant(tmp_path):
    # Three comm hooks at 2 ranks read 'DDP reaches 0.45x on 2 processes ... against single device x1.' three times,
    # only the next sentence saying which was which.
    from bench.report import report
    sw = build(str(tmp_path / "v.sqlite"), [(spec("single", 1), payload(1, 10.0)), (spec("ddp", 2), payload(2, 12.0)),
                                            (spec("single", 1, "bf16"), payload(1, 6.0)),
                                            (spec("ddp", 2, "bf16"), payload(2, 8.0))])
    said = report.verdicts(sw.bench["synthetic"])
    assert any(s.startswith("DDP [fp32] reaches 1.67x on 2 GPUs") for s in said), said
    assert any(s.startswith("DDP [bf16] reaches 1.50x on 2 GPUs") for s in said), said
    one = build(str(tmp_path / "one.sqlite"), [(spec("single", 1), payload(1, 10.0)), (spec("ddp", 2), payload(2, 12.0))])
    assert any(s.startswith("DDP reaches 1.67x") for s in report.verdicts(one.bench["synthetic"]))   # one variant: no tag


def test_the_overview_tells_variants_at_one_count_apart_and_its_legend_covers_no_point(tmp_path):
    # DDP, ZeRO and HSDP variants at x2 only: three same-coloured circles, a legend inside the small figure that hid
    # the HSDP point, clipped its labels and collapsed the axes (matplotlib: 'constrained_layout not applied').
    import io
    import warnings
    from bench.report import plots
    hooks = [spec("ddp", 2, options=(("comm_hook", h),)) for h in ("none", "fp16", "bf16", "powersgd:2")]
    sw = build(str(tmp_path / "o.sqlite"), [(spec("single", 1), payload(1, 10.0))]
               + [(h, payload(2, 12.0 + i)) for i, h in enumerate(hooks)] + [(spec("hsdp", 2), payload(2, 13.0))])
    configs = sw.bench["synthetic"]
    fig = plots.overview_figure(configs, "synthetic", "x", picks=configs[:1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # the constrained-layout warning fails the test
        fig.savefig(io.BytesIO(), format="png")   # as the report writes it: the layout runs
    ax = fig.axes[0]
    ddp = [line for line in ax.get_lines() if line.get_label().startswith("DDP")]
    assert len(ddp) == 4 and len({line.get_marker() for line in ddp}) == 4   # one marker per variant
    legend = fig.legends[0].get_window_extent()
    assert legend.y1 <= ax.get_window_extent().y0, (legend, ax.get_window_extent())   # below the axes, over no point
