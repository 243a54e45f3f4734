"""DualPipe: a bidirectional pipeline, two copies of the model fed from opposite ends (DeepSeek-V3).

p ranks (p even), 2p stages: stage s < p is stage s of the first copy (on rank s, micro-batches ``0..m/2-1``
flow down from rank 0), stage p + k is stage k of the second copy (on rank p-1-k, micro-batches ``m/2..m-1``
flow up from rank p-1). Rank r thus holds stages r and 2p-1-r, the V placement, but each is a whole pipeline
stage of its own copy: two copies of the weights per rank. The steady phase pairs a forward of one direction
with a backward of the other as one overlapped F&B unit (``Overlap``, torch's ``OVERLAP_F_B``).
"""

from __future__ import annotations

from workbench.pipeline.schedules.actions import Action, Cell, Overlap

Cells = list[list[Cell]]


class _Rank:
    """One rank's order: per-stage micro-batch counters (the second copy's start at m/2), a FIFO of W passes
    owed by I passes (DualPipe's ``WeightGradStore``) and the cells written so far."""

    def __init__(self, base: dict[int, int]) -> None:
        self.cells: list[Cell] = []
        self.next: dict[tuple[int, str], int] = {}
        self.base = base
        self.owed_w: list[Action] = []

    def take(self, stage: int, op: str) -> Action:
        kind = "F" if op == "F" else "back"  # B and I both take the stage's next backward
        mb = self.next.get((stage, kind), self.base[stage])
        self.next[(stage, kind)] = mb + 1
        if op == "I":
            self.owed_w.append(Action(stage, "W", mb))
        return Action(stage, op, mb)

    def run(self, stage: int, op: str) -> None:
        self.cells.append(self.take(stage, op))

    def pair(self, f_stage: int, b_stage: int) -> None:
        self.cells.append(Overlap(self.take(f_stage, "F"), self.take(b_stage, "B")))

    def weight(self) -> None:
        self.cells.append(self.owed_w.pop(0))


def dualpipe(pp: int, m: int) -> Cells:
    """DualPipe's per-rank orders: eight phases per rank, as in DeepSeek's reference implementation.

    With h = min(r, p-1-r) and "near"/"far" the copy whose first stage is nearer to / farther from rank r:
    2(p/2-h-1) near forwards; h+1 near/far forward pairs; p/2-h-1 (far I, W, far F); m/2-p+h+1 overlapped
    (near F & far B, far F & near B) pairs, the first of the two middle ranks not overlapped; p/2-h-1
    (far B, far F & near B); h+1 (far, near) backwards, the later half split into I (zero bubble); p/2-h-1
    (W, near I); h+1 W. Needs p even, m even and m >= 2p (the reference's asserts).

    Source: DeepSeek-AI, DeepSeek-V3 Technical Report, arXiv:2412.19437 Sec. 3.2.1, Fig. 5 and Table 2;
    github.com/deepseek-ai/DualPipe, ``dualpipe/dualpipe.py`` (``DualPipe.step``), read and re-derived here.
    """
    half, rows = pp // 2, []
    base = {s: (0 if s < pp else m // 2) for s in range(2 * pp)}
    for r in range(pp):
        h = min(r, pp - 1 - r)
        down, up = r, 2 * pp - 1 - r
        near, far = (down, up) if r < half else (up, down)
        e = _Rank(base)
        for _ in range(2 * (half - h - 1)):
            e.run(near, "F")
        for _ in range(h + 1):
            e.run(near, "F")
            e.run(far, "F")
        for _ in range(half - h - 1):
            e.run(far, "I")
            e.weight()
            e.run(far, "F")
        for i in range(m // 2 - pp + h + 1):
            if i == 0 and h == half - 1:  # the middle ranks keep their first pair apart (smaller bubble)
                e.run(near, "F")
                e.run(far, "B")
            else:
                e.pair(near, far)
            e.pair(far, near)
        for _ in range(half - h - 1):
            e.run(far, "B")
            e.pair(far, near)
        split = False
        for i in range(h + 1):
            split = split or (i == (h + 1) // 2 and h % 2 == 1)
            e.run(far, "I" if split else "B")
            split = split or (i == (h + 1) // 2 and h % 2 == 0)
            e.run(near, "I" if split else "B")
        for _ in range(half - h - 1):
            e.weight()
            e.run(near, "I")
        while e.owed_w:
            e.weight()
        rows.append(e.cells)
    return rows
