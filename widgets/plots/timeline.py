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
whose ``layout_key`` matches (the Panel app does so instead of building and swapping a new figure).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
from bokeh.models import ColumnDataSource, CustomJSHover, HoverTool, Range1d, WheelPanTool
from bokeh.models.annotations import Span
from bokeh.models.renderers import DataRenderer, GlyphRenderer
from bokeh.plotting import figure
from bokeh.transform import linear_cmap
from workbench_widgets.plots._lanes import Lanes
from workbench_widgets.plots._style import (
    COMM_COLOR,
    GREY,
    OP_COLORS,
    OP_NAMES,
    PLOT_WIDTH_PX,
    label_ticks,
    op_color,
)
from workbench_widgets.plots._timeline_content import (
    COMM_MIN_PX,
    LANE_PX,
    MAX_BLOCKS,
    MAX_FRAME_PX,
    TimelineContent,
    estimate_timeline_content,
    lane_layout,
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


def content_timeline_figure(content: TimelineContent) -> figure:
    """The figure of a ``TimelineContent`` (``timeline_figure`` is this of ``timeline_content``)."""
    fig = _frame(content.lanes, content.span_s, content.width, content.title)
    if content.aggregated:
        _draw_runs(fig, content)
    else:
        _draw_blocks(fig, content)
    rows = _legend(fig, list(content.legend_ops), blended=content.has_blended, width=content.width)
    fig.height = content.frame_px + _CHROME_PX + _LEGEND_ROW_PX * rows
    if content.makespan_ms is not None:
        fig.add_layout(
            Span(
                location=content.makespan_ms,
                dimension="height",
                line_dash="dashed",
                line_color="black",
                line_width=1,
                name="makespan",
            )
        )
    return fig


def refresh_timeline_figure(fig: figure, content: TimelineContent) -> None:
    """Write ``content`` into ``fig``, a figure built from a content with the same ``layout_key``, in place:
    new data, title, x range and makespan line, and no new bokeh models (so no document re-walk)."""
    fig.title.text = content.title  # type: ignore[union-attr]
    start, end = x_range_ms(content.span_s)
    fig.x_range.update(start=start, end=end, reset_start=start, reset_end=end)
    main = "runs" if content.aggregated else "blocks"
    _renderer(fig, main).data_source.data = content.data  # type: ignore[attr-defined]
    if content.label_data is not None:
        _renderer(fig, "labels").data_source.data = content.label_data  # type: ignore[attr-defined]
    if content.comm_data is not None:
        _renderer(fig, "comm_marks").data_source.data = content.comm_data  # type: ignore[attr-defined]
    if content.makespan_ms is not None:
        span = next(a for a in fig.center if isinstance(a, Span) and a.name == "makespan")
        span.location = content.makespan_ms


def _renderer(fig: figure, name: str) -> GlyphRenderer:
    """The renderer called ``name`` (a scan of ``fig.renderers``: ``select`` walks the whole model graph)."""
    return next(r for r in fig.renderers if isinstance(r, GlyphRenderer) and r.name == name)


def _frame(lanes: Lanes, span: tuple[float, float], width: int, title: str) -> figure:
    """Axes and tools: a plot area of ``lane_layout`` pixels, lanes top-down, every lane labelled."""
    num = len(lanes.labels)
    frame_px, shown = lane_layout(num)
    pans_lanes = shown < num
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
    ticks, overrides = label_ticks(list(range(num)), list(lanes.labels), max_ticks=max(num, 1))
    fig.yaxis.ticker = ticks
    fig.yaxis.major_label_overrides = overrides
    fig.ygrid.grid_line_color = None
    fig.toolbar.logo = None
    return fig


def _draw_blocks(fig: figure, content: TimelineContent) -> None:
    source = ColumnDataSource(content.data)
    blocks = fig.quad(
        left="left",
        right="right",
        bottom="bottom",
        top="top",
        source=source,
        name="blocks",
        fill_color="color",
        line_color="white",
        line_width=0.5,
    )
    hovered: list[DataRenderer] = [blocks]
    if content.comm_data is not None:
        hovered.append(
            fig.rect(
                x="x",
                y="y",
                width=COMM_MIN_PX,
                height="height",
                width_units="screen",
                source=ColumnDataSource(content.comm_data),
                name="comm_marks",
                fill_color="color",
                line_color=None,
            )
        )
    fig.add_tools(
        HoverTool(
            renderers=hovered,
            tooltips=[
                ("lane", "@lane_label"),
                ("op", "@op_name (@op)"),
                ("stage · chunk", "@stage · @chunk"),
                ("micro-batch", "@microbatch"),
                ("start", "@left{0,0.000} ms"),
                ("end", "@right{0,0.000} ms"),
                ("duration", "@duration_ms{0,0.000} ms"),
            ],
        )
    )
    if content.label_data is not None:
        fig.text(
            x="x",
            y="y",
            text="text",
            source=ColumnDataSource(content.label_data),
            name="labels",
            text_align="center",
            text_baseline="middle",
            text_font_size="9px",
            text_color="white",
        )


def _legend(fig: figure, ops: list[str], *, blended: bool, width: int) -> int:
    """Legend entries via invisible glyphs, one per op present (the quads share one data source), then
    ``BLENDED_LABEL`` when some quads blend blocks; above the plot, wrapped into rows that fit ``width``.
    Returns the number of legend rows."""
    entries: list[tuple[str, str, float]] = []
    for op in ops:
        if op in OP_COLORS:
            entries.append((f"{op}: {OP_NAMES[op]}", OP_COLORS[op], 1.0))
        elif not any(label == "communication / wait" for label, _, _ in entries):
            entries.append(("communication / wait", COMM_COLOR, 1.0))
    if blended:
        entries.append((BLENDED_LABEL, GREY, 0.45))
    for label, color, alpha in entries:
        fig.scatter(
            x=[np.nan], y=[np.nan], marker="square", size=10, color=color, alpha=alpha, legend_label=label
        )
    item_px = [_LEGEND_ITEM_PX + _LEGEND_PX_PER_CHAR * len(label) for label, _, _ in entries]
    per_row = len(entries)
    while per_row > 1 and sum(max(item_px[j::per_row]) for j in range(per_row)) > width - 40:
        per_row -= 1  # the legend is a grid: a column is as wide as its widest item
    fig.legend.orientation = "horizontal"
    fig.legend.ncols = per_row
    fig.legend.location = "top_left"
    fig.legend.background_fill_alpha = 0.8
    fig.add_layout(fig.legend[0], "above")
    return -(-len(entries) // per_row)


def _draw_runs(fig: figure, content: TimelineContent) -> None:
    ops = content.legend_ops
    palette = [op_color(op) for op in ops]
    mapper = linear_cmap(
        "op_code",
        palette=palette if len(palette) > 1 else palette * 2,
        low=-0.5,
        high=len(palette) - 0.5 if len(palette) > 1 else 1.5,
        nan_color=GREY,
    )
    runs_r = fig.quad(
        left="left",
        right="right",
        bottom="bottom",
        top="top",
        source=ColumnDataSource(content.data),
        name="runs",
        fill_color=mapper,
        fill_alpha="alpha",
        line_color=None,
    )
    names = [f"{OP_NAMES.get(op, op)} ({op})" for op in ops]
    op_fmt = CustomJSHover(code=f"return {json.dumps(names)}[value] ?? String(value)")
    lane_fmt = CustomJSHover(code=f"return {json.dumps(list(content.lanes.labels))}[value] ?? String(value)")
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
