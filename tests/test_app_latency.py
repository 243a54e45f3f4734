"""The fast path of a control change (issue 19 item 12; numbers in benchmarks/bench_app_latency.py).

A change of tp, pp, micro-batch, schedule or model at 64 devices writes new data and texts into the figures
already on the page: the document gains no bokeh model and the plan tab keeps its figure objects, so the
browser patches data sources in place instead of building new figure views (which took ~0.5 s per figure).
What the figures then show equals what figures built afresh for the new estimate show.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("panel")

from bokeh.document import Document  # noqa: E402
from panel.io.state import set_curdoc  # noqa: E402
from workbench_widgets.app.app import WorkbenchApp  # noqa: E402
from workbench_widgets.plots import (  # noqa: E402
    estimate_memory_figure,
    estimates_breakdown_figure,
    placement_figure,
)
from workbench_widgets.plots._timeline_content import STABLE_FRAME_PX  # noqa: E402
from workbench_widgets.plots.breakdown import SERVED_BAR_LABEL  # noqa: E402
from workbench_widgets.plots.timeline import (  # noqa: E402
    STABLE_LABEL_CHARS,
    STABLE_LABEL_FONT,
    content_timeline_figure,
    estimate_timeline_content,
)

from tests.conftest import APP_PIN  # noqa: E402

CHANGES: tuple[tuple[str, Any], ...] = (
    ("tp", 8),  # 1 -> 8: the timeline goes from the exact view to the aggregated one
    ("pp", 4),  # other lanes, other memory ranks
    ("micro_batch_size", 2),
    ("schedule", "interleaved-1f1b"),  # other ops: other legend entries
    ("model_preset", "llama-3.1-8b"),
)
"""The benchmark's changes, from the pinned plan ``APP_PIN`` (dp16 tp1 pp1 cp4 ZeRO-3 on 8 DGX H100 nodes)."""


@pytest.fixture(scope="module")
def session() -> tuple[WorkbenchApp, Document]:
    """A new session's app (as a browser tab gets it), its page attached to a bokeh Document."""
    app = WorkbenchApp()
    doc = Document()
    with set_curdoc(doc):
        doc.add_root(app.panel().get_root(doc))
        app.store.load_plan(APP_PIN)
    assert app.store.estimate is not None and app.store.estimate.plan.describe().startswith(
        "dp16 tp1 pp1 cp4"
    )
    return app, doc


@pytest.fixture
def served(session: tuple[WorkbenchApp, Document]) -> Any:
    """The session, put back on its pinned plan after each test."""
    app, doc = session
    opening = {name: getattr(app.state, name) for name, _ in CHANGES}
    yield session
    with set_curdoc(doc):
        app.state.param.update(**opening)


def _figures(app: WorkbenchApp) -> list[Any]:
    v = app.views["plan"]
    return [v.timeline.object, v.memory.object, v.breakdown.object, v.placement.object]


def _main(fig: Any) -> Any:
    """The renderer of the view the timeline shows (``blocks`` or ``runs``; the other one is empty)."""
    (shown,) = [r for r in fig.renderers if r.name in ("blocks", "runs") and len(r.data_source.data["left"])]
    return shown


def _legend(fig: Any) -> list[tuple[Any, ...]]:
    """Each legend entry of ``fig`` as drawn: label, shown or not, and the glyph's look at the entry's row
    (colours from the renderer's source where they are a field)."""
    out = []
    for item in fig.legend[0].items:
        (r,) = item.renderers
        look = []
        for attr in ("fill_color", "line_color", "hatch_pattern", "fill_alpha", "marker"):
            v = getattr(r.glyph, attr, None)
            field = v if isinstance(v, str) and v in r.data_source.data else getattr(v, "field", None)
            if field is not None:  # a colour per row: the entry's row's
                v = r.data_source.data[field][item.index or 0]
            look.append(str(v))
        out.append((item.label.value, item.visible, type(r.glyph).__name__, *look))
    return out


