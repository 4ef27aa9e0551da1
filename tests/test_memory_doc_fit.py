"""docs/memory.md says what the fit report does with a batch stored as fitting that is over the budget by today's
figure: it counts as over it throughout the page (bench.analysis.fit.Search.now, since f27f128). The paragraph had
said the report 'marks a trial stored as fitting ... and says so', as if the stored 'fits' still stood beside the mark.
The doc's claim is checked against the rule on the H200 transformer fit's figures."""
from __future__ import annotations

import re
from pathlib import Path

from bench.analysis import fit

DOC = Path(__file__).resolve().parents[1] / "docs" / "memory.md"


def test_the_memory_doc_says_a_stored_fit_over_the_budget_counts_as_over_it_as_the_rule_does():
    text = re.sub(r"\s+", " ", DOC.read_text())
    assert "marks a trial stored as fitting" not in text
    assert "counts as over it throughout the page" in text and "`Search.now`" in text
    # the rule the doc describes: 14 stored as fitting at 16.90 GiB (trial) and 17.56 GiB (measured run) in 16 GiB
    s = fit.Search("k", "transformer", "ddp", "cuda", 1, "DDP x1", "DDP x1 [bf16, adamw]", ("bf16", "adamw"), 16384.0,
                   trials=[(12, fit.FITS, 15266.25, ""), (14, fit.FITS, 17306.16, "")], measured={14: (fit.FITS, 17978.16)})
    assert [v for b, v, _, _ in s.judged if b == 14] == [fit.OVER] and s.largest == 12 and s.restated == [14]
