"""The pipeline timeline: one lane per pipeline rank (and per model chunk when vpp > 1), F/B/I/W blocks.

Dense timelines stay responsive: up to ``max_blocks`` blocks (default 6,000) are drawn one quad each,
with the micro-batch number written on the blocks wide enough to hold it. Above that (p=64, m=512 with a
split backward is ~200,000 blocks, each narrower than a pixel) the figure switches to an *aggregated*
view: every lane is rasterised into ``num_bins`` time bins (about two screen pixels each), a bin takes the
colour of the op that covers most of it and an opacity from its busy share, and equal neighbouring bins
merge into one quad (see ``widgets.plots._lanes.aggregate_runs``). The glyph count is then bounded by
lanes x bins whatever m is, and idle time still shows as gaps. For full detail of a dense step, draw a
*ranged* view: pass ``window_s`` (``detail_window_s`` gives the window holding the first ``max_blocks``
blocks, the warm-up where the bubble lives).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
from bokeh.models import ColumnDataSource, CustomJSHover, HoverTool, Range1d
from bokeh.models.annotations import Span
from bokeh.plotting import figure
from bokeh.transform import linear_cmap

from widgets.plots._lanes import Lanes, aggregate_runs, assign_lanes
from widgets.plots._style import (
    COMM_COLOR,
    GREY,
    MS_PER_S,
    OP_COLORS,
    OP_NAMES,
    PLOT_WIDTH_PX,
    label_ticks,
    op_color,
)

if TYPE_CHECKING:
    from workbench.estimate import Estimate

MAX_BLOCKS = 6_000
"""Above this many blocks the timeline is drawn aggregated (see the module docstring)."""


def estimate_timeline_figure(estimate: Estimate, **kwargs: Any) -> figure:
    """``timeline_figure`` of an Estimate, titled with its schedule, pp, vpp and micro-batch count."""
    plan = estimate.plan
    num_mb = plan.num_microbatches(estimate.workload)
    what = f"{plan.schedule if plan.pp > 1 else 'no pipeline'}, pp={plan.pp}"
    what += f", vpp={plan.vpp}" if plan.vpp > 1 else ""
    kwargs.setdefault("title_prefix", f"Pipeline timeline ({what}, m={num_mb})")
    return timeline_figure(
        estimate.timeline, makespan_s=_makespan(estimate), bubble_fraction=estimate.bubble_fraction, **kwargs
    )


def _makespan(estimate: Estimate) -> float:
    return float(estimate.timeline["end_s"].max()) if estimate.timeline.height else 0.0  # type: ignore[arg-type]


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
    """Bokeh figure of a timeline frame (``workbench.estimate.TIMELINE_COLUMNS``, seconds).

    x is milliseconds from the step start; renderer ``blocks`` holds one quad per timeline row (exact view)
    or renderer ``runs`` one quad per aggregated run; ``labels`` holds the micro-batch numbers.
    ``window_s`` keeps only blocks that overlap ``(t0, t1)`` seconds. ValueError for an empty timeline.
    """
    if timeline.height == 0:
        raise ValueError("timeline_figure: the timeline has no rows (nothing to draw)")
    span = (0.0, float(timeline["end_s"].max())) if window_s is None else window_s  # type: ignore[arg-type]
    if window_s is not None:
        timeline = timeline.filter((pl.col("end_s") > span[0]) & (pl.col("start_s") < span[1]))
        if timeline.height == 0:
            raise ValueError(f"timeline_figure: no block overlaps window_s={window_s}")
    lanes = assign_lanes(timeline)
    fig = _frame(lanes, span, width, _title(title_prefix, makespan_s, bubble_fraction, timeline, window_s))
    aggregated = timeline.height > max_blocks
    if aggregated:
        _draw_runs(fig, timeline, lanes, span, num_bins or max(50, (width - 120) // 2))
    else:
        _draw_blocks(fig, timeline, lanes, span, width)
    if makespan_s is not None and span[0] <= makespan_s <= span[1]:
        fig.add_layout(
            Span(
                location=makespan_s * MS_PER_S,
                dimension="height",
                line_dash="dashed",
                line_color="black",
                line_width=1,
            )
        )
    return fig


def _title(
    prefix: str,
    makespan_s: float | None,
    bubble: float | None,
    timeline: pl.DataFrame,
    window_s: tuple[float, float] | None,
) -> str:
    parts = [prefix]
    if makespan_s is not None:
        parts.append(f"makespan {makespan_s * MS_PER_S:.2f} ms")
    if bubble is not None:
        parts.append(f"bubble {bubble * 100:.1f} %")
    if window_s is not None:
        parts.append(f"window {window_s[0] * MS_PER_S:.2f}-{window_s[1] * MS_PER_S:.2f} ms")
    parts.append(f"{timeline.height:,} blocks")
    return " · ".join(parts)


def _frame(lanes: Lanes, span: tuple[float, float], width: int, title: str) -> figure:
    num = len(lanes.labels)
    height = int(min(680, max(220, 90 + num * (22 if num <= 16 else 9))))
    pad = (span[1] - span[0]) * 0.01 * MS_PER_S
    fig = figure(
        title=title,
        width=width,
        height=height,
        tools="xpan,xwheel_zoom,box_zoom,reset,save",
        active_scroll="xwheel_zoom",
        x_range=Range1d(start=span[0] * MS_PER_S - pad, end=span[1] * MS_PER_S + pad),
        y_range=Range1d(start=num - 0.5, end=-0.5),
        x_axis_label="time from step start (ms)",
    )
    ticks, overrides = label_ticks(list(range(num)), list(lanes.labels))
    fig.yaxis.ticker = ticks
    fig.yaxis.major_label_overrides = overrides  # type: ignore[assignment]
    fig.ygrid.grid_line_color = None
    fig.toolbar.logo = None
    return fig


def _half_heights(lanes: Lanes, lane: np.ndarray) -> np.ndarray:
    is_comm = np.array(lanes.is_comm, dtype=bool)[lane]
    return np.where(is_comm, 0.25, 0.42)


def _draw_blocks(
    fig: figure, timeline: pl.DataFrame, lanes: Lanes, span: tuple[float, float], width: int
) -> None:
    ops = timeline["op"].to_list()
    left = timeline["start_s"].to_numpy() * MS_PER_S
    right = timeline["end_s"].to_numpy() * MS_PER_S
    half = _half_heights(lanes, lanes.lane)
    data = {
        "left": left,
        "right": right,
        "bottom": lanes.lane - half,
        "top": lanes.lane + half,
        "lane_label": [lanes.labels[i] for i in lanes.lane],
        "rank": timeline["rank"].to_numpy(),
        "stage": timeline["stage"].to_numpy(),
        "chunk": timeline["chunk"].to_numpy(),
        "microbatch": timeline["microbatch"].to_numpy(),
        "op": ops,
        "op_name": [OP_NAMES.get(op, op) for op in ops],
        "color": [op_color(op) for op in ops],
        "duration_ms": right - left,
    }
    source = ColumnDataSource(data)
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
    _legend(fig, sorted(set(ops), key=lambda o: (o not in OP_COLORS, o)))
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
    _draw_labels(fig, data, span, width, len(lanes.labels))


def _draw_labels(fig: figure, data: dict, span: tuple[float, float], width: int, num_lanes: int) -> None:
    """Micro-batch numbers on the blocks wide enough at the initial zoom (about 7 px per digit)."""
    if num_lanes > 40:
        return
    px_per_ms = (width - 120) / max((span[1] - span[0]) * MS_PER_S, 1e-12)
    digits = np.char.str_len(np.asarray(data["microbatch"]).astype(str))
    fits = (data["duration_ms"] * px_per_ms >= 7 * digits + 4) & np.isin(data["op"], list(OP_COLORS))
    if not fits.any() or fits.sum() > 3_000:
        return
    idx = np.nonzero(fits)[0]
    source = ColumnDataSource(
        {
            "x": (data["left"][idx] + data["right"][idx]) / 2,
            "y": (data["bottom"][idx] + data["top"][idx]) / 2,
            "text": np.asarray(data["microbatch"])[idx].astype(str).tolist(),
        }
    )
    fig.text(
        x="x",
        y="y",
        text="text",
        source=source,
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


def _draw_runs(
    fig: figure, timeline: pl.DataFrame, lanes: Lanes, span: tuple[float, float], num_bins: int
) -> None:
    runs = aggregate_runs(timeline, lanes.lane, len(lanes.labels), num_bins=num_bins, span_s=span)
    half = _half_heights(lanes, runs.lane)
    palette = [op_color(op) for op in runs.ops]
    source = ColumnDataSource(
        {
            "left": (runs.start_s * MS_PER_S).astype(np.float32),
            "right": (runs.end_s * MS_PER_S).astype(np.float32),
            "bottom": (runs.lane - half).astype(np.float32),
            "top": (runs.lane + half).astype(np.float32),
            "lane": runs.lane.astype(np.int32),
            "op_code": runs.op_code.astype(np.int32),
            "busy": runs.busy_frac.astype(np.float32),
            "blocks": runs.num_blocks.astype(np.int32),
        }
    )
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
        source=source,
        name="runs",
        fill_color=mapper,
        fill_alpha="busy",
        line_color=None,
    )
    _legend(fig, list(runs.ops))
    names = [f"{OP_NAMES.get(op, op)} ({op})" for op in runs.ops]
    op_fmt = CustomJSHover(code=f"return {json.dumps(names)}[value] ?? String(value)")
    lane_fmt = CustomJSHover(code=f"return {json.dumps(list(lanes.labels))}[value] ?? String(value)")
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
    fig.title.text += " · aggregated to ~2 px bins (zoom the ranged view for single blocks)"  # type: ignore[union-attr,operator]
