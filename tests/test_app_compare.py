"""The Compare tab (issue 51 item 4): B against A in a delta table (absolute and %), sides named A and B, and
no drawing while the tab is hidden (a Plan-tab change with a plan pinned costs nothing here)."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("panel")

from workbench_widgets.app.app import WorkbenchApp  # noqa: E402
from workbench_widgets.app.compare_search import delta_markdown  # noqa: E402
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
