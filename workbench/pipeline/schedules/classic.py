"""Schedules with looping placement (rank r holds stages r, r+p, r+2p, ...).

Every function returns, per rank, the ordered compute actions; placement is ``looping_placement``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.pipeline.schedules.actions import Action

Rows = list[list[Action]]


def looping_placement(pp: int, vpp: int) -> tuple[int, ...]:
    """Stage s lives on rank ``s % pp`` (Megatron-LM interleaving, arXiv:2104.04473 Sec. 2.2)."""
    return tuple(s % pp for s in range(pp * vpp))


def gpipe(pp: int, m: int) -> Rows:
    """GPipe: all forwards, then all backwards, both in micro-batch order.

    Source: Huang et al., GPipe, arXiv:1811.06965. Bubble (p-1)/(m+p-1) of the step.
    """
    return [[Action(r, "F", i) for i in range(m)] + [Action(r, "B", i) for i in range(m)] for r in range(pp)]


def looped_bfs(pp: int, vpp: int, m: int) -> Rows:
    """Breadth-first looped schedule: every micro-batch through a rank's first stage, then its next
    stage, ...; backwards in the reverse stage and micro-batch order.

    Source: Lamy-Poirier, Breadth-First Pipeline Parallelism, arXiv:2211.05953.
    """
    rows: Rows = []
    for r in range(pp):
        stages = [r + k * pp for k in range(vpp)]
        row = [Action(s, "F", i) for s in stages for i in range(m)]
        row += [Action(s, "B", i) for s in reversed(stages) for i in reversed(range(m))]
        rows.append(row)
    return rows


def microbatches_per_round(pp: Any, m: Any) -> Any:
    """Micro-batches per round of the flexible interleaved schedules: ``m // max(1, m // pp)``
    (equals pp when pp divides m, as in Megatron-LM; torch relaxes that to ``m % rounds == 0``). Ints, or
    numpy arrays elementwise (the closed-form peaks of ``workbench.pipeline.peak``)."""
    return m // np.maximum(1, m // pp)


def interleaved_1f1b(pp: int, vpp: int, m: int) -> Rows:
    """Interleaved 1F1B (depth-first): warm-up of ``(vpp-1)*mpr + 2*(pp-1-r)`` forwards, then
    one forward and one backward in turn, then the remaining backwards; stages cycle every ``mpr``
    micro-batches (mpr = micro-batches per round).

    Source: Narayanan et al., Megatron-LM SC21, arXiv:2104.04473 Sec. 2.2; bubble (p-1)/(v*m+p-1)
    of the step. With mpr < pp this is torch's relaxed variant.
    """
    mpr = microbatches_per_round(pp, m)
    return [_warmup_steady_cooldown(pp, vpp, m, r, mpr=mpr, warmup_per_hop=2, split=False) for r in range(pp)]


def one_f_one_b(pp: int, m: int) -> Rows:
    """1F1B (PipeDream-Flush): ``pp-1-r`` warm-up forwards, then F/B in turn, then the remaining B.

    Source: Narayanan et al., PipeDream-2BW, arXiv:2006.09503; Megatron-LM SC21, arXiv:2104.04473
    Sec. 2.2.1. Bubble (p-1)/(m+p-1) of the step; rank r holds at most p-r micro-batches.
    """
    return [_warmup_steady_cooldown(pp, 1, m, r, mpr=m, warmup_per_hop=1, split=False) for r in range(pp)]


def zb_h1(pp: int, vpp: int, m: int) -> Rows:
    """ZB-H1: the 1F1B order with B split into I and W; rank r delays its W passes by r steady
    steps so that they fill the cool-down bubble; same peak memory as 1F1B.

    Source: Qi et al., Zero Bubble Pipeline Parallelism, arXiv:2401.10241 Sec. 3.1 (Fig. 3).
    Bubble per rank (p-1)(T_F + T_I - T_W). With vpp > 1 this is the interleaved form torch ships
    as ``ScheduleInterleavedZeroBubble``.
    """
    mpr = microbatches_per_round(pp, m) if vpp > 1 else m
    return [_warmup_steady_cooldown(pp, vpp, m, r, mpr=mpr, warmup_per_hop=1, split=True) for r in range(pp)]


def _warmup_steady_cooldown(
    pp: int, vpp: int, m: int, r: int, *, mpr: int, warmup_per_hop: int, split: bool
) -> list[Action]:
    """One rank of the warm-up / steady / cool-down family (1F1B, interleaved 1F1B, ZB-H1).

    Written for speed (a 405B plan's schedule holds 10^5-10^6 actions, built once per refined plan): the
    micro-batch of each action is counted per stage in a list, and every action is made once with ``Action``."""
    total = vpp * m
    warmup = min((vpp - 1) * mpr + warmup_per_hop * (pp - 1 - r), total)
    f_stage = [((k // mpr) % vpp) * pp + r for k in range(total)]
    b_stage = [(vpp - 1 - (k // mpr) % vpp) * pp + r for k in range(total)]
    num_stages = pp * vpp
    next_f, next_b = [0] * num_stages, [0] * num_stages
    new, act = tuple.__new__, Action
    row: list[Action] = []
    append = row.append
    for k in range(warmup):
        s = f_stage[k]
        append(new(act, (s, "F", next_f[s])))
        next_f[s] += 1
    back_op = "I" if split else "B"
    backwards: list[tuple[int, int]] = []
    num_w = 0
    for j in range(total):
        if warmup + j < total:
            s = f_stage[warmup + j]
            append(new(act, (s, "F", next_f[s])))
            next_f[s] += 1
        s = b_stage[j]
        mb = next_b[s]
        next_b[s] = mb + 1
        append(new(act, (s, back_op, mb)))
        if split:
            backwards.append((s, mb))
            if j >= r:
                ws, wmb = backwards[num_w]
                append(new(act, (ws, "W", wmb)))
                num_w += 1
    if split:
        row.extend([new(act, (st, "W", mb)) for st, mb in backwards[num_w:]])
    return row
