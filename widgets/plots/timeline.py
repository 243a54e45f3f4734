"""The pipeline timeline: one lane per pipeline rank (and per model chunk when vpp > 1), F/B/I/W blocks.

Dense timelines stay responsive: up to ``max_blocks`` blocks (default 6,000) are drawn one quad each,
with the micro-batch number written on the blocks wide enough to hold it. Above that (p=64, m=512 with a
split backward is ~200,000 blocks, each narrower than a pixel) the figure switches to an *aggregated*
view: every lane is rasterised into ``num_bins`` time bins (about two screen pixels each), a bin takes the
colour of the op that covers most of it and an opacity from its busy share, and equal neighbouring bins
merge into one quad (see ``workbench_widgets.plots._lanes.aggregate_runs``). The glyph count is then bounded by
lanes x bins whatever m is, and idle time still shows as gaps. For full detail of a dense step, draw a
*ranged* view: pass ``window_s`` (``detail_window_s`` gives the window holding the first ``max_blocks``
blocks, the warm-up where the bubble lives).

Lanes never crowd: the plot area gives every lane ``LANE_PX`` pixels (``lane_layout``); beyond
``MAX_FRAME_PX`` it stops growing and pans in y over the other lanes. A communication block also gets a
``COMM_MIN_PX`` wide mark (renderer ``comm_marks``, screen units), so sends stay visible at full zoom-out;
aggregated runs, which blend several blocks and idle time into one quad, have their own legend entry.

What is drawn is computed first, without bokeh (``timeline_content``, in ``_timeline_content``); the
builders stay pure functions of it, and ``refresh_timeline_figure`` writes a new content into a figure
whose ``layout_key`` matches. The Panel app builds its figure ``stable`` (every renderer and legend entry
either view may need), so that a change of lanes, view or ops is written in place too: the browser then
patches data sources instead of building a new figure (issue 19 item 12).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
from bokeh.models import (
    ColumnDataSource,
    CustomJSHover,
    HoverTool,
    LinearColorMapper,
    Range1d,
    WheelPanTool,
)
from bokeh.models.annotations import Span
from bokeh.models.renderers import DataRenderer, GlyphRenderer
from bokeh.plotting import figure
from workbench_widgets.plots._lanes import Lanes
from workbench_widgets.plots._style import (
    COMM_COLOR,
    GREY,
    OP_COLORS,
    OP_NAMES,
    PLOT_WIDTH_PX,
    label_ticks,
    op_color,
    plain_axes,
)
from workbench_widgets.plots._timeline_content import (
    BLOCK_COLUMNS,
    COMM_COLUMNS,
    COMM_MARK_ALPHA,
    COMM_MIN_PX,
    LABEL_COLUMNS,
    LANE_PX,
    MAX_BLOCKS,
    MAX_FRAME_PX,
    RUN_COLUMNS,
    TimelineContent,
    estimate_timeline_content,
    lane_layout,
    stable_lane_layout,
    timeline_content,
    x_range_ms,
)

if TYPE_CHECKING:
    from workbench.specs.estimate import Estimate

BLENDED_LABEL = "blended: several blocks per 2 px bin, paler = partly idle"
"""Legend entry of aggregated runs (quads that merge blocks and idle time)."""
_CHROME_PX, _LEGEND_ROW_PX = 110, 22
"""Height outside the plot area (title, x axis and its label; and per legend row), for panes that read
``height`` (bokeh sizes the figure from ``frame_height``)."""
_LEGEND_PX_PER_CHAR, _LEGEND_ITEM_PX = 6.5, 30
STABLE_TAG = "wb-stable-timeline"
"""Tag of a figure built ``stable`` (``content_timeline_figure``)."""
STABLE_LABEL_CHARS = 18
"""Characters every lane label of a ``stable`` figure is left-padded to (``rank 63 · chunk 15`` is 18): in
``STABLE_LABEL_FONT`` the y axis is then as wide for ``rank 0`` as for ``rank 0 · chunk 0``. BokehJS lays a
figure out again, with the page around it, whenever an axis changes width: 40-70 ms of the page's time on a
schedule change with and without chunks, measured in headless Chromium (issue 51 item 10). Longer labels
(rank >= 100 with chunks) still show, on a wider axis."""
STABLE_LABEL_FONT = "monospace"
"""Font of a ``stable`` figure's lane labels: one advance per character, so padding fixes their width."""
STABLE_AXIS_PX = 140
"""Room a ``stable`` figure's legend leaves for its y axis: ``STABLE_LABEL_CHARS`` monospaced characters of
BokehJS's 11 px axis font (0.6 em each in DejaVu Sans Mono, Debian's ``monospace``: 119 px), the ticks and
the axis's own label."""
STABLE_NARROWEST_PX = 980
"""The narrowest a ``stable`` (the app's) figure is drawn: its width in the app's Plan tab at a 1280 px window
(measured in headless Chromium; ``tests/test_app_layout_browser.py`` checks that nothing passes the window).
Its legend is packed for this width less ``STABLE_AXIS_PX`` (the legend starts where the plot area does):
packed for the figure's nominal width, it passed a 1280 px window by 26 px."""

