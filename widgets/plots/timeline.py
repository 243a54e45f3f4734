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

What is drawn is computed first, without bokeh (``timeline_content``, in ``_timeline_content``); the
builders stay pure functions of it, and ``refresh_timeline_figure`` writes a new content into a figure
whose ``layout_key`` matches (the Panel app does so instead of building and swapping a new figure).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
from bokeh.models import ColumnDataSource, CustomJSHover, HoverTool, Range1d
from bokeh.models.annotations import Span
from bokeh.models.renderers import GlyphRenderer
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
    MAX_BLOCKS,
    TimelineContent,
    estimate_timeline_content,
    timeline_content,
    x_range_ms,
)

if TYPE_CHECKING:
    from workbench.specs.estimate import Estimate

__all__ = [
    "MAX_BLOCKS",
    "TimelineContent",
    "content_timeline_figure",
    "estimate_timeline_content",
    "estimate_timeline_figure",
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
    if content.makespan_ms is not None:
        span = next(a for a in fig.center if isinstance(a, Span) and a.name == "makespan")
        span.location = content.makespan_ms


def _renderer(fig: figure, name: str) -> GlyphRenderer:
    """The renderer called ``name`` (a scan of ``fig.renderers``: ``select`` walks the whole model graph)."""
    return next(r for r in fig.renderers if isinstance(r, GlyphRenderer) and r.name == name)


def _frame(lanes: Lanes, span: tuple[float, float], width: int, title: str) -> figure:
    num = len(lanes.labels)
    height = int(min(680, max(220, 90 + num * (22 if num <= 16 else 9))))
    x_start, x_end = x_range_ms(span)
    fig = figure(
        title=title,
        width=width,
        height=height,
        tools="xpan,xwheel_zoom,box_zoom,reset,save",
        active_scroll="xwheel_zoom",
        x_range=Range1d(start=x_start, end=x_end),
        y_range=Range1d(start=num - 0.5, end=-0.5),
        x_axis_label="time from step start (ms)",
    )
    ticks, overrides = label_ticks(list(range(num)), list(lanes.labels))
    fig.yaxis.ticker = ticks
    fig.yaxis.major_label_overrides = overrides  # type: ignore[assignment]
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
    _legend(fig, list(content.legend_ops))
    fig.add_tools(
        HoverTool(
            renderers=[blocks],
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


def _legend(fig: figure, ops: list[str]) -> None:
    """Legend entries via invisible glyphs, one per op present (the quads share one data source)."""
    seen_comm = False
    for op in ops:
        if op not in OP_COLORS:
            if seen_comm:
                continue
            seen_comm, label, color = True, "communication / wait", COMM_COLOR
        else:
            label, color = f"{op}: {OP_NAMES[op]}", OP_COLORS[op]
        fig.scatter(x=[np.nan], y=[np.nan], marker="square", size=10, color=color, legend_label=label)
    fig.legend.orientation = "horizontal"
    fig.legend.location = "top_left"
    fig.legend.background_fill_alpha = 0.8
    fig.add_layout(fig.legend[0], "above")


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
        fill_alpha="busy",
        line_color=None,
    )
    _legend(fig, list(ops))
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
