"""In-place refresh of the Plan tab's figures: a change that keeps a figure's layout rewrites its data and
texts in the figure already shown (no new bokeh models); a change of layout still swaps the figure."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("panel")

import numpy as np  # noqa: E402
from bokeh.models import ColumnDataSource, GlyphRenderer  # noqa: E402
from workbench_widgets.app.app import WorkbenchApp  # noqa: E402
from workbench_widgets.app.state import WorkbenchState  # noqa: E402
from workbench_widgets.plots.breakdown import (  # noqa: E402
    SERVED_BAR_LABEL,
    refresh_breakdown_figure,
    served_title,
)
from workbench_widgets.plots.timeline import (  # noqa: E402
    content_timeline_figure,
    estimate_timeline_content,
    refresh_timeline_figure,
    timeline_content,
)

from workbench.specs.estimate import MEMORY_COLUMNS  # noqa: E402


@pytest.fixture
def app() -> WorkbenchApp:
    """An app on the State's parameter defaults (tp 8, pp 8, 1f1b, fits in 80 GiB), which these tests start
    from; a new session opens on the planner's best plan instead (tests/test_app_defaults.py)."""
    wb = WorkbenchApp(WorkbenchState(framework="generic"))  # non-blocking sends: the aggregated view
    wb.panel()
    return wb


def _main(fig) -> GlyphRenderer:
    """The renderer of the view shown: ``blocks`` or ``runs`` (the app's stable figure holds both, the
    unused one empty)."""
    views = [r for r in fig.renderers if r.name in ("blocks", "runs")]
    return next((r for r in views if len(r.data_source.data["left"])), views[0])


def _columns(fig) -> dict[str, list]:
    return {k: list(v) for k, v in _main(fig).data_source.data.items()}


def _slower_network(app: WorkbenchApp) -> None:
    """Every collective a quarter as fast: step time and block times change, lanes and ops do not."""
    w = app.composer.widgets
    w["scale_up_bandwidth_GBps"].value = w["scale_up_bandwidth_GBps"].value / 4
    w["scale_out_bandwidth_GBps"].value = w["scale_out_bandwidth_GBps"].value / 4


def test_bandwidth_change_rewrites_the_shown_timeline(app: WorkbenchApp) -> None:
    fig, before_title = app.views["plan"].timeline.object, app.views["plan"].timeline.object.title.text
    before = _columns(fig)
    step_before = app.store.estimate.step_time_s
    _slower_network(app)
    assert app.store.estimate.step_time_s > step_before  # the change reached the estimate
    assert app.views["plan"].timeline.object is fig  # same figure, same models
    assert _columns(fig) != before and fig.title.text != before_title
    rebuilt = content_timeline_figure(estimate_timeline_content(app.store.estimate))
    assert fig.title.text == rebuilt.title.text
    for key, column in _columns(rebuilt).items():
        assert np.array_equal(np.asarray(column), np.asarray(_columns(fig)[key])), key
    assert (fig.x_range.start, fig.x_range.end) == (rebuilt.x_range.start, rebuilt.x_range.end)
    assert (fig.x_range.reset_start, fig.x_range.reset_end) == (rebuilt.x_range.start, rebuilt.x_range.end)


def test_bandwidth_change_keeps_memory_and_rewrites_breakdown(app: WorkbenchApp) -> None:
    memory, breakdown = app.views["plan"].memory.object, app.views["plan"].breakdown.object
    parts = next(r for r in breakdown.renderers if r.name == "parts").data_source
    before = dict(parts.data)
    _slower_network(app)
    assert app.views["plan"].memory.object is memory  # memory does not depend on the network
    assert app.views["plan"].breakdown.object is breakdown
    assert list(parts.data["right"]) != list(before["right"])
    total_ms = app.store.estimate.breakdown.total_s * 1e3
    assert parts.data["total_ms"][0] == pytest.approx(total_ms)


