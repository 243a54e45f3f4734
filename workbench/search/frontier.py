"""What every search strategy (training, serving, mixed pools) shares: the Pareto mask, the divisors of a count,
and the tie band of the ranking.

- ``pareto_mask``: the rows no other row beats on every objective, each objective maximised or minimised;
- ``divisors``: the candidate degrees of a device or expert count;
- ``TIE_FRAC`` and ``tied_mask``: the plans the model cannot tell apart from the best one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

TIE_FRAC = 0.067
"""Plans whose objective lies within this share of the best plan's are marked ``tied``: the model cannot tell
them apart. 6.7 % is the worst plan-ranking miss on the public validation set (``benchmarks/bench_accuracy.py``:
the predicted-best plan of a published grid reached 93.3 % of the measured best, README "How good are the
numbers")."""

_BLOCK_ROWS = 1024
"""Rows compared against all others at once by the pairwise mask of three or more objectives (bounds its
memory to ``_BLOCK_ROWS x n`` booleans per objective)."""


def pareto_mask(
    objectives: Sequence[ArrayLike], maximise: Sequence[bool], *, keep_duplicates: bool = False
) -> np.ndarray:
    """True for the rows no other row dominates: no other row is at least as good on every objective and
    strictly better on one.

    ``objectives``: k >= 1 arrays of the same length n (one value per row); ``maximise``: k flags, True where
    higher is better. A row with a NaN in any objective is never on the frontier and dominates nothing;
    infinities compare as numbers. Rows equal on every objective do not dominate one another: with
    ``keep_duplicates`` all of them are on the frontier, without it only the first (lowest index) is.
    Returns a boolean array of shape (n,).

    Two objectives: sort by the first (ties: the better second first) and keep each row that beats every row
    sorted before it on the second, O(n log n) (Kung, Luccio & Preparata, JACM 1975). One objective: the best
    value. Three or more: pairwise comparisons in blocks, O(k n^2) time and O(k n) memory per block row.
    Raises ValueError when no objective is given, ``maximise`` has another length, or the arrays differ in
    length or are not one-dimensional.
    """
    if not objectives or len(objectives) != len(maximise):
        raise ValueError(
            f"pareto_mask: need k >= 1 objectives and one maximise flag each, got {len(objectives)} "
            f"objectives and {len(maximise)} flags"
        )
    cols = [np.asarray(v, dtype=np.float64) for v in objectives]
    n = len(cols[0])
    if any(c.ndim != 1 or len(c) != n for c in cols):
        raise ValueError(
            f"pareto_mask: objectives must be 1-D arrays of one length, got shapes {[c.shape for c in cols]}"
        )
    cost = [-c if up else c for c, up in zip(cols, maximise, strict=True)]  # every objective minimised
    mask = np.zeros(n, dtype=bool)
    known = ~np.isnan(cost[0])
    for c in cost[1:]:
        known &= ~np.isnan(c)
    rows = np.flatnonzero(known) if not known.all() else None
    if rows is not None:
        cost = [c[rows] for c in cost]
    if len(cost[0]) == 0:
        return mask
    if len(cost) == 1:
        on = _best_1d(cost[0], keep_duplicates)
    elif len(cost) == 2:
        on = _sweep_2d(cost[0], cost[1], keep_duplicates)
    else:
        on = _pairwise(np.stack(cost, axis=1), keep_duplicates)
    if rows is None:
        return on
    mask[rows] = on
    return mask


def _best_1d(a: np.ndarray, keep_duplicates: bool) -> np.ndarray:
    on = a == a.min()
    if not keep_duplicates:
        on[:] = False
        on[np.argmin(a)] = True
    return on


def _sweep_2d(a: np.ndarray, b: np.ndarray, keep_duplicates: bool) -> np.ndarray:
    """Both minimised, no NaN. A row is on the frontier when its ``b`` is below every ``b`` sorted before it
    (with ``keep_duplicates``: before its group of equal rows)."""
    n = len(a)
    order = np.lexsort((b, a))  # stable: equal rows stay in index order
    sa, sb = a[order], b[order]
    before = np.minimum.accumulate(np.concatenate(([np.inf], sb[:-1])))
    first = np.arange(n)  # the row's own position; with keep_duplicates, its group's first
    if keep_duplicates:
        starts = np.concatenate(([True], (sa[1:] != sa[:-1]) | (sb[1:] != sb[:-1])))
        first = np.maximum.accumulate(np.where(starts, first, 0))
        before = before[first]
    on = np.zeros(n, dtype=bool)
    on[order[(sb < before) | (first == 0)]] = (
        True  # nothing sorts before the first: it is on (even at b = inf)
    )
    return on


def _pairwise(cost: np.ndarray, keep_duplicates: bool) -> np.ndarray:
    """Rows of ``cost`` (n x k, minimised, no NaN) that no other row dominates."""
    n = len(cost)
    index = np.arange(n)
    on = np.ones(n, dtype=bool)
    for start in range(0, n, _BLOCK_ROWS):
        block = cost[start : start + _BLOCK_ROWS]  # rows i of the block against every row j
        no_worse = np.all(cost[None, :, :] <= block[:, None, :], axis=2)
        better = np.any(cost[None, :, :] < block[:, None, :], axis=2)
        if not keep_duplicates:  # an equal row with a lower index takes the place
            better |= index[None, :] < index[start : start + len(block), None]
        on[start : start + len(block)] = ~np.any(no_worse & better, axis=1)
    return on


def tied_mask(values: ArrayLike, best: float) -> np.ndarray:
    """True where ``values`` (an objective, any unit) lie within ``TIE_FRAC`` of ``best``:
    ``|value - best| <= TIE_FRAC x |best|``. Shape of ``values``."""
    v = np.asarray(values, dtype=np.float64)
    return np.abs(v - best) <= TIE_FRAC * abs(best)
