"""The HTML page's tables (bench.report.pages.to_html): a wide one scrolls inside its own box, never the page, and a
cell of words keeps a reading width. At 1280 px the 'all configurations' table overflowed the page, its stability
column cut off, and its efficiency cell wrapped to one word a line."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from bench.report import pages

WORDS = ("wrapper overhead not resolved (-10.6% against single device x1: DataParallel x1 and single device x1 ran one "
         "process each whose steps spread 36% and 20% of their median)")
HEADERS = ["strategy", "precision / settings", "processes", "global batch", "steps", "repeats", "samples/s", "speed-up",
           "efficiency", "median step ms", "p10 ms", "p90 ms", "peak RSS MiB (largest process)", "GFLOP/s per process",
           "MFU", "stability"]
ROW = ["DataParallel", "fp32", "1", "2", "3", "1", "3914.5", "1.12x", WORDS, "0.41", "0.38", "0.62", "411", "0.67", "–",
       "unstable"]
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)


def test_a_table_sits_in_a_box_that_scrolls_and_a_cell_of_words_keeps_a_reading_width():
    page = pages.to_html([("h", 1, "r"), ("table", HEADERS, [ROW] * 3)])
    assert page.count('<div class="table"><table>') == 1 and "div.table{overflow-x:auto" in page
    assert page.count('<td class="words">') == 3 and "<td>unstable</td>" in page   # figures stay plain cells


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_at_1280_px_the_page_itself_does_not_scroll_sideways(tmp_path):
    page = pages.to_html([("h", 1, "r"), ("table", HEADERS + ["more"] * 6, [ROW + [WORDS] * 6] * 3)])
    probe = ('<script>window.addEventListener("load",function(){var d=document.documentElement;'
             'document.body.setAttribute("data-overflow",d.scrollWidth>d.clientWidth?"yes":"no")});</script>')
    path = tmp_path / "p.html"
    path.write_text(page.replace("</body>", probe + "</body>"), encoding="utf-8")
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,900", "--dump-dom",
                          "file://" + str(path)], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-overflow="no"' in dom.stdout, dom.stdout[-500:]