def test_recompute_change_rewrites_the_memory_bars(app: WorkbenchApp) -> None:
    fig = app.views["plan"].memory.object
    app.composer.widgets["recompute"].value = "full"  # keeps only the layer inputs: fewer activation bytes
    assert app.views["plan"].memory.object is fig
    bars = next(r for r in fig.renderers if r.name == "bars").data_source.data
    shown = {
        r: g
        for r, g, part in zip(bars["rank"], bars["gib"], bars["part"], strict=True)
        if part == "activations"
    }
    memory = app.store.estimate.memory
    expected = {str(r): b / 2**30 for r, b in zip(memory["rank"], memory["activations_bytes"], strict=True)}
    assert shown == pytest.approx(expected)
    assert f"peak {app.store.estimate.peak_memory_bytes / 2**30:.1f} GiB" in fig.title.text


def _over_capacity_legend(fig) -> bool:
    return any(getattr(i.label, "value", None) == "over capacity" and i.visible for i in fig.legend[0].items)


def test_going_over_capacity_shows_the_marks_and_their_legend(app: WorkbenchApp) -> None:
    fig = app.views["plan"].memory.object
    assert app.store.estimate.fits and not _over_capacity_legend(fig)
    seq_len = app.state.seq_len
    app.composer.widgets["seq_len"].value = seq_len * 8  # 8x the activations: over 80 GiB
    assert not app.store.estimate.fits
    assert app.views["plan"].memory.object is fig and _over_capacity_legend(fig)
    marks = next(r for r in fig.renderers if r.name == "over_capacity").data_source.data["x"]
    memory = app.store.estimate.memory
    assert list(marks) == [
        str(r) for r, t in zip(memory["rank"], memory["total_bytes"], strict=True) if t > 80e9
    ]
    app.composer.widgets["seq_len"].value = seq_len
    assert not _over_capacity_legend(fig)


def test_the_memory_axis_follows_every_update() -> None:
    """Issue 19: tp 8 -> 2 (over the 80 GiB on some ranks), then interleaved-1f1b at vpp 2: the shown
    figure is rewritten in place each time, and its y axis must reach above every rank and the capacity.

    The range must be a Range1d whose reset follows too: BokehJS's DataRange1d puts back the end it was
    created with on its next update, so a written end never reached the page (tests/test_app_layout_browser.py
    checks the drawn range)."""
    from bokeh.models import Range1d

    app = WorkbenchApp(WorkbenchState(framework="generic"))  # the parameters' defaults: tp 8, pp 8, 1f1b
    app.panel()
    fig = app.views["plan"].memory.object
    capacity_gib = app.store.estimate.memory_capacity_bytes / 2**30
    for change in ({"tp": 2}, {"schedule": "interleaved-1f1b"}):
        app.state.param.update(**change)
        memory = app.store.estimate.memory
        peak_gib = float(np.max(sum(memory[c].to_numpy() for c in MEMORY_COLUMNS))) / 2**30
        assert peak_gib > capacity_gib  # ranks over capacity, which the old axis cut off
        assert app.views["plan"].memory.object is fig  # the in-place path
        y = fig.y_range
        assert isinstance(y, Range1d)
        assert y.start == 0 and float(y.end) >= max(peak_gib, capacity_gib)  # type: ignore[arg-type]
        assert (y.reset_start, y.reset_end) == (y.start, y.end)
        over = next(r for r in fig.renderers if r.name == "over_capacity").data_source.data["y"]
        assert max(over) <= y.end  # every over-capacity marker is inside the axis
    assert app.state.vpp == 2


def test_layout_change_is_written_into_the_shown_timeline(app: WorkbenchApp) -> None:
    """Other lanes (and here the exact view instead of the aggregated one) are written into the figure shown,
    which then shows what a figure built for the new plan shows (issue 19 item 12: no new figure models)."""
    fig = app.views["plan"].timeline.object
    assert _main(fig).name == "runs"  # tp 8 pp 8, m = 256: aggregated
    app.composer.widgets["num_nodes"].value = 2  # fewer pipeline ranks: other lanes
    assert app.views["plan"].timeline.object is fig and fig.name == "plan-timeline"
    content = estimate_timeline_content(app.store.estimate)
    rebuilt = content_timeline_figure(content, stable=True)  # as the app builds it: a fixed plot area
    assert _main(fig).name == _main(rebuilt).name == "blocks"
    assert fig.title.text == rebuilt.title.text and fig.frame_height == rebuilt.frame_height
    assert fig.yaxis[0].major_label_overrides == rebuilt.yaxis[0].major_label_overrides
    assert (fig.y_range.start, fig.y_range.end) == (rebuilt.y_range.start, rebuilt.y_range.end)
    for key, column in _columns(rebuilt).items():
        assert np.array_equal(np.asarray(column), np.asarray(_columns(fig)[key])), key
    shown = [i.label.value for i in fig.legend[0].items if i.visible]
    assert shown == [i.label.value for i in rebuilt.legend[0].items if i.visible]
    assert not any(len(r.data_source.data["left"]) for r in fig.renderers if r.name == "runs")


