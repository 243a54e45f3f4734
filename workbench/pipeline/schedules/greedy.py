"""Memory-capped greedy construction of zero-bubble style schedules on unit-time actions.

The Zero Bubble and Controllable Memory papers build their schedules by placing F, I and W passes
as early as dependencies allow under a cap on the activations a rank may hold; this module does the
same on a lock-step clock with T_F = T_I = T_W = 1 and no p2p latency. Each step every rank runs one
ready action, preferring (1) an I (it is on the critical path), (2) an F if the rank's in-flight
count stays under its cap (a chunk-0 F also leaves one slot free for the chunk-1 forwards of
V placement, so the pipeline can always drain), (3) the oldest pending W. Ties go to the lowest
micro-batch, then the later stage. In-flight means: F started and W not finished.

The rule does not read the F, I and W costs (every action is one step), so a schedule depends only on its
placement, micro-batches and caps. ``greedy_zero_bubble`` is the readable form; ``greedy_zero_bubble_arrays``
(what ``build_schedule`` runs, issue 52) keeps counters instead of finish steps, writes ints and, with one
stage per rank, repeats the steady state once it finds it; 5x (V-Half, V-Min) to 45x (ZB-H2, p64 m4096) faster
and equal action for action
(tests/test_greedy_golden.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from workbench.pipeline.schedules.actions import OPS, Action
from workbench.pipeline.schedules.arrays import PackedRows, joined

Rows = list[list[Action]]

_F, _B, _I, _W = range(4)  # op codes: indices in actions.OPS


def greedy_zero_bubble(
    *, stage_to_rank: Sequence[int], num_microbatches: int, cap_chunks: Sequence[int]
) -> Rows:
    """Per-rank action order from the greedy rule above.

    ``cap_chunks[r]``: most (stage, micro-batch) activations rank r may hold at once (>= 1, >= 2
    with two stages per rank). Raises ValueError if a cap is too small to make progress.
    """
    pp = len(cap_chunks)
    num_stages = len(stage_to_rank)
    m = num_microbatches
    local = [[s for s in range(num_stages) if stage_to_rank[s] == r] for r in range(pp)]
    min_cap = 2 if num_stages > pp else 1
    if min(cap_chunks) < min_cap:
        raise ValueError(f"cap_chunks must be >= {min_cap} on every rank, got {list(cap_chunks)}")
    f_done = [[-1] * m for _ in range(num_stages)]  # step at which the action finished, -1 not yet
    i_done = [[-1] * m for _ in range(num_stages)]
    next_f = [0] * num_stages
    next_i = [0] * num_stages
    pending_w: list[deque[tuple[int, int]]] = [deque() for _ in range(pp)]
    inflight = [0] * pp
    rows: Rows = [[] for _ in range(pp)]
    remaining = 3 * num_stages * m
    step = 0
    ctx = (f_done, i_done, next_f, next_i, m, num_stages)
    while remaining:
        chosen = [_pick(step, local[r], ctx, inflight[r], cap_chunks[r], pending_w[r]) for r in range(pp)]
        if all(c is None for c in chosen):
            raise _stuck(step, cap_chunks)
        for r, action in enumerate(chosen):
            if action is None:
                continue
            rows[r].append(action)
            remaining -= 1
            s, op, i = action
            if op == "F":
                f_done[s][i] = step
                next_f[s] += 1
                inflight[r] += 1
            elif op == "I":
                i_done[s][i] = step
                next_i[s] += 1
                pending_w[r].append((s, i))
            else:
                inflight[r] -= 1
        step += 1
    return rows


def _pick(
    step: int,
    stages: list[int],
    ctx: tuple[list[list[int]], list[list[int]], list[int], list[int], int, int],
    inflight: int,
    cap: int,
    pending_w: deque[tuple[int, int]],
) -> Action | None:
    """The action a rank runs at ``step`` (module docstring's rule). Candidates are compared as (micro-batch,
    -stage) tuples and only the chosen one becomes an ``Action``: this runs once per rank and step."""
    f_done, i_done, next_f, next_i, m, num_stages = ctx
    last = num_stages - 1
    first_chunk = stages[0] if len(stages) > 1 else -1  # its F leaves one slot for the chunk-1 forwards
    best_i: tuple[int, int] | None = None
    best_f: tuple[int, int] | None = None
    for s in stages:
        i = next_i[s]
        if i < m:
            dep = f_done[s][i] if s == last else i_done[s + 1][i]
            if 0 <= dep < step and (best_i is None or (i, -s) < best_i):
                best_i = (i, -s)
        j = next_f[s]
        if j < m and (s == 0 or 0 <= f_done[s - 1][j] < step):
            room = cap - 1 if s == first_chunk else cap
            if inflight < room and (best_f is None or (j, -s) < best_f):
                best_f = (j, -s)
    if best_i is not None:
        return Action(-best_i[1], "I", best_i[0])
    if best_f is not None:
        return Action(-best_f[1], "F", best_f[0])
    if pending_w:
        s, i = pending_w.popleft()
        return Action(s, "W", i)
    return None


def greedy_zero_bubble_arrays(
    *, stage_to_rank: Sequence[int], num_microbatches: int, cap_chunks: Sequence[int]
) -> PackedRows:
    """``greedy_zero_bubble``'s rows as packed arrays (``arrays.PackedRows``), action for action, built in a
    fraction of the time: what ``build_schedule`` runs for ZB-H2, V-Half and V-Min (issue 52).

    The rule's state is counters, not per-action finish steps: a stage runs its F (and its I) in micro-batch
    order and every action takes one step, so "F of (s-1, j) finished before this step" is ``next_f[s-1] > j``
    at the step's start, and "I of (s+1, i) (F of the last stage, i) finished" is ``next_i[s+1] > i``
    (``next_f[last] > i``). Each step reads a copy of the counters taken at its start and writes the live
    ones; actions are written as ints ``(micro-batch * num_stages + stage) * 4 + op code``. Placements of one
    or two stages per rank (every registered greedy schedule) run a loop written for them; any other (a rank
    of three stages, or of none) is built by ``greedy_zero_bubble`` and packed. With one stage per rank the
    steps between two states equal up to a shift of micro-batches are repeated, not run (``_SteadyState``).
    Same errors as ``greedy_zero_bubble``; tests/test_greedy_golden.py checks the two agree on many shapes.
    """
    pp, num_stages, m = len(cap_chunks), len(stage_to_rank), num_microbatches
    local = [[s for s in range(num_stages) if stage_to_rank[s] == r] for r in range(pp)]
    if {len(stages) for stages in local} - {1, 2}:
        rows = greedy_zero_bubble(stage_to_rank=stage_to_rank, num_microbatches=m, cap_chunks=cap_chunks)
        return joined(
            [np.array([(s, OPS.index(op), i) for s, op, i in row], np.int64).reshape(-1, 3) for row in rows]
        )
    min_cap = 2 if num_stages > pp else 1
    if min(cap_chunks) < min_cap:
        raise ValueError(f"cap_chunks must be >= {min_cap} on every rank, got {list(cap_chunks)}")
    # counters[s] = next F of stage s, counters[S + s] = next I; counters[2S] = m: stage 0's F never waits
    f_dep = [s - 1 if s else 2 * num_stages for s in range(num_stages)]
    i_dep = [num_stages + s + 1 for s in range(num_stages - 1)] + [num_stages - 1]
    codes = _ranks_codes(local, f_dep, i_dep, m, cap_chunks)
    lengths = [len(c) for c in codes]
    flat = np.concatenate(codes)
    packed = np.empty((len(flat), 3), dtype=np.int64)
    mb_stage, packed[:, 1] = np.divmod(flat, 4)
    packed[:, 2], packed[:, 0] = np.divmod(mb_stage, num_stages)
    offsets = np.zeros(pp + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return PackedRows(packed, offsets)


def _stuck(step: int, cap_chunks: Sequence[int]) -> ValueError:
    return ValueError(f"greedy schedule stuck at step {step} with caps {list(cap_chunks)}; raise the cap")


def _ranks_codes(
    local: list[list[int]], f_dep: list[int], i_dep: list[int], m: int, cap_chunks: Sequence[int]
) -> list[np.ndarray]:
    """Per rank, the action codes of the rule for ranks holding stages a < b (V placement) or one stage (its b;
    its a reads the counter that stays at m, so it is never a candidate): an I (lower micro-batch first, b on a
    tie), else an F under the cap (with two stages, a's F leaves one slot free), else the oldest W."""
    num_stages = len(f_dep)
    counters = [0] * (2 * num_stages) + [m]
    never = 2 * num_stages  # counters[never] stays m: stage 0's F input, a one-stage rank's a
    ranks, out = [], []
    for r, stages in enumerate(local):
        a, b = stages[0], stages[-1]
        row: list[int] = []
        pending: deque[int] = deque()
        out.append(row)
        fa, ia = (a, num_stages + a) if a != b else (never, never)  # one stage: only b is a candidate
        ranks.append(
            (r, fa, ia, f_dep[a], i_dep[a], 4 * a, b, num_stages + b, f_dep[b], i_dep[b], 4 * b)
            + (cap_chunks[r] - (a != b), cap_chunks[r], row.append, pending)
        )
    inflight = [0] * len(local)
    per_mb = 4 * num_stages
    remaining = 3 * num_stages * m
    step = 0
    one_stage = len(local[0]) == 1
    steady = _SteadyState(counters, inflight, out, [rank[-1] for rank in ranks], m, one_stage=one_stage)
    while remaining:
        if step <= steady.search_steps:
            step, remaining = steady.repeat(step, remaining)
        start = counters[:]  # the rule reads the state as it was when the step began
        left = remaining
        for r, fa, ia, fa_dep, ia_dep, ca, fb, ib, fb_dep, ib_dep, cb, room_a, room_b, emit, pending in ranks:
            i, j = start[ia], start[ib]
            if j < m and j < start[ib_dep] and (j <= i or not (i < m and i < start[ia_dep])):
                counters[ib] = j + 1
                code = j * per_mb + cb
            elif i < m and i < start[ia_dep]:
                counters[ia] = i + 1
                code = i * per_mb + ca
            else:
                held = inflight[r]
                i, j = start[fa], start[fb]
                if (
                    j < m
                    and j < start[fb_dep]
                    and held < room_b
                    and (j <= i or not (i < m and i < start[fa_dep] and held < room_a))
                ):
                    counters[fb] = j + 1
                    emit(j * per_mb + cb)
                    inflight[r] = held + 1
                    remaining -= 1
                elif i < m and i < start[fa_dep] and held < room_a:
                    counters[fa] = i + 1
                    emit(i * per_mb + ca)
                    inflight[r] = held + 1
                    remaining -= 1
                elif pending:
                    emit(pending.popleft())
                    inflight[r] = held - 1
                    remaining -= 1
                continue
            emit(code + _I)
            pending.append(code + _W)
            remaining -= 1
        if remaining == left:
            raise _stuck(step, cap_chunks)
        step += 1
    return steady.rows()


class _SteadyState:
    """Finds the step at which a placement of one stage per rank repeats an earlier state shifted by k
    micro-batches, and repeats the actions of the steps between as often as the last micro-batch allows.

    The rule's whole state at a step's start is the counters, the ranks' in-flight counts and their pending W
    (with one stage per rank, the W of the last ``len(pending)`` I of that stage: micro-batches next_i -
    len .. next_i - 1). Nothing in the rule reads a micro-batch index except against another counter or m, so
    from a state equal to an earlier one plus k the ranks run the same actions plus k, as long as every
    counter stays below m. ZB-H2 reaches its steady state (a period of 3 steps, k = 1) within about 6p steps;
    the search stops after ``search_steps`` (16 times the stages) if the state never repeats."""

    def __init__(
        self,
        counters: list[int],
        inflight: list[int],
        out: list[list[int]],
        pending: list[deque[int]],
        m: int,
        *,
        one_stage: bool,
    ) -> None:
        self.counters, self.inflight, self.out, self.pending, self.m = counters, inflight, out, pending, m
        self.num_stages = (len(counters) - 1) // 2
        self.search_steps = 16 * self.num_stages if one_stage else -1  # two stages: the W order is state too
        self.seen: dict[tuple[tuple[int, ...], ...], tuple[int, int, list[int]]] = {}
        self.repeats: tuple[list[int], list[int], int, int] | None = None

    def repeat(self, step: int, remaining: int) -> tuple[int, int]:
        """(step, actions left) after repeating the period that ends at ``step``, if one does."""
        live = self.counters[: 2 * self.num_stages]
        base = min(live)
        key = (tuple([c - base for c in live]), tuple(self.inflight), tuple(map(len, self.pending)))
        lengths = list(map(len, self.out))
        if key not in self.seen:
            self.seen[key] = (step, base, lengths)
            return step, remaining
        self.search_steps = -1  # found: no more searching
        first_step, first_base, first_lengths = self.seen.pop(key)
        self.seen.clear()
        shift = base - first_base  # >= 1: an action ran in between (else stuck), so a counter moved
        copies = (self.m - 1 - max(live)) // shift if shift > 0 else 0
        if copies <= 0:
            return step, remaining
        moved = copies * shift * 4 * self.num_stages
        for pending in self.pending:
            codes = [code + moved for code in pending]
            pending.clear()
            pending.extend(codes)
        for s in range(2 * self.num_stages):
            self.counters[s] += copies * shift
        self.repeats = (first_lengths, lengths, copies, shift * 4 * self.num_stages)
        return step + copies * (step - first_step), remaining - copies * (sum(lengths) - sum(first_lengths))

    def rows(self) -> list[np.ndarray]:
        """Per rank, its action codes: the rows written, with the period repeated where it was found."""
        if self.repeats is None:
            return [np.array(row, dtype=np.int64) for row in self.out]
        first_lengths, lengths, copies, shift = self.repeats
        out = []
        for row, begin, end in zip(self.out, first_lengths, lengths, strict=True):
            codes = np.array(row, dtype=np.int64)
            period = codes[begin:end]
            repeated = np.arange(1, copies + 1, dtype=np.int64)[:, None] * shift + period
            out.append(np.concatenate([codes[:end], repeated.ravel(), codes[end:]]))
        return out
