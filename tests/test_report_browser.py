"""report.html in a real browser (Debian's chromium through chromium-driver) at 1280 px: nothing wider than
the window, every table and plot inside its container, every plot loaded. Skips only where chromium or its
driver is not installed (CI installs both: .ci/apt-packages.txt)."""

from __future__ import annotations

import pytest

from kdakit import report
from kdakit.report import sample
from tests.infra import webdriver

pytestmark = pytest.mark.skipif(webdriver.missing() is not None, reason=f"{webdriver.missing()}")

MEASURE = """
const doc = document.documentElement;
const tables = [...document.querySelectorAll('table')].map((t, i) => ({
  index: i, width: t.getBoundingClientRect().width, container: t.parentElement.clientWidth,
  cells: [...t.querySelectorAll('td,th')].filter(c => c.scrollWidth > c.clientWidth + 1)
    .map(c => c.textContent),
  right: t.getBoundingClientRect().right,
}));
const images = [...document.querySelectorAll('img')].map(img => ({
  alt: img.alt, natural: img.naturalWidth, width: img.getBoundingClientRect().width,
  right: img.getBoundingClientRect().right, container: img.parentElement.clientWidth,
}));
return {inner: window.innerWidth, scroll: doc.scrollWidth, client: doc.clientWidth, tables, images,
        body_right: document.body.getBoundingClientRect().right};
"""


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    root = sample.write_sample(tmp_path_factory.mktemp("sample"))
    _, page = report.write_report(root)
    with webdriver.Browser(width=1280, height=1000) as browser:
        browser.open(page)
        return browser.run(MEASURE)


def test_the_page_has_no_horizontal_overflow_at_1280_px(measured):
    assert measured["inner"] == 1280
    assert measured["scroll"] <= measured["client"], "the page scrolls sideways"


def test_every_table_fits_its_container_and_no_cell_is_cut(measured):
    assert len(measured["tables"]) >= 8
    for t in measured["tables"]:
        assert t["width"] <= t["container"] + 1 and t["right"] <= measured["body_right"] + 1, t
        assert t["cells"] == [], f"table {t['index']}: cells wider than they show: {t['cells'][:3]}"


def test_every_plot_is_loaded_and_inside_the_page(measured):
    images = measured["images"]
    assert any(i["alt"].endswith("helion/triton, 95 % CI") for i in images)
    for i in images:
        assert i["natural"] > 0, f"{i['alt']}: not loaded"
        assert i["width"] <= i["container"] + 1 and i["right"] <= measured["body_right"] + 1, i
