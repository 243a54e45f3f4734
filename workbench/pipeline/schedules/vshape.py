"""Schedules with V placement: rank r holds stages r and 2p-1-r, so the first and the last stage
share rank 0 and a micro-batch goes down the ranks and back up (two chunks per rank)."""

from __future__ import annotations

from workbench.pipeline.schedules.actions import Action

Rows = list[list[Action]]


def v_placement(pp: int) -> tuple[int, ...]:
    """Stage s lives on rank ``s`` for s < pp and on rank ``2pp-1-s`` otherwise (Qi et al.,
    arXiv:2401.10241 Sec. 6, Fig. 8)."""
    return tuple(s if s < pp else 2 * pp - 1 - s for s in range(2 * pp))


class _Emitter:
    """Appends actions with per-(stage, kind) micro-batch counters; I pushes a pending W."""

    def __init__(self) -> None:
        self.row: list[Action] = []
        self.count: dict[tuple[int, str], int] = {}
        self.pending_w: list[tuple[int, int]] = []

    def emit(self, stage: int, op: str) -> None:
        kind = "F" if op == "F" else "back"  # B and I share one counter: both are a stage's input grad
        mb = self.count.get((stage, kind), 0)
        self.count[(stage, kind)] = mb + 1
        self.row.append(Action(stage, op, mb))
        if op == "I":
            self.pending_w.append((stage, mb))

    def emit_w(self, stage: int | None = None) -> None:
        """W of the oldest pending I (of ``stage`` when given); nothing if none is pending."""
        for k, (s, mb) in enumerate(self.pending_w):
            if stage is None or s == stage:
                del self.pending_w[k]
                self.row.append(Action(s, "W", mb))
                return


def zbv(pp: int, m: int) -> Rows:
    """ZB-V: V placement, chunk-0 warm-up of 2(p-r)-1 forwards, then F/I/W triples alternating the
    two chunks; W passes fill the bubbles. Zero bubble when T_F = T_I = T_W; peak p micro-batches.

    Source: Qi et al., Zero Bubble Pipeline Parallelism, arXiv:2401.10241 Sec. 6 (Fig. 8). The order
    equals ``torch.distributed.pipelining.ScheduleZBVZeroBubble``: it plans max(m, 2p-1)
    micro-batches and drops the ones beyond m.
    """
    n = max(m, 2 * pp - 1)
    rows: Rows = []
    for r in range(pp):
        c0, c1 = r, 2 * pp - 1 - r
        e = _Emitter()
        for _ in range(2 * (pp - r) - 1):
            e.emit(c0, "F")
        for _ in range(r):
            e.emit(c1, "F")
            e.emit(c0, "F")
        for _ in range(pp - r):
            _triple(e, c1)
        while e.count.get((c1, "F"), 0) < e.count[(c0, "F")] or e.count[(c0, "F")] < n:
            if e.count[(c0, "F")] < n:
                e.emit(c0, "F")
            e.emit(c0, "I")
            e.emit_w(c0)
            _triple(e, c1)
        for _ in range(r):
            e.emit(c0, "I")
            e.emit(c1, "I")
        for _ in range(pp - r):
            e.emit(c0, "I")
            e.emit_w(c0)
        while any(s == c1 for s, _ in e.pending_w):
            e.emit_w(c1)
        while e.pending_w:
            e.emit_w(c0)
        rows.append([a for a in e.row if a.microbatch < m])
    return rows


def _triple(e: _Emitter, stage: int) -> None:
    e.emit(stage, "F")
    e.emit(stage, "I")
    e.emit_w(stage)


def dualpipev(pp: int, m: int) -> Rows:
    """DualPipeV: DeepSeek's DualPipe folded onto V placement (p ranks, 2p stages).

    Eight phases per rank r: chunk-0 forwards, paired chunk-0/chunk-1 forwards, I/W/F on chunk 1,
    the main phase of paired (F, B) across the two chunks (overlapped on the device; here listed
    forward first), then backwards with W passes deferred to fill the tail. Needs m >= 2p.

    Source: DeepSeek-AI, DeepSeek-V3 Technical Report, arXiv:2412.19437 Sec. 3.2.1 and Table 2;
    the V variant of github.com/deepseek-ai/DualPipe. The order equals
    ``torch.distributed.pipelining.ScheduleDualPipeV`` with its overlapped pairs flattened.
    """
    rows: Rows = []
    for r in range(pp):
        c0, c1 = r, 2 * pp - 1 - r
        e = _Emitter()
        for _ in range(2 * (pp - r - 1)):
            e.emit(c0, "F")
        for _ in range(r + 1):
            e.emit(c0, "F")
            e.emit(c1, "F")
        for _ in range(pp - r - 1):
            e.emit(c1, "I")
            e.emit_w()
            e.emit(c1, "F")
        for _ in range(m - 2 * pp + r + 1):
            e.emit(c0, "F")
            e.emit(c1, "B")
            e.emit(c1, "F")
            e.emit(c0, "B")
        for _ in range(pp - r - 1):
            e.emit(c1, "B")
            e.emit(c1, "F")
            e.emit(c0, "B")
        split = False
        for i in range(r + 1):
            split = split or (i == (r + 1) // 2 and r % 2 == 1)
            e.emit(c1, "I" if split else "B")
            split = split or (i == (r + 1) // 2 and r % 2 == 0)
            e.emit(c0, "I" if split else "B")
        for _ in range(pp - r - 1):
            e.emit_w()
            e.emit(c0, "I" if split else "B")
        while e.pending_w:
            e.emit_w()
        rows.append(e.row)
    return rows
