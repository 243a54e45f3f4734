"""The Compare tab (issue 51 item 4): B against A in a delta table (absolute and %), sides named A and B, and
no drawing while the tab is hidden (a Plan-tab change with a plan pinned costs nothing here)."""

from __future__ import annotations

import re
from typing import Any

import pytest

pytest.importorskip("panel")

from workbench_widgets.app.app import WorkbenchApp  # noqa: E402
from workbench_widgets.app.compare_search import delta_markdown  # noqa: E402
from workbench_widgets.app.page_text import page_text  # noqa: E402
from workbench_widgets.app.state import WorkbenchState  # noqa: E402
from workbench_widgets.app.tabs import tab_index  # noqa: E402


@pytest.fixture(scope="module")
def app() -> WorkbenchApp:
    return WorkbenchApp(WorkbenchState())  # tp8 pp8 on 64 devices, no start-up search


def _rows(markdown: str) -> dict[str, list[str]]:
    out = {}
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and not set(cells[1]) <= set("-:"):
            out[cells[0]] = cells[1:]
    return out


def test_deltas_are_b_minus_a_absolute_and_relative(app: WorkbenchApp) -> None:
    app.store.pin()
    a = app.store.pinned
    app.state.pp = 4 if app.state.pp != 4 else 2
    b = app.store.estimate
    assert b is not None and b.plan != a.plan
    rows = _rows(delta_markdown(a, b))
    step = rows["step time (ms)"]
    assert step[:2] == [f"{a.step_time_s * 1e3:,.1f}", f"{b.step_time_s * 1e3:,.1f}"]
    assert step[2] == f"{(b.step_time_s - a.step_time_s) * 1e3:+,.1f}"
    assert step[3] == f"{(b.step_time_s / a.step_time_s - 1) * 100:+.1f} %"
    tokens = rows["throughput (tokens/s)"]
    assert tokens[3] == f"{(b.tokens_per_s / a.tokens_per_s - 1) * 100:+.1f} %"
    memory = rows["peak memory per device (GiB)"]
    assert memory[2] == f"{(b.peak_memory_bytes - a.peak_memory_bytes) / 2**30:+,.1f}"
    faster = "B is faster" if b.step_time_s < a.step_time_s else "A is faster"
    assert delta_markdown(a, b).startswith(f"**{faster}**")


def test_hidden_tab_draws_nothing_and_opening_it_draws_a_and_b(app: WorkbenchApp) -> None:
    view = app.views["compare"]
    app.tabs.active = tab_index("plan")
    app.store.pin()
    before = list(view.sides.objects)
    app.state.micro_batch_size = 2 if app.state.micro_batch_size != 2 else 1
    assert view.sides.objects == before  # hidden: not redrawn on a Plan-tab change
    app.tabs.active = tab_index("compare")
    sides = view.sides.objects
    assert len(sides) == 2 and sides != before
    heads = [side[0].object.splitlines()[0] for side in sides]
    assert heads == [
        f"### A: `{app.store.pinned.plan.describe()}` [{app.store.pinned.backend}]",
        f"### B: `{app.store.estimate.plan.describe()}` [{app.store.estimate.backend}]",
    ]
    bars = view.breakdown.object.y_range.factors
    assert sorted(label[:2] for label in bars) == ["A:", "B:"]  # named A and B, not #0 and #1
    assert "B against A" in view.deltas.object
    widths = [side[1].object.width for side in sides]
    assert sum(widths) <= 1440 - 300 - 80  # the two sides fit beside the composer at 1,440 px
    assert all(re.fullmatch(r"[AB]: pipeline timeline", side[1].object.title.text) for side in sides)


def test_tabs_with_their_own_inputs_hide_the_training_sidebar(app: WorkbenchApp) -> None:
    """Issue 51 item 5: the Serving and Mixed cluster tabs have their own model, cluster and nodes; the training
    composer (and its report button) is hidden there, so one set of inputs is on screen at a time."""
    for tab, shown in (
        (tab_index("serving"), False),
        (tab_index("plan"), True),
        (tab_index("mixed"), False),
        (tab_index("compare"), True),
    ):
        app.tabs.active = tab
        assert app.sidebar.visible is shown and app.download.visible is shown, tab
    app.tabs.active = tab_index("plan")


