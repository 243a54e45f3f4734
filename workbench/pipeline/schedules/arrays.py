"""Schedules built as arrays: the looping-placement family of ``classic`` here, the V schedules in ``vshape``
(ZB-V, DualPipeV, which write ints as they go) and the greedy ZB-H2, V-Half and V-Min in ``greedy``; what
``build_schedule`` runs for them.

A 405B plan's schedule holds 10^5-10^6 actions and a search refines a dozen of them; made one ``Action`` at a
time in Python the build cost 2x the simulation (issue 52). Here every rank's order is a few numpy operations
on the action positions, and the schedule keeps only its packed ``(stage, op code, micro-batch)`` array (the
``Action`` tuples are decoded only if something reads them: text, CSV, error messages).

The orders are those of ``workbench.pipeline.schedules.classic`` (the readable form, which cites the papers):
tests/test_schedule_arrays.py checks the two agree action for action for every schedule at many (pp, vpp, m),
and tests/test_schedules.py checks both these and the V schedules against torch's own ``pipeline_order``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from workbench.pipeline.schedules.classic import microbatches_per_round

_F, _B, _I, _W = range(4)  # op codes: indices in actions.OPS


class PackedRows(NamedTuple):
    """Per-rank action orders as arrays: ``packed`` (n, 3) int64 rows of (stage, op code, micro-batch),
    rank-major; rank r's actions are ``packed[offsets[r]:offsets[r + 1]]`` (``offsets``: pp + 1 int64)."""

    packed: np.ndarray
    offsets: np.ndarray
    overlap_pairs: tuple[tuple[int, ...], ...] = ()
    """Per rank (or empty: none), the positions k whose actions k and k + 1 run as one overlapped F&B pair
    (``Schedule.overlap_pairs``)."""


def joined(rows: list[np.ndarray]) -> PackedRows:
    """Per-rank (k, 3) arrays as one ``PackedRows``."""
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    return PackedRows(np.concatenate(rows).astype(np.int64, copy=False), offsets)


def _actions(stage: np.ndarray, op: int | np.ndarray, mb: np.ndarray) -> np.ndarray:
    out = np.empty((len(mb), 3), dtype=np.int64)
    out[:, 0], out[:, 1], out[:, 2] = stage, op, mb
    return out


def _count_within(group: np.ndarray) -> np.ndarray:
    """For each position, how many earlier positions hold the same group: the micro-batch of the n-th action
    of a stage is n (every stage runs its micro-batches in order)."""
    order = np.argsort(group, kind="stable")
    ranked = group[order]
    out = np.empty(len(group), dtype=np.int64)
    out[order] = np.arange(len(group)) - np.searchsorted(ranked, ranked, side="left")
    return out


def gpipe(pp: int, vpp: int, m: int) -> PackedRows:
    """``classic.gpipe``: all forwards, then all backwards, in micro-batch order."""
    mbs = np.arange(m)
    return joined(
        [
            np.concatenate([_actions(np.full(m, r), _F, mbs), _actions(np.full(m, r), _B, mbs)])
            for r in range(pp)
        ]
    )


def looped_bfs(pp: int, vpp: int, m: int) -> PackedRows:
    """``classic.looped_bfs``: every micro-batch through each of a rank's stages in turn, backwards reversed."""
    chunk = np.repeat(np.arange(vpp), m)
    mbs = np.tile(np.arange(m), vpp)
    return joined(
        [
            np.concatenate(
                [_actions(chunk * pp + r, _F, mbs), _actions((chunk * pp + r)[::-1], _B, mbs[::-1])]
            )
            for r in range(pp)
        ]
    )


def one_f_one_b(pp: int, vpp: int, m: int) -> PackedRows:
    """``classic.one_f_one_b``."""
    return _warmup_steady_cooldown(pp, 1, m, mpr=m, warmup_per_hop=1, split=False)


def interleaved_1f1b(pp: int, vpp: int, m: int) -> PackedRows:
    """``classic.interleaved_1f1b``."""
    mpr = int(microbatches_per_round(pp, m))
    return _warmup_steady_cooldown(pp, vpp, m, mpr=mpr, warmup_per_hop=2, split=False)


def zb_h1(pp: int, vpp: int, m: int) -> PackedRows:
    """``classic.zb_h1``."""
    mpr = int(microbatches_per_round(pp, m)) if vpp > 1 else m
    return _warmup_steady_cooldown(pp, vpp, m, mpr=mpr, warmup_per_hop=1, split=True)


def _warmup_steady_cooldown(
    pp: int, vpp: int, m: int, *, mpr: int, warmup_per_hop: int, split: bool
) -> PackedRows:
    """Every rank of ``classic._warmup_steady_cooldown``: ``warmup`` forwards; then, for each backward j, the
    next forward (while any is left), backward j and (split, j >= r) the W of backward j - r; then the W passes
    still owed. The k-th forward (backward) runs chunk (k // mpr) % vpp (reversed for backwards) and the next
    micro-batch of that chunk; that part is the same on every rank, only the warm-up length and the W delay
    depend on r."""
    total = vpp * m
    k = np.arange(total)
    f_chunk = (k // mpr) % vpp
    b_chunk = vpp - 1 - f_chunk
    f_mb, b_mb = _count_within(f_chunk), _count_within(b_chunk)
    back_op = _I if split else _B
    rows = []
    for r in range(pp):
        warmup = min((vpp - 1) * mpr + warmup_per_hop * (pp - 1 - r), total)
        f_stage, b_stage = f_chunk * pp + r, b_chunk * pp + r
        # one slot triple per backward j: (forward warmup + j, backward j, W of backward j - r); unused slots dropped
        steady = np.empty((total, 3, 3), dtype=np.int64)
        keep = np.ones((total, 3), dtype=bool)
        nxt = np.minimum(warmup + k, total - 1)
        steady[:, 0] = _actions(f_stage[nxt], _F, f_mb[nxt])
        keep[:, 0] = warmup + k < total
        steady[:, 1] = _actions(b_stage, back_op, b_mb)
        owed = np.maximum(k - r, 0)
        steady[:, 2] = _actions(b_stage[owed], _W, b_mb[owed])
        keep[:, 2] = split & (k >= r)
        parts = [_actions(f_stage[:warmup], _F, f_mb[:warmup]), steady[keep]]
        if split:
            done = max(0, total - r)
            parts.append(_actions(b_stage[done:], _W, b_mb[done:]))
        rows.append(np.concatenate(parts))
    return joined(rows)