__all__ = [
    "BLENDED_LABEL",
    "COMM_MIN_PX",
    "LANE_PX",
    "MAX_BLOCKS",
    "MAX_FRAME_PX",
    "TimelineContent",
    "content_timeline_figure",
    "estimate_timeline_content",
    "estimate_timeline_figure",
    "lane_layout",
    "refresh_timeline_figure",
    "timeline_content",
    "timeline_figure",
]


def estimate_timeline_figure(estimate: Estimate, **kwargs: Any) -> figure:
    """``timeline_figure`` of an Estimate, titled with its schedule, pp, vpp and micro-batch count."""
    return content_timeline_figure(estimate_timeline_content(estimate, **kwargs))


def timeline_figure(
    timeline: pl.DataFrame,
    *,
    makespan_s: float | None = None,
    bubble_fraction: float | None = None,
    title_prefix: str = "Pipeline timeline",
    max_blocks: int = MAX_BLOCKS,
    num_bins: int | None = None,
    window_s: tuple[float, float] | None = None,
    width: int = PLOT_WIDTH_PX,
) -> figure:
    """Bokeh figure of a timeline frame (``workbench.specs.estimate.TIMELINE_COLUMNS``, seconds).

    x is milliseconds from the step start; renderer ``blocks`` holds one quad per timeline row (exact view)
    or renderer ``runs`` one quad per aggregated run; ``labels`` holds the micro-batch numbers.
    ``window_s`` keeps only blocks that overlap ``(t0, t1)`` seconds. ValueError for an empty timeline.
    """
    content = timeline_content(
        timeline,
        makespan_s=makespan_s,
        bubble_fraction=bubble_fraction,
        title_prefix=title_prefix,
        max_blocks=max_blocks,
        num_bins=num_bins,
        window_s=window_s,
        width=width,
    )
    return content_timeline_figure(content)


