"""Memory pictures: the per-rank stacked bars against the device capacity, and live activations over time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
from bokeh.models import ColumnDataSource, HoverTool, LegendItem, Range1d
from bokeh.models.annotations import Span
from bokeh.plotting import figure
from workbench_widgets.plots._style import (
    GIB,
    GREY,
    MEMORY_COLORS,
    MS_PER_S,
    OKABE_ITO,
    PLOT_WIDTH_PX,
    category_colors,
    fixed_width_tick_labels,
    legend_above,
    nan_rows,
    plain_axes,
    short_columns_as_lists,
)

from workbench.specs.estimate import MEMORY_COLUMNS

if TYPE_CHECKING:
    from workbench.specs.estimate import Estimate

OVER_CAPACITY = "over capacity"
"""Legend label of the markers on ranks whose total exceeds the capacity (hidden while none does)."""
MEMORY_LABELS: dict[str, str] = {
    "parameters_bytes": "parameters",
    "gradients_bytes": "gradients",
    "optimizer_states_bytes": "optimizer states",
    "activations_bytes": "activations",
    "buffers_bytes": "buffers",
    "other_bytes": "other",
}


def usable_memory_bytes(estimate: Estimate, headroom_frac: float | None = None) -> float:
    """What a rank of ``estimate``'s plan may fill, bytes: ``memory_capacity_bytes x (1 - headroom)`` with
    ``headroom_frac`` when given (the search's ``Constraints.memory_headroom_frac``), else the estimate's own
    ``memory_usable_bytes`` (the one fit rule, ``Estimate.fits``: 80 GiB -> 76 GiB by default)."""
    if headroom_frac is None:
        return float(estimate.memory_usable_bytes)
    return estimate.memory_capacity_bytes * (1.0 - headroom_frac)


def memory_figure(
    memory: pl.DataFrame,
    *,
    capacity_bytes: float,
    usable_bytes: float | None = None,
    title: str = "Memory per pipeline rank",
    width: int = PLOT_WIDTH_PX,
) -> figure:
    """Stacked bars of ``MEMORY_COLUMNS`` per rank (GiB), the line the plan is judged against as a dashed
    line (Span ``capacity``: ``usable_bytes``, the capacity less the headroom, or the capacity when None), the
    device's whole HBM as a dotted grey line (Span ``hbm``, shown when above the usable line) and an ``x``
    marker (renderer ``over_capacity``) on every rank whose total exceeds the usable line. The y axis (a
    ``Range1d``) runs from 0 to above the tallest bar and the capacity.

    ``memory`` follows ``workbench.specs.estimate`` (rank, MEMORY_COLUMNS in bytes, total_bytes).
    ValueError if a column is missing.
    """
    hbm_bytes = capacity_bytes
    capacity_bytes = hbm_bytes if usable_bytes is None else usable_bytes
    missing = [c for c in ("rank", *MEMORY_COLUMNS) if c not in memory.columns]
    if missing:
        raise ValueError(f"memory_figure: memory table lacks column(s) {', '.join(missing)}")
    memory = memory.sort("rank")
    totals = memory.select(pl.sum_horizontal(*MEMORY_COLUMNS)).to_series().to_numpy()
    ranks = [str(r) for r in memory["rank"].to_list()]
    fig = figure(
        x_range=ranks,  # type: ignore[arg-type]
        y_range=Range1d(start=0.0, end=_y_end_gib(totals, hbm_bytes)),
        width=width,
        height=360,
        tools="save,reset",
        title=_title(title, totals, capacity_bytes, hbm_bytes),
        x_axis_label="pipeline rank",
        y_axis_label="GiB",
    )
    fig.vbar(
        x="rank",
        bottom="bottom",
        top="top",
        width=0.8,
        source=ColumnDataSource(_stack(memory, ranks, totals)),
        fill_color="color",
        line_color="white",
        name="bars",
    )
    fig.add_layout(
        Span(
            location=capacity_bytes / GIB,
            dimension="width",
            line_color="black",
            line_dash="dashed",
            line_width=2,
            name="capacity",
        )
    )
    fig.add_layout(
        Span(
            location=hbm_bytes / GIB,
            dimension="width",
            line_color=GREY,
            line_dash="dotted",
            line_width=2,
            name="hbm",
            visible=hbm_bytes > capacity_bytes,
        )
    )
    idx = np.nonzero(totals > capacity_bytes)[0]
    fig.scatter(
        x=[ranks[i] for i in idx],
        y=((totals[idx] / GIB) * 1.03).tolist(),
        name="over_capacity",
        **_OVER_CAPACITY_GLYPH,
    )
    fig.add_tools(
        HoverTool(
            renderers=[fig.renderers[0]],  # type: ignore[list-item]
            tooltips=[
                ("rank", "@rank"),
                ("part", "@part"),
                ("this part", "@gib{0,0.00} GiB"),
                ("rank total", "@total{0,0.00} GiB"),
                ("usable", f"{capacity_bytes / GIB:,.2f} GiB of {hbm_bytes / GIB:,.2f} GiB HBM"),
            ],
        )
    )
    _memory_legend(fig)
    _over_capacity_item(fig).visible = bool(len(idx))  # shown only when some rank is over
    fig.xaxis.major_label_orientation = _label_orientation(ranks)
    plain_axes(fig)
    return fig


def same_memory_layout(fig: figure, memory: pl.DataFrame) -> bool:
    """Whether ``fig`` (a ``memory_figure``) has the ranks of ``memory`` (one bar each)."""
    return list(fig.x_range.factors) == [str(r) for r in memory["rank"].sort().to_list()]  # type: ignore[attr-defined]


def refresh_memory_figure(
    fig: figure,
    memory: pl.DataFrame,
    *,
    capacity_bytes: float,
    usable_bytes: float | None = None,
    title: str = "Memory per pipeline rank",
) -> bool:
    """Write ``memory`` into ``fig`` (a ``memory_figure``) in place, with no new bokeh models: ranks (the x
    factors), bars, usable and HBM lines, over-capacity markers and their legend entry, title and y range.
    Returns True (the figure shows ``memory``)."""
    hbm_bytes = capacity_bytes
    capacity_bytes = hbm_bytes if usable_bytes is None else usable_bytes
    memory = memory.sort("rank")
    totals = memory.select(pl.sum_horizontal(*MEMORY_COLUMNS)).to_series().to_numpy()
    ranks = [str(r) for r in memory["rank"].to_list()]
    idx = np.nonzero(totals > capacity_bytes)[0]
    if list(fig.x_range.factors) != ranks:  # type: ignore[attr-defined]
        fig.x_range.factors = ranks  # type: ignore[attr-defined]
        fig.xaxis[0].major_label_orientation = _label_orientation(ranks)
    _renderer(fig, "bars").data_source.data = _stack(memory, ranks, totals)
    over = {"x": [ranks[i] for i in idx], "y": ((totals[idx] / GIB) * 1.03).tolist()}
    _renderer(fig, "over_capacity").data_source.data = over
    _over_capacity_item(fig).visible = bool(len(idx))
    _span(fig, "capacity").location = capacity_bytes / GIB
    hbm = _span(fig, "hbm")
    hbm.update(location=hbm_bytes / GIB, visible=hbm_bytes > capacity_bytes)
    hover = next(t for t in fig.tools if isinstance(t, HoverTool))
    usable_tip = ("usable", f"{capacity_bytes / GIB:,.2f} GiB of {hbm_bytes / GIB:,.2f} GiB HBM")
    hover.tooltips = [*hover.tooltips[:-1], usable_tip]  # type: ignore[index,misc]
    fig.title.text = _title(title, totals, capacity_bytes, hbm_bytes)  # type: ignore[union-attr]
    _set_y_end(fig, _y_end_gib(totals, hbm_bytes))
    return True


_OVER_CAPACITY_GLYPH: dict[str, Any] = {
    "marker": "x",
    "size": 12,
    "line_width": 3,
    "color": OKABE_ITO["vermillion"],
}


def _memory_legend(fig: figure) -> None:
    """The legend above the plot: one entry per part (``MEMORY_COLUMNS`` order), then ``OVER_CAPACITY``, drawn
    by legend-only renderers (``legend_parts``, ``legend_over_capacity``: the bars' and markers' glyphs on
    constant NaN rows, so nothing is plotted), so that writing a plan's bars and markers leaves the legend
    alone (``legend_above``)."""
    labels = [MEMORY_LABELS[c] for c in MEMORY_COLUMNS]
    colors = [MEMORY_COLORS[c] for c in MEMORY_COLUMNS]
    parts = fig.vbar(
        x="x",
        bottom="y",
        top="y",
        width=0.8,
        source=ColumnDataSource(nan_rows(len(labels), "x", "y", color=colors)),
        fill_color="color",
        line_color="white",
        name="legend_parts",
    )
    over = fig.scatter(x=[np.nan], y=[np.nan], name="legend_over_capacity", **_OVER_CAPACITY_GLYPH)
    entries = [(label, parts, i) for i, label in enumerate(labels)]
    legend_above(fig, [*entries, (OVER_CAPACITY, over, 0)], background_fill_alpha=0.8)
    fig.toolbar.logo = None


def _span(fig: figure, name: str) -> Span:
    return next(a for a in fig.center if isinstance(a, Span) and a.name == name)


def _label_orientation(ranks: list[str]) -> float:
    """Rank labels upright up to 32 ranks, slanted beyond."""
    return 0.0 if len(ranks) <= 32 else 1.2


def _over_capacity_item(fig: figure) -> LegendItem:
    return next(i for i in fig.legend[0].items if getattr(i.label, "value", None) == OVER_CAPACITY)


def _renderer(fig: figure, name: str) -> Any:
    return next(r for r in fig.renderers if r.name == name)


def _y_end_gib(totals: np.ndarray, capacity_bytes: float) -> float:
    """Top of the y axis: the tallest bar, its over-capacity marker (drawn 3 % above it) and the capacity
    line, with room to spare."""
    return max(capacity_bytes, float(totals.max(initial=0.0))) / GIB * 1.12


def _set_y_end(fig: figure, end_gib: float) -> None:
    """Show 0..``end_gib`` on the y axis of a shown figure, also after the reset tool (which otherwise goes
    back to the range the figure was first drawn with).

    The y range is a ``Range1d``: BokehJS's ``DataRange1d`` keeps the ``end`` it was created with and puts it
    back on its next update, so an ``end`` written later would not be drawn.
    """
    y = fig.y_range
    assert isinstance(y, Range1d), "memory_figure draws on a Range1d y axis"
    y.update(start=0.0, end=end_gib, reset_start=0.0, reset_end=end_gib)


def _stack(memory: pl.DataFrame, ranks: list[str], totals: np.ndarray) -> dict[str, object]:
    """One row per (rank, part): bottom and top of its segment in GiB, parts in ``MEMORY_COLUMNS`` order."""
    values = np.stack([memory[c].to_numpy() / GIB for c in MEMORY_COLUMNS])  # parts x ranks
    tops = values.cumsum(axis=0)
    num_parts = len(MEMORY_COLUMNS)
    return short_columns_as_lists(
        {
            "rank": ranks * num_parts,
            "bottom": (tops - values).ravel(),
            "top": tops.ravel(),
            "gib": values.ravel(),
            "total": np.tile(totals / GIB, num_parts),
            "part": [MEMORY_LABELS[c] for c in MEMORY_COLUMNS for _ in ranks],
            "color": [MEMORY_COLORS[c] for c in MEMORY_COLUMNS for _ in ranks],
        }
    )


def _title(title: str, totals: np.ndarray, capacity_bytes: float, hbm_bytes: float) -> str:
    peak = float(totals.max(initial=0.0))
    num_over = int((totals > capacity_bytes).sum())
    verdict = f"{num_over} rank(s) over capacity" if num_over else "fits"
    if hbm_bytes > capacity_bytes:
        limit = f"{capacity_bytes / GIB:.1f} GiB usable (dashed; HBM {hbm_bytes / GIB:.1f} GiB dotted)"
    else:
        limit = f"{capacity_bytes / GIB:.1f} GiB (dashed)"
    return f"{title} · peak {peak / GIB:.1f} GiB of {limit} · {verdict}"


def _legend_outside(fig: figure) -> None:
    fig.legend.orientation = "horizontal"
    fig.legend.background_fill_alpha = 0.8
    fig.add_layout(fig.legend[0], "above")
    fig.toolbar.logo = None


def estimate_memory_figure(
    estimate: Estimate, *, headroom_frac: float | None = None, **kwargs: Any
) -> figure:
    """``memory_figure`` of an Estimate: its device capacity and the usable line (``usable_memory_bytes``)."""
    return memory_figure(
        estimate.memory,
        capacity_bytes=estimate.memory_capacity_bytes,
        usable_bytes=usable_memory_bytes(estimate, headroom_frac),
        **kwargs,
    )


def served_memory_figure(estimate: Estimate, **kwargs: Any) -> figure:
    """``estimate_memory_figure`` for the served app: its y tick labels padded to a fixed width
    (``fixed_width_tick_labels``), so the axis is as wide at 100 GiB as at 80 and a change lays out no page.
    The padding is a ``CustomJSTickFormatter``, JavaScript the page evaluates from a string: JupyterLab's
    Content-Security-Policy (no 'unsafe-eval') refuses it, so reports and notebook figures keep the plain
    formatter and only the app, which serves its own pages, uses this."""
    fig = estimate_memory_figure(estimate, **kwargs)
    fixed_width_tick_labels(fig.yaxis[0])
    return fig


def activation_figure(
    activation_timeline: pl.DataFrame,
    *,
    capacity_bytes: float | None = None,
    max_points_per_rank: int = 400,
    width: int = PLOT_WIDTH_PX,
    title: str = "Live activation memory per pipeline rank",
) -> figure:
    """One step line per rank of activation GiB against time (ms), renderer ``activations``.

    ``activation_timeline`` has rank, time_s, activation_bytes (a step function: a value holds until the
    rank's next row). Ranks with more than ``max_points_per_rank`` rows are reduced to that many time bins
    keeping each bin's maximum, so peaks survive. One legend entry per rank (``rank 0``, ...), above the plot.
    ``capacity_bytes`` is not drawn (it would flatten the lines) nor put in the title (it is far above the
    axis; the memory figure shows it against every part): it is in the hover.
    """
    frame = activation_timeline.sort(["rank", "time_s"], maintain_order=True)
    ranks = frame["rank"].unique(maintain_order=True).to_list()
    colors = category_colors(len(ranks))
    xs, ys = [], []
    for rank in ranks:
        part = frame.filter(pl.col("rank") == rank)
        x, y = _reduce(part["time_s"].to_numpy(), part["activation_bytes"].to_numpy(), max_points_per_rank)
        xs.append((x * MS_PER_S).astype(np.float32))
        ys.append((y / GIB).astype(np.float32))
    peaks = [float(y.max(initial=0.0)) for y in ys]
    peak = max(peaks, default=0.0)
    at = f" (rank {ranks[peaks.index(peak)]})" if peaks else ""
    fig = figure(
        width=width,
        height=320 + 22 * _legend_rows(len(ranks)),
        title=f"{title} · peak {peak:.2f} GiB{at}",
        tools="pan,wheel_zoom,box_zoom,reset,save",
        x_axis_label="time from step start (ms)",
        y_axis_label="activations (GiB)",
    )
    source = ColumnDataSource(
        {
            "xs": xs,
            "ys": ys,
            "rank": [str(r) for r in ranks],
            "label": [f"rank {r}" for r in ranks],
            "color": colors,
            "peak": peaks,
        }
    )
    lines = fig.multi_line(
        xs="xs",
        ys="ys",
        line_color="color",
        line_width=1.5,
        source=source,
        name="activations",
        legend_field="label",
    )
    fig.add_tools(
        HoverTool(
            renderers=[lines],
            tooltips=[
                ("rank", "@rank"),
                ("time", "$x{0,0.00} ms"),
                ("activations", "$y{0,0.00} GiB"),
                ("rank peak", "@peak{0,0.00} GiB"),
                *([("device capacity", f"{capacity_bytes / GIB:,.1f} GiB")] if capacity_bytes else []),
            ],
        )
    )
    _legend_outside(fig)
    fig.legend.ncols = min(len(ranks), _LEGEND_COLUMNS)
    return plain_axes(fig)


_LEGEND_COLUMNS = 8
"""Ranks per legend row of the activation figure."""


def _legend_rows(num_ranks: int) -> int:
    return max(1, -(-num_ranks // _LEGEND_COLUMNS))


def _reduce(time_s: np.ndarray, values: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """Step-function points; beyond ``max_points`` the maximum per time bin (peaks kept)."""
    if len(time_s) <= max_points:
        return np.repeat(time_s, 2)[1:], np.repeat(values, 2)[:-1]
    edges = np.linspace(time_s[0], time_s[-1], max_points + 1)
    bins = np.clip(np.searchsorted(edges, time_s, side="right") - 1, 0, max_points - 1)
    peak = np.full(max_points, -np.inf)
    np.maximum.at(peak, bins, values)
    filled = np.maximum.accumulate(np.where(np.isfinite(peak), np.arange(max_points), 0))
    return edges[:-1], peak[filled]


def estimate_activation_figure(estimate: Estimate, **kwargs: Any) -> figure | None:
    """``activation_figure`` of an Estimate, or None when the backend gave no activation timeline."""
    if estimate.activation_timeline is None or estimate.activation_timeline.height == 0:
        return None
    return activation_figure(
        estimate.activation_timeline, capacity_bytes=estimate.memory_capacity_bytes, **kwargs
    )
