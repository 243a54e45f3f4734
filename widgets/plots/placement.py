"""Placement: the cluster as a grid of nodes x devices, coloured by pipeline stage, groups outlined.

Ranks follow the plan's ``rank_order`` (``workbench.cost.placement.axis_stride``); rank r sits on node
r // devices_per_node, device r % devices_per_node. Tensor-parallel groups are boxed, data-parallel groups
joined by a line; a group that spans more than one node is drawn dashed in vermillion, so a tp group that
leaves the NVLink domain stands out.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
from bokeh.models import ColumnDataSource, HoverTool, Range1d
from bokeh.plotting import figure
from workbench_widgets.plots._style import GREY, OKABE_ITO, category_colors, short_columns_as_lists

from workbench.cost.placement import axis_stride
from workbench.specs.hardware import ClusterSpec
from workbench.specs.plan import Axis, ParallelPlan

CROSS_COLOR = OKABE_ITO["vermillion"]
LAYOUT_AXES: tuple[Axis, ...] = (Axis.TP, Axis.CP, Axis.DP, Axis.PP)
"""Axes that take room on the device grid (ep is carved from tp*cp*dp)."""


def rank_coordinates(plan: ParallelPlan, num_ranks: int) -> dict[str, np.ndarray]:
    """Coordinate of every rank 0..num_ranks-1 on each layout axis: (r // stride) % degree."""
    ranks = np.arange(num_ranks)
    return {a.value: (ranks // axis_stride(plan, a)) % getattr(plan, a.value) for a in LAYOUT_AXES}


def axis_groups(plan: ParallelPlan, axis: Axis | str) -> list[list[int]]:
    """The groups of ``axis`` (tp, cp, dp or pp) as sorted rank lists; groups of one rank are omitted."""
    axis = Axis(axis)
    coords = rank_coordinates(plan, plan.num_devices)
    others = [a.value for a in LAYOUT_AXES if a is not axis]
    groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for r in range(plan.num_devices):
        groups[tuple(int(coords[o][r]) for o in others)].append(r)
    return [g for g in groups.values() if len(g) > 1]


def crosses_node(group: list[int], devices_per_node: int) -> bool:
    return len({r // devices_per_node for r in group}) > 1


def placement_figure(plan: ParallelPlan, cluster: ClusterSpec, *, width: int = 640) -> figure:
    """Grid figure: renderer ``devices`` (one rect per device of the cluster), ``tp_groups`` (boxes),
    ``dp_groups`` (lines), and a two-line title that counts the groups crossing nodes. ValueError if the plan
    needs more devices than the cluster has."""
    if plan.num_devices > cluster.num_devices:
        raise ValueError(
            f"placement_figure: plan needs {plan.num_devices} devices, cluster "
            f"{cluster.id!r} has {cluster.num_devices}"
        )
    dpn, nodes = cluster.devices_per_node, cluster.num_nodes
    tp_groups, dp_groups = axis_groups(plan, Axis.TP), axis_groups(plan, Axis.DP)
    cell = max(6, min(48, 560 // max(nodes, 1)))
    fig = figure(
        width=width,
        height=min(700, 120 + cell * nodes),
        tools="save,reset,pan,wheel_zoom",
        title=_title(plan, cluster, tp_groups, dp_groups),
        x_range=Range1d(start=-0.6, end=dpn - 0.4),
        y_range=Range1d(start=nodes - 0.4, end=-0.6),
        x_axis_label="device in node",
        y_axis_label="node",
    )
    _draw_devices(fig, plan, cluster)
    _draw_tp_boxes(fig, tp_groups, dpn)
    _draw_dp_lines(fig, dp_groups, dpn)
    fig.grid.grid_line_color = None
    fig.toolbar.logo = None
    fig.tags = placement_figure_tags(cluster)
    return fig


def refresh_placement_figure(fig: figure, plan: ParallelPlan, cluster: ClusterSpec) -> bool:
    """Write ``plan`` into ``fig`` (a ``placement_figure`` of a cluster with the same node grid) in place, with
    no new bokeh models: device colours and coordinates, tp boxes, dp lines and title. False (nothing
    changed) when the grid differs (``placement_grid_key``) or the plan needs more devices than the cluster."""
    if fig.tags != placement_figure_tags(cluster) or plan.num_devices > cluster.num_devices:
        return False
    dpn = cluster.devices_per_node
    tp_groups, dp_groups = axis_groups(plan, Axis.TP), axis_groups(plan, Axis.DP)
    fig.title.text = _title(plan, cluster, tp_groups, dp_groups)  # type: ignore[union-attr]
    _named(fig, "devices").data_source.data = _devices_data(plan, cluster)
    _named(fig, "tp_groups").data_source.data = _tp_boxes_data(tp_groups, dpn)
    _named(fig, "dp_groups").data_source.data = _dp_lines_data(dp_groups, dpn)
    return True


def placement_grid_key(cluster: ClusterSpec) -> tuple[int, int]:
    """What fixes the models of a ``placement_figure``: the grid of devices per node x nodes."""
    return (cluster.devices_per_node, cluster.num_nodes)


def placement_figure_tags(cluster: ClusterSpec) -> list[str]:
    """The ``tags`` of a ``placement_figure`` of ``cluster``: its node grid, which fixes its models."""
    return ["placement-grid {}x{}".format(*placement_grid_key(cluster))]


def _named(fig: figure, name: str) -> Any:
    return next(r for r in fig.renderers if r.name == name)


def _title(
    plan: ParallelPlan, cluster: ClusterSpec, tp_groups: list[list[int]], dp_groups: list[list[int]]
) -> str:
    dpn = cluster.devices_per_node
    tp_x = sum(crosses_node(g, dpn) for g in tp_groups)
    dp_x = sum(crosses_node(g, dpn) for g in dp_groups)
    return (  # two lines, so that the whole title fits the figure's default width
        f"Placement · {plan.num_devices} of {cluster.num_devices} devices ({cluster.num_nodes} nodes x {dpn}) · "
        f"colour: pipeline stage\n"
        f"tp groups across nodes: {tp_x} of {len(tp_groups)} · dp groups across nodes: {dp_x} of {len(dp_groups)}"
    )


def _devices_data(plan: ParallelPlan, cluster: ClusterSpec) -> dict[str, Any]:
    n = cluster.num_devices
    coords = rank_coordinates(plan, n)
    used = np.arange(n) < plan.num_devices
    stage_colors = category_colors(plan.pp)
    return short_columns_as_lists(
        {
            "x": np.arange(n) % cluster.devices_per_node,
            "y": np.arange(n) // cluster.devices_per_node,
            "rank": np.arange(n),
            "color": [stage_colors[s] if u else GREY for s, u in zip(coords["pp"], used, strict=True)],
            **{k: np.where(used, v, -1) for k, v in coords.items()},
            "state": ["in use" if u else "unused" for u in used],
        }
    )


def _draw_devices(fig: figure, plan: ParallelPlan, cluster: ClusterSpec) -> None:
    n = cluster.num_devices
    data = _devices_data(plan, cluster)
    source = ColumnDataSource(data)
    rects = fig.rect(
        x="x",
        y="y",
        width=0.9,
        height=0.9,
        source=source,
        fill_color="color",
        line_color="white",
        name="devices",
    )
    if n <= 256:
        fig.text(
            x="x",
            y="y",
            text="rank",
            source=source,
            text_align="center",
            text_baseline="middle",
            text_font_size="9px",
            text_color="white",
        )
    fig.add_tools(
        HoverTool(
            renderers=[rects],
            tooltips=[
                ("rank", "@rank (@state)"),
                ("node · device", "@y · @x"),
                ("pipeline stage (pp rank)", "@pp"),
                ("tp rank", "@tp"),
                ("dp rank", "@dp"),
                ("cp rank", "@cp"),
            ],
        )
    )


def _segments(group: list[int], dpn: int) -> list[tuple[int, int, int]]:
    """(node, first device, last device) of each contiguous run of the group inside a node."""
    out: list[tuple[int, int, int]] = []
    for r in group:
        node, dev = divmod(r, dpn)
        if out and out[-1][0] == node and out[-1][2] == dev - 1:
            out[-1] = (node, out[-1][1], dev)
        else:
            out.append((node, dev, dev))
    return out


def _tp_boxes_data(groups: list[list[int]], dpn: int) -> dict[str, list]:
    cols: dict[str, list] = {"left": [], "right": [], "top": [], "bottom": [], "color": [], "dash": []}
    for g in groups:
        cross = crosses_node(g, dpn)
        for node, first, last in _segments(g, dpn):
            cols["left"].append(first - 0.48)
            cols["right"].append(last + 0.48)
            cols["top"].append(node - 0.48)
            cols["bottom"].append(node + 0.48)
            cols["color"].append(CROSS_COLOR if cross else "black")
            cols["dash"].append("dashed" if cross else "solid")
    return cols


def _draw_tp_boxes(fig: figure, groups: list[list[int]], dpn: int) -> None:
    cols = _tp_boxes_data(groups, dpn)
    fig.quad(
        source=ColumnDataSource(cols),
        left="left",
        right="right",
        top="top",
        bottom="bottom",
        fill_alpha=0,
        line_color="color",
        line_width=2,
        line_dash="dash",
        name="tp_groups",
    )


def _dp_lines_data(groups: list[list[int]], dpn: int) -> dict[str, list]:
    return {
        "xs": [[r % dpn for r in g] for g in groups],
        "ys": [[r // dpn for r in g] for g in groups],
        "color": [CROSS_COLOR if crosses_node(g, dpn) else "black" for g in groups],
    }


def _draw_dp_lines(fig: figure, groups: list[list[int]], dpn: int) -> None:
    fig.multi_line(
        xs="xs",
        ys="ys",
        line_color="color",
        line_alpha=0.6,
        line_width=1,
        line_dash="dotted",
        source=ColumnDataSource(_dp_lines_data(groups, dpn)),
        name="dp_groups",
    )