@pytest.fixture(scope="module")
def attached() -> tuple[WorkbenchApp, Any]:
    """A session's app on tp4 pp2 vpp4 (64 devices) in a bokeh Document, the Compare tab shown, A pinned."""
    from bokeh.document import Document
    from panel.io.state import set_curdoc

    app = WorkbenchApp(WorkbenchState())
    doc = Document()
    with set_curdoc(doc):
        doc.add_root(app.panel().get_root(doc))
        for name, value in (("tp", 4), ("pp", 2), ("schedule", "interleaved-1f1b"), ("vpp", 4)):
            setattr(app.state, name, value)
        app.show_tab("compare")
        app.store.pin()
    return app, doc


def _side_figures(view: Any) -> list[Any]:
    return [side[i].object for side in view.sides.objects for i in (1, 2)] + [view.breakdown.object]


def test_a_change_of_b_is_written_into_the_figures_shown(attached) -> None:
    """Issue 51 item 10 (the Compare tab <= 300 ms): a change of B's tp or pp adds no bokeh model to the page
    (the browser patches data instead of building figures) and leaves A's figures as they were; B's figures
    then show what figures built afresh for B show, A and B on one time axis covering both."""
    from bokeh.models import GlyphRenderer
    from panel.io.state import set_curdoc
    from workbench_widgets.plots import estimate_memory_figure
    from workbench_widgets.plots.timeline import (
        content_timeline_figure,
        estimate_timeline_content,
        x_range_ms,
    )

    app, doc = attached
    view = app.views["compare"]
    figures, models = _side_figures(view), {m.id for m in doc.models}
    a_data = {r.name: dict(r.data_source.data) for r in figures[0].renderers if isinstance(r, GlyphRenderer)}
    for name, value in (("tp", 8), ("pp", 4), ("tp", 4), ("pp", 2)):
        with set_curdoc(doc):
            setattr(app.state, name, value)
        b = app.store.estimate
        assert b is not None and getattr(b.plan, name) == value
        assert _side_figures(view) == figures and {m.id for m in doc.models} == models
        a_now = {r.name: r.data_source.data for r in figures[0].renderers if isinstance(r, GlyphRenderer)}
        assert all(a_now[k] is a_data[k] or a_now[k] == a_data[k] for k in a_data)  # A untouched
        content = estimate_timeline_content(b, width=520)
        fresh = content_timeline_figure(content, stable=True)
        ours = {r.name: r.data_source.data for r in figures[2].renderers if isinstance(r, GlyphRenderer)}
        for r in fresh.renderers:
            if isinstance(r, GlyphRenderer):
                for key, column in r.data_source.data.items():
                    assert list(map(str, column)) == list(map(str, ours[r.name][key])), (r.name, key)
        assert figures[2].title.text == "B: pipeline timeline"
        assert view.sides.objects[1][0].object.splitlines()[2] == page_text(content.title)
        assert figures[3].title.text == estimate_memory_figure(b).title.text
        assert list(figures[3].x_range.factors) == [str(r) for r in sorted(b.memory["rank"].to_list())]
        a_content = estimate_timeline_content(app.store.pinned, width=520)
        ends = [x_range_ms(c.span_s) for c in (a_content, content)]
        span = (min(e[0] for e in ends), max(e[1] for e in ends))
        for fig in (figures[0], figures[2]):
            assert (fig.x_range.start, fig.x_range.end) == span
        assert [f.split(": ")[0] for f in figures[4].y_range.factors] == ["B", "A"]


def test_the_plan_tab_draws_only_while_shown(attached) -> None:
    """A change of B in the Compare tab sends the browser B's figures only: the hidden Plan tab draws the
    current estimate when it is shown again."""
    from panel.io.state import set_curdoc

    app, doc = attached
    plan = app.views["plan"]
    title = plan.timeline.object.title.text
    with set_curdoc(doc):
        app.show_tab("compare")
        app.state.micro_batch_size = 2 if app.state.micro_batch_size != 2 else 1
    assert plan.timeline.object.title.text == title  # hidden: not written
    with set_curdoc(doc):
        app.show_tab("plan")
    assert plan.timeline.object.title.text != title
    assert f"`{app.store.estimate.plan.describe()}`" in plan.summary.object
