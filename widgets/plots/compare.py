"""Predicted vs measured on the same axes: the two timelines of one plan, lane by lane.

Every lane of ``workbench_widgets.plots._lanes.assign_lanes`` (one per pipeline rank, per chunk when vpp > 1, and a
rank's communication/wait lane where either side has one) is split into two thin rows, *predicted* above
and *measured* below, on one shared x axis in ms from the step start. Both rows use the Okabe-Ito op
colours of ``_style``; predicted blocks are drawn light with an outline, measured blocks solid, and every
lane sits on its own shaded band so the pair reads as one unit. The two makespans are vertical lines
(predicted dashed, measured solid) and the title gives the step-time error, predicted / measured - 1
(:func:`workbench.estimate.compare.step_time_error_frac`, the figure ``workbench run --compare`` prints).

Dense timelines are aggregated exactly as in ``workbench_widgets.plots.timeline``: above ``max_blocks`` blocks (both
sides together) every row is rasterised by ``_lanes.aggregate_runs`` into about 2-pixel bins coloured by
their dominant op with an opacity from their busy share, so the glyph count is bounded by rows x bins.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
from bokeh.models import ColumnDataSource, CustomJSHover, HoverTool, Range1d
from bokeh.models.annotations import BoxAnnotation, Span
from bokeh.models.renderers import DataRenderer, GlyphRenderer
from bokeh.plotting import figure
from bokeh.transform import linear_cmap
from workbench_widgets.plots._lanes import PairedRows, aggregate_runs, pair_rows
from workbench_widgets.plots._style import (
    COMM_COLOR,
    GREY,
    MS_PER_S,
    OP_COLORS,
    OP_NAMES,
    PLOT_WIDTH_PX,
    label_ticks,
    op_color,
    plain_axes,
)
from workbench_widgets.plots.timeline import MAX_BLOCKS

from workbench.estimate.compare import step_time_error_frac

if TYPE_CHECKING:
    from workbench.specs.estimate import Estimate

SIDES: tuple[str, str] = ("predicted", "measured")
"""Row order inside a lane, top to bottom; also the renderer name prefixes (``predicted_blocks``, ...)."""
PREDICTED_ALPHA = 0.35
"""Fill opacity of predicted blocks (measured ones are opaque), so the two rows of a lane differ without
relying on colour."""
_HALF = 0.4
"""Half height of a row's compute blocks (rows are 1 apart); communication/wait rows use ``_HALF_COMM``."""
_HALF_COMM = 0.25
_MAKESPAN_DASH = {"predicted": "dashed", "measured": "solid"}


