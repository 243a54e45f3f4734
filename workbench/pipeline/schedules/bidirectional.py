"""DualPipe: a bidirectional pipeline, two copies of the model fed from opposite ends (DeepSeek-V3).

p ranks (p even), 2p stages: stage s < p is stage s of the first copy (on rank s, micro-batches ``0..m/2-1``
flow down from rank 0), stage p + k is stage k of the second copy (on rank p-1-k, micro-batches ``m/2..m-1``
flow up from rank p-1). Rank r thus holds stages r and 2p-1-r, the V placement, but each is a whole pipeline
stage of its own copy: two copies of the weights per rank. The steady phase pairs a forward of one direction
with a backward of the other as one overlapped F&B unit (``Overlap``, torch's ``OVERLAP_F_B``).
"""

from __future__ import annotations

import numpy as np

from workbench.pipeline.schedules.actions import Cell, cells_of, decoded_rows
from workbench.pipeline.schedules.arrays import PackedRows, joined

Cells = list[list[Cell]]


_F, _B, _I, _W = range(4)  # op codes: indices in actions.OPS


class _Rank:
    """One rank's order: per-stage micro-batch counters (the second copy's start at m/2), a FIFO of W passes
    owed by I passes (DualPipe's ``WeightGradStore``), the actions written so far as (stage, op code, micro-batch)
    ints and the positions that open an overlapped pair."""

    def __init__(self, base: list[int]) -> None:
        self.out: list[int] = []  # flat: stage, op code, micro-batch, stage, ...
        self.starts: list[int] = []
        self.next_f = list(base)
        self.next_back = list(base)  # B and I both take the stage's next backward
        self.owed_w: list[tuple[int, int]] = []

    def take(self, stage: int, op: int) -> int:
        counter = self.next_f if op == _F else self.next_back
        mb = counter[stage]
        counter[stage] = mb + 1
        if op == _I:
            self.owed_w.append((stage, mb))
        return mb

    def run(self, stage: int, op: int) -> None:
        self.out += (stage, op, self.take(stage, op))

    def pair(self, f_stage: int, b_stage: int) -> None:
        self.starts.append(len(self.out) // 3)
        f_mb = self.take(f_stage, _F)
        self.out += (f_stage, _F, f_mb, b_stage, _B, self.take(b_stage, _B))

    def weight(self) -> None:
        stage, mb = self.owed_w.pop(0)
        self.out += (stage, _W, mb)


def dualpipe(pp: int, m: int) -> Cells:
    """DualPipe's per-rank orders as cells (``dualpipe_arrays``; an ``Overlap`` for each overlapped pair)."""
    built = dualpipe_arrays(pp, 2, m)
    rows = decoded_rows(built.packed, built.offsets)
    pairs = built.overlap_pairs or ((),) * pp
    return [cells_of(row, starts) for row, starts in zip(rows, pairs, strict=True)]


def dualpipe_arrays(pp: int, vpp: int, m: int) -> PackedRows:
    """DualPipe's per-rank orders: eight phases per rank, as in DeepSeek's reference implementation.

    With h = min(r, p-1-r) and "near"/"far" the copy whose first stage is nearer to / farther from rank r:
    2(p/2-h-1) near forwards; h+1 near/far forward pairs; p/2-h-1 (far I, W, far F); m/2-p+h+1 overlapped
    (near F & far B, far F & near B) pairs, the first of the two middle ranks not overlapped; p/2-h-1
    (far B, far F & near B); h+1 (far, near) backwards, the later half split into I (zero bubble); p/2-h-1
    (W, near I); h+1 W. Needs p even, m even and m >= 2p (the reference's asserts).

    Source: DeepSeek-AI, DeepSeek-V3 Technical Report, arXiv:2412.19437 Sec. 3.2.1, Fig. 5 and Table 2;
    github.com/deepseek-ai/DualPipe, ``dualpipe/dualpipe.py`` (``DualPipe.step``), read and re-derived here.
    """
    half, rows, pairs = pp // 2, [], []
    base = [0 if s < pp else m // 2 for s in range(2 * pp)]
    for r in range(pp):
        h = min(r, pp - 1 - r)
        down, up = r, 2 * pp - 1 - r
        near, far = (down, up) if r < half else (up, down)
        e = _Rank(base)
        for _ in range(2 * (half - h - 1)):
            e.run(near, _F)
        for _ in range(h + 1):
            e.run(near, _F)
            e.run(far, _F)
        for _ in range(half - h - 1):
            e.run(far, _I)
            e.weight()
            e.run(far, _F)
        for i in range(m // 2 - pp + h + 1):
            if i == 0 and h == half - 1:  # the middle ranks keep their first pair apart (smaller bubble)
                e.run(near, _F)
                e.run(far, _B)
            else:
                e.pair(near, far)
            e.pair(far, near)
        for _ in range(half - h - 1):
            e.run(far, _B)
            e.pair(far, near)
        split = False
        for i in range(h + 1):
            split = split or (i == (h + 1) // 2 and h % 2 == 1)
            e.run(far, _I if split else _B)
            split = split or (i == (h + 1) // 2 and h % 2 == 0)
            e.run(near, _I if split else _B)
        for _ in range(half - h - 1):
            e.weight()
            e.run(near, _I)
        while e.owed_w:
            e.weight()
        rows.append(np.array(e.out, dtype=np.int64).reshape(-1, 3))
        pairs.append(tuple(e.starts))
    return joined(rows)._replace(overlap_pairs=tuple(pairs) if any(pairs) else ())
