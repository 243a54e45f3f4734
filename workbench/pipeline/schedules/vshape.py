"""Schedules with V placement: rank r holds stages r and 2p-1-r, so the first and the last stage
share rank 0 and a micro-batch goes down the ranks and back up (two chunks per rank)."""

from __future__ import annotations

import numpy as np

from workbench.pipeline.schedules.actions import Action, decoded_rows
from workbench.pipeline.schedules.arrays import PackedRows, joined

Rows = list[list[Action]]


def v_placement(pp: int) -> tuple[int, ...]:
    """Stage s lives on rank ``s`` for s < pp and on rank ``2pp-1-s`` otherwise (Qi et al.,
    arXiv:2401.10241 Sec. 6, Fig. 8)."""
    return tuple(s if s < pp else 2 * pp - 1 - s for s in range(2 * pp))


_F, _B, _I, _W = range(4)  # op codes: indices in actions.OPS


class _Emitter:
    """Appends actions as (stage, op code, micro-batch) ints with per-stage micro-batch counters; I pushes a pending
    W. Ints, not ``Action`` objects: a large plan's schedule holds 10^5 of them (issue 52)."""

    def __init__(self, num_stages: int) -> None:
        self.out: list[int] = []  # flat: stage, op code, micro-batch, stage, ...
        self.next_f = [0] * num_stages
        self.next_back = [0] * num_stages  # B and I share one counter: both are a stage's input grad
        self.pending_w: list[tuple[int, int]] = []

    def emit(self, stage: int, op: int) -> None:
        counter = self.next_f if op == _F else self.next_back
        mb = counter[stage]
        counter[stage] = mb + 1
        self.out += (stage, op, mb)
        if op == _I:
            self.pending_w.append((stage, mb))

    def emit_w(self, stage: int | None = None) -> None:
        """W of the oldest pending I (of ``stage`` when given); nothing if none is pending."""
        for k, (s, mb) in enumerate(self.pending_w):
            if stage is None or s == stage:
                del self.pending_w[k]
                self.out += (s, _W, mb)
                return

    def packed(self) -> np.ndarray:
        return np.array(self.out, dtype=np.int64).reshape(-1, 3)


def zbv(pp: int, m: int) -> Rows:
    """ZB-V as ``Action`` rows (``zbv_arrays``)."""
    built = zbv_arrays(pp, 2, m)
    return decoded_rows(built.packed, built.offsets)


def zbv_arrays(pp: int, vpp: int, m: int) -> PackedRows:
    """ZB-V: V placement, chunk-0 warm-up of 2(p-r)-1 forwards, then F/I/W triples alternating the
    two chunks; W passes fill the bubbles. Zero bubble when T_F = T_I = T_W; peak p micro-batches.

    Source: Qi et al., Zero Bubble Pipeline Parallelism, arXiv:2401.10241 Sec. 6 (Fig. 8). The order
    equals ``torch.distributed.pipelining.ScheduleZBVZeroBubble``: it plans max(m, 2p-1)
    micro-batches and drops the ones beyond m.
    """
    n = max(m, 2 * pp - 1)
    rows = []
    for r in range(pp):
        c0, c1 = r, 2 * pp - 1 - r
        e = _Emitter(2 * pp)
        for _ in range(2 * (pp - r) - 1):
            e.emit(c0, _F)
        for _ in range(r):
            e.emit(c1, _F)
            e.emit(c0, _F)
        for _ in range(pp - r):
            _triple(e, c1)
        while e.next_f[c1] < e.next_f[c0] or e.next_f[c0] < n:
            if e.next_f[c0] < n:
                e.emit(c0, _F)
            e.emit(c0, _I)
            e.emit_w(c0)
            _triple(e, c1)
        for _ in range(r):
            e.emit(c0, _I)
            e.emit(c1, _I)
        for _ in range(pp - r):
            e.emit(c0, _I)
            e.emit_w(c0)
        while any(s == c1 for s, _ in e.pending_w):
            e.emit_w(c1)
        while e.pending_w:
            e.emit_w(c0)
        row = e.packed()
        rows.append(row[row[:, 2] < m])
    return joined(rows)


def _triple(e: _Emitter, stage: int) -> None:
    e.emit(stage, _F)
    e.emit(stage, _I)
    e.emit_w(stage)


def dualpipev(pp: int, m: int) -> Rows:
    """DualPipeV as ``Action`` rows (``dualpipev_arrays``)."""
    built = dualpipev_arrays(pp, 2, m)
    return decoded_rows(built.packed, built.offsets)


def dualpipev_arrays(pp: int, vpp: int, m: int) -> PackedRows:
    """DualPipeV: DeepSeek's DualPipe folded onto V placement (p ranks, 2p stages).

    Eight phases per rank r: chunk-0 forwards, paired chunk-0/chunk-1 forwards, I/W/F on chunk 1,
    the main phase of paired (F, B) across the two chunks (overlapped on the device; here listed
    forward first), then backwards with W passes deferred to fill the tail. Needs m >= 2p.

    Source: DeepSeek-AI, DeepSeek-V3 Technical Report, arXiv:2412.19437 Sec. 3.2.1 and Table 2;
    the V variant of github.com/deepseek-ai/DualPipe. The order equals
    ``torch.distributed.pipelining.ScheduleDualPipeV`` with its overlapped pairs flattened.
    """
    rows = []
    for r in range(pp):
        c0, c1 = r, 2 * pp - 1 - r
        e = _Emitter(2 * pp)
        for _ in range(2 * (pp - r - 1)):
            e.emit(c0, _F)
        for _ in range(r + 1):
            e.emit(c0, _F)
            e.emit(c1, _F)
        for _ in range(pp - r - 1):
            e.emit(c1, _I)
            e.emit_w()
            e.emit(c1, _F)
        for _ in range(m - 2 * pp + r + 1):
            e.emit(c0, _F)
            e.emit(c1, _B)
            e.emit(c1, _F)
            e.emit(c0, _B)
        for _ in range(pp - r - 1):
            e.emit(c1, _B)
            e.emit(c1, _F)
            e.emit(c0, _B)
        split = False
        for i in range(r + 1):
            split = split or (i == (r + 1) // 2 and r % 2 == 1)
            e.emit(c1, _I if split else _B)
            split = split or (i == (r + 1) // 2 and r % 2 == 0)
            e.emit(c0, _I if split else _B)
        for _ in range(pp - r - 1):
            e.emit_w()
            e.emit(c0, _I if split else _B)
        while e.pending_w:
            e.emit_w()
        rows.append(e.packed())
    return joined(rows)