def test_refresh_timeline_figure_writes_the_new_blocks() -> None:
    import polars as pl

    def frame(scale: float) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "rank": [0, 0, 1, 1],
                "stage": [0, 0, 1, 1],
                "chunk": [0, 0, 0, 0],
                "microbatch": [0, 0, 0, 0],
                "op": ["F", "B", "F", "B"],
                "start_s": [0.0, 2.0, 1.0, 3.0],
                "end_s": [1.0, 3.0, 2.0, 4.0],
            }
        ).with_columns(pl.col("start_s", "end_s") * scale)

    first, second = timeline_content(frame(1.0), makespan_s=4.0), timeline_content(frame(2.0), makespan_s=8.0)
    assert first.layout_key == second.layout_key
    fig = content_timeline_figure(first)
    models_before = {m.id for m in fig.references()}
    refresh_timeline_figure(fig, second)
    assert {m.id for m in fig.references()} == models_before
    blocks = _main(fig).data_source
    assert list(blocks.data["left"]) == [0.0, 4000.0, 2000.0, 6000.0]  # ms, twice the first timeline
    assert list(blocks.data["right"]) == [2000.0, 6000.0, 4000.0, 8000.0]
    assert "makespan 8000.00 ms" in fig.title.text
    assert (fig.x_range.start, fig.x_range.end) == (-80.0, 8080.0)  # 1 % padding either side
    assert any(isinstance(m, ColumnDataSource) for m in fig.references())


def test_refresh_breakdown_relabels_and_refuses_another_bar_count(app: WorkbenchApp) -> None:
    fig = app.views["plan"].breakdown.object
    first = app.store.estimate
    app.composer.widgets["num_nodes"].value = 2  # another plan, another bar label
    second = app.store.estimate
    assert app.views["plan"].breakdown.object is fig
    # the app's one bar keeps its label (an axis of one width) and the title names the plan
    assert list(fig.y_range.factors) == [SERVED_BAR_LABEL]
    assert fig.title.text == f"Where the step time goes: {second.plan.describe()}" != served_title(first)
    assert not refresh_breakdown_figure(fig, [first, second])  # two bars: the figure is rebuilt instead
    assert list(fig.y_range.factors) == [SERVED_BAR_LABEL]


def test_served_session_gets_the_new_timeline_data_in_place() -> None:
    """In a served session the rewrite happens in the session's document, on the same figure model."""
    import threading
    import time

    from workbench_widgets.app.server import ThreadedApp, wait_for_http

    def wait_for(predicate: Any, timeout_s: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(0.1)
        return False

    def widget(doc: Any, css: str) -> Any:
        return next(m for m in doc.models if css in (getattr(m, "css_classes", None) or []))

    def summary(doc: Any) -> str:
        return widget(doc, "wb-summary").text

    with ThreadedApp(address="127.0.0.1") as served:
        wait_for_http(served.url, 30)
        server = served.server
        session = server.get_sessions("/")[0]
        doc = session.document
        (fig,) = [m for m in doc.models if getattr(m, "name", None) == "plan-timeline"]
        before_data, before_summary = _columns(fig), summary(doc)
        control = widget(doc, "wb-scale_up_bandwidth_GBps")
        done = threading.Event()

        def change() -> None:  # as the browser would: on the server's loop, holding the session's lock
            control.value = control.value / 4
            done.set()

        server.io_loop.add_callback(lambda: session.with_document_locked(change))
        assert done.wait(20), "the server loop did not run the change"
        assert wait_for(lambda: summary(doc) != before_summary)
        assert wait_for(lambda: _columns(fig) != before_data)
        assert [m for m in doc.models if getattr(m, "name", None) == "plan-timeline"] == [fig]
