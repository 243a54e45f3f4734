"""Closed-form peak of stored stage activations per pipeline rank, in chunks, vectorised over plans.

The simulator reads the peak off a schedule's timeline; the planner's screen cannot simulate millions of
plans, so it uses these closed forms. They reproduce a walk over the generators' per-rank action orders (+1
chunk at F, -1 at B or W; ``tests/test_search_closed_forms.py`` checks them on a grid of pp, vpp and
micro-batch counts), all capped at ``m * vpp`` (every chunk of every micro-batch):

- GPipe (Huang et al. 2019): m; looped BFS: m v (all forwards first);
- 1F1B (Narayanan et al. 2021 section 2.2): min(p, m) on rank 0, 1 on the last rank;
- interleaved 1F1B (Megatron's warm-up, ibid.): 2(p-1) + (v-1)g + 1 on rank 0 when m >= 2p, else m v;
  last rank (v-1)g + 1 (m >= 2p) or (v-1)m + 1, with g the micro-batches per round
  (``microbatches_per_round``: p when p divides m);
- ZB-H1 (Qi et al. 2024): v min(p, m) for v = 1 or m <= p; p + (v-1)g for m >= 2p; between, m v - (m - p);
- ZB-H2: min(2p-1, m); ZB-V (Qi et al. 2024): min(2p, m+1) on rank 0, min(2p, 2m) on the last rank;
  V-Half, V-Min (Qi et al. 2025): the generators' caps ``2 ((p+2)//2)`` and ``2 ((p+4)//3)``; DualPipeV
  (DeepSeek-V3 report): 2p + 1; DualPipe (DeepSeek-V3 report, arXiv:2412.19437 Table 2: PP + 1): p + 1 on
  every rank, each chunk a whole stage of one copy of the model.

Split-backward schedules free most of a chunk when its I pass ends (the weight-gradient inputs stay until
W): ``split_backward_last_rank`` corrects the last rank for ZB-H1/H2; elsewhere the whole chunk is kept
until W, an upper bound (the simulator gives the exact figure).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.pipeline.schedules.classic import microbatches_per_round
from workbench.pipeline.schedules.registry import get_schedule

Array = Any


PEAK_FAMILIES: tuple[str, ...] = (
    "gpipe",
    "looped-bfs",
    "1f1b",
    "interleaved-1f1b",
    "zb-h1",
    "zb-h2",
    "zbv",
    "v-half",
    "v-min",
    "dualpipev",
    "dualpipe",
)
"""Closed forms of the activation peak, indexed by the family code ``family_codes`` returns; each schedule's
record names its own (``ScheduleSpec.peak_family``)."""


def family_codes(names: tuple[str, ...]) -> np.ndarray:
    """Per schedule name, the index in ``PEAK_FAMILIES`` of its record's ``peak_family`` (int8).
    ValueError for an unknown name (``workbench.pipeline.schedules.get_schedule``)."""
    return np.array([PEAK_FAMILIES.index(get_schedule(n).peak_family) for n in names], dtype=np.int8)


def peak_chunks(family: Array, *, pp: Array, vpp: Array, m: Array) -> tuple[Array, Array]:
    """(rank 0, last rank) peak stage activations held, in chunks, for schedules of family codes ``family``
    (see the module docstring)."""
    p, v = pp, vpp
    g = microbatches_per_round(p, m)  # p when p divides m
    inter0 = np.where(m >= 2 * p, 2 * (p - 1) + (v - 1) * g + 1, m * v)
    zbh1 = np.where(
        (v == 1) | (m <= p), v * np.minimum(p, m), np.where(m >= 2 * p, p + (v - 1) * g, m * v - (m - p))
    )
    first = np.choose(
        family,
        [
            m,
            m * v,
            np.minimum(p, m),
            inter0,
            zbh1,
            np.minimum(2 * p - 1, m),
            np.minimum(2 * p, m + 1),
            2 * ((p + 2) // 2),
            2 * ((p + 4) // 3),
            2 * p + 1,
            p + 1,
        ],
    )
    last = np.where(family == 2, 1, first)
    last = np.where(family == 6, np.minimum(2 * p, 2 * m), last)
    inter_last = np.where(m >= 2 * p, (v - 1) * g + 1, (v - 1) * m + 1)
    last = np.where(family == 3, inter_last, last)
    one = pp == 1
    return np.where(one, 1, np.minimum(first, m * v)), np.where(one, 1, np.minimum(last, m * v))


def peak_chunks_at(
    family: Array,
    *,
    pp: Array,
    vpp: Array,
    m: Array,
    rank: Array,
    edges: tuple[Array, Array] | None = None,
) -> Array:
    """Peak stage activations held on pipeline ``rank``, in chunks. Looping placements, read off the
    generators' per-rank orders (``tests/test_search_closed_forms.py``): 1F1B min(p - r, m); interleaved 1F1B
    min(2(p - r - 1) + (v - 1) w + 1, m v) with w the micro-batches per round (``microbatches_per_round``)
    once m >= 2p, else m (Megatron's warm-up of rank r plus the chunk in flight); GPipe, looped BFS, ZB-H1 and
    ZB-H2 hold rank 0's count on every rank. V placements and DualPipe: the larger of the edge ranks', an
    upper bound. ``edges``: ``peak_chunks`` of the same arguments when the caller has it."""
    first, last = peak_chunks(family, pp=pp, vpp=vpp, m=m) if edges is None else edges
    p, v = pp, vpp
    code = PEAK_FAMILIES.index
    warm = np.where(m >= 2 * p, microbatches_per_round(p, m), m)
    looping = np.isin(family, [code(f) for f in ("gpipe", "looped-bfs", "zb-h1", "zb-h2")])
    at = np.select(
        [family == code("1f1b"), family == code("interleaved-1f1b"), looping],
        [np.minimum(p - rank, m), np.minimum(2 * (p - rank - 1) + (v - 1) * warm + 1, m * v), first],
        np.maximum(first, last),
    )
    return np.where(pp == 1, 1, at)


def split_backward_at(
    family: Array, chunks: Array, *, rank: Array, freed_frac: Array, pp: Array, m: Array
) -> Array:
    """Rank ``rank``'s peak in chunks once I frees ``freed_frac`` of a chunk: at its peak, rank r of ZB-H1
    holds r chunks, ZB-H2 2r chunks, whose I is done and W pending, fewer when the micro-batches are too few
    to fill the warm-up (ZB-H1: ``r - (p - m)`` for m < p; ZB-H2: ``2r - (2p - 1 - m)`` for m < 2p - 1; read
    off the simulator's in-flight bytes, ``tests/test_search_closed_forms.py``); other schedules keep whole
    chunks."""
    h1 = np.maximum(rank - np.maximum(pp - m, 0), 0)
    h2 = np.maximum(2 * rank - np.maximum(2 * pp - 1 - m, 0), 0)
    pending = np.select(
        [family == PEAK_FAMILIES.index("zb-h1"), family == PEAK_FAMILIES.index("zb-h2")], [h1, h2], 0
    )
    return np.maximum(chunks - freed_frac * pending, 1.0)


def split_backward_last_rank(
    family: Array, chunks_last: Array, *, pp: Array, m: Array, freed_frac: Array
) -> Array:
    """``split_backward_at`` on the last rank (r = p - 1)."""
    return split_backward_at(family, chunks_last, rank=pp - 1, freed_frac=freed_frac, pp=pp, m=m)