def content_timeline_figure(content: TimelineContent, *, stable: bool = False) -> figure:
    """The figure of a ``TimelineContent`` (``timeline_figure`` is this of ``timeline_content``).

    ``stable`` (the Panel app): the figure holds every renderer either view can need (``blocks``, ``labels``,
    ``comm_marks`` and ``runs``, the unused ones empty), a legend entry for every op kind and the blended
    runs (hidden while absent) and the makespan line, so that ``refresh_timeline_figure`` can write any
    content of the same ``stable_key`` into it: another lane count, the exact or the aggregated view, other
    ops. A plain figure holds only what its content shows."""
    fig = _frame(content.lanes, content.span_s, content.width, content.title, stable=stable)
    if stable:
        fig.tags = [STABLE_TAG]
        _draw_blocks(fig, content, stable=True)
        _draw_runs(fig, content, stable=True)
        entries = list(_STABLE_ENTRIES)
    else:
        (_draw_runs if content.aggregated else _draw_blocks)(fig, content)
        entries = _legend_entries(content)
    _legend(fig, entries)
    shown = _shown_entries(content, entries)
    items: list[Any] = fig.legend[0].items
    for item, entry in zip(items, entries, strict=True):
        item.visible = entry in shown
    rows = _set_legend_layout(fig, shown, _legend_width(content.width, stable=stable))
    if stable:  # the same height for every content: room for the legend with every entry shown
        rows = _legend_rows(list(_STABLE_ENTRIES), _legend_width(content.width, stable=True))
    frame_px = stable_lane_layout(len(content.lanes.labels))[0] if stable else content.frame_px
    fig.height = frame_px + _CHROME_PX + _LEGEND_ROW_PX * rows
    if content.makespan_ms is not None or stable:
        fig.add_layout(
            Span(
                location=content.makespan_ms or 0.0,
                dimension="height",
                line_dash="dashed",
                line_color="black",
                line_width=1,
                name="makespan",
                visible=content.makespan_ms is not None,
            )
        )
    return fig


def refresh_timeline_figure(fig: figure, content: TimelineContent) -> None:
    """Write ``content`` into ``fig`` in place: new data, title, x range and makespan line, and no new bokeh
    models (so no document re-walk). ``fig`` was built from a content with the same ``layout_key``, or, built
    ``stable`` (``content_timeline_figure``), with the same ``stable_key``: then lanes, view and legend
    follow the content too."""
    fig.title.text = content.title  # type: ignore[union-attr]
    start, end = x_range_ms(content.span_s)
    fig.x_range.update(start=start, end=end, reset_start=start, reset_end=end)
    if STABLE_TAG in fig.tags:
        _refresh_stable(fig, content)
        return
    main = "runs" if content.aggregated else "blocks"
    _renderer(fig, main).data_source.data = content.data  # type: ignore[attr-defined]
    if content.label_data is not None:
        _renderer(fig, "labels").data_source.data = content.label_data  # type: ignore[attr-defined]
    if content.comm_data is not None:
        _renderer(fig, "comm_marks").data_source.data = content.comm_data  # type: ignore[attr-defined]
    if content.makespan_ms is not None:
        _makespan_span(fig).location = content.makespan_ms


def _refresh_stable(fig: figure, content: TimelineContent) -> None:
    """The part of ``refresh_timeline_figure`` that only a stable figure takes: lanes (y axis; the frame and
    the figure keep their height), every renderer's data (the unused view emptied), the runs' colours and
    hover names, legend, makespan."""
    num = len(content.lanes.labels)
    shown = stable_lane_layout(num)[1]
    fig.y_range.update(
        start=shown - 0.5, end=-0.5, reset_start=shown - 0.5, reset_end=-0.5, bounds=(-0.5, num - 0.5)
    )
    ticks, overrides = label_ticks(list(range(num)), _stable_labels(content.lanes), max_ticks=max(num, 1))
    axis: Any = fig.yaxis[0]
    axis.ticker.ticks = ticks
    axis.major_label_overrides = overrides
    runs = _renderer(fig, "runs")
    _write(runs, content.data if content.aggregated else None)
    _write(_renderer(fig, "blocks"), None if content.aggregated else content.data)
    _write(_renderer(fig, "comm_marks"), content.comm_data)
    _write(_renderer(fig, "labels"), content.label_data)
    _recolour(fig, runs if content.aggregated else _renderer(fig, "blocks"), content)
    lane_code = _lane_formatter(content).code
    for hover in (t for t in fig.tools if isinstance(t, HoverTool)):
        formatters: Any = hover.formatters
        formatters["@lane"].code = lane_code
    shown_entries = _shown_entries(content, _STABLE_ENTRIES)
    items: list[Any] = fig.legend[0].items
    for item, entry in zip(items, _STABLE_ENTRIES, strict=True):
        if item.visible != (entry in shown_entries):  # a legend of another size relayouts the page
            item.visible = entry in shown_entries
    _set_legend_layout(fig, shown_entries, _legend_width(content.width, stable=True))
    span = _makespan_span(fig)
    span.visible = content.makespan_ms is not None
    if content.makespan_ms is not None:
        span.location = content.makespan_ms


