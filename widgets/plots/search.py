"""The search space: throughput (or MFU) against peak memory per device for the plans of a search.

Input is the planner's ranked frame, best plan first. Columns used (``SEARCH_COLUMNS``):

- required: ``tokens_per_s`` (float, tokens/s over the cluster; or the column named by ``y``),
  ``peak_memory_bytes`` (float, bytes per device), ``fits`` (bool);
- optional: ``mfu`` (0..1), ``plan`` (str, e.g. ``ParallelPlan.describe()``), the plan fields ``dp``,
  ``tp``, ``pp``, ``cp``, ``ep``, ``vpp``, ``micro_batch_size``, ``zero_stage``, ``recompute``, ``schedule``,
  ``tier`` (``refined`` or ``screened``), ``rejected_reason`` (str, null when accepted),
  ``memory_capacity_bytes`` (float, drawn as a vertical line).

A plan is feasible when ``fits`` is true and ``rejected_reason`` is null or empty; the rest are grey.
Plans are numbered from 1 like the planner's ``rank`` (its column when present, else the row order);
axes read ``470k``, not ``4.700e+5``; the legend sits right of the plot area, never over the points.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from bokeh.models import ColumnDataSource, HoverTool, NumeralTickFormatter
from bokeh.models.annotations import Span
from bokeh.plotting import figure
from workbench_widgets.plots._style import GIB, GREY, OKABE_ITO, PLOT_WIDTH_PX, category_colors

from workbench.search.frontier import pareto_mask
from workbench.specs.rules import PLAN_FIELDS

SEARCH_REQUIRED: tuple[str, ...] = ("tokens_per_s", "peak_memory_bytes", "fits")
SEARCH_COLUMNS: tuple[str, ...] = (
    *SEARCH_REQUIRED,
    "mfu",
    "plan",
    *PLAN_FIELDS,
    "tier",
    "rejected_reason",
    "memory_capacity_bytes",
)
Y_LABELS = {"tokens_per_s": ("tokens/s", "{0,0}"), "mfu": ("MFU", "{0.0 %}")}
Y_TICK_FORMATS = {"tokens_per_s": "0.[0]a", "mfu": "0 %"}
"""Numeral.js formats of the y ticks (``470k``, ``1.2m``; ``45 %``); other columns get ``0,0.[00]``."""
X_TICK_FORMAT = "0,0.[0]"
"""GiB ticks: ``40``, ``52.5``."""


def feasible_mask(frame: pl.DataFrame) -> np.ndarray:
    """``fits`` and no rejection reason."""
    ok = frame["fits"].fill_null(False).to_numpy().astype(bool)
    if "rejected_reason" in frame.columns:
        reason = frame["rejected_reason"].cast(pl.String).fill_null("").to_numpy()
        ok &= reason == ""
    return ok


def search_figure(
    frame: pl.DataFrame,
    *,
    y: str = "tokens_per_s",
    color_by: str = "pp",
    chosen_index: int = 0,
    max_points: int = 4_000,
    width: int = PLOT_WIDTH_PX,
    title: str = "Search space",
    usable_bytes: float | None = None,
) -> figure:
    """Scatter of ``y`` against peak memory (GiB) with renderers ``feasible``, ``infeasible`` (grey crosses,
    with a legend entry only when there are some), ``pareto`` (the frontier over feasible plans, drawn as a
    step line) and ``chosen`` (row ``chosen_index``); the memory a device may use as a dashed vertical line
    (Span ``capacity``: ``usable_bytes``, else the frame's ``memory_capacity_bytes``).

    Beyond ``max_points`` rows, all ``refined`` rows, the frontier, the chosen row and the first half of the
    ranking stay, and an even sample of the rest. ValueError for missing columns or a bad index.
    """
    missing = [c for c in (*SEARCH_REQUIRED[1:], y) if c not in frame.columns]
    if missing or "fits" not in frame.columns:
        raise ValueError(
            f"search_figure: frame lacks column(s) {', '.join(missing or ['fits'])}; "
            f"required: {', '.join(SEARCH_REQUIRED)} (and y={y!r})"
        )
    if not 0 <= chosen_index < max(frame.height, 1):
        raise ValueError(f"search_figure: chosen_index must be in 0..{frame.height - 1}, got {chosen_index}")
    frame = _numbered(frame)
    feasible = feasible_mask(frame)
    mem = frame["peak_memory_bytes"].to_numpy().astype(float)
    val = frame[y].to_numpy().astype(float)
    front = np.zeros(frame.height, dtype=bool)
    front[feasible] = pareto_mask((mem[feasible], val[feasible]), (False, True))
    keep = _sample(frame, front, chosen_index, max_points)
    data = _hover_data(frame, y)
    if usable_bytes is None and "memory_capacity_bytes" in frame.columns:
        capacities = frame["memory_capacity_bytes"].drop_nulls()
        usable_bytes = float(capacities[0]) if capacities.len() else None
    fig = figure(
        width=width,
        height=460,
        title=_title(
            title, frame.height, int(keep.sum()), int(feasible.sum()), int((keep & ~feasible).sum())
        ),
        x_axis_label="peak memory per device (GiB)",
        y_axis_label=Y_LABELS.get(y, (y, ""))[0],
        tools="pan,wheel_zoom,box_zoom,reset,save",
    )
    if (keep & ~feasible).any():
        _draw_infeasible(fig, data, keep & ~feasible)
    _draw_feasible(fig, data, keep & feasible, frame, color_by)
    idx = np.nonzero(front)[0][np.argsort(mem[front])]
    fig.step(
        x=mem[idx] / GIB,
        y=val[idx],
        mode="after",
        line_color="black",
        line_width=2,
        name="pareto",
        legend_label="Pareto frontier",
    )
    fig.scatter(
        x=[mem[chosen_index] / GIB],
        y=[val[chosen_index]],
        marker="star",
        size=22,
        fill_color="white",
        line_color="black",
        line_width=2,
        name="chosen",
        legend_label=f"chosen plan (#{frame['rank_in_search'][chosen_index]})",
    )
    if usable_bytes is not None:
        fig.add_layout(
            Span(
                location=usable_bytes / GIB,
                dimension="height",
                line_dash="dashed",
                line_color="black",
                name="capacity",
            )
        )
    fig.add_tools(
        HoverTool(
            renderers=[r for r in fig.renderers if r.name in ("feasible", "infeasible")],  # type: ignore[misc]
            tooltips=_tooltips(frame, y),
        )
    )
    fig.yaxis.formatter = NumeralTickFormatter(format=Y_TICK_FORMATS.get(y, "0,0.[00]"))
    fig.xaxis.formatter = NumeralTickFormatter(format=X_TICK_FORMAT)
    fig.legend.click_policy = "hide"
    fig.legend.title = "click to hide"
    fig.add_layout(fig.legend[0], "right")  # outside the plot area: never over the points
    fig.toolbar.logo = None
    return fig


def _numbered(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with ``rank_in_search``: the planner's 1-based ``rank`` where present, else 1, 2, ... in order."""
    if "rank" in frame.columns and frame["rank"].null_count() == 0:
        return frame.with_columns(rank_in_search=pl.col("rank").cast(pl.Int64))
    return frame.with_row_index("rank_in_search", offset=1)


def _title(title: str, total: int, shown: int, num_feasible: int, num_grey: int) -> str:
    sample = f", {shown:,} shown" if shown < total else ""
    grey = f" · grey: {num_grey:,} rejected or over memory" if num_grey else ""
    return f"{title} · {total:,} plans ({num_feasible:,} feasible{sample}){grey}"


def _sample(frame: pl.DataFrame, front: np.ndarray, chosen: int, max_points: int) -> np.ndarray:
    n = frame.height
    keep = np.zeros(n, dtype=bool)
    keep[: max(max_points // 2, 1)] = True
    if n > max_points // 2:
        keep[np.linspace(max_points // 2, n - 1, max(max_points // 2, 1)).astype(int)] = True
    if "tier" in frame.columns:
        keep |= (frame["tier"].cast(pl.String) == "refined").fill_null(False).to_numpy()
    keep |= front
    keep[chosen] = True
    return keep


def _hover_data(frame: pl.DataFrame, y: str) -> dict[str, np.ndarray | list]:
    data: dict[str, np.ndarray | list] = {
        "x": frame["peak_memory_bytes"].to_numpy() / GIB,
        "y": frame[y].to_numpy(),
        "rank_in_search": frame["rank_in_search"].to_numpy(),
        "plan": _plan_text(frame),
    }
    for col in ("tokens_per_s", "mfu", "tier", "rejected_reason"):
        if col in frame.columns:
            data[col] = (
                frame[col].cast(pl.String).fill_null("").to_list()
                if col in ("tier", "rejected_reason")
                else frame[col].to_numpy()
            )
    return data


def _plan_text(frame: pl.DataFrame) -> list[str]:
    if "plan" in frame.columns:
        return frame["plan"].cast(pl.String).fill_null("").to_list()
    present = [f for f in PLAN_FIELDS if f in frame.columns]
    rows = frame.select(present).rows()
    return [" ".join(f"{k}={v}" for k, v in zip(present, row, strict=True)) for row in rows]


def _tooltips(frame: pl.DataFrame, y: str) -> list[tuple[str, str]]:
    tips = [("#", "@rank_in_search"), ("plan", "@plan"), ("peak memory", "@x{0,0.00} GiB")]
    if "tokens_per_s" in frame.columns:
        tips.append(("throughput", "@tokens_per_s{0,0} tokens/s"))
    if "mfu" in frame.columns:
        tips.append(("MFU", "@mfu{0.0 %}"))
    if y not in ("tokens_per_s", "mfu"):
        tips.append((y, "@y"))
    names = {"tier": "tier (screened / refined)", "rejected_reason": "why rejected"}
    tips += [(names[c], f"@{c}") for c in ("tier", "rejected_reason") if c in frame.columns]
    return tips


def _subset(data: dict, mask: np.ndarray) -> ColumnDataSource:
    return ColumnDataSource(
        {
            k: (
                np.asarray(v)[mask]
                if isinstance(v, np.ndarray)
                else [x for x, m in zip(v, mask, strict=True) if m]
            )
            for k, v in data.items()
        }
    )


def _draw_infeasible(fig: figure, data: dict, mask: np.ndarray) -> None:
    fig.scatter(
        x="x",
        y="y",
        source=_subset(data, mask),
        marker="x",
        size=7,
        color=GREY,
        alpha=0.6,
        name="infeasible",
        legend_label="rejected / over memory",
    )


def _draw_feasible(fig: figure, data: dict, mask: np.ndarray, frame: pl.DataFrame, color_by: str) -> None:
    source = _subset(data, mask)
    if color_by not in frame.columns:
        fig.scatter(
            x="x",
            y="y",
            source=source,
            size=8,
            color=OKABE_ITO["blue"],
            alpha=0.8,
            name="feasible",
            legend_label="feasible",
        )
        return
    values = frame[color_by].cast(pl.String).fill_null("?").to_numpy()[mask]
    levels = sorted(set(values.tolist()), key=lambda v: (len(v), v))
    colors = dict(zip(levels, category_colors(len(levels)), strict=True))
    source.data["color"] = [colors[v] for v in values]
    source.data["group"] = [f"{color_by}={v}" for v in values]
    fig.scatter(
        x="x", y="y", source=source, size=8, color="color", alpha=0.85, name="feasible", legend_group="group"
    )
