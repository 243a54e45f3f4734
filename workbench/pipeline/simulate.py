"""Timeline of a static pipeline schedule: start and end of every action as a longest path.

A static schedule is a DAG: each action waits for the previous action of its rank and for one data
dependency, plus ``p2p_s`` (or that hop's ``p2p_rank_s``) when that dependency ran on another rank:

- F of stage s after F of stage s-1 (same micro-batch);
- B or I of stage s after B or I of stage s+1; of the last stage after its own F;
- W of stage s after I of stage s;
- in a bidirectional schedule (DualPipe) "first" and "last" are those of the micro-batch's own copy of the
  model, and the forward of an overlapped F&B pair (torch's ``OVERLAP_F_B``) also waits for its backward's
  dependency: the pair starts as one unit once both inputs are in, then runs F and B back to back (F&B = F + B:
  the overlap hides communication, which the step model prices, not compute).

Start = max(end of the rank's previous action, end of the dependency + p2p); computed in one pass
over a ready-list of ranks (no event heap, no wall clock). Bubble conventions follow GPipe
(arXiv:1811.06965, share of the step), Megatron-LM (arXiv:2104.04473 Sec. 2.2, bubble over ideal
time) and Zero Bubble (arXiv:2401.10241, per-rank idle).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from workbench.pipeline.schedules.actions import OPS, Schedule
from workbench.pipeline.simulate_dag import longest_path

_F, _B, _I, _W = range(4)
_OPCODE = {op: k for k, op in enumerate(OPS)}


@dataclass(frozen=True, kw_only=True, slots=True)
class StageCosts:
    """Per-stage durations (seconds) of each op on one micro-batch, and what links the stages.

    Entry k describes piece k of the model cut into ``num_stages`` pieces in layer order; a stage of a
    bidirectional schedule runs ``num_directions`` consecutive pieces (``Schedule.pieces_of_stage``), so the
    same costs serve DualPipe (2p stages, each 1/p of the model) and one-direction schedules."""

    forward_s: tuple[float, ...]
    """F duration per stage (length num_stages). >= 0."""
    backward_s: tuple[float, ...]
    """Full backward B per stage. >= 0."""
    backward_input_s: tuple[float, ...]
    """I (gradient w.r.t. inputs) per stage. >= 0."""
    backward_weight_s: tuple[float, ...]
    """W (gradient w.r.t. weights) per stage. >= 0."""
    p2p_s: float = 0.0
    """Latency + transfer time between consecutive stages on different ranks (0 on the same rank). >= 0.
    With ``p2p_rank_s`` given: the slowest hop (what closed forms and the breakdown's bound use)."""
    p2p_rank_s: tuple[tuple[float, ...], ...] | None = None
    """Optional per-hop times: ``p2p_rank_s[i][j]`` seconds from pipeline rank i to rank j (pp x pp, finite,
    >= 0), for pipelines whose hops cross different links; None: ``p2p_s`` for every hop."""
    activation_bytes: tuple[float, ...] | None = None
    """Activation memory of one micro-batch per stage, allocated at F start; None means 0."""
    released_at_input_grad_frac: float = 0.0
    """Share of a stage's activation freed when its I ends (the rest when W ends); B frees all. 0..1."""

    def __post_init__(self) -> None:
        n = len(self.forward_s)
        for field in ("forward_s", "backward_s", "backward_input_s", "backward_weight_s", "activation_bytes"):
            values = getattr(self, field)
            if values is None:
                continue
            object.__setattr__(self, field, tuple(float(v) for v in values))
            bad = [v for v in getattr(self, field) if not (math.isfinite(v) and v >= 0)]
            if len(values) != n or bad:
                raise ValueError(
                    f"StageCosts: {field} must hold {n} finite numbers >= 0 (one per stage), "
                    f"got {len(values)} values{' including ' + repr(bad[0]) if bad else ''}"
                )
        if not (math.isfinite(self.p2p_s) and self.p2p_s >= 0):
            raise ValueError(f"StageCosts: p2p_s must be a finite number >= 0 seconds, got {self.p2p_s!r}")
        if self.p2p_rank_s is not None:
            hops = np.asarray(self.p2p_rank_s, dtype=float)
            if (
                hops.ndim != 2
                or hops.shape[0] != hops.shape[1]
                or not np.all(np.isfinite(hops) & (hops >= 0))
            ):
                raise ValueError(
                    f"StageCosts: p2p_rank_s must be a square table of finite seconds >= 0 (pp x pp), got shape "
                    f"{hops.shape}"
                )
            object.__setattr__(self, "p2p_rank_s", tuple(tuple(float(v) for v in row) for row in hops))
        if not 0.0 <= self.released_at_input_grad_frac <= 1.0:
            raise ValueError(
                f"StageCosts: released_at_input_grad_frac must be in 0..1, got {self.released_at_input_grad_frac!r}"
            )

    @property
    def num_stages(self) -> int:
        return len(self.forward_s)

    @classmethod
    def uniform(
        cls,
        *,
        num_stages: int,
        vpp: int = 1,
        forward_s: float,
        backward_s: float,
        backward_weight_s: float = 0.0,
        p2p_s: float = 0.0,
        activation_bytes: float = 0.0,
        released_at_input_grad_frac: float = 0.0,
    ) -> StageCosts:
        """Equal stages. Times and bytes are for one *full pipeline stage* (a rank's share of the
        model); each of its ``vpp`` stages gets 1/vpp of them. I = B - W. Raises ValueError if W > B."""
        if backward_weight_s > backward_s:
            raise ValueError(
                f"StageCosts: backward_weight_s ({backward_weight_s}) must not exceed backward_s ({backward_s})"
            )
        if not isinstance(vpp, int) or vpp < 1:
            raise ValueError(f"StageCosts: vpp must be an integer >= 1, got {vpp!r}")

        def per_stage(x: float) -> tuple[float, ...]:
            return (x / vpp,) * num_stages

        return cls(
            forward_s=per_stage(forward_s),
            backward_s=per_stage(backward_s),
            backward_input_s=per_stage(backward_s - backward_weight_s),
            backward_weight_s=per_stage(backward_weight_s),
            p2p_s=p2p_s,
            activation_bytes=per_stage(activation_bytes),
            released_at_input_grad_frac=released_at_input_grad_frac,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class SimResult:
    """Simulated step of one schedule. Times in seconds from the first action's start (0).

    ``timeline``: one row per action, columns rank, stage, chunk, microbatch (int), op (str F/B/I/W),
    start_s, end_s (float), rows rank-major in execution order. ``comm``: one row per cross-rank
    transfer (p2p_s > 0): src_rank, dst_rank, stage (receiver), microbatch, op (F activations, B
    gradients), start_s, end_s. ``inflight``: per rank a step function, columns rank, time_s,
    num_inflight (stage activations held: +1 at F start, -1 at B end or W end), activation_bytes;
    the value holds from time_s until the rank's next row.
    """

    schedule: Schedule
    timeline: pl.DataFrame
    comm: pl.DataFrame
    inflight: pl.DataFrame
    makespan_s: float
    """Step time: last end minus first start over all ranks."""
    busy_s: tuple[float, ...]
    """Per rank, total compute time."""
    idle_s: tuple[float, ...]
    """Per rank, makespan minus busy (idle measured over the whole step)."""
    span_s: tuple[float, ...]
    """Per rank, its last end minus its first start."""
    idle_in_span_s: tuple[float, ...]
    """Per rank, idle inside its own span (Zero Bubble's per-rank bubble)."""
    idle_frac_per_rank: tuple[float, ...]
    """Per rank, idle_in_span_s / span_s (convention 3)."""
    bubble_fraction_of_step: float
    """Convention 1: idle share of pp x makespan (GPipe's (p-1)/(m+p-1))."""
    bubble_over_ideal: float
    """Convention 2: total idle / total busy (Megatron's (p-1)/m for 1F1B)."""
    peak_inflight_chunks_per_rank: tuple[int, ...]
    """Per rank, most stage activations held at once (counted per stage, i.e. per chunk)."""
    peak_inflight_per_rank: tuple[float, ...]
    """Per rank, peak in full-stage units: peak_inflight_chunks * num_directions / vpp (a DualPipe stage is a
    full stage)."""
    peak_activation_bytes_per_rank: tuple[float, ...]
    """Per rank, peak activation bytes (0 without activation_bytes)."""


def simulate(schedule: Schedule, costs: StageCosts) -> SimResult:
    """Start and end of every action of ``schedule`` priced with ``costs`` (longest path in the DAG).

    Raises ValueError if ``costs`` does not have ``schedule.num_stages`` stages, or if the per-rank
    orders deadlock (the message names the first stuck action of each blocked rank and what it waits for).
    """
    if costs.num_stages != schedule.num_stages:
        raise ValueError(
            f"StageCosts has {costs.num_stages} stages but schedule {schedule.name!r} has {schedule.num_stages}"
        )
    arrays = _index_arrays(schedule, costs)
    dep2, lat2 = _overlap_dependencies(schedule, arrays[1], arrays[2])
    start, end = longest_path(schedule, *arrays[:4], dep2_a=dep2, lat2_a=lat2)
    return _result(schedule, costs, arrays, start, end)


def _overlap_dependencies(
    schedule: Schedule, dep: np.ndarray, lat: np.ndarray
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Second dependency of every action (-1: none): the forward opening an overlapped pair waits for its
    backward's dependency too, so the pair starts as one unit."""
    if not schedule.overlap_pairs:
        return None, None
    first = np.concatenate(
        [
            schedule.rank_offsets[r] + np.asarray(p, dtype=np.int64)
            for r, p in enumerate(schedule.overlap_pairs)
        ]
    ).astype(np.int64)
    dep2 = np.full(len(dep), -1, dtype=np.int64)
    lat2 = np.zeros(len(dep))
    dep2[first], lat2[first] = dep[first + 1], lat[first + 1]
    return dep2, lat2


def _index_arrays(schedule: Schedule, costs: StageCosts) -> tuple[np.ndarray, ...]:
    """Rank offsets, dependency index (-1: none), latency and duration per action, plus stage, op, mb."""
    stage, op, mb = schedule.packed.T
    offsets = schedule.rank_offsets
    num_stages, m = schedule.num_stages, schedule.num_microbatches
    pos = np.full(num_stages * 4 * m, -1, dtype=np.int64)
    pos[(stage * 4 + op) * m + mb] = np.arange(len(stage))

    def at(s: np.ndarray, code: int) -> np.ndarray:
        return pos[(np.clip(s, 0, num_stages - 1) * 4 + code) * m + mb]

    per_copy = schedule.stages_per_direction
    first, last = stage % per_copy == 0, stage % per_copy == per_copy - 1
    back_next = np.maximum(at(stage + 1, _B), at(stage + 1, _I))
    dep = np.where(op == _F, np.where(first, -1, at(stage - 1, _F)), np.where(last, at(stage, _F), back_next))
    dep = np.where(op == _W, at(stage, _I), dep)
    s2r = np.array(schedule.stage_to_rank, dtype=np.int64)
    src = s2r[stage[np.maximum(dep, 0)]]
    cross = (dep >= 0) & (src != s2r[stage])
    if costs.p2p_rank_s is not None:
        if len(costs.p2p_rank_s) != schedule.pp:
            raise ValueError(
                f"StageCosts: p2p_rank_s is {len(costs.p2p_rank_s)} x {len(costs.p2p_rank_s)}; the schedule has "
                f"pp = {schedule.pp} ranks"
            )
        lat = np.where(cross, np.asarray(costs.p2p_rank_s)[src, s2r[stage]], 0.0)
    else:
        lat = np.where(cross, costs.p2p_s, 0.0)
    table = np.array([costs.forward_s, costs.backward_s, costs.backward_input_s, costs.backward_weight_s])
    dur = _per_stage(schedule, table)[op, stage]
    return offsets, dep, lat, dur, stage, op, mb


def _per_stage(schedule: Schedule, per_piece: np.ndarray) -> np.ndarray:
    """Sum over the pieces each stage runs (last axis: pieces in, stages out); the identity for one direction."""
    d = schedule.num_directions
    if d == 1:
        return per_piece
    block = per_piece.reshape(*per_piece.shape[:-1], -1, d).sum(axis=-1)
    return np.concatenate([block] * d, axis=-1)


def _result(
    schedule: Schedule, costs: StageCosts, arrays: tuple[np.ndarray, ...], start: np.ndarray, end: np.ndarray
) -> SimResult:
    offsets, dep, lat, dur, stage, op, mb = arrays
    pp = schedule.pp
    s2r = np.array(schedule.stage_to_rank, dtype=np.int64)
    rank = s2r[stage]
    chunk_of = np.array([schedule.chunk_of_stage(s) for s in range(schedule.num_stages)], dtype=np.int64)
    timeline = pl.DataFrame(
        {
            "rank": rank,
            "stage": stage,
            "chunk": chunk_of[stage],
            "microbatch": mb,
            "op": pl.Series(op).replace_strict(dict(enumerate(OPS)), return_dtype=pl.String),
            "start_s": start,
            "end_s": end,
        }
    )
    origin = float(start.min())
    makespan = float(end.max()) - origin
    busy = np.bincount(rank, weights=dur, minlength=pp)
    first = start[offsets[:-1]]
    last_end = end[offsets[1:] - 1]
    span = last_end - first
    idle_span = np.maximum(span - busy, 0.0)
    idle_frac = np.divide(idle_span, span, out=np.zeros(pp), where=span > 0)
    total_busy = float(busy.sum())
    capacity = pp * makespan
    inflight, peaks, peak_bytes = _inflight(schedule, costs, rank, stage, op, start, end)
    return SimResult(
        schedule=schedule,
        timeline=timeline,
        comm=_comm_rows(dep, lat, rank, stage, op, mb, end),
        inflight=inflight,
        makespan_s=makespan,
        busy_s=tuple(busy.tolist()),
        idle_s=tuple((makespan - busy).tolist()),
        span_s=tuple(span.tolist()),
        idle_in_span_s=tuple(idle_span.tolist()),
        idle_frac_per_rank=tuple(idle_frac.tolist()),
        bubble_fraction_of_step=(capacity - total_busy) / capacity if capacity > 0 else 0.0,
        bubble_over_ideal=(capacity - total_busy) / total_busy if total_busy > 0 else 0.0,
        peak_inflight_chunks_per_rank=tuple(int(x) for x in peaks),
        peak_inflight_per_rank=tuple(float(x) * schedule.num_directions / schedule.vpp for x in peaks),
        peak_activation_bytes_per_rank=tuple(float(x) for x in peak_bytes),
    )


def _comm_rows(
    dep: np.ndarray,
    lat: np.ndarray,
    rank: np.ndarray,
    stage: np.ndarray,
    op: np.ndarray,
    mb: np.ndarray,
    end: np.ndarray,
) -> pl.DataFrame:
    sel = np.flatnonzero(lat > 0)
    src = dep[sel]
    return pl.DataFrame(
        {
            "src_rank": rank[src],
            "dst_rank": rank[sel],
            "stage": stage[sel],
            "microbatch": mb[sel],
            "op": pl.Series(op[sel] == _F).replace_strict({True: "F", False: "B"}, return_dtype=pl.String),
            "start_s": end[src],
            "end_s": end[src] + lat[sel],
        },
        schema={
            "src_rank": pl.Int64,
            "dst_rank": pl.Int64,
            "stage": pl.Int64,
            "microbatch": pl.Int64,
            "op": pl.String,
            "start_s": pl.Float64,
            "end_s": pl.Float64,
        },
    )


def _inflight(
    schedule: Schedule,
    costs: StageCosts,
    rank: np.ndarray,
    stage: np.ndarray,
    op: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
) -> tuple[pl.DataFrame, Sequence[int], Sequence[float]]:
    """Per-rank step functions of held activations. A rank's actions run one after another, so its
    events in action order (start of 0, end of 0, start of 1, ...) are already in time order; a
    release at the instant of an allocation therefore counts first."""
    act = _per_stage(schedule, np.asarray(costs.activation_bytes or (0.0,) * schedule.num_stages))[stage]
    frac = costs.released_at_input_grad_frac
    is_f, is_b, is_i, is_w = (op == k for k in range(4))
    n = len(op)
    count = np.zeros(2 * n, dtype=np.int64)
    count[0::2] = is_f
    count[1::2] = -(is_b | is_w).astype(np.int64)
    nbytes = np.zeros(2 * n)
    nbytes[0::2] = np.where(is_f, act, 0.0)
    nbytes[1::2] = np.select([is_b, is_i, is_w], [-act, -frac * act, -(1.0 - frac) * act], 0.0)
    time = np.empty(2 * n)
    time[0::2], time[1::2] = start, end
    keep = np.flatnonzero((count != 0) | (nbytes != 0))
    count_c = np.cumsum(count[keep])
    bytes_c = np.cumsum(nbytes[keep])
    rank_k = np.repeat(rank, 2)[keep]
    frame = pl.DataFrame(
        {"rank": rank_k, "time_s": time[keep], "num_inflight": count_c, "activation_bytes": bytes_c}
    )
    bounds = np.searchsorted(rank_k, np.arange(schedule.pp))
    peaks = np.maximum.reduceat(count_c, bounds)
    peak_bytes = np.maximum.reduceat(bytes_c, bounds)
    return frame, peaks.tolist(), np.maximum(peak_bytes, 0.0).tolist()
