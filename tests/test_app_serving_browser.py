"""The Serving tab in a real browser (headless Debian Chromium, Playwright): opening the tab simulates the default
deployment, the two latency CDFs are laid out side by side at their full width in a 1280-pixel window, a change of the input length
updates the numbers, the host-offload and ep fields of the dense default model are disabled with their reasons, nothing leaves 127.0.0.1 and the page logs no error. Skipped without /usr/bin/chromium."""

from __future__ import annotations

import pytest

from tests.conftest import needs_chromium, served_app_page

pytestmark = [pytest.mark.browser, needs_chromium]

CDF_BOXES_JS = """() => {
  // Screen boxes of the rendered figures whose title starts with TTFT or TPOT (the latency CDFs).
  if (!window.Bokeh || !Bokeh.index) return [];
  const boxes = [];
  const walk = (view) => {
    const title = view.model && view.model.title && view.model.title.text;
    if (typeof title === "string" && /^(TTFT|TPOT): p50/.test(title)) {
      const r = view.el.getBoundingClientRect();
      boxes.push({title: title.slice(0, 4), x: r.x, y: r.y, width: r.width});
    }
    for (const child of (view.child_views ?? [])) walk(child);
  };
  const idx = Bokeh.index;
  const roots = idx.roots !== undefined ? [...idx.roots] : [...(idx.values ? idx.values() : Object.values(idx))];
  roots.forEach(walk);
  return boxes;
}"""


def test_serving_tab_computes_and_lays_out_its_figures() -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    with served_app_page(viewport={"width": 1280, "height": 900}, console=True) as (
        app,
        page,
        outside,
        errors,
    ):
        page.goto(app.url, wait_until="load", timeout=90_000)
        page.get_by_text("Serving", exact=True).first.click()
        summary = page.locator(".wb-serving-summary")
        summary.filter(has_text="TTFT mean").first.wait_for(timeout=90_000)
        page.wait_for_function(f"() => ({CDF_BOXES_JS})().length === 2", timeout=30_000)
        ttft, tpot = sorted(page.evaluate(CDF_BOXES_JS), key=lambda b: b["x"])
        assert (ttft["title"], tpot["title"]) == ("TTFT", "TPOT")
        assert ttft["width"] > 400 and tpot["width"] > 400  # not collapsed
        assert abs(ttft["y"] - tpot["y"]) < 2 and tpot["x"] >= ttft["x"] + ttft["width"] - 2  # side by side
        # the dense default model: the host-offload field is disabled in the page, its reason beside it
        sync_api.expect(page.locator(".wb-serving-offload_group_size input").first).to_be_disabled(
            timeout=30_000
        )
        note = page.locator(".wb-serving-offload-note").first
        sync_api.expect(note).to_contain_text("no MoE layers", timeout=30_000)
        # and so are its ep fields, with their reason; the dtype fields are enabled
        sync_api.expect(page.locator(".wb-serving-ep select").first).to_be_disabled(timeout=30_000)
        sync_api.expect(page.locator(".wb-serving-ep-note").first).to_contain_text("is dense", timeout=30_000)
        sync_api.expect(page.locator(".wb-serving-weight_dtype select").first).to_be_enabled(timeout=30_000)
        sync_api.expect(summary.first).to_contain_text("tp all-reduce: NCCL at tp 8", timeout=30_000)
        ttft_line = page.locator(".wb-serving-summary li").first  # "TTFT mean ... ms, p50 ..., p99 ..."
        before = ttft_line.inner_text()
        assert before.startswith("TTFT mean") and " ms" in before
        field = page.locator(".wb-serving-input_tokens input").first
        field.fill("4096")
        field.press("Enter")
        sync_api.expect(ttft_line).not_to_have_text(before, timeout=60_000)
        sync_api.expect(ttft_line).to_contain_text("TTFT mean", timeout=60_000)
    assert not outside, outside
    assert not errors, errors
