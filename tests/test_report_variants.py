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
