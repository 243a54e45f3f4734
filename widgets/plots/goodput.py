"""Goodput pictures: goodput against the checkpoint interval, and against the cluster size.

The numbers come from :mod:`workbench.goodput` (Daly's expected wall time of a run that fails, checkpoints
and restarts) and :func:`workbench.search.sizes.goodput_scaling` (the plan over node counts); these figures
only draw them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl
from bokeh.models import ColumnDataSource, HoverTool, LinearAxis, Range1d, Span
from bokeh.plotting import figure
from workbench_widgets.plots._style import OKABE_ITO, PLOT_WIDTH_PX, plain_axes

from workbench.goodput import daly_interval_s, goodput_frac, young_interval_s
from workbench.search.sizes import SCALING_COLUMNS

if TYPE_CHECKING:
    from workbench.goodput import GoodputEstimate

S_PER_MIN = 60.0


def interval_curve(g: GoodputEstimate, points: int = 121) -> dict[str, np.ndarray]:
    """Goodput of ``g``'s run at checkpoint intervals from 1/20 to 20 x the chosen one (log-spaced), with the
    same stall, MTBF, restart and downtime: interval_s, goodput_frac."""
    interval = g.checkpoint_interval_s * np.logspace(np.log10(1 / 20), np.log10(20), points)
    frac = goodput_frac(interval, g.checkpoint_stall_s, g.mtbf_s, g.restart_s, g.downtime_s)
    return {"interval_s": interval, "goodput_frac": np.asarray(frac, dtype=float)}


def goodput_interval_figure(
    g: GoodputEstimate, *, title: str = "Goodput against the checkpoint interval", width: int = PLOT_WIDTH_PX
) -> figure:
    """Goodput (%) over the checkpoint interval (minutes, log axis): the curve (renderer ``curve``), the chosen
    interval and Young's and Daly's first- and higher-order optima as vertical lines (Spans named
    ``chosen``, ``young``, ``daly``)."""
    curve = interval_curve(g)
    source = ColumnDataSource(
        {"minutes": curve["interval_s"] / S_PER_MIN, "goodput": curve["goodput_frac"] * 100.0}
    )
    fig = figure(
        width=width,
        height=320,
        title=title,
        x_axis_type="log",
        x_axis_label="checkpoint interval (minutes of training)",
        y_axis_label="goodput (%)",
        tools="save,reset",
    )
    line = fig.line("minutes", "goodput", source=source, line_width=2, color=OKABE_ITO["blue"], name="curve")
    marks = (
        ("chosen", g.checkpoint_interval_s, OKABE_ITO["black"], "solid"),
        ("young", float(young_interval_s(g.checkpoint_stall_s, g.mtbf_s)), OKABE_ITO["orange"], "dashed"),
        ("daly", float(daly_interval_s(g.checkpoint_stall_s, g.mtbf_s)), OKABE_ITO["bluish_green"], "dotted"),
    )
    for name, seconds, color, dash in marks:
        fig.add_layout(
            Span(
                location=seconds / S_PER_MIN,
                dimension="height",
                line_color=color,
                line_dash=dash,
                line_width=2,
                name=name,
            )
        )
    fig.add_tools(
        HoverTool(
            renderers=[line], tooltips=[("interval", "@minutes{0,0.0} min"), ("goodput", "@goodput{0.0} %")]
        )
    )
    fig.toolbar.logo = None
    return plain_axes(fig)


def goodput_scale_figure(
    scaling: pl.DataFrame, *, title: str = "Goodput against the cluster size", width: int = PLOT_WIDTH_PX
) -> figure:
    """Goodput (%, left axis, renderer ``goodput``) and throughput with and without failures (tokens/s, right
    axis, renderers ``ideal`` and ``effective``) over the node count (log axis), from ``workbench.search.sizes.goodput_scaling``.
    ValueError when the frame is empty or lacks a column."""
    missing = [c for c in SCALING_COLUMNS if c not in scaling.columns]
    if missing or scaling.height == 0:
        raise ValueError(f"goodput_scale_figure: need a non-empty goodput_scaling frame (missing: {missing})")
    data = scaling.to_dict(as_series=False)
    data["goodput_pct"] = [v * 100.0 for v in data["goodput_frac"]]
    data["mtbf_h"] = [v / 3600.0 for v in data["mtbf_s"]]
    source = ColumnDataSource(data)
    fig = figure(
        width=width,
        height=340,
        title=title,
        x_axis_type="log",
        x_axis_label="nodes",
        y_axis_label="goodput (%)",
        y_range=Range1d(0, 100),
        tools="save,reset",
    )
    top = max(data["tokens_per_s"]) * 1.1
    fig.extra_y_ranges = {"tokens": Range1d(0, top)}
    fig.add_layout(LinearAxis(y_range_name="tokens", axis_label="tokens/s (cluster)"), "right")
    good = fig.line("num_nodes", "goodput_pct", source=source, color=OKABE_ITO["vermillion"], line_width=2,
                    legend_label="goodput", name="goodput")  # fmt: skip
    fig.scatter("num_nodes", "goodput_pct", source=source, color=OKABE_ITO["vermillion"], size=6)
    fig.line("num_nodes", "tokens_per_s", source=source, y_range_name="tokens", color=OKABE_ITO["sky_blue"],
             line_dash="dashed", line_width=2, legend_label="tokens/s without failures", name="ideal")  # fmt: skip
    fig.line("num_nodes", "goodput_tokens_per_s", source=source, y_range_name="tokens", color=OKABE_ITO["blue"],
             line_width=2, legend_label="tokens/s with failures", name="effective")  # fmt: skip
    fig.add_tools(
        HoverTool(
            renderers=[good],
            tooltips=[
                ("nodes", "@num_nodes"),
                ("plan", "@plan"),
                ("goodput", "@goodput_pct{0.0} %"),
                ("job MTBF", "@mtbf_h{0,0.0} h"),
                ("tokens/s with failures", "@goodput_tokens_per_s{0,0}"),
            ],
        )
    )
    fig.legend.location = "bottom_left"
    fig.toolbar.logo = None
    return plain_axes(fig)
