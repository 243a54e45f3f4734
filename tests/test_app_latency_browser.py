"""Issue 19 item 12 in a real browser: a tp change at 64 devices is written into the figures already on the page
(the timeline keeps its bokeh model, so the browser patches data sources instead of building new views, which
cost ~0.5 s a figure). The numbers themselves are measured by ``benchmarks/bench_app_latency.py``; this test
only guards the mechanism (no timed assertion)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import FIND_VIEW_JS, needs_chromium, served_app_page, view_js

pytestmark = [pytest.mark.browser, needs_chromium]

TIMELINE_JS = view_js('m.name === "plan-timeline"', "[v.model.id, v.model.title.text]")


def test_a_tp_change_patches_the_timeline_in_place() -> None:
    with served_app_page(viewport={"width": 1600, "height": 1000}, console=False) as (
        app,
        page,
        outside,
        errors,
    ):
        page.goto(app.url, wait_until="load", timeout=120_000)
        page.wait_for_function(TIMELINE_JS, timeout=120_000)
        model_id, title = page.evaluate(TIMELINE_JS)
        select = page.locator(".wb-tp select").first
        current = select.input_value()
        other = next(o for o in select.locator("option").all_inner_texts() if o.strip() != current)
        select.select_option(label=other)
        page.wait_for_function(
            f"() => {{ const t = ({TIMELINE_JS})(); return t && t[1] !== {title!r}; }}", timeout=120_000
        )
        new_id, new_title = page.evaluate(TIMELINE_JS)
    assert new_title != title
    assert new_id == model_id  # the same figure, patched in place
    assert outside == [] and errors == []


MEMORY_JS = """() => {
  // The plan-memory figure's view on screen: its y range end, its y axis's width (px) and how often it and
  // the breakdown figure ("Where the step time goes") were laid out since the first call (a layout of a
  // figure lays out the whole page: BokehJS computes it from the root).
  const found = {};
  const walk = (view) => {
    const m = view.model;
    if (m && m.name === "plan-memory") found.memory = view;
    if (m && m.title && String(m.title.text).startsWith("Where the step time goes")) found.breakdown = view;
    for (const child of (view.child_views ?? [])) walk(child);
  };
  const idx = Bokeh.index;
  const roots = idx.roots !== undefined ? [...idx.roots] : [...(idx.values ? idx.values() : Object.values(idx))];
  roots.forEach(walk);
  if (!found.memory || !found.breakdown) return null;
  window.__wb_layouts ??= 0;
  for (const view of [found.memory, found.breakdown]) {
    if (view.__wb_counted) continue;
    const compute = view.compute_layout;
    view.compute_layout = function (...args) { window.__wb_layouts += 1; return compute.apply(this, args); };
    view.__wb_counted = true;
  }
  const axis = found.memory.renderer_views.get(found.memory.model.left[0]);
  return [found.memory.model.y_range.end, axis.layout.bbox.width, window.__wb_layouts, found.memory.model.title.text];
}"""


def test_memory_and_breakdown_changes_lay_out_no_page() -> None:
    """From a plan over the usable memory (98.7 GiB: a y axis to 110 GiB, ticks up to ``100``) to tp 8 (56.7
    GiB: to 89.6 GiB, ticks up to ``80``) and back: the memory figure's y axis keeps its width (labels padded to
    five figures) and neither it nor the step-time breakdown is laid out again (their legends reference no
    renderer a change writes), so BokehJS lays out no page for them (issue 51 item 10)."""
    seen = _switched("tp", ("8", "4", "8", "4"), MEMORY_JS, title_at=3)
    ends = [s[0] for s in seen]
    assert min(ends) < 100 <= max(ends), ends  # the tick labels went from two figures to three
    assert len({s[1] for s in seen}) == 1, seen  # the axis kept its width
    assert seen[-1][2] == seen[0][2], seen  # no layout of either figure


TIMELINE_VIEW_JS = f"""() => ({FIND_VIEW_JS})((m) => m.name === "plan-timeline")"""
BREAKDOWN_VIEW_JS = f"""() => ({FIND_VIEW_JS})(
  (m) => m.title != null && String(m.title.text).startsWith("Where the step time goes"))"""


TIMELINE_AXIS_JS = f"""() => {{
  // The plan-timeline figure's view on screen: its title, its y axis's width (px), the widest lane label on
  // screen (px, as BokehJS measured it) and how often it and the step-time breakdown were laid out since the
  // first call.
  const found = ({TIMELINE_VIEW_JS})();
  const breakdown = ({BREAKDOWN_VIEW_JS})();
  if (!found || !breakdown) return null;
  window.__wb_timeline_layouts ??= 0;
  for (const view of [found, breakdown]) {{
    if (view.__wb_counted) continue;
    const compute = view.compute_layout;
    view.compute_layout = function (...args) {{ window.__wb_timeline_layouts += 1; return compute.apply(this, args); }};
    view.__wb_counted = true;
  }}
  const axis = found.renderer_views.get(found.model.left[0]);
  return [found.model.title.text, axis.layout.bbox.width, Math.max(...axis._tick_label_extents()),
          window.__wb_timeline_layouts];
}}"""


def test_a_schedule_change_lays_out_neither_the_timeline_nor_the_breakdown() -> None:
    """From interleaved 1F1B (lanes ``rank r · chunk c``) to 1F1B (lanes ``rank r``) and back: the timeline's
    y axis keeps its width (its lane labels padded to ``STABLE_LABEL_CHARS`` in a monospaced font) and the
    step-time breakdown's too (its bar labelled ``this plan``, the plan in its title), so BokehJS lays out
    neither figure (nor the page around it) again (issue 51 item 10)."""
    seen = _switched(
        "schedule", ("1f1b", "interleaved-1f1b", "1f1b", "interleaved-1f1b"), TIMELINE_AXIS_JS, title_at=0
    )
    assert len({s[0] for s in seen}) == 2, seen  # two plans, each shown twice
    assert len({s[1] for s in seen}) == 1, seen  # the axis kept its width...
    assert len({round(s[2], 3) for s in seen}) == 1, seen  # ...as wide for "rank 0" as for "rank 0 · chunk 0"
    assert seen[-1][3] == seen[0][3], seen  # no layout of either figure


PINNED_QUERY = "cp=1&tp=4&pp=2&schedule=interleaved-1f1b&vpp=4&zero_stage=1&micro_batch_size=1"
"""The benchmark's starting plan (dp8 tp4 pp2 vpp4 interleaved 1F1B on 64 devices) as the app's query string."""


def _switched(control: str, values: tuple[str, ...], probe_js: str, *, title_at: int) -> list[Any]:
    """What ``probe_js`` reads on the served app's page (opened on ``PINNED_QUERY``), once settled and after
    ``control`` is set to each of ``values`` in turn (each change awaited by the title at index ``title_at`` of
    the reading); no request leaves the machine and the page logs no error."""
    with served_app_page(viewport={"width": 1600, "height": 1000}, console=False) as (
        app,
        page,
        outside,
        errors,
    ):
        page.goto(f"{app.url}?{PINNED_QUERY}", wait_until="load", timeout=120_000)
        page.wait_for_function(probe_js, timeout=120_000)
        page.wait_for_timeout(1500)  # the page settles
        seen = [page.evaluate(probe_js)]
        select = page.locator(f".wb-{control} select").first
        for value in values:
            select.select_option(value)
            page.wait_for_function(
                f"() => {{ const m = ({probe_js})(); return m && m[{title_at}] !== {seen[-1][title_at]!r}; }}",
                timeout=60_000,
            )
            page.wait_for_timeout(500)  # a layout would follow the patch within a frame or two
            seen.append(page.evaluate(probe_js))
    assert outside == [] and errors == []
    return seen


SHIMS_PROBE_JS = f"""() => {{
  // (the app's BokehJS shims installed, the timeline's title, stylesheet writes of an unchanged text since the
  // first call, getComputedStyle calls of two reads of one visual property in one task)
  if (!window.Bokeh || !Bokeh.index) return null;
  const found = ({TIMELINE_VIEW_JS})();
  if (!found) return null;
  if (window.__wb_same_css === undefined) {{
    window.__wb_same_css = 0;
    const text = Object.getOwnPropertyDescriptor(Node.prototype, "textContent");
    Object.defineProperty(HTMLStyleElement.prototype, "textContent", {{
      configurable: true,
      get() {{ return text.get.call(this); }},
      set(css) {{ if (text.get.call(this) === css) window.__wb_same_css += 1; text.set.call(this, css); }},
    }});
  }}
  const visual = [...found.renderer_views.values()].flatMap((r) => [...(r.visuals ?? [])])
    .find((v) => typeof v._get_css_value === "function");
  const computed = window.getComputedStyle;
  let calls = 0;
  window.getComputedStyle = (...args) => {{ calls += 1; return computed(...args); }};
  try {{ visual._get_css_value("line-color"); visual._get_css_value("line-color"); }}
  finally {{ window.getComputedStyle = computed; }}
  return [window.__wb_bokehjs_shims ?? [], found.model.title.text, window.__wb_same_css, calls];
}}"""


def test_the_bokehjs_shims_spare_a_change_its_repeated_css_work() -> None:
    """The served page runs ``SHIMS_JS`` (``workbench_widgets.app.bokehjs_shims``): over tp changes no
    stylesheet is written with the text it already has (BokehJS 3.9 rewrites every annotation's position
    stylesheet on each paint, which forces a style recalculation before the next CSS read), and a visual's
    second CSS read in one task asks the cascade nothing (issue 51 item 10)."""
    seen = _switched("tp", ("8", "4"), SHIMS_PROBE_JS, title_at=1)
    assert all(s[0] == ["skip_same_css", "css_cache"] for s in seen), seen
    assert len({s[1] for s in seen}) == 2, seen  # the figures changed, so BokehJS painted
    assert seen[-1][2] == seen[0][2], seen  # no stylesheet written again with its own text over the changes
    assert {s[3] for s in seen} <= {0, 1}, seen  # two reads, at most one getComputedStyle


PAGE_LAYOUTS_JS = f"""() => {{
  // (the timeline's title, its lane count, the memory figure's bar count, how often any rendered view, figure
  // or Panel layout, was laid out since the first call: a layout of one figure lays out the whole page)
  const timeline = ({TIMELINE_VIEW_JS})();
  const memory = ({FIND_VIEW_JS})((m) => m.name === "plan-memory");
  if (!timeline || !memory) return null;
  window.__wb_page_layouts ??= 0;
  const hook = (view) => {{
    if (!view.__wb_page_counted && typeof view.compute_layout === "function") {{
      const compute = view.compute_layout;
      view.compute_layout = function (...args) {{ window.__wb_page_layouts += 1; return compute.apply(this, args); }};
      view.__wb_page_counted = true;
    }}
    for (const child of (view.child_views ?? [])) hook(child);
  }};
  const idx = Bokeh.index;
  (idx.roots !== undefined ? [...idx.roots] : [...(idx.values ? idx.values() : Object.values(idx))]).forEach(hook);
  return [timeline.model.title.text, timeline.model.y_range.bounds[1] + 0.5, memory.model.x_range.factors.length,
          window.__wb_page_layouts];
}}"""


def test_a_pp_change_lays_out_no_figure() -> None:
    """From pp 2 to pp 4 and back at 64 devices (interleaved 1F1B, vpp 4: twice the timeline's lanes, 2 <-> 4 memory
    bars, other placement groups): the timeline keeps its height and its y axis its width, the memory figure's x
    factors change in place, and no view of the page, figure or Panel layout, is laid out again (issue 51 item
    10: pp changes took ~480 ms while the timeline's height followed its lanes)."""
    seen = _switched("pp", ("4", "2", "4", "2"), PAGE_LAYOUTS_JS, title_at=0)
    lanes = [s[1] for s in seen]
    assert lanes[0] == lanes[2] == lanes[4] < lanes[1] == lanes[3], seen  # the lanes changed with pp...
    assert [s[2] for s in seen] == [2, 4, 2, 4, 2], seen  # ...and the memory figure's bars
    assert seen[-1][3] == seen[0][3], seen  # no layout of any view
