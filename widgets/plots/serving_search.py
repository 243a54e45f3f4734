"""The serving search's trade-off: SLO-goodput per device against the latency at the goodput point, with the Pareto
frontier (``workbench.search.serving``: ``ServingSearchResult.table``)."""

from __future__ import annotations

import polars as pl
from bokeh.models import ColumnDataSource, HoverTool, NumeralTickFormatter
from bokeh.plotting import figure
from workbench_widgets.plots._style import GREY, MS_PER_S, OKABE_ITO, PLOT_WIDTH_PX

X_COLUMN = "goodput_output_tokens_per_s_per_device"
SEARCH_FIGURE_COLUMNS = (
    "plan",
    X_COLUMN,
    "ttft_s_at_goodput",
    "tpot_s_at_goodput",
    "pareto_ttft",
    "pareto_tpot",
)
"""Columns of the search table this figure reads."""


def serving_search_figure(
    table: pl.DataFrame, latency: str = "ttft", *, width: int = PLOT_WIDTH_PX // 2
) -> figure:
    """Each simulated plan (renderer ``plans``) at (goodput output tokens/s per device, TTFT or TPOT at the goodput
    point in ms), and that latency's Pareto frontier as a line (renderer ``frontier``: the rows whose
    ``pareto_<latency>`` is true, by throughput). ValueError for a latency other than ``ttft``/``tpot`` or a table
    without ``SEARCH_FIGURE_COLUMNS``."""
    if latency not in ("ttft", "tpot"):
        raise ValueError(f"serving_search_figure: latency must be ttft or tpot, got {latency!r}")
    missing = [c for c in SEARCH_FIGURE_COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"serving_search_figure: the search table lacks column(s) {', '.join(missing)}")
    y = f"{latency}_s_at_goodput"
    rows = table.filter(pl.col(y).is_not_null() & pl.col(X_COLUMN).is_not_null())
    frontier = rows.filter(pl.col(f"pareto_{latency}")).sort(X_COLUMN)
    name = latency.upper()
    fig = figure(width=width, height=320, title=f"Serving search: goodput against {name} ({frontier.height} on the frontier)",
                 x_axis_label="goodput output tokens/s per device", y_axis_label=f"{name} at the goodput point (ms)",
                 tools="pan,wheel_zoom,box_zoom,reset,save")  # fmt: skip
    for frame, renderer, color in ((rows, "plans", GREY), (frontier, "frontier", OKABE_ITO["vermillion"])):
        source = ColumnDataSource({"x": frame[X_COLUMN].to_list(), "y_ms": (frame[y] * MS_PER_S).to_list(),
                                   "plan": frame["plan"].to_list()})  # fmt: skip
        if renderer == "plans":
            glyph = fig.scatter("x", "y_ms", source=source, size=7, color=color, alpha=0.6, name=renderer)
        else:
            glyph = fig.line("x", "y_ms", source=source, color=color, line_width=2, name=renderer)
            fig.scatter("x", "y_ms", source=source, size=9, color=color)
        fig.add_tools(HoverTool(renderers=[glyph], tooltips=[("plan", "@plan"), ("goodput", "@x{0,0} tokens/s/device"),
                                                             (name, "@y_ms{0,0.0} ms")]))  # fmt: skip
    fig.xaxis.formatter = NumeralTickFormatter(format="0,0")
    fig.toolbar.logo = None
    return fig
