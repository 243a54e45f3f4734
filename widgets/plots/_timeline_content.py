"""What the pipeline timeline shows, computed without bokeh: lanes, block or run columns, labels, title.

``workbench_widgets.plots.timeline`` draws a ``TimelineContent`` as a figure, or writes it into a figure already
shown whose ``layout_key`` is the same (the Panel app does so after each change that keeps the layout).
Times arrive in seconds and leave in milliseconds (display units).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
from workbench_widgets.plots._lanes import Lanes, aggregate_runs, assign_lanes
from workbench_widgets.plots._style import MS_PER_S, OP_COLORS, PLOT_WIDTH_PX

if TYPE_CHECKING:
    from workbench.specs.estimate import Estimate

MAX_BLOCKS = 6_000
"""Above this many blocks the timeline is drawn aggregated (see ``workbench_widgets.plots.timeline``)."""
LANE_PX = 20
"""Height of one lane in screen pixels at the initial zoom: room for an 11 px axis label and a gap."""
MIN_FRAME_PX = 120
"""Smallest plot area (a one- or two-lane timeline still gets a readable band)."""
MAX_FRAME_PX = 800
"""Tallest plot area: beyond ``MAX_FRAME_PX // LANE_PX`` lanes the figure shows that many and pans in y."""
STABLE_FRAME_PX = 30 * LANE_PX
"""Plot area of a ``stable`` timeline (the app's): fixed, whatever the lane count, so that a change of pp or
vpp moves nothing on the page below it (no relayout); up to 30 lanes share it, more pan in y (the figure's
tools pan in y always, so a lane count that starts or stops overflowing needs no new figure). Fewer lanes
get taller bands."""
COMM_MIN_PX = 1
"""Screen width of the mark drawn on every communication block, so a send stays visible at full zoom-out. One
pixel, drawn pale (``COMM_MARK_ALPHA``): at 3 px the ~1,000 sends of an interleaved schedule's rank joined into a
solid bar that read as "communicating all step" while they took 1 % of it."""
COMM_MARK_ALPHA = 0.35
"""Opacity of those marks: where sends crowd, the lane is pale, not solid."""
COMM_FLOOR_ALPHA = 0.5
"""Least opacity of a communication bin in the aggregated view (a thin send is a small busy share)."""


BLOCK_COLUMNS: tuple[str, ...] = (
    "left",
    "right",
    "bottom",
    "top",
    "lane",
    "rank",
    "stage",
    "chunk",
    "microbatch",
    "op_code",
    "duration_ms",
)
"""Columns of renderer ``blocks`` (exact view): quad edges (ms, lanes), hover fields and the op as its index in
``TimelineContent.legend_ops`` (the fill colour and the hover's op name come from that index through a colour
mapper and a formatter: no text column, so a change sends numbers only, issue 51 item 10)."""
COMM_COLUMNS: tuple[str, ...] = (
    "left",
    "right",
    "lane",
    "stage",
    "chunk",
    "microbatch",
    "op_code",
    "duration_ms",
    "x",
    "y",
    "height",
)
"""Columns of renderer ``comm_marks``: the communication blocks' hover fields plus their marks' centre and
height."""
RUN_COLUMNS: tuple[str, ...] = (
    "left",
    "right",
    "bottom",
    "top",
    "lane",
    "op_code",
    "busy",
    "alpha",
    "blocks",
)
"""Columns of renderer ``runs`` (aggregated view)."""
LABEL_COLUMNS: tuple[str, ...] = ("x", "y", "text")
"""Columns of renderer ``labels`` (micro-batch numbers)."""


