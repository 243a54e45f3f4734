"""Step-time breakdown: compute, exposed communication by kind, bubble and optimizer, one bar per plan; under
each bar a thin hatched bar of the communication hidden behind compute, by kind (not part of the step)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from bokeh.models import ColumnDataSource, HoverTool, Range1d
from bokeh.plotting import figure
from bokeh.transform import dodge
from workbench_widgets.plots._style import (
    GREY,
    MS_PER_S,
    OKABE_ITO,
    PLOT_WIDTH_PX,
    legend_above,
    nan_rows,
    plain_axes,
)

if TYPE_CHECKING:
    from workbench.specs.estimate import Estimate, StepBreakdown

BREAKDOWN_PARTS: tuple[tuple[str, str, str], ...] = (
    ("compute_s", "compute", OKABE_ITO["blue"]),
    ("exposed_tp_comm_s", "TP comm", OKABE_ITO["orange"]),
    ("exposed_cp_comm_s", "CP comm", OKABE_ITO["yellow"]),
    ("exposed_ep_comm_s", "EP comm", OKABE_ITO["reddish_purple"]),
    ("exposed_pp_comm_s", "PP comm", OKABE_ITO["sky_blue"]),
    ("exposed_dp_comm_s", "DP comm", OKABE_ITO["bluish_green"]),
    ("bubble_s", "bubble", GREY),
    ("optimizer_s", "optimizer", OKABE_ITO["black"]),
)
"""(StepBreakdown field, label, colour), in stacking order."""

OVERLAPPED_PARTS: tuple[tuple[str, str, str], ...] = tuple(
    (f"overlapped_{kind}_comm_s", f"{kind.upper()} comm hidden", color)
    for kind, color in (
        ("tp", OKABE_ITO["orange"]),
        ("cp", OKABE_ITO["yellow"]),
        ("ep", OKABE_ITO["reddish_purple"]),
        ("pp", OKABE_ITO["sky_blue"]),
        ("dp", OKABE_ITO["bluish_green"]),
    )
)
"""(StepBreakdown field, label, colour) of the hidden communication, drawn hatched under each bar."""


HIDDEN_LABEL = "hatched: communication hidden behind compute (not in the step)"
"""Legend entry of the thin hatched bars under each plan."""


def breakdown_figure(
    breakdowns: Sequence[StepBreakdown],
    labels: Sequence[str],
    *,
    title: str = "Where the step time goes",
    width: int = PLOT_WIDTH_PX,
) -> figure:
    """Horizontal stacked bars in ms, one per breakdown (renderer ``parts``: one row per plan and part), and
    under each a thin hatched bar of the communication hidden behind compute (renderer ``overlapped``: one row
    per plan and kind that hid any).

    Hover gives the part in ms and its share of that plan's step. ValueError if the lengths differ or
    nothing is given.
    """
    if not breakdowns or len(breakdowns) != len(labels):
        raise ValueError(
            f"breakdown_figure: need one label per breakdown, got {len(breakdowns)} breakdowns "
            f"and {len(labels)} labels (at least one)"
        )
    height = 200 + 40 * len(labels)  # one plan: a bar of ~70 px under its two-row legend, not a strip
    parts, hidden = _stack(breakdowns, labels), _hidden(breakdowns, labels)
    end = x_end_ms(parts, hidden)
    fig = figure(
        x_range=Range1d(start=0, end=end, reset_start=0, reset_end=end),
        y_range=list(reversed(labels)),  # type: ignore[arg-type]
        width=width,
        height=min(height, 600),
        title=title,
        x_axis_label="ms per optimizer step",
        tools="save,reset",
    )
    fig.hbar(
        y="plan",
        left="left",
        right="right",
        height=0.7,
        source=ColumnDataSource(parts),
        fill_color="color",
        line_color="white",
        name="parts",
    )
    fig.hbar(
        y=dodge("plan", -0.42, range=fig.y_range),
        left="left",
        right="right",
        height=0.12,
        source=ColumnDataSource(hidden),
        fill_color="color",
        hatch_color="color",
        name="overlapped",
        **_HIDDEN_GLYPH,
    )
    fig.add_tools(
        HoverTool(
            renderers=[fig.renderers[1]],  # type: ignore[list-item]
            tooltips=[("plan", "@plan"), ("hidden behind compute", "@part"), ("time", "@ms{0,0.000} ms")],
        )
    )
    fig.add_tools(
        HoverTool(
            renderers=[fig.renderers[0]],  # type: ignore[list-item]
            tooltips=[
                ("plan", "@plan"),
                ("part", "@part"),
                ("time", "@ms{0,0.000} ms"),
                ("share of step", "@share{0.0 %}"),
                ("step", "@total_ms{0,0.000} ms"),
            ],
        )
    )
    _breakdown_legend(fig)
    fig.toolbar.logo = None
    return plain_axes(fig)


_HIDDEN_GLYPH: dict[str, Any] = {"fill_alpha": 0.45, "hatch_pattern": "/", "line_color": None}
"""Look of the thin hatched bars (their colours: the kind's, per row)."""


def _breakdown_legend(fig: figure) -> None:
    """The legend above the plot: one entry per part (``BREAKDOWN_PARTS`` order), then ``HIDDEN_LABEL`` (a grey
    hatched glyph: the hatch says hidden, the bar's colour its kind), drawn by legend-only renderers
    (``legend_parts``, ``legend_overlapped``: the bars' glyphs on constant NaN rows, so nothing is plotted),
    so that writing a plan's bars leaves the legend alone (``legend_above``)."""
    parts = fig.hbar(
        y="y",
        left="x",
        right="x",
        height=0.7,
        source=ColumnDataSource(
            nan_rows(len(BREAKDOWN_PARTS), "x", "y", color=[c for *_, c in BREAKDOWN_PARTS])
        ),
        fill_color="color",
        line_color="white",
        name="legend_parts",
    )
    hidden = fig.hbar(
        y=np.nan,
        left=np.nan,
        right=np.nan,
        height=0.12,
        color=GREY,
        name="legend_overlapped",
        **_HIDDEN_GLYPH,
    )
    entries = [(label, parts, i) for i, (_, label, _) in enumerate(BREAKDOWN_PARTS)]
    legend_above(fig, [*entries, (HIDDEN_LABEL, hidden, 0)])


DATA_RANGE_PAD_FRAC = 0.1
"""Bokeh's ``DataRange1d.range_padding`` default: the span from 0 to the longest bar widened by 10%, centred."""


def x_end_ms(*columns: dict[str, list]) -> float:
    """The end of the x range (ms) that bokeh's ``DataRange1d`` with ``start=0`` computes in the browser for
    bars ``columns`` (``_stack``): the longest bar's right edge ``hi`` padded as ``hi/2 + hi (1 + pad)/2``
    (BokehJS ``DataRange1d._compute_range``: span (hi - 0)(1 + pad) about the centre hi/2), 1 when no bar
    is longer than 0 (its ``default_span`` 2 about 0). Set with the data as a fixed ``Range1d``, so the
    browser recomputes no data range and lays the figure out once per change (issue 51 item 10)."""
    hi = max((max(c["right"]) for c in columns if len(c["right"])), default=0.0)
    return hi / 2 + hi * (1 + DATA_RANGE_PAD_FRAC) / 2 if hi > 0 else 1.0


def _stack(
    breakdowns: Sequence[StepBreakdown],
    labels: Sequence[str],
    parts: tuple[tuple[str, str, str], ...] = BREAKDOWN_PARTS,
    *,
    skip_empty: bool = False,
) -> dict[str, list]:
    """One row per (plan, part): its left and right edge in ms, stacked from 0 in ``parts`` order, with its
    share of the plan's step; ``skip_empty`` leaves out parts of 0 ms."""
    cols: dict[str, list] = {
        k: [] for k in ("plan", "part", "color", "left", "right", "ms", "share", "total_ms")
    }
    for b, label in zip(breakdowns, labels, strict=True):
        left = 0.0
        for field, part, color in parts:
            ms = getattr(b, field) * MS_PER_S
            if skip_empty and ms <= 0:
                continue
            for key, value in (
                ("plan", label),
                ("part", part),
                ("color", color),
                ("left", left),
                ("right", left + ms),
                ("ms", ms),
                ("total_ms", b.total_s * MS_PER_S),
                ("share", getattr(b, field) / b.total_s if b.total_s > 0 else 0.0),
            ):
                cols[key].append(value)
            left += ms
    return cols


def _hidden(breakdowns: Sequence[StepBreakdown], labels: Sequence[str]) -> dict[str, list]:
    """One row per (plan, kind) that hid communication, stacked from 0 (``OVERLAPPED_PARTS``)."""
    return _stack(breakdowns, labels, OVERLAPPED_PARTS, skip_empty=True)


def estimates_breakdown_figure(estimates: Sequence[Estimate], **kwargs: Any) -> figure:
    """``breakdown_figure`` of Estimates, labelled ``#i plan`` (backend added when backends differ)."""
    return breakdown_figure([e.breakdown for e in estimates], estimate_labels(estimates), **kwargs)


def estimate_labels(estimates: Sequence[Estimate]) -> list[str]:
    """The bar labels of ``estimates_breakdown_figure``: ``#i plan``, backend added when backends differ."""
    several = len({e.backend for e in estimates}) > 1
    return [
        f"#{i} {e.plan.describe()}" + (f" [{e.backend}]" if several else "") for i, e in enumerate(estimates)
    ]


def same_bars(fig: figure, estimates: Sequence[Estimate]) -> bool:
    """Whether ``fig`` (an ``estimates_breakdown_figure``) has as many bars as ``estimates`` would get
    (its height follows the count; the labels are written in place)."""
    return len(fig.y_range.factors) == len(estimates)  # type: ignore[attr-defined]


def refresh_breakdown_figure(
    fig: figure, estimates: Sequence[Estimate], *, labels: Sequence[str] | None = None
) -> bool:
    """Write the bars of ``estimates`` into ``fig`` (an ``estimates_breakdown_figure``, or a ``breakdown_figure``
    of as many bars labelled ``labels``) in place, with no new bokeh models; False (and nothing changed) unless
    ``same_bars``. ``labels``: the bars' labels (default ``estimate_labels``)."""
    if not same_bars(fig, estimates):
        return False
    labels = list(labels) if labels is not None else estimate_labels(estimates)
    fig.y_range.factors = list(reversed(labels))  # type: ignore[attr-defined]
    stack = _stack([e.breakdown for e in estimates], labels)
    next(r for r in fig.renderers if r.name == "parts").data_source.data = stack  # type: ignore[attr-defined]
    hidden = next((r for r in fig.renderers if r.name == "overlapped"), None)
    columns = [stack]
    if hidden is not None:
        columns.append(_hidden([e.breakdown for e in estimates], labels))
        hidden.data_source.data = columns[-1]  # type: ignore[attr-defined]
    end = x_end_ms(*columns)
    fig.x_range.update(end=end, reset_end=end)  # type: ignore[attr-defined]
    return True


SERVED_BAR_LABEL = "this plan"
"""The bar label of ``served_breakdown_figure`` (the plan itself is said in the title)."""


def served_title(estimate: Estimate) -> str:
    """The title of ``served_breakdown_figure``: ``Where the step time goes: <plan>``."""
    return f"Where the step time goes: {estimate.plan.describe()}"


def served_breakdown_figure(estimate: Estimate, **kwargs: Any) -> figure:
    """The breakdown of one Estimate for the served app: its bar labelled ``SERVED_BAR_LABEL`` and the plan in
    the title (``served_title``), so that the y axis is as wide for every plan. The axis's labels set its
    width, and BokehJS lays a figure out again, with the page around it, whenever an axis changes width:
    25-33 ms of the page's time on a schedule change (``interleaved-1f1b`` in the label or not), measured in
    headless Chromium (issue 51 item 10); a title's width costs no layout."""
    return breakdown_figure([estimate.breakdown], [SERVED_BAR_LABEL], title=served_title(estimate), **kwargs)


def refresh_served_breakdown(fig: figure, estimate: Estimate) -> bool:
    """``refresh_breakdown_figure`` of a ``served_breakdown_figure``: its bar and title; False (nothing
    changed) unless ``fig`` has one bar."""
    if not refresh_breakdown_figure(fig, [estimate], labels=[SERVED_BAR_LABEL]):
        return False
    fig.title.text = served_title(estimate)  # type: ignore[union-attr]
    return True