def _part_colors(fig: Any, renderer: str) -> dict[str, str]:
    """Part -> colour of the bars of ``renderer`` (one colour per part)."""
    data = next(r for r in fig.renderers if r.name == renderer).data_source.data
    colors = {p: c for p, c in zip(data["part"], data["color"], strict=True)}
    assert len(colors) == len(set(zip(data["part"], data["color"], strict=True)))
    return colors


def _main_bars(fig: Any) -> dict[str, list[str]]:
    """The columns of a breakdown figure's bars (renderer ``parts``), as text."""
    data = next(r for r in fig.renderers if r.name == "parts").data_source.data
    return {k: list(map(str, v)) for k, v in data.items()}


def _legend_models(*figures: Any) -> dict[str, Any]:
    """Every model the legends of ``figures`` reach (items, their renderers, glyphs and data sources): a change
    of any of them makes BokehJS rebuild that legend and lay its figure out again."""
    return {m.id: m for fig in figures for m in fig.legend[0].references()}


def _sources(models: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    return {
        i: {k: list(map(str, v)) for k, v in m.data.items()} for i, m in models.items() if hasattr(m, "data")
    }


def _set(app: WorkbenchApp, doc: Document, name: str, value: Any) -> None:
    with set_curdoc(doc):  # as a served session's callback runs
        setattr(app.state, name, value)
    assert getattr(app.state, name) == value and app.store.estimate is not None, app.store.error


@pytest.mark.parametrize(("name", "other"), CHANGES)
def test_control_change_adds_no_bokeh_model(served, name: str, other: Any) -> None:
    app, doc = served
    assert app.store.cluster_spec().num_devices == 64
    figures, models = _figures(app), {m.id for m in doc.models}
    sizes = (figures[0].height, figures[0].frame_height)
    base = getattr(app.state, name)
    assert base != other
    for value in (other, base):
        _set(app, doc, name, value)
        assert _figures(app) == figures  # the same figure objects...
        assert {m.id for m in doc.models} == models  # ...and not one new model in the document
        # ...and the timeline keeps its height whatever its lanes (a pp change relayouts nothing below it)
        assert (figures[0].height, figures[0].frame_height) == sizes == (sizes[0], STABLE_FRAME_PX)


@pytest.mark.parametrize(("name", "other"), CHANGES)
def test_figures_written_in_place_show_the_new_estimate(served, name: str, other: Any) -> None:
    app, doc = served
    base = getattr(app.state, name)
    for value in (other, base):
        _set(app, doc, name, value)
        e = app.store.estimate
        timeline, memory, breakdown, placement = _figures(app)
        content = estimate_timeline_content(e)
        fresh = content_timeline_figure(content)
        assert timeline.title.text == fresh.title.text
        assert _main(timeline).name == ("runs" if content.aggregated else "blocks")
        for key, column in _main(fresh).data_source.data.items():
            assert np.array_equal(np.asarray(column), np.asarray(_main(timeline).data_source.data[key])), key
        # the same lane labels, the app's padded to one width (``STABLE_LABEL_CHARS``, right-aligned)
        padded = timeline.yaxis[0].major_label_overrides
        assert {k: v.strip() for k, v in padded.items()} == fresh.yaxis[0].major_label_overrides
        assert {len(v) for v in padded.values()} == {STABLE_LABEL_CHARS}
        assert timeline.yaxis[0].major_label_text_font == STABLE_LABEL_FONT
        ours, theirs = (_main(f).glyph.fill_color.transform for f in (timeline, fresh))  # op code -> colour
        assert (list(ours.palette), ours.low, ours.high) == (list(theirs.palette), theirs.low, theirs.high)
        stable = content_timeline_figure(content, stable=True)
        assert (timeline.frame_height, timeline.height) == (stable.frame_height, stable.height)
        assert timeline.y_range.start == stable.y_range.start and timeline.y_range.end == stable.y_range.end
        shown = [i.label.value for i in timeline.legend[0].items if i.visible]
        assert shown == [i.label.value for i in fresh.legend[0].items]
        fresh_memory = estimate_memory_figure(e)
        assert memory.title.text == fresh_memory.title.text
        assert list(memory.x_range.factors) == list(fresh_memory.x_range.factors)
        # the legends: the entries a fresh figure has (labels, order, shown, glyph and colours)...
        fresh_breakdown = estimates_breakdown_figure([e])
        assert _legend(memory) == _legend(fresh_memory) and _legend(breakdown) == _legend(fresh_breakdown)
        # the step time's bar: the parts a fresh figure has, under the one label of every plan (the plan in
        # the title), so that the y axis keeps its width
        assert list(breakdown.y_range.factors) == [SERVED_BAR_LABEL]
        assert breakdown.title.text == f"{fresh_breakdown.title.text}: {e.plan.describe()}"
        parts, fresh_parts = (_main_bars(f) for f in (breakdown, fresh_breakdown))
        assert parts["plan"] == [SERVED_BAR_LABEL] * len(fresh_parts["plan"])
        assert {k: v for k, v in parts.items() if k != "plan"} == {
            k: v for k, v in fresh_parts.items() if k != "plan"
        }
        # ...whose colours are the bars' colours of each part
        for fig, bars in ((memory, "bars"), (breakdown, "parts")):
            looks = {label: fill for label, _, _, fill, *_ in _legend(fig)}
            assert all(looks[part] == color for part, color in _part_colors(fig, bars).items()), (
                fig.title.text
            )
        fresh_placement = placement_figure(e.plan, e.cluster)
        assert placement.title.text == fresh_placement.title.text
        for r in ("devices", "tp_groups", "dp_groups"):
            ours = next(x for x in placement.renderers if x.name == r).data_source.data
            theirs = next(x for x in fresh_placement.renderers if x.name == r).data_source.data
            assert {k: list(map(str, v)) for k, v in ours.items()} == {
                k: list(map(str, v)) for k, v in theirs.items()
            }, r


@pytest.mark.parametrize(("name", "other"), CHANGES)
def test_a_change_leaves_the_memory_and_breakdown_legends_alone(served, name: str, other: Any) -> None:
    """The legends of the memory and step-time figures reference legend-only renderers on constant sources,
    never the bars a change writes: BokehJS rebuilds a legend, and lays its figure out again, when anything
    its items reach changes (issue 51 item 10). A change sends nothing to a model these legends reach but
    the over-capacity entry's ``visible``, when a rank goes over or back."""
    app, doc = served
    _, memory, breakdown, _ = _figures(app)
    reached = _legend_models(memory, breakdown)
    data = _sources(reached)
    assert data and not any(
        r.name in ("bars", "over_capacity", "parts", "overlapped") for r in reached.values()
    )
    touched: list[tuple[str, str]] = []

    def record(event: Any) -> None:
        model = getattr(event, "model", None)
        if model is not None and model.id in reached:
            touched.append((type(model).__name__, getattr(event, "attr", type(event).__name__)))

    doc.on_change(record)
    try:
        for value in (other, getattr(app.state, name)):
            _set(app, doc, name, value)
    finally:
        doc.remove_on_change(record)
    assert set(touched) <= {("LegendItem", "visible")}, touched
    assert _sources(reached) == data


def test_exact_timeline_rows_carry_no_per_row_names(served) -> None:
    """Lanes, op names and colours reach the page through formatters and a colour mapper, not as a string
    per block: every column of a change is numbers, which bokeh sends as binary buffers (issue 51 item 10);
    the op code names the op of its timeline row."""
    app, _ = served
    content = estimate_timeline_content(app.store.estimate)
    assert not content.aggregated
    assert all(isinstance(v, np.ndarray) and v.dtype.kind in "iuf" for v in content.data.values())
    assert content.data["lane"].dtype == np.int32 and content.data["op_code"].dtype == np.uint8
    ops = [content.legend_ops[c] for c in content.data["op_code"]]
    assert ops == app.store.estimate.timeline["op"].to_list()


def test_short_columns_reach_the_page_as_json_and_long_ones_as_buffers(served) -> None:
    """Bokeh sends each numpy column of a change as a binary buffer (two websocket frames, two messages in the
    page); the memory bars, over-capacity marks and placement devices (tens of rows at 64 devices) go as lists
    inside the patch's JSON, the timeline's thousands of blocks stay binary (issue 51 item 10)."""
    from workbench_widgets.plots._style import SHORT_COLUMN_ROWS, short_columns_as_lists

    app, _ = served
    timeline, memory, _, placement = _figures(app)
    for fig, name in ((memory, "bars"), (memory, "over_capacity"), (placement, "devices")):
        data = next(r for r in fig.renderers if r.name == name).data_source.data
        assert all(isinstance(v, list) for v in data.values()), (name, {k: type(v) for k, v in data.items()})
    assert all(isinstance(v, np.ndarray) for v in _main(timeline).data_source.data.values())
    short, long = np.arange(SHORT_COLUMN_ROWS, dtype=np.int32), np.arange(SHORT_COLUMN_ROWS + 1.0)
    out = short_columns_as_lists({"short": short, "long": long, "text": ["a"]})
    assert out["short"] == list(range(SHORT_COLUMN_ROWS)) and out["long"] is long and out["text"] == ["a"]


def test_a_notice_shown_or_hidden_lays_out_nothing_again(served) -> None:
    """The schedule 1f1b moves vpp 4 -> 1, which the adjusted notice says, and the notice goes again when the
    interleaved schedule is back; neither sends a change of ``visible`` to the page (BokehJS answers one with a
    layout pass of the whole page that repaints every figure: about 100 ms of the page's CPU)."""
    from workbench_widgets.app.views import is_shown

    app, doc = served
    opening = {name: getattr(app.state, name) for name in ("cp", "tp", "pp", "schedule", "vpp")}
    view = app.views["plan"]
    try:
        for name, value in (("cp", 1), ("tp", 4), ("pp", 2), ("schedule", "interleaved-1f1b"), ("vpp", 4)):
            _set(app, doc, name, value)
        (model,) = [m for m, _ in view.adjusted._models.values() if m.document is doc]  # what the page has

        def on_page() -> tuple[bool, str | None]:
            return model.visible, dict(model.styles).get("display")

        assert not is_shown(view.adjusted) and on_page() == (True, "none")
        _set(app, doc, "schedule", "1f1b")
        assert app.state.vpp == 1 and is_shown(view.adjusted) and "vpp 4 -&gt; 1" in view.adjusted.object
        assert on_page() == (True, None)
        _set(app, doc, "schedule", "interleaved-1f1b")
        assert app.state.vpp == 4 and not is_shown(view.adjusted) and on_page() == (True, "none")
    finally:
        with set_curdoc(doc):
            app.state.param.update(**opening)


def test_every_control_answers_a_change_with_one_patch_at_once(session) -> None:
    """Each composer control applies a change from the page under one document hold (``OnePatch``: URL,
    options and figures in one PATCH-DOC message), and a list or a checkbox without Panel's 50 ms debounce
    (one event per choice, nothing to merge); the numeric inputs keep the debounce."""
    import panel as pn
    from workbench_widgets.app.views import OnePatch

    app, _ = session
    widgets = app.composer.widgets
    assert all(isinstance(w, OnePatch) for w in widgets.values()), [
        n for n, w in widgets.items() if not isinstance(w, OnePatch)
    ]
    discrete = [w for w in widgets.values() if isinstance(w, pn.widgets.Select | pn.widgets.Checkbox)]
    assert len(discrete) >= len(("tp", "pp", "schedule", "model_preset")) and all(
        "value" in w._priority_changes for w in discrete
    )
    numeric = [w for w in widgets.values() if isinstance(w, pn.widgets.IntInput | pn.widgets.FloatInput)]
    assert numeric and not any("value" in w._priority_changes for w in numeric)
