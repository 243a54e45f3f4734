"""What a user sees of the served app, in headless Debian Chromium driven by Playwright (issue 19).

- The page fits the window: at 1280 and 1920 px nothing scrolls sideways and "Where the step time goes" lies
  inside the window (the app was ~2700 px wide at every size).
- Every figure title of the Plan tab fits its figure (the placement title was cut after "tp groups across
  nodes: 0 of"), and no table has an empty header row.
- The memory chart's y axis follows the data: after a change that puts ranks over capacity, the range the
  browser draws reaches above every rank's total and the capacity line (BokehJS's DataRange1d kept its first
  end, so the bars over capacity were cut off).

Skipped when /usr/bin/chromium is absent (CI installs Debian's chromium).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import (
    APP_PIN,
    APP_PIN_QUERY,
    CHROMIUM,
    CHROMIUM_FLAGS,
    collect_errors,
    keep_local,
    needs_chromium,
)

pytestmark = [pytest.mark.browser, needs_chromium]

GIB = 2**30
BREAKDOWN_TITLE = "Where the step time goes"

FIGURES_JS = """() => {
  // Every figure on screen: its title lines with their drawn width (the title's own font), the width of the
  // plot frame the title sits over, the box of the figure in the window, and its numeric y range.
  if (!window.Bokeh || !Bokeh.index) return [];
  const ctx = document.createElement("canvas").getContext("2d");
  const out = [];
  const walk = (view) => {
    const m = view.model;
    if (m && m.title && typeof m.title.text === "string" && view.frame && view.el) {
      const t = m.title;
      ctx.font = `${t.text_font_style} ${t.text_font_size} ${t.text_font}`;
      const box = view.el.getBoundingClientRect();
      out.push({
        name: m.name,
        title: t.text,
        line_widths: t.text.split("\\n").map((line) => ctx.measureText(line).width),
        frame_width: view.frame.bbox.width,
        left: box.left,
        right: box.right,
        visible: box.width > 0 && box.height > 0,
        y_end: typeof m.y_range.end === "number" ? m.y_range.end : null,
      });
    }
    for (const child of (view.child_views ?? [])) walk(child);
  };
  const idx = Bokeh.index;
  const roots = idx.roots !== undefined ? [...idx.roots] : [...(idx.values ? idx.values() : Object.values(idx))];
  roots.forEach(walk);
  return out;
}"""

HEADER_ROWS_JS = """() => {
  // The text of every header row of every table in the page, shadow roots included.
  const rows = [];
  const visit = (root) => {
    for (const tr of root.querySelectorAll("thead tr")) rows.push(tr.textContent.trim());
    for (const el of root.querySelectorAll("*")) if (el.shadowRoot) visit(el.shadowRoot);
  };
  visit(document);
  return rows;
}"""


def _figures_ready(names: tuple[str, ...]) -> str:
    return f"""() => {{
      const figs = ({FIGURES_JS})().filter((f) => f.visible);
      return {list(names)!r}.every((n) => figs.some((f) => f.name === n || f.title.startsWith(n)));
    }}"""


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Any, Any, list[str]]]:
    """(app, browser, requests that tried to leave 127.0.0.1): one served app and one browser for the module."""
    sync_api = pytest.importorskip("playwright.sync_api")
    from workbench_widgets.app.server import ThreadedApp

    outside: list[str] = []
    with ThreadedApp(address="127.0.0.1") as app, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS)
        try:
            yield app, browser, outside
        finally:
            browser.close()
    assert outside == [], f"requests left the machine: {outside}"


def _open(served: tuple[Any, Any, list[str]], width: int, query: str = "") -> tuple[Any, list[str]]:
    """A page of the served app ``width`` px wide, opened on the app's URL with ``query`` (a link's choices)."""
    app, browser, outside = served
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors: list[str] = []
    collect_errors(page, errors)
    keep_local(page, outside)
    page.goto(f"{app.url}?{query}" if query else app.url, wait_until="load", timeout=90_000)
    page.wait_for_function(
        _figures_ready(("plan-timeline", "plan-memory", BREAKDOWN_TITLE, "Placement")), timeout=90_000
    )
    page.wait_for_timeout(500)  # the layout settles after the first paint
    return page, errors


@pytest.mark.parametrize("width", [1280, 1920])
def test_the_page_fits_the_window_and_every_title_its_figure(served: Any, width: int) -> None:
    page, errors = _open(served, width)
    try:
        assert page.evaluate("document.documentElement.scrollWidth") <= width  # no sideways scrolling
        figures = page.evaluate(FIGURES_JS)
        (breakdown,) = [f for f in figures if f["title"].startswith(BREAKDOWN_TITLE)]
        assert 0 <= breakdown["left"] < breakdown["right"] <= width, breakdown
        for fig in figures:
            assert fig["right"] <= width, fig
            # Bokeh draws a title on one canvas line per "\n" and cuts what passes the figure's edge.
            assert max(fig["line_widths"]) <= fig["frame_width"], fig
        placement = next(f for f in figures if f["title"].startswith("Placement"))
        tp = _opening_plan().tp  # tp <= 8 devices per node: no tp group leaves its node
        groups = 64 // tp if tp > 1 else 0  # a plan without tensor parallelism has no tp groups to place
        assert f"tp groups across nodes: 0 of {groups}" in placement["title"]  # the whole sentence
        headers = page.evaluate(HEADER_ROWS_JS)
        assert headers, "the summary table is missing"
        assert all(headers), f"a table has an empty header row: {headers}"
    finally:
        page.close()
    assert errors == [], errors


def test_the_goodput_tab_fits_a_1280_px_window(served: Any) -> None:
    page, errors = _open(served, 1280)
    try:
        page.locator(".bk-tab", has_text="Goodput").first.click()
        page.locator(".wb-goodput-run button").first.click()
        page.wait_for_function(
            f"() => ({FIGURES_JS})().filter((f) => f.visible && /goodput/i.test(f.title)).length >= 2",
            timeout=60_000,
        )
        page.wait_for_timeout(500)
        assert page.evaluate("document.documentElement.scrollWidth") <= 1280
        for fig in page.evaluate(FIGURES_JS):
            if fig["visible"]:
                assert fig["right"] <= 1280, fig
    finally:
        page.close()
    assert errors == [], errors


def _inputs() -> tuple[Any, Any, Any]:
    """The app's default model, cluster and workload, from the catalog: Llama 3.1 70B on 8 DGX H100,
    8192 tokens x 256 sequences, bf16."""
    from workbench.presets.catalog import load_cluster, load_model
    from workbench.specs.hardware import DType
    from workbench.specs.plan import Workload

    workload = Workload(seq_len=8192, global_batch_size=256, dtype=DType.BF16)
    return load_model("llama-3.1-70b"), load_cluster("dgx-h100", num_nodes=8), workload


@functools.cache
def _opening_plan() -> Any:
    """The plan the app opens on: the core planner's first for the default inputs, with ``workbench plan``'s
    defaults (top 20 refined, 5 % of the memory kept free)."""
    from workbench.presets.calibration import load_calibration
    from workbench.presets.frameworks import DEFAULT_FRAMEWORK
    from workbench.search import Constraints, search

    best = search(
        *_inputs(),
        Constraints(memory_headroom_frac=0.05),
        top_k=20,
        calibration=load_calibration(framework=DEFAULT_FRAMEWORK),
    )
    assert best.plans.row(0, named=True)["fits"]
    return best.estimates[0].plan


@functools.cache
def _pinned_plan() -> Any:
    """The plan ``APP_PIN`` makes of the app's defaults (the State's other plan fields as they open)."""
    from workbench_widgets.app.state import WorkbenchState
    from workbench_widgets.app.store import WorkbenchStore

    store = WorkbenchStore(WorkbenchState())
    store.load_plan(APP_PIN)
    return store.plan()


def _expected_peak_gib(**changes: Any) -> float:
    """The largest per-rank memory total of the pinned plan (``APP_PIN``) with ``changes``, priced by the
    core's analytic backend directly."""
    from dataclasses import replace

    import polars as pl

    from workbench.estimate.registry import get_backend
    from workbench.presets.frameworks import DEFAULT_FRAMEWORK
    from workbench.specs.estimate import MEMORY_COLUMNS

    model, cluster, workload = _inputs()
    plan = replace(_pinned_plan(), **changes)
    estimate = get_backend("analytic", framework=DEFAULT_FRAMEWORK).estimate(model, cluster, workload, plan)
    totals = estimate.memory.select(pl.sum_horizontal(*MEMORY_COLUMNS)).to_series().to_numpy()
    return float(totals.max()) / GIB


