"""Timeline arithmetic for the pipeline figure: lanes, and the per-pixel aggregation of dense timelines.

Pure numpy/polars, no bokeh, so it is tested on its own. Times stay in seconds here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
from workbench_widgets.plots._style import OP_COLORS, is_compute_op

_COMPUTE_OPS = list(OP_COLORS)


@dataclass(frozen=True, kw_only=True, slots=True)
class Lanes:
    """Row layout of a timeline: one lane per (rank, chunk) of compute, one per rank for communication."""

    lane: np.ndarray
    """Lane index of every timeline row (int), same order as the frame."""
    labels: tuple[str, ...]
    """Axis label of every lane, top to bottom."""
    is_comm: tuple[bool, ...]
    """Whether each lane holds communication (non F/B/I/W ops)."""


def assign_lanes(timeline: pl.DataFrame) -> Lanes:
    """Lanes ordered by rank, then chunk, then the rank's comm lane (only ranks with comm ops have one).

    Label ``rank r`` when the rank has one chunk, ``rank r · chunk c`` otherwise, ``rank r · comm``.
    """
    comm = (~timeline["op"].cast(pl.String).is_in(_COMPUTE_OPS)).to_numpy()
    ranks = timeline["rank"].to_numpy().astype(np.int64)
    chunks = np.where(comm, -1, timeline["chunk"].to_numpy().astype(np.int64))
    # One integer per (rank, chunk) whose order is (rank, compute chunks ascending, comm last).
    width = int(chunks.max(initial=0)) + 2
    order_key = ranks * width + np.where(chunks < 0, width - 1, chunks)
    unique_keys, lane = np.unique(order_key, return_inverse=True)
    keys = list(zip((unique_keys // width).tolist(), (unique_keys % width).tolist(), strict=True))
    keys = [(r, -1 if c == width - 1 else c) for r, c in keys]
    chunks_per_rank: dict[int, int] = {}
    for r, c in keys:
        if c >= 0:
            chunks_per_rank[r] = chunks_per_rank.get(r, 0) + 1
    labels = tuple(_lane_label(r, c, chunks_per_rank.get(r, 0)) for r, c in keys)
    return Lanes(lane=lane.astype(np.int64).reshape(-1), labels=labels, is_comm=tuple(c < 0 for _, c in keys))


def _lane_label(rank: int, chunk: int, num_chunks: int) -> str:
    if chunk < 0:
        return f"rank {rank} · comm"
    return f"rank {rank}" if num_chunks <= 1 else f"rank {rank} · chunk {chunk}"


@dataclass(frozen=True, kw_only=True, slots=True)
class PairedRows:
    """Two timelines of one plan on shared lanes: each lane of ``assign_lanes`` (over both) is split into a
    row per side that has blocks in it, side 0 (e.g. predicted) above side 1 (measured)."""

    joined: pl.DataFrame
    """Both timelines, side 0 first, with TIMELINE_COLUMNS and ``side`` (0 or 1)."""
    of_block: np.ndarray
    """Row index of every row of ``joined``."""
    labels: tuple[str, ...]
    """Row labels, ``<lane label> · <side name>``, top to bottom."""
    lane: np.ndarray
    """Lane of each row (the rows of a lane are adjacent)."""
    side: np.ndarray
    """Side of each row, 0 or 1."""
    is_comm: np.ndarray
    """Whether each row holds communication (bool)."""


def pair_rows(
    first: pl.DataFrame, second: pl.DataFrame, names: tuple[str, str] = ("predicted", "measured")
) -> PairedRows:
    """Shared lanes for two timeline frames (``workbench.specs.estimate.TIMELINE_COLUMNS``), ``names`` per side."""
    cols = ("rank", "stage", "chunk", "microbatch", "op", "start_s", "end_s")
    joined = pl.concat(
        [
            frame.select(
                pl.col("rank", "stage", "chunk", "microbatch").cast(pl.Int64),
                pl.col("op").cast(pl.String),
                pl.col("start_s", "end_s").cast(pl.Float64),
            ).with_columns(side=pl.lit(k, dtype=pl.Int8))
            for k, frame in enumerate((first, second))
        ]
    ).select(*cols, "side")
    lanes = assign_lanes(joined)
    key = lanes.lane * 2 + joined["side"].to_numpy().astype(np.int64)
    present = np.unique(key)
    row_of_key = np.full(2 * len(lanes.labels), -1, dtype=np.int64)
    row_of_key[present] = np.arange(len(present))
    return PairedRows(
        joined=joined,
        of_block=row_of_key[key],
        labels=tuple(f"{lanes.labels[k // 2]} · {names[k % 2]}" for k in present.tolist()),
        lane=present // 2,
        side=present % 2,
        is_comm=np.array(lanes.is_comm, dtype=bool)[present // 2],
    )


def detail_window_s(timeline: pl.DataFrame, max_blocks: int) -> tuple[float, float]:
    """The window ``(0, t)`` from the step start that holds about the first ``max_blocks`` blocks to start."""
    starts = np.sort(timeline["start_s"].to_numpy())
    if len(starts) <= max_blocks:
        return 0.0, float(timeline["end_s"].max())  # type: ignore[arg-type]
    return 0.0, float(starts[max_blocks])


@dataclass(frozen=True, kw_only=True, slots=True)
class Runs:
    """Aggregated timeline: runs of consecutive pixel bins of one lane with the same dominant op."""

    lane: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    op_code: np.ndarray
    """Index into ``ops`` of the op that covers most of the run."""
    busy_frac: np.ndarray
    """Busy share of the run (all ops together), 0..1, quantised to quarters."""
    num_blocks: np.ndarray
    """Blocks that start inside the run."""
    ops: tuple[str, ...]


def aggregate_runs(
    timeline: pl.DataFrame,
    lane: np.ndarray,
    num_lanes: int,
    *,
    num_bins: int,
    span_s: tuple[float, float],
    keep_any: np.ndarray | None = None,
) -> Runs:
    """Rasterise a timeline into ``num_bins`` time bins per lane and merge equal neighbours into runs.

    Per lane and op, busy time inside each bin is the difference of the cumulative busy time
    C(t) = sum over blocks of clip(t - start, 0, duration) at the bin edges (exact when the blocks of one
    lane and op do not overlap; overlapping communication is capped at a fully busy bin). A bin's colour is
    its dominant op, its opacity its busy share (quartiles); bins under 2 % busy stay empty (idle), except on
    the lanes where ``keep_any`` (bool per lane, e.g. the communication lanes) is true: there any busy time
    makes the bin show, so short sends stay visible however far the view is zoomed out.
    """
    op_column = timeline["op"].cast(pl.String)
    ops = tuple(sorted(op_column.unique().to_list(), key=lambda o: (not is_compute_op(o), o)))
    op_code = op_column.replace_strict(ops, list(range(len(ops))), return_dtype=pl.Int64).to_numpy()
    starts = timeline["start_s"].to_numpy().astype(np.float64)
    ends = timeline["end_s"].to_numpy().astype(np.float64)
    edges = np.linspace(span_s[0], span_s[1], num_bins + 1)
    busy = _busy_per_bin(lane * len(ops) + op_code, starts, ends, edges, num_lanes * len(ops))
    busy = busy.reshape(num_lanes, len(ops), num_bins)
    dominant = busy.argmax(axis=1)
    frac = np.clip(busy.sum(axis=1) / (edges[1] - edges[0]), 0.0, 1.0)
    idle_below = np.full((num_lanes, 1), 0.02)
    if keep_any is not None:
        idle_below[np.asarray(keep_any, dtype=bool)] = 1e-12
    level = np.where(frac < idle_below, 0, np.ceil(frac * 4)).astype(np.int64)
    counts = _starts_per_bin(lane, starts, edges, num_lanes)
    return _merge_bins(dominant, level, counts, edges, ops)


def _busy_per_bin(
    group: np.ndarray, starts: np.ndarray, ends: np.ndarray, edges: np.ndarray, num_groups: int
) -> np.ndarray:
    """Busy seconds per (group, bin), all groups in one sorted pass (groups shifted apart in time)."""
    lo = min(edges[0], starts.min(initial=edges[0]))
    hi = max(edges[-1], ends.max(initial=edges[-1]))
    shift = (hi - lo) * 2.0 + 1.0
    order = np.lexsort((starts, group))
    g, s = group[order], starts[order] + group[order] * shift
    dur = np.maximum(ends[order] - starts[order], 0.0)
    cum = np.cumsum(dur)
    base = np.zeros(num_groups)
    last_of_group = np.r_[np.nonzero(np.diff(g))[0], len(g) - 1] if len(g) else np.array([], np.int64)
    group_totals = np.zeros(num_groups)
    group_totals[g[last_of_group]] = cum[last_of_group]
    base[1:] = np.maximum.accumulate(group_totals)[:-1]
    t = (edges[None, :] + np.arange(num_groups)[:, None] * shift).ravel()
    i = np.searchsorted(s, t, side="right") - 1
    safe = np.maximum(i, 0)
    c = cum[safe] - dur[safe] + np.minimum(t - s[safe], dur[safe])
    c = np.where(i < 0, 0.0, c).reshape(num_groups, len(edges)) - base[:, None]
    return np.diff(np.maximum(c, 0.0), axis=1)


def _starts_per_bin(lane: np.ndarray, starts: np.ndarray, edges: np.ndarray, num_lanes: int) -> np.ndarray:
    bins = np.clip(np.searchsorted(edges, starts, side="right") - 1, 0, len(edges) - 2)
    counts = np.zeros((num_lanes, len(edges) - 1), dtype=np.int64)
    np.add.at(counts, (lane, bins), 1)
    return counts


def _merge_bins(
    dominant: np.ndarray, level: np.ndarray, counts: np.ndarray, edges: np.ndarray, ops: tuple[str, ...]
) -> Runs:
    key = np.where(level > 0, dominant * 8 + level, -1)
    num_lanes, num_bins = key.shape
    padded = np.concatenate([np.full((num_lanes, 1), -2), key, np.full((num_lanes, 1), -2)], axis=1)
    change = padded[:, 1:] != padded[:, :-1]
    lanes_s, first = np.nonzero(change[:, :-1])
    lanes_e, last = np.nonzero(change[:, 1:])
    assert np.array_equal(lanes_s, lanes_e)
    keep = key[lanes_s, first] >= 0
    lanes_s, first, last = lanes_s[keep], first[keep], last[keep]
    cum = np.concatenate([np.zeros((num_lanes, 1), np.int64), counts.cumsum(axis=1)], axis=1)
    return Runs(
        lane=lanes_s,
        start_s=edges[first],
        end_s=edges[last + 1],
        op_code=dominant[lanes_s, first],
        busy_frac=level[lanes_s, first] / 4.0,
        num_blocks=cum[lanes_s, last + 1] - cum[lanes_s, first],
        ops=ops,
    )
