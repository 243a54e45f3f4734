"""Memory-capped greedy construction of zero-bubble style schedules on unit-time actions.

The Zero Bubble and Controllable Memory papers build their schedules by placing F, I and W passes
as early as dependencies allow under a cap on the activations a rank may hold; this module does the
same on a lock-step clock with T_F = T_I = T_W = 1 and no p2p latency. Each step every rank runs one
ready action, preferring (1) an I (it is on the critical path), (2) an F if the rank's in-flight
count stays under its cap (a chunk-0 F also leaves one slot free for the chunk-1 forwards of
V placement, so the pipeline can always drain), (3) the oldest pending W. Ties go to the lowest
micro-batch, then the later stage. In-flight means: F started and W not finished.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from workbench.pipeline.schedules.actions import Action

Rows = list[list[Action]]


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
            raise ValueError(
                f"greedy schedule stuck at step {step} with caps {list(cap_chunks)}; raise the cap"
            )
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