def _write(renderer: GlyphRenderer, data: dict[str, Any] | None) -> None:
    """``data`` into the renderer's source; None: no rows, the columns kept (the glyph and the hover still
    name them)."""
    source: Any = renderer.data_source
    if data is not None:
        source.data = data
    elif any(len(v) for v in source.data.values()):
        source.data = {k: [] for k in source.data}


def _recolour(fig: figure, shown: GlyphRenderer, content: TimelineContent) -> None:
    """Palette and hover names of renderer ``shown`` (``runs``, or ``blocks`` whose colour mapper the
    ``comm_marks`` share) for ``content.legend_ops`` (op codes index that tuple); unchanged values send
    nothing."""
    mapper = _runs_mapper(content.legend_ops)
    glyph: Any = shown.glyph
    glyph.fill_color.transform.update(palette=mapper.palette, low=mapper.low, high=mapper.high)
    hover = next(t for t in fig.tools if isinstance(t, HoverTool) and shown in (t.renderers or []))
    formatters: Any = hover.formatters
    formatters["@op_code"].code = _runs_formatters(content)[0].code


def _makespan_span(fig: figure) -> Span:
    return next(a for a in fig.center if isinstance(a, Span) and a.name == "makespan")


def _renderer(fig: figure, name: str) -> GlyphRenderer:
    """The renderer called ``name`` (a scan of ``fig.renderers``: ``select`` walks the whole model graph)."""
    return next(r for r in fig.renderers if isinstance(r, GlyphRenderer) and r.name == name)


def _frame(
    lanes: Lanes, span: tuple[float, float], width: int, title: str, *, stable: bool = False
) -> figure:
    """Axes and tools: a plot area of ``lane_layout`` pixels (``stable_lane_layout`` when ``stable``), lanes
    top-down, every lane labelled."""
    num = len(lanes.labels)
    frame_px, shown = (stable_lane_layout if stable else lane_layout)(num)
    pans_lanes = shown < num or stable
    x_start, x_end = x_range_ms(span)
    fig = figure(
        title=title,
        width=width,
        height=frame_px + _CHROME_PX + _LEGEND_ROW_PX,
        frame_height=frame_px,
        tools=f"{'pan' if pans_lanes else 'xpan'},xwheel_zoom,box_zoom,reset,save",
        active_scroll="xwheel_zoom",
        x_range=Range1d(start=x_start, end=x_end),
        y_range=Range1d(start=shown - 0.5, end=-0.5, bounds=(-0.5, num - 0.5)),
        x_axis_label="time from step start (ms)",
    )
    if pans_lanes:
        fig.add_tools(WheelPanTool(dimension="height", description="Scroll the lanes"))
    labels = _stable_labels(lanes) if stable else list(lanes.labels)
    ticks, overrides = label_ticks(list(range(num)), labels, max_ticks=max(num, 1))
    fig.yaxis.ticker = ticks
    fig.yaxis.major_label_overrides = overrides
    if stable:
        fig.yaxis.major_label_text_font = STABLE_LABEL_FONT
    fig.ygrid.grid_line_color = None
    fig.toolbar.logo = None
    return plain_axes(fig)


def _stable_labels(lanes: Lanes) -> list[str]:
    """The lane labels of a ``stable`` figure: left-padded to ``STABLE_LABEL_CHARS`` (right-aligned at the
    frame, so the padding is not seen)."""
    return [label.rjust(STABLE_LABEL_CHARS) for label in lanes.labels]


