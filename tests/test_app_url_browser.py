"""A link opens the same view (issue 51 item 7): the served app keeps its inputs and plan in the URL's query
string, and a page opened on such a URL shows that model, cluster size and plan. Headless Debian Chromium."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest

from tests.conftest import needs_chromium, served_app_page
from tests.test_app_browser import TIMELINE_TITLE_JS

pytestmark = [pytest.mark.browser, pytest.mark.slow, needs_chromium]

SUMMARY_JS = """() => {
  // The text of the Plan tab's summary pane (the Markdown model with css class wb-summary).
  const out = [];
  for (const doc of (window.Bokeh ? Bokeh.documents : [])) {
    for (const m of doc.all_models) {
      if (m.css_classes && m.css_classes.includes('wb-summary') && typeof m.text === 'string') out.push(m.text);
    }
  }
  return out.join(' ');
}"""


def test_a_link_carries_the_inputs_and_the_plan() -> None:
    with served_app_page(viewport={"width": 1440, "height": 900}) as (app, page, outside, errors):
        query = "model_preset=llama-3.1-8b&num_nodes=2&tp=2&pp=2&cp=1&micro_batch_size=2&schedule=1f1b&vpp=1"
        page.goto(f"{app.url}?{query}", wait_until="load", timeout=90_000)
        page.wait_for_function(TIMELINE_TITLE_JS, timeout=90_000)
        page.wait_for_function(f"() => ({SUMMARY_JS})().includes('tp2 pp2')", timeout=60_000)
        text = page.evaluate(SUMMARY_JS)
        assert "8B" in text or "8b" in text, text
        assert "tp2 pp2" in text and "mbs2 " in text and "cp1" not in text, text
        dp = 16 // (2 * 2 * 1)  # 2 nodes x 8 devices / (tp 2 x pp 2 x cp 1)
        assert f"dp{dp} tp2 pp2 mbs2" in text, text
        assert outside == [], outside
        params = parse_qs(urlparse(page.url).query)
        assert params["model_preset"] == ["llama-3.1-8b"] and params["tp"] == ["2"]


def test_a_link_to_an_interleaved_plan_opens_that_plan() -> None:
    """vpp 4 is valid only once pp 2 and the interleaved schedule are set; the link sets all at once."""
    with served_app_page(viewport={"width": 1440, "height": 900}) as (app, page, outside, errors):
        query = "tp=4&pp=2&cp=1&vpp=4&schedule=interleaved-1f1b&micro_batch_size=1"
        page.goto(f"{app.url}?{query}", wait_until="load", timeout=90_000)
        page.wait_for_function(TIMELINE_TITLE_JS, timeout=90_000)
        page.wait_for_function(f"() => ({SUMMARY_JS})().includes('vpp4')", timeout=60_000)
        text = page.evaluate(SUMMARY_JS)
        assert "dp8 tp4 pp2 vpp4 mbs1" in text and "interleaved-1f1b" in text, text
        assert outside == [], outside