def comparison_timeline_figure(
    predicted: Estimate,
    measured: Estimate,
    *,
    max_blocks: int = MAX_BLOCKS,
    num_bins: int | None = None,
    width: int = PLOT_WIDTH_PX,
) -> figure:
    """Bokeh figure overlaying the timelines of ``predicted`` and ``measured`` (same plan) on one x axis (ms).

    Renderers: ``predicted_blocks`` / ``measured_blocks`` (one quad per timeline row of that side) or, above
    ``max_blocks`` rows in all, ``predicted_runs`` / ``measured_runs`` (aggregated); Spans named
    ``predicted_makespan`` / ``measured_makespan`` at each timeline's last end (ms). Raises ValueError if
    either timeline is empty or the measured step time is not > 0.
    """
    for side, est in zip(SIDES, (predicted, measured), strict=True):
        if est.timeline.height == 0:
            raise ValueError(f"comparison_timeline_figure: the {side} timeline has no rows (nothing to draw)")
    rows = pair_rows(predicted.timeline, measured.timeline, SIDES)
    makespans = (_makespan_s(predicted.timeline), _makespan_s(measured.timeline))
    span = (0.0, max(makespans))
    fig = _frame(rows.labels, span, width, _title(predicted, measured))
    _lane_bands(fig, rows.lane)
    if rows.joined.height > max_blocks:
        _draw_runs(fig, rows.joined, rows, span, num_bins or max(50, (width - 160) // 2))
    else:
        _draw_blocks(fig, rows.joined, rows)
    for side, at_s in zip(SIDES, makespans, strict=True):
        fig.add_layout(
            Span(
                name=f"{side}_makespan",
                location=at_s * MS_PER_S,
                dimension="height",
                line_color="black",
                line_dash=_MAKESPAN_DASH[side],
                line_width=1.5,
            )
        )
    return fig


def _makespan_s(timeline: pl.DataFrame) -> float:
    return float(timeline["end_s"].max())  # type: ignore[arg-type]


def _title(predicted: Estimate, measured: Estimate) -> str:
    err = step_time_error_frac(predicted, measured)
    return (
        f"Predicted ({predicted.backend}) vs measured ({measured.backend}) · step time "
        f"{predicted.step_time_s * MS_PER_S:.2f} ms predicted, {measured.step_time_s * MS_PER_S:.2f} ms "
        f"measured · error {err * 100:+.1f} % (predicted / measured - 1)"
    )


def _frame(labels: tuple[str, ...], span: tuple[float, float], width: int, title: str) -> figure:
    num = len(labels)
    height = int(min(720, max(240, 110 + num * (18 if num <= 32 else 7))))
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
    ticks, overrides = label_ticks(list(range(num)), list(labels))
    fig.yaxis.ticker = ticks
    fig.yaxis.major_label_overrides = overrides
    fig.ygrid.grid_line_color = None
    fig.toolbar.logo = None
    return plain_axes(fig)


def _half(rows: PairedRows, row: np.ndarray) -> np.ndarray:
    return np.where(rows.is_comm[row], _HALF_COMM, _HALF)


def _lane_bands(fig: figure, lane_of_row: np.ndarray) -> None:
    """A light band behind every other lane, so the predicted/measured pair of a lane reads as one."""
    if len(lane_of_row) > 256:
        return
    starts = np.flatnonzero(np.r_[True, lane_of_row[1:] != lane_of_row[:-1]])
    stops = np.r_[starts[1:], len(lane_of_row)]
    for k, (a, b) in enumerate(zip(starts.tolist(), stops.tolist(), strict=True)):
        if k % 2 == 0:
            fig.add_layout(
                BoxAnnotation(top=a - 0.5, bottom=b - 0.5, fill_color=GREY, fill_alpha=0.12, line_alpha=0)
            )


def _draw_blocks(fig: figure, both: pl.DataFrame, rows: PairedRows) -> None:
    renderers: list[DataRenderer] = []
    for k, side in enumerate(SIDES):
        sel = np.flatnonzero(both["side"].to_numpy() == k)
        part, row = both[sel], rows.of_block[sel]
        ops = part["op"].to_list()
        left = part["start_s"].to_numpy() * MS_PER_S
        right = part["end_s"].to_numpy() * MS_PER_S
        source = ColumnDataSource(
            {
                "left": left,
                "right": right,
                "bottom": row - _half(rows, row),
                "top": row + _half(rows, row),
                "row_label": [rows.labels[i] for i in row],
                "side": [side] * len(ops),
                "op": ops,
                "op_name": [OP_NAMES.get(op, op) for op in ops],
                "color": [op_color(op) for op in ops],
                "microbatch": part["microbatch"].to_numpy(),
                "duration_ms": right - left,
            }
        )
        renderers.append(_quads(fig, source, f"{side}_blocks", "color", side))
    _legend(fig, sorted(set(both["op"].to_list()), key=lambda o: (o not in OP_COLORS, o)))
    fig.add_tools(
        HoverTool(
            renderers=renderers,
            tooltips=[
                ("side", "@side"),
                ("row", "@row_label"),
                ("op", "@op_name (@op)"),
                ("micro-batch", "@microbatch"),
                ("start", "@left{0,0.000} ms"),
                ("end", "@right{0,0.000} ms"),
                ("duration", "@duration_ms{0,0.000} ms"),
            ],
        )
    )


def _alpha(side: str) -> float:
    return PREDICTED_ALPHA if side == "predicted" else 1.0


def _quads(
    fig: figure, source: ColumnDataSource, name: str, color: Any, side: str, alpha: Any = None
) -> GlyphRenderer:
    """Quads of one side: predicted light with an outline in the op colour, measured solid."""
    predicted = side == "predicted"
    return fig.quad(
        left="left",
        right="right",
        bottom="bottom",
        top="top",
        source=source,
        name=name,
        fill_color=color,
        fill_alpha=_alpha(side) if alpha is None else alpha,
        line_color=color if predicted else "white",
        line_width=1.0 if predicted else 0.5,
    )


def _draw_runs(
    fig: figure, both: pl.DataFrame, rows: PairedRows, span: tuple[float, float], num_bins: int
) -> None:
    runs = aggregate_runs(both, rows.of_block, len(rows.labels), num_bins=num_bins, span_s=span)
    palette = [op_color(op) for op in runs.ops]
    mapper = linear_cmap(
        "op_code",
        palette=palette if len(palette) > 1 else palette * 2,
        low=-0.5,
        high=len(palette) - 0.5 if len(palette) > 1 else 1.5,
        nan_color=GREY,
    )
    renderers: list[DataRenderer] = []
    for k, side in enumerate(SIDES):
        sel = np.flatnonzero(rows.side[runs.lane] == k)
        row = runs.lane[sel]
        half = _half(rows, row)
        source = ColumnDataSource(
            {
                "left": (runs.start_s[sel] * MS_PER_S).astype(np.float32),
                "right": (runs.end_s[sel] * MS_PER_S).astype(np.float32),
                "bottom": (row - half).astype(np.float32),
                "top": (row + half).astype(np.float32),
                "row": row.astype(np.int32),
                "op_code": runs.op_code[sel].astype(np.int32),
                "busy": runs.busy_frac[sel].astype(np.float32),
                "alpha": (runs.busy_frac[sel] * _alpha(side)).astype(np.float32),
                "blocks": runs.num_blocks[sel].astype(np.int32),
            }
        )
        renderers.append(_quads(fig, source, f"{side}_runs", mapper, side, alpha="alpha"))
    _legend(fig, list(runs.ops))
    names = [f"{OP_NAMES.get(op, op)} ({op})" for op in runs.ops]
    op_fmt = CustomJSHover(code=f"return {json.dumps(names)}[value] ?? String(value)")
    row_fmt = CustomJSHover(code=f"return {json.dumps(list(rows.labels))}[value] ?? String(value)")
    fig.add_tools(
        HoverTool(
            renderers=renderers,
            formatters={"@op_code": op_fmt, "@row": row_fmt},
            tooltips=[
                ("row (side)", "@row{custom}"),
                ("mostly", "@op_code{custom}"),
                ("from", "@left{0,0.000} ms"),
                ("to", "@right{0,0.000} ms"),
                ("busy", "@busy{0 %}"),
                ("blocks starting here", "@blocks"),
            ],
        )
    )
    fig.title.text += " · aggregated to ~2 px bins"  # type: ignore[union-attr,operator]


def _legend(fig: figure, ops: list[str]) -> None:
    """Legend above the plot: the ops present (F, B, I, W order, then communication), the two sides' styles
    and the two makespan lines, via invisible glyphs."""
    present = [op for op in OP_COLORS if op in ops]
    entries = [(f"{op}: {OP_NAMES[op]}", OP_COLORS[op], 1.0) for op in present]
    if any(op not in OP_COLORS for op in ops):
        entries.append(("comm / wait", COMM_COLOR, 1.0))
    entries += [("predicted (light)", GREY, PREDICTED_ALPHA), ("measured (solid)", GREY, 1.0)]
    for label, color, alpha in entries:
        fig.scatter(
            x=[np.nan],
            y=[np.nan],
            marker="square",
            size=10,
            fill_color=color,
            fill_alpha=alpha,
            line_color=color,
            legend_label=label,
        )
    for side in SIDES:
        fig.line(
            x=[np.nan, np.nan],
            y=[np.nan, np.nan],
            line_color="black",
            line_dash=_MAKESPAN_DASH[side],
            line_width=1.5,
            legend_label=f"{side} makespan",
        )
    fig.legend.orientation = "horizontal"
    fig.legend.location = "top_left"
    fig.legend.background_fill_alpha = 0.8
    fig.legend.label_text_font_size = "11px"
    fig.add_layout(fig.legend[0], "above")