def _draw_blocks(fig: figure, content: TimelineContent, *, stable: bool = False) -> None:
    """Renderers ``blocks``, ``comm_marks`` and ``labels`` of the exact view (in a stable figure always, empty
    while the content is aggregated or has no sends or labels)."""
    exact = not content.aggregated
    source = ColumnDataSource(content.data if exact else _no_rows(BLOCK_COLUMNS))
    colours = {"field": "op_code", "transform": _runs_mapper(content.legend_ops)}
    blocks = fig.quad(
        left="left",
        right="right",
        bottom="bottom",
        top="top",
        source=source,
        name="blocks",
        fill_color=colours,
        line_color="white",
        line_width=0.5,
    )
    hovered: list[DataRenderer] = [blocks]
    if content.comm_data is not None or stable:
        comm = content.comm_data if exact and content.comm_data is not None else _no_rows(COMM_COLUMNS)
        hovered.append(
            fig.rect(
                x="x",
                y="y",
                width=COMM_MIN_PX,
                height="height",
                width_units="screen",
                source=ColumnDataSource(comm),
                name="comm_marks",
                fill_color=colours,
                fill_alpha=COMM_MARK_ALPHA,
                line_color=None,
            )
        )
    fig.add_tools(
        HoverTool(
            renderers=hovered,
            formatters={"@lane": _lane_formatter(content), "@op_code": _runs_formatters(content)[0]},
            tooltips=[
                ("lane", "@lane{custom}"),
                ("op", "@op_code{custom}"),
                ("stage · chunk", "@stage · @chunk"),
                ("micro-batch", "@microbatch"),
                ("start", "@left{0,0.000} ms"),
                ("end", "@right{0,0.000} ms"),
                ("duration", "@duration_ms{0,0.000} ms"),
            ],
        )
    )
    if content.label_data is not None or stable:
        fig.text(
            x="x",
            y="y",
            text="text",
            source=ColumnDataSource(
                content.label_data if content.label_data is not None else _no_rows(LABEL_COLUMNS)
            ),
            name="labels",
            text_align="center",
            text_baseline="middle",
            text_font_size="9px",
            text_color="white",
        )


def _no_rows(columns: tuple[str, ...]) -> dict[str, list]:
    return {c: [] for c in columns}


LegendEntry = tuple[str, str, float]
"""(label, colour, alpha) of one legend entry."""
COMM_LABEL = "communication: sends (a pale mark >= 1 px each)"
"""Legend label of the communication blocks: what they are (the sends between stages, not a wait)."""
_COMM_ENTRY: LegendEntry = (COMM_LABEL, COMM_COLOR, 1.0)
_BLENDED_ENTRY: LegendEntry = (BLENDED_LABEL, GREY, 0.45)
_STABLE_ENTRIES: tuple[LegendEntry, ...] = (
    *((f"{op}: {OP_NAMES[op]}", OP_COLORS[op], 1.0) for op in sorted(OP_COLORS)),
    _COMM_ENTRY,
    _BLENDED_ENTRY,
)
"""Every entry a timeline legend can have, in the order of a content's own (compute ops sorted, then
communication, then blended): a stable figure holds them all and shows those of its content."""


def _legend_entries(content: TimelineContent) -> list[LegendEntry]:
    """One entry per op present (the quads share one data source), one for communication and waits, then
    ``BLENDED_LABEL`` when some quads blend blocks."""
    entries: list[LegendEntry] = []
    for op in content.legend_ops:
        if op in OP_COLORS:
            entries.append((f"{op}: {OP_NAMES[op]}", OP_COLORS[op], 1.0))
        elif _COMM_ENTRY not in entries:
            entries.append(_COMM_ENTRY)
    if content.has_blended:
        entries.append(_BLENDED_ENTRY)
    return entries


def _shown_entries(content: TimelineContent, entries: Sequence[LegendEntry]) -> list[LegendEntry]:
    present = set(_legend_entries(content))
    return [e for e in entries if e in present]


