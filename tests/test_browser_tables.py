"""The Hardware check's tables in Chromium at 1366×768: no word is broken letter by letter.

Gradio's Markdown lets a word break anywhere, which shrank the tips table's columns to one
letter ("s e c o n d s"). Every word of every table cell must sit on one line.
"""

from __future__ import annotations

import pytest

from gpen_core.hwcheck import advice

from .test_browser import Shots, page_url  # noqa: F401

pytestmark = pytest.mark.browser

# Every word (split at spaces, hyphens and slashes, where a line may break) of every table
# cell in the element: those whose text spans more than one line box.
_BROKEN_WORDS = """(root) => {
  const out = [];
  for (const table of document.querySelectorAll(root + ' table')) {
    const walk = document.createTreeWalker(table, NodeFilter.SHOW_TEXT);
    for (let node = walk.nextNode(); node; node = walk.nextNode()) {
      const re = /[^\\s\\-\\/]+/g;
      let m;
      while ((m = re.exec(node.data)) !== null) {
        const r = document.createRange();
        r.setStart(node, m.index);
        r.setEnd(node, m.index + m[0].length);
        const tops = new Set(Array.from(r.getClientRects()).map(x => Math.round(x.top)));
        if (tops.size > 1) out.push(m[0]);
      }
    }
  }
  return out;
}"""


def _report() -> advice.AdviceReport:
    """Every tip with numbers of the real table's widths (a 12 MP photo's peaks and seconds)."""
    side = advice.Side
    results = []
    for t in advice.TIPS:
        if t.number in (4, 5, 10, 11):
            results.append(advice.TipResult(t, "not measurable here", "needs a CUDA GPU; `benchmarks/gpu_check.py` measures it"))
        else:
            b, a = side("PNG", 812_000_000, 790_000_000, 2.31), side("JPEG q95", 850_000_000, 800_000_000, 0.52)
            v, why = advice.verdict(b, a, "process", t.claims)
            results.append(advice.TipResult(t, v, why, b, a))
    return advice.AdviceReport("AMD EPYC [avx512_bf16], 2 cores, 24 GiB RAM, no CUDA GPU", "2026-12-04T03:00:00",
                               "a 12 MP photo", 3, tuple(results))


def test_the_tips_table_breaks_no_word_at_1366_px(browser, page_url, monkeypatch, tmp_path) -> None:  # noqa: F811
    monkeypatch.setenv("GPEN_HOME", str(tmp_path))
    advice.save_report(_report())
    page = browser.new_page(viewport={"width": 1366, "height": 768})
    try:
        page.goto(page_url)
        page.get_by_role("tab", name="Hardware check").click()
        page.get_by_text("Tips, measured here").click()
        page.locator("#tips-report table").wait_for()
        Shots(tmp_path).take(page, "tips-1366")
        broken = page.evaluate(_BROKEN_WORDS, "#tips-report")
        assert broken == [], f"words broken across lines: {broken[:20]}"
    finally:
        page.close()