def test_the_memory_axis_follows_the_data_in_the_browser(served: Any) -> None:
    page, errors = _open(served, 1280, APP_PIN_QUERY)
    capacity_gib = 80.0  # H100 SXM5 80 GB: 80 GiB of HBM (profiles/devices)

    def memory_title() -> str:
        return next(f["title"] for f in page.evaluate(FIGURES_JS) if f["name"] == "plan-memory")

    def choose(control: str, value: str) -> None:
        before = memory_title()
        page.locator(f".wb-{control} select").first.select_option(value)
        page.wait_for_function(
            f"""() => {{ const f = ({FIGURES_JS})().find((f) => f.name === "plan-memory");
                        return f && f.title !== {before!r}; }}""",
            timeout=60_000,
        )
        page.wait_for_timeout(500)  # BokehJS updates its ranges on the next paint

    assert _pinned_plan().zero_stage > 0 and _pinned_plan().micro_batch_size == 1, _pinned_plan()
    try:
        for control, value, changes in (
            ("zero_stage", "0", {"zero_stage": 0}),  # unsharded optimizer states: every rank over 80 GiB
            ("micro_batch_size", "2", {"zero_stage": 0, "micro_batch_size": 2}),  # more activations still
        ):
            choose(control, value)
            peak_gib = _expected_peak_gib(**changes)
            assert peak_gib > capacity_gib  # the change is one that was cut off before the fix
            (memory,) = [f for f in page.evaluate(FIGURES_JS) if f["name"] == "plan-memory"]
            assert "over capacity" in memory["title"], memory
            assert memory["y_end"] >= peak_gib and memory["y_end"] >= capacity_gib, (memory, peak_gib)
    finally:
        page.close()
    assert errors == [], errors
