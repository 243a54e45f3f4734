"""The Mixed cluster tab in a real browser (headless Debian Chromium, Playwright): pools typed in the command line's
form rebuild the rows, the Plan button runs the planner while the page stays live, the ranked table and the
placement figure appear, a click on another row redraws the placement, a single pool is said in the tab, nothing
leaves 127.0.0.1 and the page logs no error. Skipped without /usr/bin/chromium."""

from __future__ import annotations

import pytest

from tests.conftest import needs_chromium, served_app_page, view_js
from workbench.presets import catalog

pytestmark = [pytest.mark.browser, needs_chromium]

PLACEMENT_TITLE_JS = view_js(
    'm.title != null && typeof m.title.text === "string" && m.title.text.startsWith("Which pool runs")',
    "v.model.title.text",
)


def _type(page, css: str, text: str) -> None:
    field = page.locator(f"{css} input").first
    field.fill(text)
    field.press("Enter")


def test_mixed_tab_plans_the_typed_pools_and_draws_the_selected_plan() -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    with served_app_page(viewport={"width": 1366, "height": 900}, console=True) as (
        app,
        page,
        outside,
        errors,
    ):
        page.goto(app.url, wait_until="load", timeout=90_000)
        page.locator(".bk-tab", has_text="Mixed cluster").first.click()
        label = next(
            k for k, v in catalog.model_choices().items() if v == "llama-3.1-8b"
        )  # "<family> · <id>"
        page.locator(".wb-mixed-model_preset select").first.select_option(label=label)
        _type(page, ".wb-mixed-seq_len", "2048")
        _type(page, ".wb-mixed-global_batch_size", "32")
        _type(page, ".wb-mixed-text", "dgx-h100:1+dgx-a100:1+dgx-a100:1")
        nodes = page.locator(".wb-mixed-pool-nodes input")
        sync_api.expect(nodes).to_have_count(3, timeout=30_000)
        page.locator(".wb-mixed-pool-remove button").nth(2).click()
        sync_api.expect(nodes).to_have_count(2, timeout=30_000)
        page.locator(".wb-mixed-run button").first.click()
        page.locator(".wb-mixed-summary li", has_text="over the fastest pool alone").wait_for(timeout=90_000)
        text = page.locator(".wb-mixed-summary p").first.inner_text()  # the header line
        assert "1 x dgx-h100" in text and "1 x dgx-a100" in text and "llama-3.1-8b" in text, text
        page.wait_for_function(f"() => ({PLACEMENT_TITLE_JS})() !== null", timeout=30_000)
        best = page.evaluate(PLACEMENT_TITLE_JS)
        rows = page.locator(".wb-mixed-table .tabulator-row")
        assert rows.first.locator(".tabulator-cell:visible").first.inner_text().strip() == "1"
        rows.nth(1).click()
        page.wait_for_function(
            f"() => {{ const t = ({PLACEMENT_TITLE_JS})(); return t && t !== {best!r}; }}", timeout=30_000
        )
        page.locator(".wb-mixed-pool-remove button").nth(1).click()
        page.locator(".wb-mixed-run button").first.click()
        message = page.locator(".wb-mixed-message")
        sync_api.expect(message).to_contain_text("needs at least two pools", timeout=30_000)
    assert not outside, outside
    assert not errors, errors