def _legend(fig: figure, entries: Sequence[LegendEntry]) -> None:
    """Legend entries via invisible glyphs, above the plot, horizontal (``_set_legend_layout`` wraps them)."""
    for label, color, alpha in entries:
        fig.scatter(
            x=[np.nan], y=[np.nan], marker="square", size=10, color=color, alpha=alpha, legend_label=label
        )
    fig.legend.orientation = "horizontal"
    fig.legend.location = "top_left"
    fig.legend.background_fill_alpha = 0.8
    fig.add_layout(fig.legend[0], "above")


def _set_legend_layout(fig: figure, shown: list[LegendEntry], width: int) -> int:
    """Wrap the ``shown`` entries into rows that fit ``width``; returns the number of legend rows."""
    per_row = _legend_columns(shown, width)
    fig.legend.ncols = per_row
    return max(1, -(-len(shown) // per_row))


def _legend_columns(shown: list[LegendEntry], width: int) -> int:
    item_px = [_LEGEND_ITEM_PX + _LEGEND_PX_PER_CHAR * len(label) for label, _, _ in shown]
    per_row = max(1, len(shown))
    while per_row > 1 and sum(max(item_px[j::per_row]) for j in range(per_row)) > width - 40:
        per_row -= 1  # the legend is a grid: a column is as wide as its widest item
    return per_row


def _legend_width(width: int, *, stable: bool) -> int:
    """The width (px) a legend's entries are packed into: a ``stable`` figure's fits ``STABLE_NARROWEST_PX``
    beside the y axis."""
    return min(width, STABLE_NARROWEST_PX) - STABLE_AXIS_PX if stable else width


def _legend_rows(entries: list[LegendEntry], width: int) -> int:
    return max(1, -(-len(entries) // _legend_columns(entries, width)))


def _runs_mapper(ops: tuple[str, ...]) -> Any:
    palette = [op_color(op) for op in ops] or [GREY]
    return LinearColorMapper(
        palette=palette if len(palette) > 1 else palette * 2,
        low=-0.5,
        high=len(palette) - 0.5 if len(palette) > 1 else 1.5,
        nan_color=GREY,
    )


def _lane_formatter(content: TimelineContent) -> CustomJSHover:
    """Hover text of a lane index: the lane's label."""
    return CustomJSHover(code=f"return {json.dumps(list(content.lanes.labels))}[value] ?? String(value)")


def _runs_formatters(content: TimelineContent) -> tuple[CustomJSHover, CustomJSHover]:
    """Hover text of an ``op_code`` (``forward (F)``, ``comm (comm)``) and of a lane index."""
    names = [f"{OP_NAMES.get(op, op)} ({op})" for op in content.legend_ops]
    op_fmt = CustomJSHover(code=f"return {json.dumps(names)}[value] ?? String(value)")
    return op_fmt, _lane_formatter(content)


def _draw_runs(fig: figure, content: TimelineContent, *, stable: bool = False) -> None:
    """Renderer ``runs`` of the aggregated view (in a stable figure always, empty while the view is exact)."""
    runs_r = fig.quad(
        left="left",
        right="right",
        bottom="bottom",
        top="top",
        source=ColumnDataSource(content.data if content.aggregated else _no_rows(RUN_COLUMNS)),
        name="runs",
        fill_color={"field": "op_code", "transform": _runs_mapper(content.legend_ops)},
        fill_alpha="alpha",
        line_color=None,
    )
    op_fmt, lane_fmt = _runs_formatters(content)
    fig.add_tools(
        HoverTool(
            renderers=[runs_r],
            formatters={"@op_code": op_fmt, "@lane": lane_fmt},
            tooltips=[
                ("lane", "@lane{custom}"),
                ("mostly", "@op_code{custom}"),
                ("from", "@left{0,0.000} ms"),
                ("to", "@right{0,0.000} ms"),
                ("busy", "@busy{0 %}"),
                ("blocks starting here", "@blocks"),
            ],
        )
    )