def lane_layout(num_lanes: int) -> tuple[int, int]:
    """``(frame_px, shown_lanes)``: the plot-area height in pixels and how many lanes it shows at first.

    Every shown lane gets at least ``LANE_PX`` pixels; above ``MAX_FRAME_PX`` the frame stops growing and shows
    the first ``MAX_FRAME_PX // LANE_PX`` lanes (the figure then pans in y over the rest).
    ValueError for ``num_lanes < 1``.
    """
    if num_lanes < 1:
        raise ValueError(f"lane_layout: num_lanes must be >= 1, got {num_lanes}")
    shown = min(num_lanes, MAX_FRAME_PX // LANE_PX)
    return max(MIN_FRAME_PX, shown * LANE_PX), shown


def stable_lane_layout(num_lanes: int) -> tuple[int, int]:
    """``lane_layout`` of a ``stable`` figure: ``(STABLE_FRAME_PX, lanes shown at first)``, the frame the same
    for every lane count. ValueError for ``num_lanes < 1``."""
    if num_lanes < 1:
        raise ValueError(f"stable_lane_layout: num_lanes must be >= 1, got {num_lanes}")
    return STABLE_FRAME_PX, min(num_lanes, STABLE_FRAME_PX // LANE_PX)


@dataclass(frozen=True, kw_only=True, slots=True)
class TimelineContent:
    """Everything a timeline figure shows, without bokeh: what ``timeline_figure`` draws and what
    ``refresh_timeline_figure`` writes into an existing figure of the same ``layout_key``."""

    title: str
    span_s: tuple[float, float]
    lanes: Lanes
    width: int
    aggregated: bool
    data: dict[str, Any]
    """Columns of renderer ``blocks`` (exact view) or ``runs`` (aggregated view)."""
    legend_ops: tuple[str, ...]
    label_data: dict[str, Any] | None
    """Columns of renderer ``labels`` (micro-batch numbers), None when none fit."""
    makespan_ms: float | None
    """Where the dashed makespan line goes, None when outside the span."""
    comm_data: dict[str, Any] | None = None
    """Columns of renderer ``comm_marks`` (a ``COMM_MIN_PX`` wide mark per communication block, exact view),
    None when there is no communication block."""
    has_blended: bool = False
    """Whether some drawn quads blend several blocks or part-idle time (aggregated runs): they get a legend entry."""

    @property
    def frame_px(self) -> int:
        """Height of the plot area in pixels (``lane_layout``)."""
        return lane_layout(len(self.lanes.labels))[0]

    @property
    def shown_lanes(self) -> int:
        """Lanes in view at the initial zoom (all of them unless above ``MAX_FRAME_PX``)."""
        return lane_layout(len(self.lanes.labels))[1]

    @property
    def stable_key(self) -> tuple:
        """What fixes the models of a figure built ``stable`` (``content_timeline_figure``): its width (the
        frame's height is fixed and its tools pan in y whatever the lanes)."""
        return (self.width,)

    @property
    def layout_key(self) -> tuple:
        """What fixes the figure's models: two contents with equal keys differ only in data and texts."""
        return (
            self.aggregated,
            self.lanes.labels,
            self.lanes.is_comm,
            self.legend_ops,
            self.label_data is None,
            self.makespan_ms is None,
            self.width,
            self.comm_data is None,
            self.has_blended,
        )


def estimate_timeline_content(estimate: Estimate, **kwargs: Any) -> TimelineContent:
    """``timeline_content`` of an Estimate (see ``estimate_timeline_figure``)."""
    plan = estimate.plan
    num_mb = plan.num_microbatches(estimate.workload)
    what = f"{plan.schedule if plan.pp > 1 else 'no pipeline'}, pp={plan.pp}"
    what += f", vpp={plan.vpp}" if plan.vpp > 1 else ""
    kwargs.setdefault("title_prefix", f"Pipeline timeline ({what}, m={num_mb})")
    return timeline_content(
        estimate.timeline, makespan_s=_makespan(estimate), bubble_fraction=estimate.bubble_fraction, **kwargs
    )


def _makespan(estimate: Estimate) -> float:
    return float(estimate.timeline["end_s"].max()) if estimate.timeline.height else 0.0  # type: ignore[arg-type]


def timeline_content(
    timeline: pl.DataFrame,
    *,
    makespan_s: float | None = None,
    bubble_fraction: float | None = None,
    title_prefix: str = "Pipeline timeline",
    max_blocks: int = MAX_BLOCKS,
    num_bins: int | None = None,
    window_s: tuple[float, float] | None = None,
    width: int = PLOT_WIDTH_PX,
) -> TimelineContent:
    """What ``timeline_figure`` draws. ``window_s`` keeps only blocks that overlap ``(t0, t1)`` seconds;
    above ``max_blocks`` blocks the view is aggregated into ``num_bins`` bins per lane."""
    if timeline.height == 0:
        raise ValueError("timeline_figure: the timeline has no rows (nothing to draw)")
    span = (0.0, float(timeline["end_s"].max())) if window_s is None else window_s  # type: ignore[arg-type]
    if window_s is not None:
        timeline = timeline.filter((pl.col("end_s") > span[0]) & (pl.col("start_s") < span[1]))
        if timeline.height == 0:
            raise ValueError(f"timeline_figure: no block overlaps window_s={window_s}")
    lanes = assign_lanes(timeline)
    title = _title(title_prefix, makespan_s, bubble_fraction, timeline, window_s)
    aggregated = timeline.height > max_blocks
    comm_data = None
    if aggregated:
        bins = num_bins or max(50, (width - 120) // 2)
        data, ops = _runs_data(timeline, lanes, span, bins)
        title += ", aggregated to ~2 px bins (zoom the ranged view for single blocks)"
        label_data = None
        has_blended = bool(np.any((data["busy"] < 1.0) | (data["blocks"] > 1)))
    else:
        ops = legend_order(timeline["op"].unique().to_list())
        data = _blocks_data(timeline, lanes, ops)
        compute = np.isin(np.asarray(ops), list(OP_COLORS))[data["op_code"]]
        label_data = _label_data(data, compute, span, width, len(lanes.labels))
        comm_data = _comm_data(data, ~compute)
        has_blended = False
    show_makespan = makespan_s is not None and span[0] <= makespan_s <= span[1]
    return TimelineContent(
        title=title,
        span_s=span,
        lanes=lanes,
        width=width,
        aggregated=aggregated,
        data=data,
        legend_ops=ops,
        label_data=label_data,
        makespan_ms=makespan_s * MS_PER_S if show_makespan and makespan_s is not None else None,
        comm_data=comm_data,
        has_blended=has_blended,
    )


def x_range_ms(span: tuple[float, float]) -> tuple[float, float]:
    """The x range (ms) of a figure spanning ``span`` seconds: 1 % padding either side."""
    pad = (span[1] - span[0]) * 0.01 * MS_PER_S
    return span[0] * MS_PER_S - pad, span[1] * MS_PER_S + pad


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
    return " · ".join(parts) + f"\n{timeline.height:,} blocks"  # what is drawn: on its own line, always


def _half_heights(lanes: Lanes, lane: np.ndarray) -> np.ndarray:
    is_comm = np.array(lanes.is_comm, dtype=bool)[lane]
    return np.where(is_comm, 0.25, 0.42)


def legend_order(ops: list[str]) -> tuple[str, ...]:
    """``ops`` without repeats in legend order: the compute ops (``OP_COLORS``) first, then the others, each
    group sorted. A block's ``op_code`` is its op's index in this tuple."""
    return tuple(sorted(set(ops), key=lambda o: (o not in OP_COLORS, o)))


def _blocks_data(timeline: pl.DataFrame, lanes: Lanes, ops: tuple[str, ...]) -> dict[str, Any]:
    """One row per block, numbers only: the op as its index in ``ops`` (``op_code``, whose colour and name the
    figure's colour mapper and hover formatter give), lanes named by the hover too. Float32 where a 24-bit
    mantissa is plenty (lane edges, durations); block edges stay float64 (ms to 0.001 over a long step).
    Bokeh sends these as binary buffers, so a change sends no text per block (issue 51 item 10)."""
    left = timeline["start_s"].to_numpy() * MS_PER_S
    right = timeline["end_s"].to_numpy() * MS_PER_S
    half = _half_heights(lanes, lanes.lane)
    code = pl.Series(ops, dtype=pl.String)
    op_code = timeline["op"].cast(pl.String).replace_strict(code, range(len(ops)), return_dtype=pl.UInt8)
    return {
        "left": left,
        "right": right,
        "bottom": (lanes.lane - half).astype(np.float32),
        "top": (lanes.lane + half).astype(np.float32),
        "lane": lanes.lane.astype(np.int32),
        "rank": timeline["rank"].to_numpy().astype(np.int32),
        "stage": timeline["stage"].to_numpy().astype(np.int32),
        "chunk": timeline["chunk"].to_numpy().astype(np.int32),
        "microbatch": timeline["microbatch"].to_numpy().astype(np.int32),
        "op_code": op_code.to_numpy(),
        "duration_ms": (right - left).astype(np.float32),
    }


def _comm_data(data: dict[str, Any], comm: np.ndarray) -> dict[str, Any] | None:
    """The communication blocks' (mask ``comm``) hover columns plus the centre ``x`` (ms), lane ``y`` and
    ``height`` of their marks."""
    if not comm.any():
        return None
    idx = np.nonzero(comm)[0]
    out: dict[str, Any] = {k: data[k][idx] for k in COMM_COLUMNS if k in data}
    left, right = data["left"][idx], data["right"][idx]
    bottom, top = data["bottom"][idx], data["top"][idx]
    return out | {"x": (left + right) / 2, "y": (bottom + top) / 2, "height": top - bottom}


def _label_data(
    data: dict, compute: np.ndarray, span: tuple[float, float], width: int, num_lanes: int
) -> dict[str, Any] | None:
    """Micro-batch numbers on the compute blocks (mask ``compute``) wide enough at the initial zoom (about
    7 px per digit)."""
    if num_lanes > 40:
        return None
    px_per_ms = (width - 120) / max((span[1] - span[0]) * MS_PER_S, 1e-12)
    digits = np.char.str_len(np.asarray(data["microbatch"]).astype(str))
    fits = (data["duration_ms"] * px_per_ms >= 7 * digits + 4) & compute
    if not fits.any() or fits.sum() > 3_000:
        return None
    idx = np.nonzero(fits)[0]
    return {
        "x": (data["left"][idx] + data["right"][idx]) / 2,
        "y": (data["bottom"][idx] + data["top"][idx]) / 2,
        "text": np.asarray(data["microbatch"])[idx].astype(str).tolist(),
    }


def _runs_data(
    timeline: pl.DataFrame, lanes: Lanes, span: tuple[float, float], num_bins: int
) -> tuple[dict[str, Any], tuple[str, ...]]:
    is_comm = np.array(lanes.is_comm, dtype=bool)
    runs = aggregate_runs(
        timeline, lanes.lane, len(lanes.labels), num_bins=num_bins, span_s=span, keep_any=is_comm
    )
    half = _half_heights(lanes, runs.lane)
    alpha = np.where(is_comm[runs.lane], np.maximum(runs.busy_frac, COMM_FLOOR_ALPHA), runs.busy_frac)
    data = {
        "left": (runs.start_s * MS_PER_S).astype(np.float32),
        "right": (runs.end_s * MS_PER_S).astype(np.float32),
        "bottom": (runs.lane - half).astype(np.float32),
        "top": (runs.lane + half).astype(np.float32),
        "lane": runs.lane.astype(np.int32),
        "op_code": runs.op_code.astype(np.int32),
        "busy": runs.busy_frac.astype(np.float32),
        "alpha": alpha.astype(np.float32),
        "blocks": runs.num_blocks.astype(np.int32),
    }
    return data, runs.ops
